package jobmanager_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/localcluster"
)

func jobEdge(from, to string, allToAll, blocking bool) *jobplanev1.JobEdge {
	e := &jobplanev1.JobEdge{SourceVertexId: from, TargetVertexId: to,
		Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE,
		ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED}
	if allToAll {
		e.Distribution = jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL
	}
	if blocking {
		e.ResultType = jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING
	}
	return e
}

func attemptKey(a *jobplanev1.ExecutionAttemptId) string {
	return fmt.Sprintf("%s/%d#%d", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber())
}

// submits counts the SubmitTask calls of a job per attempt.
func submits(c *localcluster.Cluster, job string) map[string]int {
	out := map[string]int{}
	for _, e := range c.Tasks().Events() {
		if e.JobID == job && e.Method == "SubmitTask" {
			out[attemptKey(e.Attempt)]++
		}
	}
	return out
}

// A job of 3 vertices, parallelism 4, with one blocking edge runs on 2
// TaskExecutors with 4 slots each; the consumer region is deployed only
// after every producer reported FINISHED.
func TestBlockingEdgeOrdersDeployment(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: 2, Slots: 4})
	g := &jobplanev1.JobGraph{
		Name: "three",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "src", Invokable: "noop", Parallelism: 4},
			{Id: "mid", Invokable: "sleep", Parallelism: 4, Config: map[string]string{"duration": "50ms"}},
			{Id: "sink", Invokable: "noop", Parallelism: 4},
		},
		Edges: []*jobplanev1.JobEdge{jobEdge("src", "mid", true, false), jobEdge("mid", "sink", true, true)},
	}
	submit(t, c, "blocking", g)
	if r := result(t, c, "blocking"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetRestartCount() != 0 {
		t.Fatalf("result = %v, want FINISHED without restarts", r)
	}
	lastProducerFinished, firstSinkSubmit := -1, -1
	executors := map[string]bool{}
	for _, e := range c.Tasks().Events() {
		v := e.Attempt.GetVertexId()
		switch {
		case e.Method == "UpdateTaskExecutionState" && e.State == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED && v != "sink":
			lastProducerFinished = max(lastProducerFinished, e.Seq)
		case e.Method == "SubmitTask" && v == "sink" && firstSinkSubmit < 0:
			firstSinkSubmit = e.Seq
		case e.Method == "SubmitTask":
			executors[e.TaskExecutor] = true
		}
	}
	if firstSinkSubmit < 0 || lastProducerFinished < 0 || firstSinkSubmit < lastProducerFinished {
		t.Errorf("first sink deployment at #%d, last producer FINISHED at #%d; want the deployment after:\n%v",
			firstSinkSubmit, lastProducerFinished, c.Tasks().Events())
	}
	if len(executors) != 2 {
		t.Errorf("the producer region ran on %d TaskExecutors, want 2 (it needs all 8 slots)", len(executors))
	}
	got := submits(c, "blocking")
	for _, v := range []string{"src", "mid", "sink"} {
		for i := range 4 {
			if n := got[fmt.Sprintf("%s/%d#0", v, i)]; n != 1 {
				t.Errorf("%s/%d deployed %d times, want once", v, i, n)
			}
		}
	}
	if len(got) != 12 {
		t.Errorf("deployments = %v, want 12 first attempts", got)
	}
}

// failoverGraph is src =pointwise, pipelined=> map =pointwise, blocking=>
// sink at parallelism 2: regions {src0, map0}, {src1, map1}, {sink0},
// {sink1}. map1's first attempt fails.
func failoverGraph(mode jobplanev1.SchedulingMode) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{
			{Id: "src", Invokable: "noop", Parallelism: 2},
			{Id: "map", Invokable: "fail", Parallelism: 2, Config: map[string]string{
				"subtasks": "1", "attempts": "0", "delay": "100ms", "message": "map1 broke"}},
			{Id: "sink", Invokable: "gate", Parallelism: 2},
		},
		Edges: []*jobplanev1.JobEdge{jobEdge("src", "map", false, false), jobEdge("map", "sink", false, true)},
		Config: &jobplanev1.JobConfig{SchedulingMode: mode, RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3}},
		}},
	}
}

// gate returns an invokable that runs until open is closed.
func gate(open <-chan struct{}) taskexecutor.Invokable {
	return func(ctx context.Context, _ taskexecutor.Task) error {
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitJob polls GetJob (full view) until ok accepts the details.
func waitJob(t *testing.T, c *localcluster.Cluster, id string, ok func(*jobplanev1.JobDetails) bool) *jobplanev1.JobDetails {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last *jobplanev1.JobDetails
	for {
		resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id, View: jobplanev1.JobView_JOB_VIEW_FULL})
		if err == nil {
			last = resp.GetJob()
			if ok(last) {
				return last
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s never reached the expected state; last: %v, %v", id, last, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// subtask returns the details of one subtask.
func subtask(d *jobplanev1.JobDetails, vertex string, index int) *jobplanev1.SubtaskDetails {
	for _, v := range d.GetVertices() {
		if v.GetVertexId() == vertex && index < len(v.GetSubtasks()) {
			return v.GetSubtasks()[index]
		}
	}
	return nil
}

// A failed task restarts its region and the regions downstream of it;
// the other regions keep running with their attempt numbers.
func TestRegionFailover(t *testing.T) {
	open := make(chan struct{})
	c := newCluster(t, localcluster.Config{Invokables: map[string]taskexecutor.Invokable{"gate": gate(open)}})

	// Eager: both sinks run while map1 fails. sink1 consumes map1 and
	// restarts; sink0 and region {src0, map0} keep their attempts.
	submit(t, c, "eager", failoverGraph(jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER))
	running := jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	finished := jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED
	d := waitJob(t, c, "eager", func(d *jobplanev1.JobDetails) bool {
		return subtask(d, "map", 1).GetAttemptNumber() == 1 && subtask(d, "map", 1).GetState() == finished &&
			subtask(d, "sink", 1).GetState() == running && subtask(d, "sink", 0).GetState() == running
	})
	want := map[string][2]int32{"src": {0, 1}, "map": {0, 1}, "sink": {0, 1}}
	for v, attempts := range want {
		for i, a := range attempts {
			if got := subtask(d, v, i).GetAttemptNumber(); got != a {
				t.Errorf("%s/%d at attempt %d, want %d", v, i, got, a)
			}
		}
	}
	s := d.GetSummary()
	if s.GetRestartCount() != 1 || s.GetFailure().GetMessage() != "map1 broke" || attemptKey(s.GetFailure().GetAttempt()) != "map/1#0" {
		t.Errorf("summary restarts %d, failure %v; want 1 restart caused by map/1#0 \"map1 broke\"", s.GetRestartCount(), s.GetFailure())
	}
	if got := submits(c, "eager"); got["sink/0#0"] != 1 || got["src/0#0"] != 1 || got["map/0#0"] != 1 || got["sink/1#1"] != 1 {
		t.Errorf("deployments = %v", got)
	}

	// Pipelined regions (the default): sink1 was never deployed before
	// map1 failed, so it runs once, after map1's second attempt finished.
	submit(t, c, "regions", failoverGraph(jobplanev1.SchedulingMode_SCHEDULING_MODE_UNSPECIFIED))
	waitJob(t, c, "regions", func(d *jobplanev1.JobDetails) bool {
		return subtask(d, "sink", 1).GetState() == running && subtask(d, "sink", 0).GetState() == running
	})
	close(open)
	for _, id := range []string{"eager", "regions"} {
		if r := result(t, c, id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetRestartCount() != 1 {
			t.Errorf("%s: result = %v, want FINISHED after 1 restart", id, r)
		}
	}
	got := submits(c, "regions")
	for key, n := range map[string]int{"src/0#0": 1, "map/0#0": 1, "src/1#0": 1, "map/1#0": 1, "src/1#1": 1, "map/1#1": 1, "sink/0#0": 1, "sink/1#0": 1} {
		if got[key] != n {
			t.Errorf("regions: %s deployed %d times, want %d (all: %v)", key, got[key], n, got)
		}
	}
	if len(got) != 8 {
		t.Errorf("regions: deployments = %v, want 8 attempts", got)
	}
}

// Each restart strategy allows its number of restarts with its delays,
// read off a fake clock.
func TestRestartDelays(t *testing.T) {
	clock := localcluster.NewFakeClock(time.Unix(1_800_000_000, 0))
	c := newCluster(t, localcluster.Config{Clock: clock})
	strategy := func(s *jobplanev1.RestartStrategy) *jobplanev1.JobGraph {
		return &jobplanev1.JobGraph{
			Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "fail", Parallelism: 1, Config: map[string]string{"attempts": "0,1,2,3,4,5"}}},
			Config:   &jobplanev1.JobConfig{RestartStrategy: s},
		}
	}
	sec := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	for _, tc := range []struct {
		name     string
		strategy *jobplanev1.RestartStrategy
		delays   []time.Duration
		advance  map[int]time.Duration // extra clock time before firing delay i
		status   jobplanev1.JobStatus
	}{
		{name: "none", strategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}},
			status: jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{name: "fixed", strategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
			Attempts: 2, Delay: durationpb.New(sec(10))}}},
			delays: []time.Duration{sec(10), sec(10)}, status: jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{name: "exponential", strategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
			InitialDelay: durationpb.New(sec(1)), MaxDelay: durationpb.New(sec(3)), Multiplier: 2, Attempts: 4}}},
			delays: []time.Duration{sec(1), sec(2), sec(3), sec(3)}, status: jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{name: "exponential-reset", strategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
			InitialDelay: durationpb.New(sec(1)), MaxDelay: durationpb.New(sec(8)), Multiplier: 2, ResetAfter: durationpb.New(time.Minute), Attempts: 3}}},
			delays: []time.Duration{sec(1), sec(2), sec(1)}, advance: map[int]time.Duration{1: 2 * time.Minute}, status: jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{name: "failure-rate", strategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FailureRate_{FailureRate: &jobplanev1.RestartStrategy_FailureRate{
			MaxFailures: 2, Interval: durationpb.New(time.Minute), Delay: durationpb.New(sec(5))}}},
			delays: []time.Duration{sec(5), sec(5)}, status: jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{name: "failure-rate-sliding", strategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FailureRate_{FailureRate: &jobplanev1.RestartStrategy_FailureRate{
			MaxFailures: 2, Interval: durationpb.New(time.Minute), Delay: durationpb.New(sec(5))}}},
			// The window slides past old failures: attempts 0-5 fail, 6 finishes.
			delays:  []time.Duration{sec(5), sec(5), sec(5), sec(5), sec(5), sec(5)},
			advance: map[int]time.Duration{1: time.Minute, 3: time.Minute, 5: time.Minute}, status: jobplanev1.JobStatus_JOB_STATUS_FINISHED},
	} {
		id := "restart-" + tc.name
		submit(t, c, id, strategy(tc.strategy))
		for i, want := range tc.delays {
			timer := clock.Next(t, 30*time.Second)
			if timer.Delay != want {
				t.Errorf("%s: delay %d = %v, want %v", tc.name, i, timer.Delay, want)
			}
			clock.Advance(tc.advance[i])
			timer.Fire()
		}
		r := result(t, c, id)
		if r.GetStatus() != tc.status || int(r.GetRestartCount()) != len(tc.delays) {
			t.Errorf("%s: result %v after %d restarts, want %v after %d", tc.name, r.GetStatus(), r.GetRestartCount(), tc.status, len(tc.delays))
		}
		if got := submits(c, id); len(got) != len(tc.delays)+1 {
			t.Errorf("%s: attempts deployed %v, want %d", tc.name, got, len(tc.delays)+1)
		}
		if n := clock.Pending(); n != 0 {
			t.Errorf("%s: %d timers armed beyond the restarts allowed", tc.name, n)
		}
	}
}

// A job whose region waits for more slots than it holds gives the idle
// ones back after the slot yield delay (so that jobs holding parts of
// what each needs cannot wait for one another), keeps its requirement,
// and runs once the slots it needs are free.
func TestWaitingJobGivesBackIdleSlots(t *testing.T) {
	var yields atomic.Int32 // FreeSlots calls that give back the waiting job's slots
	count := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			switch m := req.Any().(type) {
			case *clusterv1.FreeSlotsRequest:
				if m.GetJobId() == "waits" && strings.Contains(m.GetReason(), "waits for more") {
					yields.Add(1)
				}
			case *clusterv1.FreeSlotRequest:
				if m.GetJobId() == "waits" && strings.Contains(m.GetReason(), "waits for more") {
					yields.Add(1)
				}
			}
			return next(ctx, req)
		}
	})
	open := make(chan struct{})
	c := newCluster(t, localcluster.Config{TaskExecutors: 1, Slots: 3, SlotYield: 200 * time.Millisecond,
		Invokables:               map[string]taskexecutor.Invokable{"gate": gate(open)},
		TaskExecutorInterceptors: []connect.Interceptor{count}})
	// "runs" keeps one slot (its source's is given back); "waits" needs
	// three at once and gets the two left.
	submit(t, c, "runs", &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{{Id: "src", Invokable: "noop", Parallelism: 1}, {Id: "sink", Invokable: "gate", Parallelism: 1}},
		Edges:    []*jobplanev1.JobEdge{jobEdge("src", "sink", true, false)},
	})
	running := jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	waitJob(t, c, "runs", func(d *jobplanev1.JobDetails) bool { return subtask(d, "sink", 0).GetState() == running })
	submit(t, c, "waits", &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{{Id: "src", Invokable: "noop", Parallelism: 1}, {Id: "sink", Invokable: "gate", Parallelism: 2}},
		Edges:    []*jobplanev1.JobEdge{jobEdge("src", "sink", true, false)},
	})
	for deadline := time.Now().Add(30 * time.Second); yields.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting job gave back no idle slot within 30s; expected it to after 200ms")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(submits(c, "waits")); n != 0 {
		t.Errorf("%d attempts of the waiting job deployed before it had its three slots", n)
	}
	close(open)
	for _, id := range []string{"runs", "waits"} {
		if r := result(t, c, id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Errorf("job %s: %v; want FINISHED", id, r)
		}
	}
}

// A region larger than the cluster's slots fails with a cause once it
// waited out the slot timeout, rather than waiting forever.
func TestRegionWithoutSlotsFails(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: 1, Slots: 2, SlotTimeout: 300 * time.Millisecond})
	submit(t, c, "too-big", &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 1}, {Id: "b", Invokable: "noop", Parallelism: 2}},
		Edges:    []*jobplanev1.JobEdge{jobEdge("a", "b", true, false)},
	})
	r := result(t, c, "too-big")
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || !strings.HasPrefix(r.GetFailure().GetMessage(), "no slots: a region of 3 subtasks") {
		t.Errorf("result = %v, want FAILED for want of slots", r)
	}
	if got := submits(c, "too-big"); len(got) != 0 {
		t.Errorf("deployments = %v, want none (the region never had all its slots)", got)
	}
}
