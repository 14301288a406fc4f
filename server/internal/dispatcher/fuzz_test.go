package dispatcher_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/rpcfuzz"
)

// finishingRunner finishes its job as soon as it starts, so that a fuzzed
// WatchJob or GetJobResult of a job a fuzzed SubmitJob created ends at
// once instead of waiting for the job.
type finishingRunner struct{}

func (finishingRunner) Start(_ context.Context, done func(jobmaster.Result, error)) {
	go done(jobmaster.Result{Status: jobstatus.Finished}, nil)
}
func (finishingRunner) Cancel(context.Context) jobplanev1.JobStatus { return jobstatus.Cancelling }
func (finishingRunner) JobMaster() *jobmaster.JobMaster             { return nil }

// newLeadingHandler serves DispatcherService for a Dispatcher that leads
// on an embedded store of its own, until the fuzz target ends: one store
// per target, as etcd takes a while to start.
func newLeadingHandler(tb testing.TB) http.Handler {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: tb.TempDir(), Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quiet,
		Jobs: jobsOf(store, func(*hastorev1.ExecutionPlan, bool, *hastore.Leadership, func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			return finishingRunner{}, nil
		}),
	})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := sess.Campaign(ctx, election.JobManager, "http://127.0.0.1:1")
	if err != nil {
		tb.Fatal(err)
	}
	led := make(chan error, 1)
	go func() { led <- d.Lead(l.Context(), l) }()
	tb.Cleanup(func() {
		cancel()
		_ = l.Resign(context.Background())
		<-led
		_ = sess.Close(context.Background())
		store.Close()
	})
	// Wait for the leadership to be ready (recovery done): a submission
	// is accepted then.
	h := dispatcher.NewHandler(d)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := h.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if connect.CodeOf(err) != connect.CodeUnavailable {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the Dispatcher does not lead after 30s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, handler := h.Path()
	return handler
}

// dispatcherMethods are DispatcherService's procedures, in proto order.
var dispatcherMethods = jobplanev1.File_jobplane_v1_dispatcher_service_proto.Services().ByName("DispatcherService").Methods()

// dispatcherSeeds are valid and invalid requests of each procedure.
func dispatcherSeeds() map[protoreflect.Name][]proto.Message {
	graph := &jobplanev1.JobGraph{Name: "g", Vertices: []*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 2}, {Id: "b", Invokable: "noop", Parallelism: 1}},
		Edges: []*jobplanev1.JobEdge{{SourceVertexId: "a", TargetVertexId: "b", Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL, ResultType: jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED}}}
	return map[protoreflect.Name][]proto.Message{
		"SubmitJob": {
			&jobplanev1.SubmitJobRequest{JobId: "seed", JobGraph: graph},
			&jobplanev1.SubmitJobRequest{JobId: "seed", JobGraph: &jobplanev1.JobGraph{}},
			&jobplanev1.SubmitJobRequest{JobId: "bad id!", JobGraph: graph},
		},
		"GetJob":                {&jobplanev1.GetJobRequest{JobId: "seed", View: jobplanev1.JobView_JOB_VIEW_FULL, PageToken: "x"}},
		"ListJobs":              {&jobplanev1.ListJobsRequest{PageSize: -1}, &jobplanev1.ListJobsRequest{PageToken: "AQAAAAAAAAAAam9i"}},
		"CancelJob":             {&jobplanev1.CancelJobRequest{JobId: "seed"}},
		"GetJobResult":          {&jobplanev1.GetJobResultRequest{JobId: "seed", Wait: true}},
		"WatchJob":              {&jobplanev1.WatchJobRequest{JobId: "seed", ResumeToken: "t"}},
		"ReportClientHeartbeat": {&jobplanev1.ReportClientHeartbeatRequest{JobId: "seed"}},
		"ListTaskExecutors":     {&jobplanev1.ListTaskExecutorsRequest{PageSize: 3}},
		"GetTaskOutput":         {&jobplanev1.GetTaskOutputRequest{JobId: "seed", VertexId: "a", SubtaskIndex: 1, Offset: -1}},
		"GetClusterOverview":    {&jobplanev1.GetClusterOverviewRequest{}},
	}
}

// dispatcherInvalid says which decoded requests the Dispatcher must refuse
// as invalid: a malformed job id, and a job graph that does not validate.
func dispatcherInvalid(msg proto.Message) bool {
	if r, ok := msg.(interface{ GetJobId() string }); ok && !hastore.ValidJobID(r.GetJobId()) {
		return true
	}
	switch r := msg.(type) {
	case *jobplanev1.SubmitJobRequest:
		_, err := jobgraph.Prepare(r.GetJobGraph(), nil, jobgraph.Limits{})
		return err != nil
	case *jobplanev1.ListJobsRequest:
		return r.GetPageSize() < 0
	}
	return false
}

// Every body sent to any DispatcherService procedure, in the Connect
// protocol (binary and JSON) or gRPC framing, gets an answer in its
// protocol with a code the contract allows, and INVALID_ARGUMENT when it
// does not decode or does not validate.
func FuzzDispatcherRequest(f *testing.F) {
	rpcfuzz.AddSeeds(f, dispatcherMethods, dispatcherSeeds())
	target := rpcfuzz.Target{Handler: newLeadingHandler(f), Methods: dispatcherMethods, Invalid: dispatcherInvalid}
	f.Fuzz(func(t *testing.T, method, protocol uint8, raw bool, body []byte) {
		target.Check(t, method, protocol, raw, body)
	})
}
