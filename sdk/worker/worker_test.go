package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/internal/servertest"
	"github.com/jobplane/jobplane/sdk/worker"
)

// serverURL is a cluster's, for the Examples.
var serverURL string

func TestMain(m *testing.M) {
	c, err := servertest.Launch()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverURL = c.URL
	code := servertest.Main(m)
	c.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func quiet() *slog.Logger {
	if os.Getenv("JOBPLANE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is a Worker whose Run goes on until stop or the end of the test.
type running struct {
	stop  context.CancelFunc
	ended chan error
}

// start runs w until the test ends (or stop), and fails the test if Run
// fails.
func start(t *testing.T, w *worker.Worker) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: cancel, ended: make(chan error, 1)}
	go func() { r.ended <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := r.wait(t); err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	})
	return r
}

// wait returns Run's result, failing the test if Run does not return
// within 30s.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.ended:
		r.ended <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context's end")
		return nil
	}
}

func newWorker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWorkerRunsRegisteredFunction(t *testing.T) {
	c := servertest.Start(t)
	var (
		mu   sync.Mutex
		seen []worker.Task
	)
	w := newWorker(t, worker.Config{Server: c.URL, Slots: 3, ID: "w-runs"})
	w.Register("record", func(ctx context.Context, task worker.Task) error {
		task.Logger.Info("recording", "subtask", task.SubtaskIndex)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, task)
		return nil
	})
	start(t, w)

	te := c.WaitTaskExecutor(t, "record")
	if te.GetTaskExecutorId() != "w-runs" || te.GetSlotCount() != 3 {
		t.Errorf("registered as %q with %d slots, want w-runs with 3", te.GetTaskExecutorId(), te.GetSlotCount())
	}
	for _, name := range []string{"record", "noop", "sleep", "fail"} {
		if !slices.Contains(te.GetInvokables(), name) {
			t.Errorf("invokables %v lack %q", te.GetInvokables(), name)
		}
	}
	if slices.Contains(te.GetInvokables(), "exec") {
		t.Errorf("invokables %v offer exec without AllowExec", te.GetInvokables())
	}
	if !strings.HasPrefix(te.GetAddress(), "http://127.0.0.1:") {
		t.Errorf("advertised address %q, want http://127.0.0.1:<port>", te.GetAddress())
	}

	c.Submit(t, "runs", "record", 3, map[string]string{"k": "v"})
	if r := c.Result(t, "runs"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%v), want FINISHED", r.GetStatus(), r.GetFailure())
	}
	mu.Lock()
	defer mu.Unlock()
	var indexes []int
	for _, task := range seen {
		indexes = append(indexes, task.SubtaskIndex)
		if task.JobID != "runs" || task.VertexID != "v" || task.Subtasks != 3 || task.Attempt != 0 || task.Config["k"] != "v" || task.Logger == nil {
			t.Errorf("task %+v, want job runs, vertex v, 3 subtasks, attempt 0, config k=v and a logger", task)
		}
	}
	slices.Sort(indexes)
	if !slices.Equal(indexes, []int{0, 1, 2}) {
		t.Errorf("subtask indexes run %v, want [0 1 2]", indexes)
	}
}

func TestFailingFunctionFailsJob(t *testing.T) {
	c := servertest.Start(t)
	w := newWorker(t, worker.Config{Server: c.URL})
	w.Register("errs", func(context.Context, worker.Task) error { return errors.New("the input is bad") })
	w.Register("panics", func(context.Context, worker.Task) error { panic("out of range") })
	w.Register("works", func(context.Context, worker.Task) error { return nil })
	start(t, w)
	c.WaitTaskExecutor(t, "errs")

	for _, tc := range []struct{ invokable, want string }{
		{"errs", "the input is bad"},
		{"panics", "panicked: out of range"},
	} {
		c.Submit(t, tc.invokable, tc.invokable, 1, nil)
		r := c.Result(t, tc.invokable)
		if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED {
			t.Errorf("%s: job ended %v, want FAILED", tc.invokable, r.GetStatus())
		}
		if !strings.Contains(r.GetFailure().GetMessage(), tc.want) {
			t.Errorf("%s: failure %q, want it to contain %q", tc.invokable, r.GetFailure().GetMessage(), tc.want)
		}
	}
	// The panic failed a subtask, not the worker.
	c.Submit(t, "after-panic", "works", 1, nil)
	if r := c.Result(t, "after-panic"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job after the panic ended %v, want FINISHED", r.GetStatus())
	}
}

// blocking is a Func that waits for its context, announcing when it
// started and what ended it.
type blocking struct {
	started chan int
	ended   chan error
}

func newBlocking() *blocking {
	return &blocking{started: make(chan int, 8), ended: make(chan error, 8)}
}

func (b *blocking) run(ctx context.Context, task worker.Task) error {
	b.started <- task.SubtaskIndex
	<-ctx.Done()
	b.ended <- ctx.Err()
	return ctx.Err()
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		var zero T
		return zero
	}
}

func TestCancelJobCancelsFunctionContext(t *testing.T) {
	c := servertest.Start(t)
	b := newBlocking()
	w := newWorker(t, worker.Config{Server: c.URL, Slots: 2})
	w.Register("block", b.run)
	start(t, w)
	c.WaitTaskExecutor(t, "block")

	c.Submit(t, "canceled", "block", 2, nil)
	receive(t, b.started, "start of subtask")
	receive(t, b.started, "start of subtask")
	c.Cancel(t, "canceled")
	for range 2 {
		if err := receive(t, b.ended, "end of subtask"); !errors.Is(err, context.Canceled) {
			t.Errorf("function's ctx ended with %v, want context.Canceled", err)
		}
	}
	if r := c.Result(t, "canceled"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v, want CANCELED", r.GetStatus())
	}
}

func TestRunEndsCleanlyOnCancel(t *testing.T) {
	c := servertest.Start(t)
	b := newBlocking()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	w := newWorker(t, worker.Config{Server: c.URL, Listen: addr})
	w.Register("held", b.run)
	r := start(t, w)
	if te := c.WaitTaskExecutor(t, "held"); te.GetAddress() != "http://"+addr {
		t.Errorf("advertised %q, want http://%s", te.GetAddress(), addr)
	}
	c.Submit(t, "held", "held", 1, nil)
	receive(t, b.started, "start of subtask")

	r.stop()
	if err := receive(t, b.ended, "end of the running subtask"); !errors.Is(err, context.Canceled) {
		t.Errorf("function's ctx ended with %v, want context.Canceled", err)
	}
	if err := r.wait(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("the worker's address %s still accepts connections after Run returned", addr)
	}
	// Leaked goroutines are checked once all tests ran (TestMain).
}

func TestRunFails(t *testing.T) {
	t.Run("twice", func(t *testing.T) {
		w := newWorker(t, worker.Config{Server: "http://127.0.0.1:1"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Run(ctx); err != nil {
			t.Fatalf("Run with a canceled context = %v, want nil", err)
		}
		if err := w.Run(context.Background()); err == nil {
			t.Error("second Run: no error")
		}
	})
	t.Run("address in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		w := newWorker(t, worker.Config{Server: "http://127.0.0.1:1", Listen: ln.Addr().String()})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Run(ctx); err == nil || ctx.Err() != nil {
			t.Errorf("Run on a bound address = %v (ctx %v), want an error at once", err, ctx.Err())
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  worker.Config
		ok   bool
	}{
		{"server only", worker.Config{Server: "http://127.0.0.1:8080"}, true},
		{"everything", worker.Config{Server: "https://jm:8080", Listen: ":0", Advertise: "http://me:9000", Slots: 4, ID: "me", AllowExec: true}, true},
		{"no server", worker.Config{}, false},
		{"relative server", worker.Config{Server: "127.0.0.1:8080"}, false},
		{"server scheme", worker.Config{Server: "ftp://127.0.0.1:8080"}, false},
		{"listen without port", worker.Config{Server: "http://a:1", Listen: "127.0.0.1"}, false},
		{"advertise without scheme", worker.Config{Server: "http://a:1", Advertise: "me:9000"}, false},
		{"negative slots", worker.Config{Server: "http://a:1", Slots: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if _, nerr := worker.New(tc.cfg); (nerr == nil) != tc.ok {
				t.Errorf("New() = %v, want ok=%v", nerr, tc.ok)
			}
		})
	}
}

func TestRegisterPanicsOnMisuse(t *testing.T) {
	t.Parallel()
	f := func(context.Context, worker.Task) error { return nil }
	for _, tc := range []struct {
		name string
		do   func(w *worker.Worker)
	}{
		{"empty name", func(w *worker.Worker) { w.Register("", f) }},
		{"nil func", func(w *worker.Worker) { w.Register("x", nil) }},
		{"twice", func(w *worker.Worker) { w.Register("x", f); w.Register("x", f) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorker(t, worker.Config{Server: "http://127.0.0.1:1"})
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.do(w)
		})
	}
}
