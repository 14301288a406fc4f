package failover

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

// tsJobManager returns the command of the TypeScript JobManager
// (jobmanager-ts, written from the contract alone), built by `make
// jobmanager-ts`.
func tsJobManager(t *testing.T) []string {
	t.Helper()
	main, err := filepath.Abs(filepath.Join("..", "..", "jobmanager-ts", "dist", "main.js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(main); err != nil {
		t.Fatalf("the TypeScript JobManager is not built (make jobmanager-ts): %v", err)
	}
	return []string{"node", main}
}

// A mixed cluster: the reference jobmanager and the TypeScript one, leader
// and standby of one HA store. Each is SIGKILLed in turn while jobs run,
// and the other takes them over: the jobs the Go leader started run on
// under the TypeScript one, and those the TypeScript leader started run on
// under the Go one; every job then ends as its client asks, and no two
// attempts of a subtask ever ran at once. Without a task lease the new
// leader deploys the jobs anew; with one (10 s on both) it adopts the
// running attempts, and no attempt starts after the first SIGKILL but the
// new job's, and none after the second.
func TestMixedCluster(t *testing.T) {
	lease := []string{"--task-lease", (10 * time.Second).String()}
	for _, tc := range []struct {
		name  string
		args  []string // both jobmanagers'
		adopt bool
	}{{"deployed-anew", noLease, false}, {"adopted", lease, true}} {
		t.Run(tc.name, func(t *testing.T) { mixedCluster(t, tc.args, tc.adopt) })
	}
}

func mixedCluster(t *testing.T, args []string, adopt bool) {
	cfg := localcluster.ProcessClusterConfig{
		EmbeddedStore: true, JobManagers: 2, JobManagerArgs: args,
		JobManagerCommands: map[int][]string{1: append(tsJobManager(t), args...)},
	}
	c, cl, goJM, ids := start(t, cfg, 2)
	tsJM := c.JobManagers()[1]

	// The Go leader dies; the TypeScript standby takes its jobs over.
	killed := time.Now()
	goJM.Kill()
	ctx := within(t, phase(t))
	next, err := leadsRunning(ctx, c, ids, goJM)
	if err != nil {
		t.Fatalf("after the Go leader's SIGKILL: %v\n%s", err, tsJM.Log())
	}
	if next != tsJM {
		t.Fatalf("%s leads after the Go leader's SIGKILL; want the TypeScript one", next.Name)
	}
	t.Logf("SIGKILL of the Go leader: the TypeScript JobManager runs its jobs after %v", time.Since(killed))

	// Under the TypeScript leader: a job of its own, and the Go
	// jobmanager back as its standby.
	const mine = "ts-0"
	if _, err := cl.Submit(ctx, sleepJob(mine, 2, time.Hour), sdk.WithJobID(mine)); err != nil {
		t.Fatalf("submit %s to the TypeScript leader: %v", mine, err)
	}
	all := append(slices.Clone(ids), mine)
	if err := waitRunning(ctx, tsJM, all...); err != nil {
		t.Fatal(err)
	}
	if err := goJM.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	// The TypeScript leader dies; the Go standby takes every job over.
	killedTS := time.Now()
	tsJM.Kill()
	ctx = within(t, phase(t))
	back, err := leadsRunning(ctx, c, all, tsJM)
	if err != nil {
		t.Fatalf("after the TypeScript leader's SIGKILL: %v", err)
	}
	if back != goJM {
		t.Fatalf("%s leads after the TypeScript leader's SIGKILL; want the Go one", back.Name)
	}
	t.Logf("SIGKILL of the TypeScript leader: the Go jobmanager runs every job after %v", time.Since(killedTS))

	finish(t, cl, all, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	ivs := checkAttempts(t, c)
	if !adopt {
		checkRecovered(t, ivs, killedTS, all)
		return
	}
	started := map[string]int{}
	for _, iv := range ivs {
		started[iv.JobID]++
		if iv.Start.After(killed) && iv.JobID != mine {
			t.Errorf("an attempt started after the Go leader's SIGKILL: %v", iv)
		}
		if iv.Start.After(killedTS) {
			t.Errorf("an attempt started after the TypeScript leader's SIGKILL: %v", iv)
		}
	}
	for _, id := range all {
		if started[id] != 2 {
			t.Errorf("job %s ran %d attempts; want its 2 subtasks' first, adopted", id, started[id])
		}
	}
}
