package failover

import (
	"context"
	"fmt"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

// callTimeout bounds one call to a jobmanager that may be stopped.
const callTimeout = time.Second

// sleepJob returns a one-vertex JobGraph named name whose parallelism
// subtasks run the built-in sleep invokable for d each.
func sleepJob(name string, parallelism int32, d time.Duration) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{
		Id: "sleep", Name: "sleep", Invokable: "sleep", Parallelism: parallelism,
		Config: map[string]string{"duration": d.String()},
	}}}
}

// jobState asks the jobmanager (within a second) for the job and returns
// its status and how many of its subtasks run, of how many. A standby
// answers UNAVAILABLE (NOT_LEADER).
func jobState(ctx context.Context, jm *localcluster.JobManagerProcess, jobID string) (status jobplanev1.JobStatus, running, total int, err error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := jm.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: jobID, View: jobplanev1.JobView_JOB_VIEW_FULL})
	if err != nil {
		return 0, 0, 0, err
	}
	for _, v := range resp.GetJob().GetVertices() {
		total += int(v.GetParallelism())
		for _, st := range v.GetSubtasks() {
			if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				running++
			}
		}
	}
	return resp.GetJob().GetSummary().GetStatus(), running, total, nil
}

// leadsRunning waits for a leader, not one of not, and until it reports
// every one of the jobs running, and returns it.
func leadsRunning(ctx context.Context, c *localcluster.ProcessCluster, ids []string, not ...*localcluster.JobManagerProcess) (*localcluster.JobManagerProcess, error) {
	l, err := c.WaitLeader(ctx, not...)
	if err != nil {
		return nil, err
	}
	return l, waitRunning(ctx, l, ids...)
}

// waitRunning waits until the jobmanager reports every one of the jobs
// RUNNING with all its subtasks RUNNING, or ctx ends.
func waitRunning(ctx context.Context, jm *localcluster.JobManagerProcess, jobIDs ...string) error {
	return waitEvery(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		for _, id := range jobIDs {
			status, running, total, err := jobState(ctx, jm, id)
			if err != nil {
				return fmt.Errorf("%s: job %s: %w", jm.Name, id, err)
			}
			if status != jobplanev1.JobStatus_JOB_STATUS_RUNNING || running < total {
				return fmt.Errorf("%s: job %s is %v with %d of %d subtasks running", jm.Name, id, status, running, total)
			}
		}
		return nil
	})
}

// waitAnyRunning waits until one of the jobs is RUNNING at the jobmanager
// with at least one subtask RUNNING, and returns when it saw that (the end
// of the answering call).
func waitAnyRunning(ctx context.Context, jm *localcluster.JobManagerProcess, jobIDs ...string) (time.Time, error) {
	var at time.Time
	err := waitEvery(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var last error
		for _, id := range jobIDs {
			status, running, _, err := jobState(ctx, jm, id)
			if err == nil && status == jobplanev1.JobStatus_JOB_STATUS_RUNNING && running > 0 {
				at = time.Now()
				return nil
			}
			last = fmt.Errorf("%s: job %s: %v, %d running, %v", jm.Name, id, status, running, err)
		}
		return last
	})
	return at, err
}

// waitFor calls fn every 20 ms until it returns nil or ctx ends.
func waitFor(ctx context.Context, fn func(ctx context.Context) error) error {
	return waitEvery(ctx, 20*time.Millisecond, fn)
}

// waitEvery calls fn every interval until it returns nil or ctx ends, and
// then returns ctx's error with fn's last one.
func waitEvery(ctx context.Context, interval time.Duration, fn func(ctx context.Context) error) error {
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-timer.C:
		}
	}
}
