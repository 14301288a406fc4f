package main

import (
	"bytes"
	"context"
	"fmt"
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

// mustFail maps each broken store to the store cases it must fail. Every
// case that checks a promise of contract 1.1, or of 1.2's checkpoints,
// consistency and equality, is listed under at least one (see covered).
var mustFail = map[string][]string{
	"replace-answers-ok":         {"store/execution-plans", "store/plan-repeated-in-json"},
	"plan-repeat-refused":        {"store/execution-plans", "store/plan-repeated-in-json"},
	"result-repeat-refused":      {"store/job-results", "store/result-repeated-in-json"},
	"equality-by-encoding":       {"store/plan-repeated-in-json", "store/result-repeated-in-json"},
	"delete-without-result":      {"store/execution-plans", "store/plan-delete-needs-result"},
	"job-token-writes":           {"store/token-of-another-election-refused"},
	"campaign-repeat-refused":    {"store/campaign-repeated"},
	"ignore-stale-tokens":        {"store/stale-token-refused-for-every-write", "store/stale-write-from-paused-leader", "store/task-executor-membership", "store/checkpoint-fencing"},
	"accept-invalid":             {"store/bad-input", "store/checkpoint-bad-input"},
	"leader-without-address":     {"store/grant-confirm-leader"},
	"resign-noop":                {"store/resign-grants-next"},
	"no-expiry":                  {"store/lease-expiry-revokes", "store/stale-write-from-paused-leader"},
	"cancel-request-lost":        {"store/cancel-requests"},
	"no-snapshot-end":            {"store/watch-session-snapshot"},
	"checkpoint-any-fence":       {"store/checkpoint-fencing", "store/savepoints"},
	"checkpoint-ids-not-checked": {"store/checkpoint-ids-increase", "store/checkpoint-retention"},
	"keep-all-checkpoints":       {"store/checkpoint-retention"},
	"checkpoints-outlive-plan":   {"store/checkpoints-go-with-the-job"},
	"savepoints-go-with-the-job": {"store/savepoints", "store/checkpoints-go-with-the-job"},
	"clean-before-plan-delete":   {"store/result-clean-after-the-plan"},
	"created-every-put":          {"store/plan-created-once"},
	"stale-reads":                {"store/reads-see-acknowledged-writes", "store/listings-are-snapshots"},
	"listing-not-a-snapshot":     {"store/listings-are-snapshots"},
	"equality-by-proto-equal":    {"store/equal-by-encoding"},
	"unknown-fields-dropped":     {"store/unknown-fields-refused"},
	"non-normalized-accepted":    {"store/durations-normalized"},
	"cancel-record-last-wins":    {"store/cancel-record-first-kept"},
	"cancel-beside-result":       {"store/cancel-races-result", "store/result-before-cancel"},
}

// covered are the store cases that must fail against some broken store.
// The others come from the store contract suite, which the Go tests of
// every backend run; no broken store of this table fails them yet (a
// wrapper around the reference cannot easily break epochs, restarts,
// ObserveLeader's stream or session closing).
var covered = []string{
	"store/execution-plans", "store/job-results", "store/token-of-another-election-refused",
	"store/stale-token-refused-for-every-write", "store/stale-write-from-paused-leader",
	"store/campaign-repeated", "store/plan-repeated-in-json", "store/result-repeated-in-json", "store/plan-delete-needs-result",
	"store/bad-input", "store/grant-confirm-leader", "store/resign-grants-next", "store/lease-expiry-revokes",
	"store/cancel-requests", "store/watch-session-snapshot",
	"store/checkpoint-fencing", "store/checkpoint-ids-increase", "store/checkpoint-retention",
	"store/checkpoints-go-with-the-job", "store/savepoints", "store/checkpoint-bad-input",
	"store/plan-created-once", "store/result-clean-after-the-plan",
	"store/reads-see-acknowledged-writes", "store/listings-are-snapshots",
	"store/equal-by-encoding", "store/unknown-fields-refused", "store/durations-normalized",
	"store/cancel-record-first-kept", "store/cancel-races-result",
}

func build(t *testing.T, dir, out, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, out)
	if b, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return bin
}

// TestEveryStoreCaseCatchesABrokenStore runs the store cases against the
// reference store, where each must pass, and against the broken stores
// listed for it, where it must fail by its own assertions.
//
// Its smoke version (make test) runs each broken store against the first
// case listed for it only, and not the reference, which `make
// conformance` runs; `make test-long` (localcluster.Long) runs the whole
// table.
func TestEveryStoreCaseCatchesABrokenStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs stores for every case")
	}
	names := make([]string, 0, len(mustFail))
	for name, cases := range mustFail {
		if _, ok := breaks[name]; !ok {
			t.Errorf("the table lists %s, which is no break", name)
		}
		for _, c := range cases {
			if !runner.Matches(c) {
				t.Errorf("the table lists %s, which is no case", c)
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, c := range covered {
		if !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(mustFail[n], c) }) {
			t.Errorf("no broken store fails %s", c)
		}
	}

	run := mustFail
	smoke := !localcluster.Long()
	if smoke {
		run = map[string][]string{}
		for name, cases := range mustFail {
			run[name] = cases[:1]
		}
	}

	dir := t.TempDir()
	jobplane, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	broken := build(t, dir, "brokenstore", "github.com/jobplane/jobplane/conformance/internal/brokenstore")
	ctx := context.Background()

	t.Run("reference", func(t *testing.T) {
		if smoke {
			t.Skip("smoke version: make conformance runs the store cases against the reference store")
		}
		var out bytes.Buffer
		sum, err := runner.Run(ctx, runner.Config{
			StoreCommand: jobplane + " hastore --log-level warn --listen {listen} --data-dir {data}",
			Parallel:     2, Out: &out,
		})
		if err != nil || sum.Failed > 0 || sum.Passed != len(runner.StoreCases()) {
			t.Errorf("reference store: %+v, %v; want every case passed\n%s", sum, err, out.String())
		}
	})

	var mu sync.Mutex
	failedBy := map[string][]string{}
	var wg sync.WaitGroup
	// Each case runs a store process of its own; more at once than the
	// machine has cores would test the machine rather than the cases.
	sem := make(chan struct{}, max(1, runtime.NumCPU()/2))
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var out bytes.Buffer
			sum, err := runner.Run(ctx, runner.Config{
				StoreCommand: fmt.Sprintf("%s --break %s --listen {listen} --data-dir {data}", broken, name),
				Run:          run[name], Parallel: 1, Out: &out,
			})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range sum.Results {
				timedOut := slices.ContainsFunc(r.Messages, func(m string) bool { return strings.HasPrefix(m, "the case did not end within") })
				switch {
				case r.Outcome == "failed" && !timedOut:
					failedBy[r.Name] = append(failedBy[r.Name], name)
				case slices.Contains(run[name], r.Name):
					t.Errorf("%s passed against the %q store; it must fail there\n%s", r.Name, name, out.String())
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range runner.StoreCases() {
		t.Logf("%-45s fails against %s", c.Name, strings.Join(failedBy[c.Name], ", "))
	}
}
