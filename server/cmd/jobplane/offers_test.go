package main

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// A `jobplane taskexecutor` offers exec only with --allow-exec: while the
// only one registered lacks it, an exec job is refused at submission
// (INVOKABLE_NOT_OFFERED, listing what is offered); one started with it
// offers exec.
func TestTaskExecutorOffersExecOnlyWhenAllowed(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr")
	jm := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(), "--task-executors", "0")
	url := "http://" + waitForFile(t, jm, addrFile)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// offers waits until n TaskExecutors are registered, and returns
	// whether each offers exec.
	offers := func(n int) []bool {
		t.Helper()
		for {
			resp, err := client.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{})
			if err == nil && len(resp.GetTaskExecutors()) == n {
				var out []bool
				for _, te := range resp.GetTaskExecutors() {
					out = append(out, slices.Contains(te.GetInvokables(), "exec"))
				}
				return out
			}
			if ctx.Err() != nil {
				t.Fatalf("%d TaskExecutors never registered: %v, %v", n, resp, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	startJobplane(t, "taskexecutor", "--hastore", url, "--slots", "1")
	if got := offers(1); got[0] {
		t.Errorf("a taskexecutor without --allow-exec offers exec")
	}
	graph := &jobplanev1.JobGraph{Name: "exec", Vertices: []*jobplanev1.JobVertex{{Id: "run", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": `["true"]`}}}}
	_, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "exec", JobGraph: graph})
	if _, md, _ := apierror.Info(err); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED) || md["offered"] != "count,fail,noop,sleep" {
		t.Errorf("SubmitJob of an exec job = %v (metadata %v), want INVOKABLE_NOT_OFFERED offering count,fail,noop,sleep", err, md)
	}

	startJobplane(t, "taskexecutor", "--hastore", url, "--slots", "1", "--allow-exec")
	if got := offers(2); slices.Index(got, true) < 0 || slices.Index(got, false) < 0 {
		t.Errorf("exec offered by %v of the TaskExecutors, want the one with --allow-exec alone", got)
	}
}
