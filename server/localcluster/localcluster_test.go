package localcluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/localcluster"
)

func TestMain(m *testing.M) {
	// The test binary is also the child program of the Process tests.
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// start starts a cluster that Closes when the test ends.
func start(t testing.TB, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func execute(t *testing.T, c *localcluster.Cluster, g *jobplanev1.JobGraph) *jobplanev1.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Execute(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func oneVertex(invokable string, parallelism int32) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: invokable, Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: invokable, Parallelism: parallelism}}}
}

func fixedDelay(attempts int32) *jobplanev1.JobConfig {
	return &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: attempts, Delay: durationpb.New(10 * time.Millisecond)},
	}}}
}

// A function gets its attempt's identity and the vertex's config.
func TestFunctionGetsTask(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []worker.Task
	)
	c := start(t, localcluster.Config{TaskExecutors: 2, Slots: 2, Functions: map[string]worker.Func{
		"record": func(_ context.Context, task worker.Task) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, task)
			return nil
		},
	}})
	g := oneVertex("record", 3)
	g.Vertices[0].Config = map[string]string{"k": "v"}
	res := execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("status %v, want FINISHED", res.GetStatus())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("%d attempts ran, want 3", len(seen))
	}
	subtasks := map[int]bool{}
	for _, task := range seen {
		subtasks[task.SubtaskIndex] = true
		if task.JobID != res.GetJobId() || task.VertexID != "v" || task.Subtasks != 3 || task.Attempt != 0 || task.Config["k"] != "v" || task.Logger == nil {
			t.Errorf("task %+v: want job %s, vertex v, 3 subtasks, attempt 0, config k=v and a logger", task, res.GetJobId())
		}
	}
	if len(subtasks) != 3 {
		t.Errorf("subtask indexes %v, want 0, 1 and 2", subtasks)
	}
}

// A failing function is restarted by the job's restart strategy, and the
// job fails once the strategy gives up.
func TestRestartStrategy(t *testing.T) {
	var attempts atomic.Int32
	c := start(t, localcluster.Config{Functions: map[string]worker.Func{
		"flaky": func(_ context.Context, task worker.Task) error {
			attempts.Add(1)
			if task.Attempt == 0 {
				return errors.New("first attempt fails")
			}
			return nil
		},
		"broken": func(context.Context, worker.Task) error { return errors.New("always broken") },
	}})

	g := oneVertex("flaky", 1)
	g.Config = fixedDelay(3)
	res := execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || res.GetRestartCount() != 1 || attempts.Load() != 2 {
		t.Errorf("flaky: status %v after %d restarts and %d attempts, want FINISHED after 1 restart and 2 attempts", res.GetStatus(), res.GetRestartCount(), attempts.Load())
	}

	g = oneVertex("broken", 1)
	g.Config = fixedDelay(2)
	res = execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || res.GetRestartCount() != 2 {
		t.Errorf("broken: status %v after %d restarts, want FAILED after 2", res.GetStatus(), res.GetRestartCount())
	}
	if msg := res.GetFailure().GetMessage(); !strings.Contains(msg, "always broken") {
		t.Errorf("broken: failure %q, want the function's error", msg)
	}
}

// A function that panics fails its job, not the process.
func TestPanicFailsJob(t *testing.T) {
	c := start(t, localcluster.Config{Functions: map[string]worker.Func{
		"panic": func(context.Context, worker.Task) error { panic("boom") },
	}})
	res := execute(t, c, oneVertex("panic", 1))
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || !strings.Contains(res.GetFailure().GetMessage(), "boom") {
		t.Errorf("status %v, failure %q; want FAILED with the panic's value", res.GetStatus(), res.GetFailure().GetMessage())
	}
}

// When Execute's context ends, the call returns its error, the function's
// context is canceled and the job ends CANCELED.
func TestExecuteCanceledContext(t *testing.T) {
	started, stopped := make(chan struct{}), make(chan struct{})
	c := start(t, localcluster.Config{Functions: map[string]worker.Func{
		"block": func(ctx context.Context, _ worker.Task) error {
			close(started)
			<-ctx.Done()
			close(stopped)
			return ctx.Err()
		},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Execute(ctx, oneVertex("block", 1))
		errc <- err
	}()
	deadline := time.After(30 * time.Second)
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("Execute returned before the function started: %v", err)
	case <-deadline:
		t.Fatal("the function did not start within 30s")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Execute: %v, want context.Canceled", err)
		}
	case <-deadline:
		t.Fatal("Execute did not return within 30s of the cancel")
	}
	select {
	case <-stopped:
	case <-deadline:
		t.Fatal("the function's context was not canceled within 30s")
	}

	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	var ids []string
	for job, err := range c.Client().List(wctx) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, job.GetJobId())
	}
	if len(ids) != 1 {
		t.Fatalf("jobs %v, want one", ids)
	}
	res, err := c.Client().Wait(wctx, ids[0])
	if err != nil || res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("result %v, %v; want CANCELED", res, err)
	}
}

// An invalid graph fails before anything is sent, with the SDK's typed
// error.
func TestExecuteInvalidGraph(t *testing.T) {
	c := start(t, localcluster.Config{})
	_, err := c.Execute(context.Background(), oneVertex("noop", 0))
	var invalid *sdk.InvalidJobError
	if !errors.As(err, &invalid) || len(invalid.Violations) == 0 {
		t.Errorf("Execute: %v, want an *sdk.InvalidJobError with violations", err)
	}
}

// dispatcher returns a client of the cluster at url that is not the
// cluster's own.
func dispatcher(t *testing.T, url string) jobplanev1connect.DispatcherServiceClient {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)
}

// Two clusters run at once in one process, each on its own ports and
// directory, each running its own functions.
func TestTwoClusters(t *testing.T) {
	var ran [2]atomic.Int32
	var cs [2]*localcluster.Cluster
	dirs := [2]string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() {
			cs[i] = start(t, localcluster.Config{DataDir: dirs[i], Functions: map[string]worker.Func{
				"f": func(context.Context, worker.Task) error { ran[i].Add(1); return nil },
			}})
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if cs[0].URL() == cs[1].URL() {
		t.Fatalf("both clusters at %s", cs[0].URL())
	}
	for i := range cs {
		wg.Go(func() {
			if res := execute(t, cs[i], oneVertex("f", int32(i+1))); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("cluster %d: %v, want FINISHED", i, res.GetStatus())
			}
		})
	}
	wg.Wait()
	if ran[0].Load() != 1 || ran[1].Load() != 2 {
		t.Errorf("functions ran %d and %d times, want 1 and 2", ran[0].Load(), ran[1].Load())
	}
}

// A cluster on a DataDir keeps it on Close, and a later cluster on it has
// the earlier job's result.
func TestDataDirKept(t *testing.T) {
	dir := t.TempDir()
	c, err := localcluster.Start(context.Background(), localcluster.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res := execute(t, c, oneVertex("noop", 1))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = start(t, localcluster.Config{DataDir: dir})
	got, err := dispatcher(t, c.URL()).GetJobResult(context.Background(), &jobplanev1.GetJobResultRequest{JobId: res.GetJobId()})
	if err != nil || got.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || got.GetResult().GetJobId() != res.GetJobId() {
		t.Errorf("result after restart: %v, %v; want FINISHED", got, err)
	}
}

// A DataDir in use by a running cluster cannot start a second one.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	start(t, localcluster.Config{DataDir: dir})
	if _, err := localcluster.Start(context.Background(), localcluster.Config{DataDir: dir}); !errors.Is(err, localcluster.ErrDataDirInUse) {
		t.Errorf("second Start: %v, want ErrDataDirInUse", err)
	}
}

// Close stops every goroutine the cluster started, and removes the
// temporary directory.
func TestCloseLeavesNothing(t *testing.T) {
	before := goleak.IgnoreCurrent()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	c, err := localcluster.Start(context.Background(), localcluster.Config{TaskExecutors: 2})
	if err != nil {
		t.Fatal(err)
	}
	execute(t, c, oneVertex("noop", 4))
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
		t.Errorf("temporary directory holds %d entries while the cluster runs, want its data directory", len(entries))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("after Close, the temporary directory still holds %v", entries)
	}
	goleak.VerifyNone(t, before)
}

// Start gives up with its context, leaving nothing behind.
func TestStartCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := localcluster.Start(ctx, localcluster.Config{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start: %v, want context.Canceled", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []localcluster.Config{
		{JobManagers: -1},
		{Slots: -1},
		{StartTimeout: -time.Second},
		{Functions: map[string]worker.Func{"nil": nil}},
		{HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v): nil, want an error", cfg)
		}
		if _, err := localcluster.Start(context.Background(), cfg); err == nil {
			t.Errorf("Start(%+v): nil error", cfg)
		}
	}
}

// BenchmarkStartToFirstJob starts a cluster, executes a one-vertex noop
// job on it and closes it. Besides the time per cycle it reports where
// the time goes, from the components' logs: the store open (store-ms),
// the JobManager's leadership (leader-ms) and the TaskExecutor's
// registration (registered-ms), all from the call to Start; then Start's
// return (start-ms), the job (job-ms) and Close (close-ms).
func BenchmarkStartToFirstJob(b *testing.B) {
	marks := &milestones{at: map[string]time.Time{}}
	log := slog.New(marks)
	sum := map[string]time.Duration{}
	for b.Loop() {
		marks.reset()
		t0 := time.Now()
		c, err := localcluster.Start(context.Background(), localcluster.Config{Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		res, err := c.Execute(context.Background(), oneVertex("noop", 1))
		if err != nil || res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			b.Fatalf("%v, %v", res, err)
		}
		t2 := time.Now()
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		sum["start-ms"] += t1.Sub(t0)
		sum["job-ms"] += t2.Sub(t1)
		sum["close-ms"] += time.Since(t2)
		for metric, msg := range map[string]string{
			"store-ms": "ha store on embedded etcd", "leader-ms": "leadership granted", "registered-ms": "registered with the ResourceManager",
		} {
			sum[metric] += marks.since(msg, t0)
		}
	}
	for metric, d := range sum {
		b.ReportMetric(float64(d.Microseconds())/1000/float64(b.N), metric+"/op")
	}
}

// milestones is a slog.Handler that keeps the time of the first record
// of each message at Info or above.
type milestones struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (m *milestones) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (m *milestones) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.at[r.Message]; !ok {
		m.at[r.Message] = r.Time
	}
	return nil
}

func (m *milestones) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *milestones) WithGroup(string) slog.Handler      { return m }

func (m *milestones) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.at)
}

// since returns how long after t0 msg was first logged.
func (m *milestones) since(msg string, t0 time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at[msg].Sub(t0)
}

// Config.Logger gets the components' logs, and a function's logs with its
// attempt's job, vertex, subtask and attempt.
func TestLogger(t *testing.T) {
	var out localcluster.Buffer
	c := start(t, localcluster.Config{
		Logger: slog.New(slog.NewJSONHandler(&out, nil)),
		Functions: map[string]worker.Func{"say": func(_ context.Context, task worker.Task) error {
			task.Logger.Info("said")
			return nil
		}},
	})
	res := execute(t, c, oneVertex("say", 1))
	var said, granted bool
	for line := range strings.Lines(out.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch rec["msg"] {
		case "leadership granted":
			granted = true
		case "said":
			said = true
			want := map[string]any{"job": res.GetJobId(), "vertex": "v", "subtask": 0.0, "attempt": 0.0}
			for k, v := range want {
				if rec[k] != v {
					t.Errorf("function log %s = %v, want %v", k, rec[k], v)
				}
			}
		}
	}
	if !said || !granted {
		t.Errorf("logs have the function's line: %v, the JobManager's leadership: %v; want both", said, granted)
	}
}

// Without Config.Logger a cluster is quiet: nothing reaches the default
// logger (nor, through it, the standard log package).
func TestQuietByDefault(t *testing.T) {
	var out localcluster.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)
	c, err := localcluster.Start(context.Background(), localcluster.Config{Functions: map[string]worker.Func{
		"say": func(_ context.Context, task worker.Task) error { task.Logger.Info("said"); return nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	execute(t, c, oneVertex("say", 2))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "" {
		t.Errorf("a cluster without a logger logged:\n%s", out.String())
	}
}

// A function's log lines, and a panic's stack, are kept in the attempt's
// output for clients to read.
func TestTaskOutput(t *testing.T) {
	c := start(t, localcluster.Config{Functions: map[string]worker.Func{
		"say": func(_ context.Context, task worker.Task) error {
			task.Logger.Info("said", "who", task.Config["who"])
			if task.Attempt == 0 {
				panic("boom")
			}
			return nil
		},
	}})
	g := oneVertex("say", 1)
	g.Vertices[0].Config = map[string]string{"who": "world"}
	g.Config = fixedDelay(1)
	res := execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("status %v, want FINISHED after one restart", res.GetStatus())
	}
	api := c.Client().Dispatcher(c.URL())
	for attempt, want := range []string{"task panicked", "said who=world"} {
		out, err := api.GetTaskOutput(context.Background(), &jobplanev1.GetTaskOutputRequest{
			JobId: res.GetJobId(), VertexId: "v", SubtaskIndex: 0, AttemptNumber: proto.Int32(int32(attempt)),
		})
		if err != nil {
			t.Fatalf("attempt %d: GetTaskOutput: %v", attempt, err)
		}
		if !strings.Contains(string(out.GetData()), want) {
			t.Errorf("attempt %d output %q, want %q in it", attempt, out.GetData(), want)
		}
	}
}

// With two JobManagers, the first leads; stopped, it hands over to the
// standby, which the cluster's client follows.
func TestStandbyTakesOver(t *testing.T) {
	c := localcluster.New(t, localcluster.Config{JobManagers: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jms := c.JobManagers()
	if len(jms) != 2 || jms[0].URL() != c.URL() || jms[0].URL() == jms[1].URL() {
		t.Fatalf("JobManagers at %v and %v, the cluster at %s; want two, the first the cluster's", jms[0].URL(), jms[len(jms)-1].URL(), c.URL())
	}
	if ov, err := jms[1].Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{}); err == nil {
		t.Fatalf("the standby answered as the leader: %v", ov)
	}
	// The leader counts the standby (the store, etcd, lists the campaigns)
	// once the standby's campaign is in the store: the standby may answer
	// NOT_LEADER a moment before its campaign is written, so the count is
	// read again until it is 1 or the test's time is up.
	for {
		ov, err := jms[0].Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && ov.StandbyCount != nil && ov.GetStandbyCount() == 1 {
			break
		}
		if ctx.Err() != nil || (err == nil && ov.GetStandbyCount() > 1) {
			t.Fatalf("the leader's overview: %v, %v; want 1 standby", ov, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := jms[0].Stop(); err != nil {
		t.Fatal(err)
	}
	res := execute(t, c, oneVertex("noop", 2))
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("status %v, want FINISHED", res.GetStatus())
	}
	ov, err := jms[1].Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || ov.GetLeader().GetAddress() != jms[1].URL() || ov.StandbyCount == nil || ov.GetStandbyCount() != 0 {
		t.Errorf("overview of the standby: %v, %v; want it leading, with no standby", ov, err)
	}
}

// A negative number of TaskExecutors starts a JobManager alone.
func TestNoTaskExecutors(t *testing.T) {
	c := localcluster.New(t, localcluster.Config{TaskExecutors: -1})
	ov, err := c.Dispatcher().GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || ov.GetTaskExecutorCount() != 0 || len(c.TaskExecutors()) != 0 {
		t.Errorf("overview %v, %v, with %d TaskExecutors; want none", ov, err, len(c.TaskExecutors()))
	}
}

// A cluster whose public API refuses every caller it cannot
// authenticate, itself included, starts all the same once its
// TaskExecutors have registered.
func TestStartBehindAuthentication(t *testing.T) {
	refuse := connect.UnaryInterceptorFunc(func(connect.UnaryFunc) connect.UnaryFunc {
		return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("who are you?"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{TaskExecutors: 2, DispatcherOptions: []connect.HandlerOption{connect.WithInterceptors(refuse)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetClusterOverview: %v, want UNAUTHENTICATED", err)
	}
}
