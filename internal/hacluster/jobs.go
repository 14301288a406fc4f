package hacluster

import (
	"context"
	"fmt"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// SleepJob returns a one-vertex JobGraph named name whose parallelism
// subtasks run the built-in sleep invokable for d each.
func SleepJob(name string, parallelism int32, d time.Duration) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{
		Id: "sleep", Name: "sleep", Invokable: "sleep", Parallelism: parallelism,
		Config: map[string]string{"duration": d.String()},
	}}}
}

// JobState asks the jobmanager (within a second) for the job and returns
// its status and how many of its subtasks run, of how many. A standby
// answers UNAVAILABLE (NOT_LEADER).
func (jm *JobManager) JobState(ctx context.Context, jobID string) (status jobplanev1.JobStatus, running, total int, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := jm.Dispatcher.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: jobID, View: jobplanev1.JobView_JOB_VIEW_FULL})
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

// WaitRunning waits until the jobmanager reports every one of the jobs
// RUNNING with all its subtasks RUNNING.
func (jm *JobManager) WaitRunning(ctx context.Context, jobIDs ...string) error {
	return waitFor(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		for _, id := range jobIDs {
			status, running, total, err := jm.JobState(ctx, id)
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

// WaitAnyRunning waits until one of the jobs is RUNNING at the jobmanager
// with at least one subtask RUNNING, and returns when it saw that (the end
// of the answering call).
func (jm *JobManager) WaitAnyRunning(ctx context.Context, jobIDs ...string) (time.Time, error) {
	var at time.Time
	err := waitFor(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var last error
		for _, id := range jobIDs {
			status, running, _, err := jm.JobState(ctx, id)
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
