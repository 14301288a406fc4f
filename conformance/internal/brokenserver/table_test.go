package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jobplane/jobplane/conformance/runner"
	"github.com/jobplane/jobplane/server/localcluster"
)

// breaks maps each broken server to the cases it must fail. Every case
// must be listed under at least one: a case that no broken server fails
// could not catch the defect it is about.
var breaks = map[string][]string{
	"always-created": {"idempotency/resubmit-while-running", "idempotency/resubmit-while-initializing", "idempotency/resubmit-after-finished",
		"idempotency/resubmit-after-failed", "idempotency/resubmit-after-canceled", "idempotency/concurrent-identical"},
	"runs-twice":            {"idempotency/retry-after-lost-ack", "idempotency/resubmit-after-failed-persist", "idempotency/concurrent-identical"},
	"accept-different-plan": {"idempotency/different-plan"},
	"ack-before-persist": {"persist/plan-before-campaign", "persist/plan-before-address", "persist/plan-before-slot-request",
		"persist/plan-before-deploy", "persist/plan-before-ack", "persist/failed-put-no-run", "persist/delayed-put-holds-ack",
		"idempotency/resubmit-after-failed-persist"},
	"delete-plan-first":           {"persist/dirty-result-before-plan-delete"},
	"clean-early":                 {"persist/clean-after-plan-delete"},
	"persist-invalid":             {"persist/invalid-plan-writes-nothing"},
	"ignore-stale-tokens":         {"fencing/stale-offer-refused", "fencing/stale-state-update-refused"},
	"stale-token-deploys":         {"fencing/deploy-with-current-token", "fencing/fresh-token-per-grant", "fencing/no-deploy-after-revoke"},
	"ignore-revoke":               {"fencing/no-deploy-after-revoke"},
	"retry-stale-write":           {"fencing/stale-write-steps-down"},
	"no-recovery":                 {"recovery/standby-takes-over", "recovery/restart-recovers-job", "recovery/graceful-handoff", "recovery/session-expiry"},
	"rerun-dirty":                 {"recovery/dirty-result-cleaned-not-rerun"},
	"standby-no-address":          {"recovery/standby-answers-not-leader"},
	"standby-copies-token":        {"recovery/standby-answers-not-leader"},
	"cancel-noop":                 {"lifecycle/cancel-running", "lifecycle/cancel-terminal", "lifecycle/cancel-unknown", "lifecycle/cancel-before-run"},
	"watch-never-ends":            {"lifecycle/watch-ends-at-terminal"},
	"unknown-result-empty":        {"lifecycle/result-of-unknown-job"},
	"accept-invalid":              {"lifecycle/bad-graphs"},
	"no-normalization":            {"idempotency/retry-in-another-encoding"},
	"private-digest":              {"persist/plan-digest-canonical"},
	"deposed-answers":             {"recovery/paused-leader-resumes-deposed"},
	"cancel-not-durable":          {"recovery/cancel-survives-failover"},
	"cancel-recorded-late":        {"recovery/cancel-survives-failover"},
	"late-plan-ignored":           {"persist/late-plan-runs"},
	"bare-errors":                 {"lifecycle/errors-carry-errorinfo"},
	"watch-no-resume":             {"lifecycle/watch-resumes"},
	"rm-ignores-receiver-token":   {"fencing/stale-resource-manager-token-refused"},
	"rm-checks-job-token-first":   {"fencing/resource-manager-token-checked-first"},
	"trust-job-master-token":      {"fencing/forged-job-master-token-refused", "fencing/tokens/register-job-master"},
	"no-token-check":              {"fencing/tokens/*"},
	"renew-late":                  {"faults/keep-alive"},
	"hoard-slots":                 {"recovery/restart-slots-held", "lifecycle/idle-slots-given-back"},
	"no-adoption":                 {"adoption/*"},
	"lease-outlives-wait":         {"adoption/unreachable-task-executor"},
	"ack-checkpoint-early":        {"checkpoint/completed-when-durable"},
	"checkpoint-errors-ignored":   {"checkpoint/restore-latest-durable"},
	"forget-checkpoints":          {"checkpoint/ids-increase-across-failover"},
	"savepoint-not-durable":       {"checkpoint/savepoint-survives-job-and-failover"},
	"accept-not-offered":          {"lifecycle/invokable-not-offered-refused"},
	"zero-means-unlimited":        {"lifecycle/restart-bound-explicit"},
	"restarts-not-watched":        {"lifecycle/watch-reports-restarts"},
	"keep-job-leaderships":        {"recovery/job-leaderships-follow-jobmanager"},
	"accept-unknown-fields":       {"lifecycle/unknown-fields-refused"},
	"list-ignores-token":          {"lifecycle/list-jobs-pages"},
	"no-task-output":              {"lifecycle/task-output"},
	"no-executors-listed":         {"lifecycle/list-task-executors"},
	"detach-every-job":            {"lifecycle/attached-job"},
	"run-id-ignored":              {"lifecycle/run-ids"},
	"purge-noop":                  {"lifecycle/purge", "lifecycle/run-ids"},
	"id-reuse-ignored":            {"lifecycle/id-reuse-policy"},
	"cancel-reason-dropped":       {"lifecycle/cancel-reason", "recovery/cancel-survives-failover"},
	"cancel-record-not-durable":   {"recovery/cancel-survives-failover"},
	"submit-refused-during-purge": {"lifecycle/resubmit-races-purge"},

	// The races (cases_races.go).
	"cancel-after-finish-cancelling": {"races/cancel-against-finish"},
	"deposed-serves-cache":           {"races/leadership-flapping"},
	"dirty-taken-as-clean":           {"races/kill-between-result-and-plan-delete"},
	"timings-out-of-bounds":          {"lifecycle/advertised-limits"},
	"timings-lie":                    {"lifecycle/advertised-limits"},

	// The public surface (cases_surface.go).
	"limits-not-enforced":      {"lifecycle/request-too-large", "lifecycle/graph-limits", "lifecycle/list-page-size-lowered"},
	"request-too-large-bare":   {"lifecycle/request-too-large"},
	"graph-limit-unnamed":      {"lifecycle/graph-limits"},
	"list-page-size-refused":   {"lifecycle/list-page-size-lowered"},
	"full-view-unpaged":        {"lifecycle/full-view-pages"},
	"page-token-any-job":       {"lifecycle/full-view-pages"},
	"page-token-per-leader":    {"recovery/full-view-token-survives-failover"},
	"eager-ignored":            {"lifecycle/eager-deploys-at-once"},
	"watch-coalesced-unmarked": {"lifecycle/watch-resume-window"},
	"watch-behind-ends-ok":     {"lifecycle/slow-watch-behind"},
	"page-tokens-private":      {"lifecycle/list-jobs-pages", "lifecycle/full-view-pages", "lifecycle/list-task-executors"},
	"graph-paths-unquoted":     {"lifecycle/bad-graphs"},
	"savepoint-id-per-job":     {"checkpoint/savepoint-names-the-run"},
	"inline-limit-unenforced":  {"checkpoint/inline-state-limit"},
	"unasked-cancel-forgiven":  {"lifecycle/unasked-cancel-is-a-failure"},
}

// Cases of whole families, caught through the invariants every case's
// trace is checked against (persist-before-ack, persist-before-run), and
// the recovery faults also by their own checks.
func init() {
	breaks["ack-before-persist"] = append(breaks["ack-before-persist"], "faults/*")
	breaks["no-recovery"] = append(breaks["no-recovery"], "faults/recovery-reads-*", "faults/session-calls")
	breaks["cancel-noop"] = append(breaks["cancel-noop"], "faults/random-schedule")
	breaks["rerun-dirty"] = append(breaks["rerun-dirty"], "lifecycle/terminal-survives-restart")
	breaks["ack-before-persist"] = append(breaks["ack-before-persist"], "persist/unknown-outcome-runs", "persist/failed-put-unreadable")
	breaks["no-normalization"] = append(breaks["no-normalization"], "idempotency/plan-identity")
	breaks["accept-different-plan"] = append(breaks["accept-different-plan"], "idempotency/different-plan-after-lost-ack")
	breaks["cancel-noop"] = append(breaks["cancel-noop"], "persist/cancel-not-recorded")
	breaks["ignore-revoke"] = append(breaks["ignore-revoke"], "recovery/revoke-while-watch-down")
}

// expand returns the names of the cases that the patterns of a break
// select.
func expand(patterns []string) []string {
	var out []string
	for _, c := range runner.Cases() {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, c.Name); ok {
				out = append(out, c.Name)
				break
			}
		}
	}
	return out
}

func build(t *testing.T, dir, out, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, out)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return bin
}

// TestEveryCaseCatchesABrokenServer runs each case against the reference
// server, where it must pass, and against the broken servers listed for
// it, where it must fail.
//
// Its smoke version (make test) runs each broken server against the
// first case listed for it only, and not the reference, which `make
// conformance` runs: every break is still shown caught, in a fraction of
// the time. `make test-long` (localcluster.Long) runs the whole table.
func TestEveryCaseCatchesABrokenServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs servers for every break")
	}
	covered := map[string]bool{}
	for name, patterns := range breaks {
		cases := expand(patterns)
		if len(cases) < len(patterns) {
			t.Errorf("the table lists %v for %s, which name fewer cases", patterns, name)
		}
		breaks[name] = cases
		for _, c := range cases {
			covered[c] = true
		}
	}
	for _, c := range runner.Cases() {
		if !covered[c.Name] {
			t.Errorf("no broken server fails %s: the case cannot be shown to catch anything", c.Name)
		}
		delete(covered, c.Name)
	}

	dir := t.TempDir()
	jobplane, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	broken := build(t, dir, "brokenserver", "github.com/jobplane/jobplane/conformance/internal/brokenserver")
	ctx := context.Background()

	smoke := !localcluster.Long()
	if smoke {
		for name, cases := range breaks {
			breaks[name] = cases[:1]
		}
	}
	t.Run("reference", func(t *testing.T) {
		if smoke {
			t.Skip("smoke version: make conformance runs the suite against the reference server")
		}
		// On its defaults (a task lease), where every case passes, and
		// without a task lease (the adoption cases must fail there, see
		// the no-adoption break).
		for _, run := range []struct {
			args string
			skip []string
		}{{"", nil}, {" --task-lease 0", []string{"adoption/*"}}} {
			var out bytes.Buffer
			sum, err := runner.Run(ctx, runner.Config{
				ServerCommand: jobplane + " jobmanager --hastore {hastore} --listen {listen}" + run.args,
				Features:      map[string]bool{runner.FeatureResourceManager: true, runner.FeatureFailover: true, runner.FeatureAdoption: true, runner.FeatureCheckpoints: true, runner.FeatureInvokableCheck: true},
				Skip:          run.skip, Parallel: 2, Out: &out,
			})
			if err != nil || sum.Failed > 0 || sum.Passed != len(runner.Cases())-len(expand(run.skip)) {
				t.Errorf("reference server%s: %+v, %v; want every case passed\n%s", run.args, sum, err, out.String())
			}
		}
	})

	names := make([]string, 0, len(breaks))
	for name := range breaks {
		names = append(names, name)
	}
	sort.Strings(names)
	var mu sync.Mutex
	failedBy := map[string][]string{}
	// Each case runs processes of its own; more at once than the
	// machine has cores would test the machine rather than the cases.
	sem := make(chan struct{}, max(1, runtime.NumCPU()/2))
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var out bytes.Buffer
			sum, err := runner.Run(ctx, runner.Config{
				ServerCommand: fmt.Sprintf("%s --break %s --jobplane %s --hastore {hastore} --listen {listen} --data {data}", broken, name, jobplane),
				Features:      map[string]bool{runner.FeatureResourceManager: true, runner.FeatureFailover: true, runner.FeatureAdoption: true, runner.FeatureCheckpoints: true, runner.FeatureInvokableCheck: true},
				Run:           breaks[name], Parallel: 1, Out: &out,
			})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range sum.Results {
				// A case catches a break by its own assertions, not by
				// running out of time or failing before its checks.
				switch {
				case r.Outcome == "failed" && runner.CaughtByAssertion(r):
					failedBy[r.Name] = append(failedBy[r.Name], name)
				case slices.Contains(breaks[name], r.Name):
					t.Errorf("%s passed against the %q server; it must fail there\n%s", r.Name, name, out.String())
				}
			}
		}()
	}
	wg.Wait()
	if smoke {
		return
	}
	for _, c := range runner.Cases() {
		if len(failedBy[c.Name]) == 0 {
			t.Errorf("%s failed against no broken server", c.Name)
		} else {
			t.Logf("%-45s fails against %s", c.Name, strings.Join(failedBy[c.Name], ", "))
		}
	}
}

// tsOnly are the breaks that do not apply to the TypeScript JobManager as
// it is: each sets flags of the reference server's (a task lease, a slot
// yield, the address it advertises) or breaks by starting it without a
// task lease.
var tsOnly = []string{"lease-outlives-wait", "hoard-slots", "no-adoption", "unasked-cancel-forgiven"}

// tsSmoke are the breaks the smoke version runs against the TypeScript
// JobManager: one of each family (persist, idempotency, fencing both
// ways, recovery, cancel, watch, the surface, checkpoints).
var tsSmoke = []string{"ack-before-persist", "runs-twice", "ignore-stale-tokens", "no-token-check", "no-recovery",
	"cancel-noop", "watch-no-resume", "page-tokens-private", "graph-paths-unquoted", "savepoint-id-per-job", "inline-limit-unenforced"}

// The breaks, applied to the TypeScript JobManager (jobmanager-ts, written
// from the contract alone) behind the same proxies, are caught by the
// same cases as for the reference: the cases catch a broken promise, not a
// broken reference. The smoke version runs a break of each family, one
// case each; JOBPLANE_TEST_LONG=1 every break that applies, every case.
func TestBreaksCatchTheTypeScriptJobManager(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs servers for every break")
	}
	main, err := filepath.Abs(filepath.Join("..", "..", "..", "jobmanager-ts", "dist", "main.js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(main); err != nil {
		t.Fatalf("the TypeScript JobManager is not built (make jobmanager-ts): %v", err)
	}
	jobplane, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	broken := build(t, t.TempDir(), "brokenserver", "github.com/jobplane/jobplane/conformance/internal/brokenserver")
	names := tsSmoke
	if localcluster.Long() {
		names = nil
		for name := range breaks {
			if !slices.Contains(tsOnly, name) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
	}
	run := func(mode string, cases []string) (runner.Summary, string) {
		t.Helper()
		var out bytes.Buffer
		sum, err := runner.Run(context.Background(), runner.Config{
			// Without a task lease, as the breaks run the reference (see
			// brokenserver's run): a lease would hide a break whose
			// tasks a new JobMaster then adopts (renew-late).
			ServerCommand: fmt.Sprintf("%s --break '%s' --child 'node %s --task-lease 0' --jobplane %s --hastore {hastore} --listen {listen} --data {data}", broken, mode, main, jobplane),
			Features:      map[string]bool{runner.FeatureResourceManager: true, runner.FeatureFailover: true, runner.FeatureAdoption: true, runner.FeatureCheckpoints: true, runner.FeatureInvokableCheck: true},
			Run:           cases, Parallel: 1, Out: &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		return sum, out.String()
	}
	caseOf := map[string][]string{}
	var all []string
	for _, name := range names {
		cases := expand(breaks[name])
		if len(cases) == 0 {
			t.Fatalf("no case for the break %s", name)
		}
		if !localcluster.Long() {
			cases = cases[:1]
		}
		caseOf[name] = cases
		for _, c := range cases {
			if !slices.Contains(all, c) {
				all = append(all, c)
			}
		}
	}
	// A case that fails against the TypeScript JobManager as it is would
	// "catch" every break: each must pass behind the proxies first.
	if sum, out := run("", all); sum.Passed != len(all) {
		t.Fatalf("against the TypeScript JobManager behind the proxies, nothing broken: %d of %d cases passed; want all\n%s", sum.Passed, len(all), out)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			sum, out := run(name, caseOf[name])
			for _, r := range sum.Results {
				if slices.Contains(caseOf[name], r.Name) && (r.Outcome != "failed" || !runner.CaughtByAssertion(r)) {
					t.Errorf("%s %s against the TypeScript JobManager with %q broken; it must fail there by its own checks\n%s", r.Name, r.Outcome, name, out)
				}
			}
		})
	}
}
