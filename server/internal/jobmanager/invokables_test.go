package jobmanager_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/localcluster"
)

// A new job naming invokables that no registered TaskExecutor offers is
// refused at submission, with each vertex's invokable field and the
// invokables that are offered, and nothing is written for it. The
// cluster's TaskExecutors, started without AllowExec, do not offer exec.
func TestSubmitRefusesInvokableNotOffered(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := &jobplanev1.JobGraph{Name: "needs", Vertices: []*jobplanev1.JobVertex{
		{Id: "a", Invokable: "noop", Parallelism: 1},
		{Id: "b", Invokable: "nosuch", Parallelism: 1},
		{Id: "c", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": `["true"]`}},
		{Id: "d", Invokable: "nosuch", Parallelism: 1},
	}}
	_, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "needs", JobGraph: g})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED) {
		t.Fatalf("SubmitJob = %v, want FAILED_PRECONDITION INVOKABLE_NOT_OFFERED", err)
	}
	_, md, _ := apierror.Info(err)
	if md["invokables"] != "exec,nosuch" || md["offered"] != "count,fail,noop,sleep" {
		t.Errorf("metadata %v, want invokables exec,nosuch and offered count,fail,noop,sleep", md)
	}
	var fields []string
	for _, v := range apierror.Violations(err) {
		fields = append(fields, v.Path)
	}
	if want := []string{"job_graph.vertices[1].invokable", "job_graph.vertices[2].invokable", "job_graph.vertices[3].invokable"}; !slices.Equal(fields, want) {
		t.Errorf("violations %q, want %q", fields, want)
	}
	if cerr := new(connect.Error); !errors.As(err, &cerr) || !strings.Contains(cerr.Message(), "(they offer: count, fail, noop, sleep)") {
		t.Errorf("message of %v does not list the invokables offered", err)
	}
	if _, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "needs"}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND) {
		t.Errorf("GetJob of the refused job = %v, want JOB_NOT_FOUND", err)
	}
	if _, err := c.Store().GetExecutionPlan(ctx, "needs"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("the refused job's plan: %v, want none stored", err)
	}
}

// While no TaskExecutor is registered, a job is accepted and waits, as a
// cluster that is starting must allow. Once one is registered, a
// resubmission of that job is answered as always, a new job naming the
// same invokable is refused, and the accepted one fails at deployment,
// the backstop for a check made with what was registered then.
func TestInvokableCheckWaitsForTaskExecutors(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := &jobplanev1.JobGraph{Name: "early", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "nosuch", Parallelism: 1}}}
	if resp := submit(t, c, "early", g); !resp.GetCreated() {
		t.Fatalf("SubmitJob with no TaskExecutor registered = %v, want created", resp)
	}

	w, err := worker.New(worker.Config{Server: c.URL(), Slots: 1, ID: "w-late", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker Run = %v", err)
		}
	})
	for {
		ov, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if ov.GetTaskExecutorCount() > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the worker did not register within 60s")
		case <-time.After(20 * time.Millisecond):
		}
	}

	if resp := submit(t, c, "early", g); resp.GetCreated() {
		t.Errorf("resubmission = %v, want the existing job (created false)", resp)
	}
	if _, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "late", JobGraph: g}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED) {
		t.Errorf("a new job once a TaskExecutor is registered: %v, want INVOKABLE_NOT_OFFERED", err)
	}
	if res := result(t, c, "early"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || !strings.Contains(res.GetFailure().GetMessage(), "nosuch") {
		t.Errorf("the job accepted early ended %v (%v), want FAILED naming nosuch", res.GetStatus(), res.GetFailure())
	}
}
