package jobmanager_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

// endedSubtask is one subtask of an ended job as GetJob lists it.
type endedSubtask struct {
	vertex string
	st     *jobplanev1.SubtaskDetails
}

// allPages lists a job's full view with page_size 1: every subtask, in
// order, the vertices as each page showed them, and the pages that
// carried the plan.
func allPages(t *testing.T, c *localcluster.Cluster, id string) ([]endedSubtask, []*jobplanev1.VertexDetails, []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		subtasks  []endedSubtask
		vertices  []*jobplanev1.VertexDetails
		withGraph []int
		token     string
	)
	for page := 0; ; page++ {
		resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id, View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatalf("GetJob(%s) page %d: %v", id, page, err)
		}
		if resp.GetJob().GetJobGraph() != nil {
			withGraph = append(withGraph, page)
		}
		n := 0
		for _, v := range resp.GetJob().GetVertices() {
			vertices = append(vertices, v)
			for _, st := range v.GetSubtasks() {
				subtasks = append(subtasks, endedSubtask{v.GetVertexId(), st})
				n++
			}
		}
		if n != 1 {
			t.Errorf("page %d of %s lists %d subtasks, want 1", page, id, n)
		}
		if token = resp.GetNextPageToken(); token == "" {
			return subtasks, vertices, withGraph
		}
		if page > 100 {
			t.Fatalf("more than 100 pages for %s", id)
		}
	}
}

// getJob returns GetJob's answer in a view.
func getJob(t *testing.T, c *localcluster.Cluster, id string, view jobplanev1.JobView) *jobplanev1.GetJobResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id, View: view})
	if err != nil {
		t.Fatalf("GetJob(%s, %v): %v", id, view, err)
	}
	return resp
}

// countsText is a vertex's or job's counts as "STATE=n,...".
func countsText(counts []*jobplanev1.ExecutionStateCount) string {
	var parts []string
	for _, c := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(c.GetState().String(), "EXECUTION_STATE_"), c.GetCount()))
	}
	return strings.Join(parts, ",")
}

// After a job FINISHED, GetJob still shows its vertices and every
// subtask with its final state, attempt and TaskExecutor, paged as a
// running job's, the plan on the first page; the summary view shows the
// vertices' counts.
func TestEndedJobKeepsItsDetailsFinished(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "done", twoVertices("noop", nil))
	if r := result(t, c, "done"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	executors := map[string]bool{}
	for _, te := range c.TaskExecutors() {
		executors[te.ID()] = true
	}
	subtasks, vertices, withGraph := allPages(t, c, "done")
	var got []string
	for _, s := range subtasks {
		got = append(got, fmt.Sprintf("%s/%d", s.vertex, s.st.GetSubtaskIndex()))
		if s.st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || s.st.GetAttemptNumber() != 0 ||
			!executors[s.st.GetTaskExecutorId()] || s.st.GetFailure() != nil {
			t.Errorf("subtask %s/%d = %v; want FINISHED, attempt 0, on one of the TaskExecutors, no failure", s.vertex, s.st.GetSubtaskIndex(), s.st)
		}
	}
	want := []string{"source/0", "source/1", "source/2", "source/3", "sink/0", "sink/1", "sink/2", "sink/3"}
	if !slices.Equal(got, want) {
		t.Errorf("subtasks listed %v, want %v", got, want)
	}
	if !slices.Equal(withGraph, []int{0}) {
		t.Errorf("the plan came on pages %v, want [0]", withGraph)
	}
	for _, v := range vertices {
		if v.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || countsText(v.GetTaskCounts()) != "FINISHED=4" ||
			v.GetStartTime() == nil || v.GetEndTime() == nil {
			t.Errorf("vertex %v; want FINISHED, 4 FINISHED, started and ended", v)
		}
	}

	summary := getJob(t, c, "done", jobplanev1.JobView_JOB_VIEW_SUMMARY).GetJob()
	if s := summary.GetSummary(); s.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || countsText(s.GetTaskCounts()) != "FINISHED=8" || s.GetEndTime() == nil {
		t.Errorf("summary = %v; want FINISHED with 8 FINISHED subtasks and an end", s)
	}
	if len(summary.GetVertices()) != 2 || summary.GetJobGraph() != nil {
		t.Fatalf("summary view = %v; want 2 vertices and no plan", summary)
	}
	for _, v := range summary.GetVertices() {
		if countsText(v.GetTaskCounts()) != "FINISHED=4" || len(v.GetSubtasks()) != 0 {
			t.Errorf("vertex %s in the summary view = %v; want its counts and no subtasks", v.GetVertexId(), v)
		}
	}
}

// After a job FAILED, GetJob shows the failed subtask FAILED with its
// failure and the TaskExecutor it ran on, and the others in their final
// states, as they stood once every attempt had stopped.
func TestEndedJobKeepsItsDetailsFailed(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	g := &jobplanev1.JobGraph{
		Name: "failing",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "nap", Invokable: "sleep", Parallelism: 2, Config: map[string]string{"duration": "1h"}},
			{Id: "ok", Invokable: "noop", Parallelism: 1},
			{Id: "bad", Invokable: "fail", Parallelism: 1, Config: map[string]string{"message": "broken on purpose"}},
		},
		// bad runs once ok finished, while nap runs.
		Edges: []*jobplanev1.JobEdge{{
			SourceVertexId: "ok", TargetVertexId: "bad",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING,
		}},
		Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}}},
	}
	before := time.Now()
	submit(t, c, "failed", g)
	r := result(t, c, "failed")
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("result = %v, want FAILED", r)
	}
	subtasks, vertices, withGraph := allPages(t, c, "failed")
	if len(subtasks) != 4 || !slices.Equal(withGraph, []int{0}) {
		t.Fatalf("listed %d subtasks, the plan on pages %v; want 4, [0]", len(subtasks), withGraph)
	}
	for _, s := range subtasks {
		st := s.st
		// An ended job's subtasks keep since when they are in their end state.
		if at := st.GetStateTime(); at == nil || at.AsTime().Before(before) || at.AsTime().After(r.GetEndTime().AsTime()) {
			t.Errorf("%s/%d state time %v; want one between the submission and the job's end %v", s.vertex, st.GetSubtaskIndex(), at, r.GetEndTime().AsTime())
		}
		switch key := fmt.Sprintf("%s/%d", s.vertex, st.GetSubtaskIndex()); key {
		case "bad/0":
			if st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FAILED || !strings.Contains(st.GetFailure().GetMessage(), "broken on purpose") ||
				st.GetTaskExecutorId() == "" || st.GetFailure().GetTaskExecutorId() != st.GetTaskExecutorId() {
				t.Errorf("%s = %v; want FAILED with its failure, on its TaskExecutor", key, st)
			}
		case "ok/0":
			if st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || st.GetTaskExecutorId() == "" || st.GetFailure() != nil {
				t.Errorf("%s = %v; want FINISHED on a TaskExecutor", key, st)
			}
		default:
			// Canceled with the job; on a loaded machine, an attempt whose
			// deployment the cancellation cut short may fail instead.
			if !(st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED && st.GetFailure() == nil) &&
				!(st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_FAILED && st.GetFailure() != nil) {
				t.Errorf("%s = %v; want CANCELED with the job (or FAILED, with its failure)", key, st)
			}
		}
	}
	states := map[string]jobplanev1.ExecutionState{}
	for _, v := range vertices {
		states[v.GetVertexId()] = v.GetState()
	}
	napEnded := states["nap"] == jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED || states["nap"] == jobplanev1.ExecutionState_EXECUTION_STATE_FAILED
	if !napEnded || states["ok"] != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || states["bad"] != jobplanev1.ExecutionState_EXECUTION_STATE_FAILED {
		t.Errorf("vertex states %v; want nap CANCELED (or FAILED), ok FINISHED, bad FAILED", states)
	}
	d := getJob(t, c, "failed", jobplanev1.JobView_JOB_VIEW_SUMMARY).GetJob()
	counts := countsText(d.GetSummary().GetTaskCounts())
	if s := d.GetSummary(); s.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || !strings.Contains(s.GetFailure().GetMessage(), "broken on purpose") ||
		!slices.Contains([]string{"FINISHED=1,CANCELED=2,FAILED=1", "FINISHED=1,CANCELED=1,FAILED=2", "FINISHED=1,FAILED=3"}, counts) {
		t.Errorf("summary = %v; want FAILED with the root cause, counts FINISHED=1,CANCELED=2,FAILED=1 (or some canceled ones FAILED)", s)
	}
	if len(d.GetVertices()) != 3 || len(d.GetExceptionHistory()) == 0 {
		t.Errorf("summary view = %v; want 3 vertices and the exception history", d)
	}
}

// Past the details retention, an ended job is known by its result
// alone: the summary and the exception history, no vertices, no plan.
func TestEndedJobDetailsPastTheRetention(t *testing.T) {
	c := newCluster(t, localcluster.Config{DetailsRetention: time.Nanosecond})
	submit(t, c, "gone", twoVertices("noop", nil))
	if r := result(t, c, "gone"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	for _, view := range []jobplanev1.JobView{jobplanev1.JobView_JOB_VIEW_SUMMARY, jobplanev1.JobView_JOB_VIEW_FULL} {
		resp := getJob(t, c, "gone", view)
		if d := resp.GetJob(); d.GetSummary().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || len(d.GetVertices()) != 0 ||
			d.GetJobGraph() != nil || resp.GetNextPageToken() != "" {
			t.Errorf("GetJob(%v) past the retention = %v; want the FINISHED summary alone", view, resp)
		}
	}
}

// The details of ended jobs are bounded by their subtasks in all: beyond
// the bound, the oldest job's go first.
func TestEndedJobDetailsAreBounded(t *testing.T) {
	c := newCluster(t, localcluster.Config{DetailsSubtasks: 12})
	for _, id := range []string{"first", "second"} {
		submit(t, c, id, twoVertices("noop", nil)) // 8 subtasks each
		if r := result(t, c, id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Fatalf("result of %s = %v, want FINISHED", id, r)
		}
	}
	if d := getJob(t, c, "first", jobplanev1.JobView_JOB_VIEW_FULL).GetJob(); len(d.GetVertices()) != 0 || d.GetSummary().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("the oldest job beyond the bound = %v; want its summary alone", d)
	}
	if d := getJob(t, c, "second", jobplanev1.JobView_JOB_VIEW_FULL).GetJob(); len(d.GetVertices()) != 2 || d.GetJobGraph() == nil {
		t.Errorf("the newest job within the bound = %v; want its vertices and plan", d)
	}
}

// An ended job's details are not durable: the next leader knows the job
// by its result alone.
func TestEndedJobDetailsStayWithTheirLeader(t *testing.T) {
	c := newCluster(t, localcluster.Config{JobManagers: 2})
	submit(t, c, "before", twoVertices("noop", nil))
	if r := result(t, c, "before"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	if d := getJob(t, c, "before", jobplanev1.JobView_JOB_VIEW_FULL).GetJob(); len(d.GetVertices()) != 2 {
		t.Fatalf("at the leader it ended under: %v; want its vertices", d)
	}
	c.JobManagers()[0].Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := &jobplanev1.GetJobRequest{JobId: "before", View: jobplanev1.JobView_JOB_VIEW_FULL}
	resp, err := c.JobManagers()[1].Dispatcher().GetJob(ctx, req)
	for err != nil && ctx.Err() == nil {
		// The standby answers NOT_LEADER until it has taken over.
		time.Sleep(20 * time.Millisecond)
		resp, err = c.JobManagers()[1].Dispatcher().GetJob(ctx, req)
	}
	if d := resp.GetJob(); err != nil || d.GetSummary().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || len(d.GetVertices()) != 0 || d.GetJobGraph() != nil {
		t.Errorf("at the next leader: %v, %v; want the FINISHED summary alone", resp, err)
	}
}
