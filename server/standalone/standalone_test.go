package standalone_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/standalone"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A cluster runs a job on a caller's invokable, and stops with its
// context, leaving nothing running.
func TestClusterRunsInvokable(t *testing.T) {
	var ran atomic.Int32
	c, err := standalone.New(context.Background(), standalone.Config{
		Store:         etcdstore.OpenConfig{DataDir: t.TempDir()},
		TaskExecutors: 2, Slots: 2,
		Invokables: map[string]taskexecutor.Invokable{"count": func(context.Context, taskexecutor.Task) error {
			ran.Add(1)
			return nil
		}},
		Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.TaskExecutorIDs()); got != 2 {
		t.Errorf("TaskExecutorIDs: %d, want 2", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, c.URL())
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	g := &jobplanev1.JobGraph{Name: "count", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "count", Parallelism: 3}}}
	for {
		_, err := client.SubmitJob(wctx, &jobplanev1.SubmitJobRequest{JobId: "j1", JobGraph: g})
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("submit: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // until the JobManager leads
	}
	res, err := client.GetJobResult(wctx, &jobplanev1.GetJobResultRequest{JobId: "j1", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetResult().GetStatus(); got != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("status %v, want FINISHED", got)
	}
	if got := ran.Load(); got != 3 {
		t.Errorf("invokable ran %d times, want 3", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := c.Run(context.Background()); err == nil {
		t.Error("second Run: no error")
	}
}

// Close releases a cluster that never ran: its data directory can be
// opened again at once.
func TestCloseWithoutRun(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		c, err := standalone.New(context.Background(), standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, TaskExecutors: 1, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The cluster's URL is the advertised one; it still serves on the bound
// address.
func TestClusterURLIsAdvertised(t *testing.T) {
	c, err := standalone.New(context.Background(), standalone.Config{Store: etcdstore.OpenConfig{DataDir: t.TempDir()}, Advertise: "http://host1:8080", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.URL(); got != "http://host1:8080" {
		t.Errorf("URL() = %q, want the advertised http://host1:8080", got)
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  standalone.Config
	}{
		{"no store", standalone.Config{}},
		{"negative TaskExecutors", standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, TaskExecutors: -1}},
		{"negative slots", standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, Slots: -1}},
		{"timings", standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second}},
		{"every interface without advertise", standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, Listen: "0.0.0.0:0"}},
		{"advertise with a path", standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, Advertise: "http://host1:8080/jobplane"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil {
				t.Error("Validate: nil, want an error")
			}
			if _, err := standalone.New(context.Background(), tc.cfg); err == nil {
				t.Error("New: nil error")
			}
		})
	}
}

// A second cluster on a data directory in use fails to open, and leaves
// the first one intact.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	c, err := standalone.New(context.Background(), standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = standalone.New(context.Background(), standalone.Config{Store: etcdstore.OpenConfig{DataDir: dir}, Logger: quiet()})
	if !errors.Is(err, etcdmember.ErrDataDirInUse) {
		t.Errorf("second New: %v, want ErrDataDirInUse", err)
	}
}
