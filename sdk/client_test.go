package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

const (
	finished = jobplanev1.JobStatus_JOB_STATUS_FINISHED
	canceled = jobplanev1.JobStatus_JOB_STATUS_CANCELED
)

// A job's whole life through the Client: submit, watch, wait, get, list,
// resubmit, and the typed errors of what cannot be done.
func TestJobLifecycle(t *testing.T) {
	c := newClient(t, []string{serverURL})
	ctx := testContext(t, 60*time.Second)

	b := jobgraph.NewBuilder("lifecycle")
	extract := b.Vertex("extract", "noop").Parallelism(3)
	load := b.Vertex("load", "sleep").Config("duration", "200ms").Parallelism(2)
	b.Connect(extract, load).Blocking()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Created || len(s.JobID) != 32 {
		t.Fatalf("Submit = %+v, want a new job with a generated 32-digit id", s)
	}

	var seen []jobplanev1.JobStatus
	var running *jobplanev1.JobDetails
	for sum, err := range c.Watch(ctx, s.JobID) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if sum.GetJobId() != s.JobID {
			t.Fatalf("watch gave job %q", sum.GetJobId())
		}
		seen = append(seen, sum.GetStatus())
		if sum.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING && running == nil {
			if running, err = c.Get(ctx, s.JobID, sdk.WithSubtaskPageSize(1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) == 0 || seen[len(seen)-1] != finished {
		t.Fatalf("watch saw %v, want it to end with FINISHED", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] == seen[i-1] {
			t.Fatalf("watch repeated a status: %v", seen)
		}
	}

	res, err := c.Wait(ctx, s.JobID)
	if err != nil || res.GetStatus() != finished {
		t.Fatalf("Wait = %v, %v; want FINISHED", res, err)
	}
	var subtasks int
	for _, v := range running.GetVertices() {
		subtasks += len(v.GetSubtasks())
	}
	for _, v := range running.GetVertices() {
		for i, st := range v.GetSubtasks() {
			if int(st.GetSubtaskIndex()) != i {
				t.Fatalf("vertex %s: subtask %d listed at %d (pages merged out of order)", v.GetVertexId(), st.GetSubtaskIndex(), i)
			}
		}
	}
	if len(running.GetVertices()) != 2 || subtasks != 5 || running.GetJobGraph() == nil {
		t.Fatalf("Get while running: %d vertices, %d subtasks, graph %v; want 2, 5 and the graph", len(running.GetVertices()), subtasks, running.GetJobGraph() != nil)
	}
	if d, err := c.Get(ctx, s.JobID, sdk.WithSummaryView()); err != nil || d.GetSummary().GetStatus() != finished {
		t.Fatalf("Get after the end: %v, %v; want FINISHED", d, err)
	}

	listed := false
	for j, err := range c.List(ctx, sdk.WithStatuses(finished), sdk.WithPageSize(1)) {
		if err != nil {
			t.Fatal(err)
		}
		if j.GetStatus() != finished {
			t.Fatalf("List with a FINISHED filter gave %v", j.GetStatus())
		}
		listed = listed || j.GetJobId() == s.JobID
	}
	if !listed {
		t.Fatal("List did not list the job")
	}

	again, err := c.Submit(ctx, g, sdk.WithJobID(s.JobID))
	if err != nil || again.Created || again.Status != finished {
		t.Fatalf("resubmission = %+v, %v; want the ended job, not created", again, err)
	}
	_, err = c.Submit(ctx, sleepGraph("other", 1, time.Millisecond), sdk.WithJobID(s.JobID))
	var dup *sdk.DuplicateJobError
	if !errors.As(err, &dup) || !dup.GloballyTerminated || dup.JobID != s.JobID {
		t.Fatalf("another plan under the id: %v; want a DuplicateJobError of an ended job", err)
	}
	if _, err := c.Cancel(ctx, s.JobID); !errors.Is(err, sdk.ErrJobTerminal) {
		t.Fatalf("Cancel of a finished job: %v; want ErrJobTerminal", err)
	}
	if _, err := c.Get(ctx, "no-such-job"); !errors.Is(err, sdk.ErrJobNotFound) || sdk.Reason(err) != jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND {
		t.Fatalf("Get of an unknown job: %v; want ErrJobNotFound", err)
	}
	var cerr *connect.Error
	if _, err := c.Wait(ctx, "no-such-job"); !errors.As(err, &cerr) || cerr.Code() != connect.CodeNotFound {
		t.Fatalf("Wait of an unknown job: %v; want a *connect.Error NOT_FOUND underneath", err)
	}
}

func TestCancel(t *testing.T) {
	c := newClient(t, []string{serverURL})
	ctx := testContext(t, 60*time.Second)
	s, err := c.Submit(ctx, sleepGraph("long", 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Cancel(ctx, s.JobID)
	if err != nil || (st != canceled && st != jobplanev1.JobStatus_JOB_STATUS_CANCELLING) {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	res, err := c.Wait(ctx, s.JobID)
	if err != nil || res.GetStatus() != canceled {
		t.Fatalf("Wait = %v, %v; want CANCELED", res, err)
	}
	if st, err := c.Cancel(ctx, s.JobID); err != nil || st != canceled {
		t.Fatalf("second Cancel = %v, %v; want CANCELED, no error", st, err)
	}
}

// The SDK checks a graph by the server's rules, in the server's words:
// for each bad graph, the violations Validate finds before sending are the
// ones the server answers when the graph is sent anyway.
func TestValidateAgreesWithServer(t *testing.T) {
	c := newClient(t, []string{serverURL})
	ctx := testContext(t, 30*time.Second)
	v := func(id, inv string, p int32) *jobplanev1.JobVertex {
		return &jobplanev1.JobVertex{Id: id, Invokable: inv, Parallelism: p}
	}
	bad := map[string]*jobplanev1.JobGraph{
		"no vertices":     {Name: "empty"},
		"zero parallel":   {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 0)}},
		"no invokable":    {Vertices: []*jobplanev1.JobVertex{v("a", "", 1)}},
		"duplicate ids":   {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 1), v("a", "noop", 1)}},
		"bad vertex id":   {Vertices: []*jobplanev1.JobVertex{v("a b", "noop", 1)}},
		"edge to nowhere": {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 1)}, Edges: []*jobplanev1.JobEdge{{SourceVertexId: "a", TargetVertexId: "z"}}},
		"cycle": {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 1), v("b", "noop", 1)}, Edges: []*jobplanev1.JobEdge{
			{SourceVertexId: "a", TargetVertexId: "b"}, {SourceVertexId: "b", TargetVertexId: "a"},
		}},
		"bad restart": {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 1)}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: -1}},
		}}},
		// Before contract 1.2, attempts 0 meant unlimited.
		"restart attempts 0": {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 1)}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{}},
		}}},
		"restart attempts and unlimited": {Vertices: []*jobplanev1.JobVertex{v("a", "noop", 1)}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 2, Unlimited: true}},
		}}},
	}
	for name, g := range bad {
		t.Run(name, func(t *testing.T) {
			local := sdk.Validate(g)
			var lerr *sdk.InvalidJobError
			if !errors.As(local, &lerr) || len(lerr.Violations) == 0 {
				t.Fatalf("Validate = %v; want an InvalidJobError", local)
			}
			if _, err := c.Submit(ctx, g); !errors.As(err, new(*sdk.InvalidJobError)) || err.Error() != local.Error() {
				t.Fatalf("Submit = %v; want the local check's error %v", err, local)
			}
			_, err := c.Dispatcher(serverURL).SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: sdk.NewJobID(), JobGraph: g})
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeInvalidArgument {
				t.Fatalf("server: %v; want INVALID_ARGUMENT", err)
			}
			remote := violationsOf(err)
			if !slices.Equal(remote, lerr.Violations) {
				t.Fatalf("violations differ:\nlocal:  %v\nserver: %v", lerr.Violations, remote)
			}
		})
	}
	// The server names the field of attempts 0 and says what to write.
	_, err := c.Dispatcher(serverURL).SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: sdk.NewJobID(), JobGraph: bad["restart attempts 0"]})
	if got := violationsOf(err); len(got) != 1 || got[0].Field != "job_graph.config.restart_strategy.fixed_delay.attempts" ||
		!strings.Contains(got[0].Description, "unlimited: true") {
		t.Fatalf("attempts 0: server's violations %v; want job_graph.config.restart_strategy.fixed_delay.attempts, naming unlimited: true", got)
	}
	if _, err := c.Submit(ctx, sleepGraph("x", 1, 0), sdk.WithJobID("bad id!")); !errors.As(err, new(*sdk.InvalidJobError)) {
		t.Fatalf("a malformed job id: %v; want an InvalidJobError", err)
	}
	_, err = c.Dispatcher(serverURL).SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "bad id!", JobGraph: sleepGraph("x", 1, 0)})
	want := []sdk.Violation{{Field: "job_id", Description: jobgraph.JobIDRule}}
	if got := violationsOf(err); !slices.Equal(got, want) {
		t.Fatalf("server's job id violation %v, want %v", got, want)
	}
}

// The Client speaks every protocol and HTTP version the server serves.
func TestProtocols(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []sdk.Option
	}{
		{"connect-h2c", nil},
		{"connect-http1", []sdk.Option{sdk.WithHTTP1()}},
		{"grpc-h2c", []sdk.Option{sdk.WithProtocol(sdk.ProtocolGRPC)}},
		{"grpcweb-http1", []sdk.Option{sdk.WithProtocol(sdk.ProtocolGRPCWeb), sdk.WithHTTP1()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, []string{serverURL}, tc.opts...)
			ctx := testContext(t, 30*time.Second)
			s, err := c.Submit(ctx, sleepGraph(tc.name, 1, 10*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var last jobplanev1.JobStatus
			for sum, err := range c.Watch(ctx, s.JobID) {
				if err != nil {
					t.Fatal(err)
				}
				last = sum.GetStatus()
			}
			if last != finished {
				t.Fatalf("watch ended with %v", last)
			}
			_, err = c.Submit(ctx, &jobplanev1.JobGraph{}, sdk.WithJobID(s.JobID))
			if !errors.As(err, new(*sdk.InvalidJobError)) {
				t.Fatalf("%v", err)
			}
		})
	}
	if _, err := sdk.New([]string{serverURL}, sdk.WithProtocol(sdk.ProtocolGRPC), sdk.WithHTTP1()); err == nil {
		t.Fatal("gRPC over HTTP/1.1 accepted")
	}
	for _, bad := range []string{"", "ftp://x", "http://"} {
		if _, err := sdk.New([]string{bad}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

func TestNewJobIDIsValidAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := sdk.NewJobID()
		if !jobgraph.ValidJobID(id) || seen[id] {
			t.Fatalf("NewJobID gave %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
	if jobgraph.ValidJobID(fmt.Sprintf("%065d", 0)) || jobgraph.ValidJobID("") || !jobgraph.ValidJobID("a-Z_9") {
		t.Fatal("ValidJobID does not follow the contract's rule")
	}
}

// violationsOf reads the BadRequest field violations of a generated
// client's error, without the SDK's help.
func violationsOf(err error) []sdk.Violation {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return nil
	}
	var out []sdk.Violation
	for _, d := range cerr.Details() {
		if m, derr := d.Value(); derr == nil {
			if br, ok := m.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					out = append(out, sdk.Violation{Field: v.GetField(), Description: v.GetDescription()})
				}
			}
		}
	}
	return out
}

// An attached job (client_heartbeat_timeout) lives while Wait waits for
// it, and is canceled when nobody does.
func TestWaitKeepsAnAttachedJobAlive(t *testing.T) {
	c := newClient(t, []string{serverURL})
	ctx := testContext(t, 60*time.Second)
	// A heartbeat timeout of 3s: the waited-for job outlives it, the
	// abandoned one is canceled well before its task would end.
	attached := func(name, nap string) *jobplanev1.JobGraph {
		b := jobgraph.NewBuilder(name)
		b.Vertex("nap", "sleep").Config("duration", nap)
		b.ClientHeartbeatTimeout(3 * time.Second)
		g, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	res, err := c.Execute(ctx, attached("waited", "5s"))
	if err != nil || res.GetStatus() != finished {
		t.Fatalf("a waited-for attached job: %v, %v; want FINISHED", res, err)
	}
	s, err := c.Submit(ctx, attached("abandoned", "1h"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Dispatcher(serverURL).GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: s.JobID, Wait: true})
	if err != nil || r.GetResult().GetStatus() != canceled {
		t.Fatalf("an attached job nobody waits for: %v, %v; want CANCELED", r, err)
	}
}

// Interceptors see every call, with the header they set reaching the
// server.
func TestInterceptors(t *testing.T) {
	var calls []string
	count := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			calls = append(calls, req.Spec().Procedure)
			req.Header().Set("X-Test", "1")
			return next(ctx, req)
		}
	})
	c := newClient(t, []string{serverURL}, sdk.WithInterceptors(count))
	if _, err := c.Cluster(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"/jobplane.v1.DispatcherService/GetClusterOverview"}) {
		t.Fatalf("the interceptor saw %v", calls)
	}
}

// A task's output is read through the Client, after the job ended too,
// and can be followed by offset.
func TestTaskOutput(t *testing.T) {
	c := newClient(t, []string{serverURL})
	ctx := testContext(t, 60*time.Second)
	g := &jobplanev1.JobGraph{Name: "echo", Vertices: []*jobplanev1.JobVertex{{
		Id: "echo", Invokable: "exec", Parallelism: 2,
		Config: map[string]string{"argv": `["sh","-c","echo out-$JOBPLANE_SUBTASK_INDEX; echo err >&2"]`},
	}}}
	res, err := c.Execute(ctx, g)
	if err != nil || res.GetStatus() != finished {
		t.Fatalf("Execute = %v, %v", res, err)
	}
	var got []byte
	offset := int64(0)
	for {
		out, err := c.TaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: res.GetJobId(), VertexId: "echo", SubtaskIndex: 1, Offset: offset, MaxBytes: 3})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.GetData()...)
		offset = out.GetNextOffset()
		if out.GetEnded() && offset == out.GetEndOffset() {
			break
		}
	}
	if string(got) != "out-1\nerr\n" && string(got) != "err\nout-1\n" {
		t.Fatalf("subtask 1's output, read 3 bytes at a time: %q", got)
	}
	_, err = c.TaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: res.GetJobId(), VertexId: "nope"})
	if !errors.As(err, new(*sdk.InvalidJobError)) {
		t.Fatalf("an unknown vertex: %v; want INVALID_ARGUMENT", err)
	}
}
