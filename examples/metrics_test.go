package examples_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

// docs/operations.md's scrape of /metrics, run as written against a
// standalone server after a job ran there.
func TestDocsMetricsScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the scrape needs curl")
	}
	script := docBlock(t, "ops:metrics")
	cluster := localcluster.NewStandalone(t, "--task-executors", "2", "--slots", "2")
	cluster.WaitTaskExecutor(t, "noop")
	// Both TaskExecutors registered, not only the first: the scrape counts them.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ov, err := cluster.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && ov.GetTaskExecutorCount() == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("two TaskExecutors not registered within a minute: %v, %v", ov, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cluster.Submit(t, "scraped", "noop", 1, nil)
	if r := cluster.Result(t, "scraped"); !strings.HasSuffix(r.GetStatus().String(), "FINISHED") {
		t.Fatalf("job ended %v", r.GetStatus())
	}
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "JOBPLANE_SERVER="+cluster.URL())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the scrape of docs/operations.md failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"jobplane_jobs_submitted_total 1\n",
		`jobplane_jobs_ended_total{status="FINISHED"} 1` + "\n",
		"jobplane_taskexecutors 2\n",
		`jobplane_slots{state="total"} 4` + "\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the scrape lacks %q:\n%s", want, out)
		}
	}
}
