package runner

import (
	"context"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// FeatureInvokableCheck (contract 1.2): SubmitJob refuses a new job that
// names an invokable no registered TaskExecutor offers, while one is
// registered (FAILED_PRECONDITION, INVOKABLE_NOT_OFFERED; see
// JobVertex.invokable). A server of contract 1.1 accepts such a job and
// fails it at deployment instead.
const FeatureInvokableCheck = "checks_invokables"

// notOffered is an invokable that the runner's TaskExecutors do not offer.
const notOffered = "conformance-not-offered"

var invokableCases = []Case{
	{Name: "lifecycle/invokable-not-offered-refused", Requires: []string{FeatureResourceManager, FeatureInvokableCheck},
		Doc: "once TaskExecutors are registered, a new job naming an invokable none offers is FAILED_PRECONDITION (INVOKABLE_NOT_OFFERED) with a field violation of that vertex's invokable and the offered invokables in its metadata, and writes nothing",
		Run: invokableNotOfferedRefused},
}

func invokableNotOfferedRefused(t *T) {
	// A job that ran shows the runner's TaskExecutors registered.
	t.setup(func() {
		barrier := t.job("barrier")
		t.mustSubmit(barrier, noopGraph(1))
		t.finishedOnce(barrier, 1)
	})
	id := t.job("j")
	g := &jobplanev1.JobGraph{Name: "not-offered", Vertices: []*jobplanev1.JobVertex{
		{Id: "src", Invokable: "noop", Parallelism: 1},
		{Id: "sink", Invokable: notOffered, Parallelism: 1},
	}}
	_, err := t.submit(id, g)
	info, _ := errorDetail[*errdetails.ErrorInfo](err)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || info.GetReason() != "INVOKABLE_NOT_OFFERED" {
		t.Errorf("a job naming %q, which no registered TaskExecutor offers, answered %v; expected FAILED_PRECONDITION (INVOKABLE_NOT_OFFERED)", notOffered, err)
	} else {
		br, _ := errorDetail[*errdetails.BadRequest](err)
		var fields []string
		for _, v := range br.GetFieldViolations() {
			fields = append(fields, v.GetField())
		}
		if !slices.Equal(fields, []string{"job_graph.vertices[1].invokable"}) {
			t.Errorf("INVOKABLE_NOT_OFFERED named the fields %q; expected a BadRequest violation of job_graph.vertices[1].invokable alone", fields)
		}
		md := info.GetMetadata()
		offered := strings.Split(md["offered"], ",")
		if md["invokables"] != notOffered || !slices.IsSorted(offered) || !slices.Contains(offered, "noop") || !slices.Contains(offered, "gate") || slices.Contains(offered, notOffered) {
			t.Errorf("INVOKABLE_NOT_OFFERED metadata %v; expected invokables %q and offered the runner's TaskExecutors' invokables (noop, gate, ...) in increasing order", md, notOffered)
		}
	}
	if n := len(t.events(id, "put-plan")); n != 0 {
		t.Errorf("%d plan puts for the refused job; expected none", n)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	if _, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id}); reason(err) != "JOB_NOT_FOUND" {
		t.Errorf("GetJob of the refused job answered %v; expected JOB_NOT_FOUND", err)
	}
}
