package jobmanager_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

// WatchJob's first message is the job's current state, task counts
// included, not the summary of its last status change.
func TestWatchJobStartsWithTheCurrentState(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "watched", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "sleep", Parallelism: 2, Config: map[string]string{"duration": "1h"}}}})
	running := func(s *jobplanev1.JobSummary) int32 {
		for _, n := range s.GetTaskCounts() {
			if n.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				return n.GetCount()
			}
		}
		return 0
	}
	waitJob(t, c, "watched", func(d *jobplanev1.JobDetails) bool { return running(d.GetSummary()) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	first := stream.Msg().GetJob()
	if first.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING || running(first) != 2 {
		t.Errorf("first message = %v, want RUNNING with 2 subtasks RUNNING", first)
	}
}

// GetClusterOverview names the leader by its address as well as its token.
func TestClusterOverviewNamesTheLeader(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetLeader().GetAddress(); got != c.URL() {
		t.Errorf("leader address = %q, want %q", got, c.URL())
	}
	if resp.GetLeader().GetToken().GetEpoch() == 0 {
		t.Error("no leader token")
	}
}

// A job's slots are free when its result is written: the next job finds
// them free at once, without waiting for the TaskExecutors' next reports.
// The job is one pipelined region of two subtasks, so it runs only once
// both slots were offered to it and taken.
func TestSlotsFreeWhenResultIsWritten(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: 1, Slots: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		id := fmt.Sprintf("quick-%d", i)
		g := twoVertices("noop", nil)
		g.Vertices[0].Parallelism, g.Vertices[1].Parallelism = 1, 1
		submit(t, c, id, g)
		if res := result(t, c, id); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Fatalf("%s: %v", id, res)
		}
		resp, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetFreeSlotCount() != resp.GetSlotCount() || resp.GetSlotCount() != 2 {
			t.Fatalf("right after %s's result: %d of %d slots free, want all 2", id, resp.GetFreeSlotCount(), resp.GetSlotCount())
		}
	}
}

// The full view of a job lists its subtasks a page at a time, each once,
// in vertex order; a page token works only for the job it was issued for.
func TestGetJobFullViewIsPaged(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{
		{Id: "a", Invokable: "sleep", Parallelism: 1500, Config: map[string]string{"duration": "1h"}},
		{Id: "b", Invokable: "sleep", Parallelism: 700, Config: map[string]string{"duration": "1h"}},
	}}
	submit(t, c, "wide", g)
	waitJob(t, c, "wide", func(d *jobplanev1.JobDetails) bool { return len(d.GetVertices()) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[string]bool{}
	var sizes []int
	token := ""
	for {
		resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "wide", View: jobplanev1.JobView_JOB_VIEW_FULL, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range resp.GetJob().GetVertices() {
			if len(v.GetTaskCounts()) == 0 {
				t.Errorf("vertex %s without counts", v.GetVertexId())
			}
			for _, st := range v.GetSubtasks() {
				key := fmt.Sprintf("%s/%d", v.GetVertexId(), st.GetSubtaskIndex())
				if seen[key] {
					t.Errorf("subtask %s listed twice", key)
				}
				seen[key] = true
				n++
			}
		}
		sizes = append(sizes, n)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if len(sizes) > 10 {
			t.Fatal("more than 10 pages")
		}
	}
	if len(seen) != 2200 || fmt.Sprint(sizes) != "[1000 1000 200]" {
		t.Errorf("listed %d subtasks in pages of %v, want 2200 in [1000 1000 200]", len(seen), sizes)
	}
	small, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "wide", View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: 10})
	if err != nil || len(small.GetJob().GetVertices()) != 1 || len(small.GetJob().GetVertices()[0].GetSubtasks()) != 10 || small.GetNextPageToken() == "" {
		t.Errorf("page of 10 = %v, %v", small, err)
	}
	submit(t, c, "other", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}})
	for _, req := range []*jobplanev1.GetJobRequest{
		{JobId: "other", View: jobplanev1.JobView_JOB_VIEW_FULL, PageToken: small.GetNextPageToken()},
		{JobId: "wide", View: jobplanev1.JobView_JOB_VIEW_FULL, PageToken: "bogus!"},
		{JobId: "wide", View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: -1},
	} {
		if _, err := c.Dispatcher().GetJob(ctx, req); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("GetJob(%v): %v, want INVALID_ARGUMENT", req, err)
		}
	}
}

// A job of a million subtasks is refused at submission, naming the limit,
// and nothing of it is stored.
func TestHugeJobIsRefused(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "huge", JobGraph: &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1_000_000, MaxParallelism: 1_000_000}},
	}})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "over the limit of 100000") {
		t.Errorf("submit of 1e6 subtasks: %v, want INVALID_ARGUMENT naming the limit", err)
	}
	if _, err := c.Store().GetExecutionPlan(ctx, "huge"); err == nil {
		t.Error("the refused job's plan is stored")
	}
}

// GetJob's full view shows each vertex's state and times, and, on its
// first page, the job's plan.
func TestJobDetailsShowVerticesAndPlan(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	g := twoVertices("sleep", map[string]string{"duration": "1h"})
	g.Edges[0].ResultType = jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING
	submit(t, c, "views", g)
	d := waitJob(t, c, "views", func(d *jobplanev1.JobDetails) bool {
		return len(d.GetVertices()) == 2 && d.GetVertices()[1].GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	})
	source, sink := d.GetVertices()[0], d.GetVertices()[1]
	if source.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || source.GetStartTime() == nil || source.GetEndTime() == nil ||
		source.GetEndTime().AsTime().Before(source.GetStartTime().AsTime()) {
		t.Errorf("source = %v; want FINISHED with a start and a later end", source)
	}
	if sink.GetStartTime() == nil || sink.GetEndTime() != nil || sink.GetStartTime().AsTime().Before(source.GetEndTime().AsTime()) {
		t.Errorf("sink = %v; want RUNNING, started after the source ended, not ended", sink)
	}
	if d.GetJobGraph().GetVertices()[1].GetConfig()["duration"] != "1h" {
		t.Errorf("plan in the first page = %v; want the job's graph", d.GetJobGraph())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "views", View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: 4})
	if err != nil || second.GetNextPageToken() == "" {
		t.Fatalf("first page of 4 = %v, %v", second, err)
	}
	next, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "views", View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: 4, PageToken: second.GetNextPageToken()})
	if err != nil || next.GetJob().GetJobGraph() != nil {
		t.Errorf("second page = %v, %v; want no plan in it", next.GetJob().GetJobGraph(), err)
	}
	summary, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "views"})
	if err != nil || summary.GetJob().GetJobGraph() != nil || summary.GetJob().GetVertices()[0].GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
		t.Errorf("summary view = %v, %v; want vertex states and no plan", summary.GetJob(), err)
	}
}

// A subtask's details say since when its attempt is in its state: unset
// before it first moved, and once RUNNING, the time the JobMaster learnt
// it, between the submission and the read.
func TestSubtaskStateTime(t *testing.T) {
	c := newCluster(t, localcluster.Config{Slots: 2})
	before := time.Now()
	submit(t, c, "timed", &jobplanev1.JobGraph{Name: "timed", Vertices: []*jobplanev1.JobVertex{
		{Id: "nap", Invokable: "sleep", Parallelism: 2, Config: map[string]string{"duration": "1h"}},
	}})
	waitJob(t, c, "timed", func(d *jobplanev1.JobDetails) bool {
		return countsText(d.GetSummary().GetTaskCounts()) == "RUNNING=2"
	})
	after := time.Now()
	resp := getJob(t, c, "timed", jobplanev1.JobView_JOB_VIEW_FULL)
	n := 0
	for _, v := range resp.GetJob().GetVertices() {
		for _, st := range v.GetSubtasks() {
			n++
			at := st.GetStateTime()
			if st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || at == nil ||
				at.AsTime().Before(before) || at.AsTime().After(after) {
				t.Errorf("subtask %d = %v; want RUNNING since a time between %v and %v", st.GetSubtaskIndex(), st, before, after)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d subtasks listed, want 2", n)
	}
}
