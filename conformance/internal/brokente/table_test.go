package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jobplane/jobplane/conformance/runner"
	"github.com/jobplane/jobplane/server/localcluster"
)

// mustFail maps each broken TaskExecutor to the TaskExecutor cases it
// must fail, each by its own assertions. Every case is listed under at
// least one.
var mustFail = map[string][]string{
	"no-rm-heartbeat":         {"taskexecutor/registers"},
	"ignore-rm-leader-change": {"taskexecutor/follows-resource-manager"},
	"accept-stale-rm-token":   {"taskexecutor/follows-resource-manager"},
	"refuse-newer-rm-token":   {"taskexecutor/follows-resource-manager"},
	"no-offer":                {"taskexecutor/runs-and-reports"},
	"never-finished":          {"taskexecutor/runs-and-reports"},
	"no-value":                {"taskexecutor/runs-and-reports"},
	"no-failure":              {"taskexecutor/runs-and-reports"},
	"swallow-refusals":        {"taskexecutor/deployment-refusals"},
	"repeat-refused":          {"taskexecutor/deployment-refusals"},
	"no-reoffer":              {"taskexecutor/newer-job-master-takes-the-slots"},
	"accept-stale-jm-token":   {"taskexecutor/stale-job-master-refused"},
	"ignore-cancel":           {"taskexecutor/stale-job-master-refused", "taskexecutor/cancel-and-free", "taskexecutor/adoption-keeps-running"},
	"ignore-free-slot":        {"taskexecutor/cancel-and-free"},
	"no-jm-heartbeat":         {"taskexecutor/heartbeats-job-masters"},
	"no-watchdog":             {"taskexecutor/stops-when-job-master-silent"},
	"no-task-lease":           {"taskexecutor/adoption-keeps-running", "taskexecutor/stale-refusal-keeps-adopted"},
	"cancel-on-refusal":       {"taskexecutor/stale-refusal-keeps-adopted"},
	// Since contract 1.2.
	"stale-rm-until-called":              {"taskexecutor/follows-resource-manager"},
	"trust-newer-resource-manager-token": {"taskexecutor/forged-resource-manager-token-refused"},
	"trust-newer-job-master-token":       {"taskexecutor/forged-job-master-token-refused"},
}

// TestEveryTaskExecutorCaseCatchesABrokenTaskExecutor runs the
// TaskExecutor cases against the broken TaskExecutors listed for them,
// where each must fail by its own assertions, and against brokente
// breaking nothing, where every case must pass. Its smoke version (make
// test) runs each broken TaskExecutor against the first case listed for
// it only; `make test-long` (localcluster.Long) runs the whole table.
// `make conformance` runs the cases against `jobplane taskexecutor` and
// the node Worker.
func TestEveryTaskExecutorCaseCatchesABrokenTaskExecutor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs TaskExecutors for every case")
	}
	names := make([]string, 0, len(mustFail))
	for name, cases := range mustFail {
		if _, ok := breaks[name]; !ok || name == "" {
			t.Errorf("the table lists %q, which is no break", name)
		}
		for _, c := range cases {
			if !runner.Matches(c) {
				t.Errorf("the table lists %s, which is no case", c)
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, c := range runner.TaskExecutorCases() {
		if !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(mustFail[n], c.Name) }) {
			t.Errorf("no broken TaskExecutor fails %s", c.Name)
		}
	}
	for name := range breaks {
		if _, ok := mustFail[name]; !ok && name != "" {
			t.Errorf("break %s is in no row of the table", name)
		}
	}

	run := mustFail
	if !localcluster.Long() {
		run = map[string][]string{}
		for name, cases := range mustFail {
			run[name] = cases[:1]
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "brokente")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/jobplane/jobplane/conformance/internal/brokente").CombinedOutput(); err != nil {
		t.Fatalf("go build brokente: %v\n%s", err, b)
	}
	command := func(mode string) string {
		return fmt.Sprintf("%s --break '%s' --hastore {hastore} --listen {listen}", bin, mode)
	}
	ctx := context.Background()

	t.Run("breaking-nothing", func(t *testing.T) {
		var out bytes.Buffer
		sum, err := runner.Run(ctx, runner.Config{TaskExecutorCommand: command(""), Parallel: 2, Out: &out})
		if err != nil || sum.Failed > 0 || sum.Passed != len(runner.TaskExecutorCases()) {
			t.Errorf("brokente breaking nothing: %+v, %v; want every case passed\n%s", sum, err, out.String())
		}
	})
	var mu sync.Mutex
	failedBy := map[string][]string{}
	var wg sync.WaitGroup
	// Two at a time: each case runs a TaskExecutor and an etcd member.
	sem := make(chan struct{}, 2)
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var out bytes.Buffer
			sum, err := runner.Run(ctx, runner.Config{TaskExecutorCommand: command(name), Run: run[name], Parallel: 1, Out: &out})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range sum.Results {
				switch {
				case r.Outcome == "failed" && runner.CaughtByAssertion(r):
					failedBy[r.Name] = append(failedBy[r.Name], name)
				case slices.Contains(run[name], r.Name):
					t.Errorf("%s did not fail by its own assertions against the %q TaskExecutor (%s); it must\n%s", r.Name, name, r.Outcome, out.String())
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range runner.TaskExecutorCases() {
		t.Logf("%-52s fails against %s", c.Name, strings.Join(failedBy[c.Name], ", "))
	}
}
