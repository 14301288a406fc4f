package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/planid"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// The floor is the least a durable submission can cost on this machine:
// one Connect round trip to a server whose SubmitJob handler makes one
// fenced etcd transaction of the job's plan, on an embedded member of its
// own, and nothing else (the one-write floor). Told "lifecycle", it
// becomes the lifecycle floor instead (lifecycle.go): each job it
// acknowledges is also deployed to a stand-in TaskExecutor, whose report
// it ends with the finish write. It runs as a process of its own (the
// bench binary re-executed with the argument "floor"), so that its CPU is
// not the bench's, and is driven over its stdin and stdout:
//
//	floor → "ready <url>"                    once serving
//	"raw <seconds> <writers>" → one JSON RawResult line
//	"lifecycle <te-url>" → one JSON LifecycleStats line; from then on
//	                         SubmitJob deploys to the TaskExecutor at te-url
//	"drain <seconds>" → one JSON LifecycleStats line, once no job is
//	                         pending or after the seconds
//	end of stdin, or "quit"                  it stops and removes its data

// floorSessionTTL is the TTL of the floor's session, as the JobManager's
// default.
const floorSessionTTL = 10 * time.Second

// floorHandler answers SubmitJob with one fenced put of the plan, which it
// builds as the Dispatcher does: a copy of the graph (Prepare returns
// one), its digest (SHA-256 of the deterministic encoding) and the submit
// time. It checks only that the graph has a vertex; the Dispatcher's
// validation and idempotency are left out, on purpose.
//
// In the lifecycle mode (life set) it hands every job whose plan it wrote
// to the lifecycle after answering.
type floorHandler struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
	store *etcdstore.Store
	fence hastore.Fence
	life  atomic.Pointer[lifecycle]
}

func (h *floorHandler) SubmitJob(ctx context.Context, req *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error) {
	if len(req.GetJobGraph().GetVertices()) == 0 || !hastore.ValidJobID(req.GetJobId()) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a job id and a vertex are required"))
	}
	plan := floorPlan(req.GetJobId(), req.GetJobGraph())
	if err := h.store.PutExecutionPlan(ctx, h.fence, plan); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if l := h.life.Load(); l != nil {
		l.start(plan)
	}
	return &jobplanev1.SubmitJobResponse{JobId: req.GetJobId(), Created: true, Status: jobplanev1.JobStatus_JOB_STATUS_INITIALIZING}, nil
}

// GetClusterOverview answers with an empty overview, at once: the least
// a unary call costs (row 3 times it as one round trip of the contract's
// own after the submission).
func (h *floorHandler) GetClusterOverview(context.Context, *jobplanev1.GetClusterOverviewRequest) (*jobplanev1.GetClusterOverviewResponse, error) {
	return &jobplanev1.GetClusterOverviewResponse{}, nil
}

// floorJobMaster serves JobMasterService in the floor: the lifecycle's
// while its mode is on, and otherwise no job.
type floorJobMaster struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler
	h *floorHandler
}

func (m *floorJobMaster) UpdateTaskExecutionState(ctx context.Context, req *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	l := m.h.life.Load()
	if l == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such attempt"))
	}
	return l.UpdateTaskExecutionState(ctx, req)
}

// floorPlan builds the execution plan of a submission as the Dispatcher
// does.
func floorPlan(jobID string, g *jobplanev1.JobGraph) *hastorev1.ExecutionPlan {
	prepared := proto.Clone(g).(*jobplanev1.JobGraph)
	return &hastorev1.ExecutionPlan{JobId: jobID, JobGraph: prepared, Digest: planid.Digest(g), SubmitTime: timestamppb.Now()}
}

// RawResult is the outcome of a run of raw etcd puts in the floor.
type RawResult struct {
	Acks    int     `json:"acks"`
	Seconds float64 `json:"seconds"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	Error   string  `json:"error,omitempty"`
}

// Rate returns puts per second.
func (r RawResult) Rate() float64 { return float64(r.Acks) / r.Seconds }

// RunFloor is the floor process's main: it serves the floor on a free
// loopback port and answers the commands read from in on out, until in
// ends or ctx is done.
func RunFloor(ctx context.Context, in io.Reader, out io.Writer) error {
	dir, err := os.MkdirTemp("", "jobplane-bench-floor-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store, err := etcdstore.Open(octx, etcdstore.OpenConfig{DataDir: filepath.Join(dir, "data"), Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	sess, err := store.OpenSession(octx, hastore.SessionConfig{TTL: floorSessionTTL})
	if err != nil {
		return err
	}
	defer sess.Close(context.WithoutCancel(ctx))
	l, err := sess.Campaign(octx, election.JobManager, "")
	if err != nil {
		return err
	}
	srv, err := Listen()
	if err != nil {
		return err
	}
	h := &floorHandler{store: store, fence: l.Fence()}
	srv.Handle(jobplanev1connect.NewDispatcherServiceHandler(h, connect.WithCompressMinBytes(compressMinBytes)))
	// The JobMaster of the lifecycle mode, mounted from the start: until
	// the mode is on, it knows no job.
	jm := &floorJobMaster{h: h}
	srv.Handle(clusterv1connect.NewJobMasterServiceHandler(jm, connect.WithCompressMinBytes(compressMinBytes)))
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Run(sctx) }()
	defer func() {
		stop()
		<-served
		if life := h.life.Load(); life != nil {
			life.wait()
		}
	}()

	fmt.Fprintf(out, "ready %s\n", srv.URL())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	graph := OneTaskGraph("noop")
	for {
		var line string
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return err
		case l, ok := <-lines:
			if !ok {
				return nil
			}
			line = l
		}
		var secs float64
		var writers int
		var teURL string
		switch {
		case line == "quit":
			return nil
		case fmtSscan(line, "raw %g %d", &secs, &writers):
			res := rawPuts(ctx, store, time.Duration(secs*float64(time.Second)), writers, graph)
			b, _ := json.Marshal(res)
			fmt.Fprintf(out, "%s\n", b)
		case fmtSscan(line, "lifecycle %s", &teURL):
			var res LifecycleStats
			if !h.life.CompareAndSwap(nil, newLifecycle(sctx, store, l.Fence(), teURL)) {
				res.Error = "the lifecycle mode is on already"
			}
			b, _ := json.Marshal(res)
			fmt.Fprintf(out, "%s\n", b)
		case fmtSscan(line, "drain %g", &secs):
			var res LifecycleStats
			if life := h.life.Load(); life != nil {
				res = life.drain(ctx, time.Duration(secs*float64(time.Second)))
			} else {
				res.Error = "the lifecycle mode is off"
			}
			b, _ := json.Marshal(res)
			fmt.Fprintf(out, "%s\n", b)
		default:
			fmt.Fprintf(out, "{\"error\":%q}\n", "unknown command "+line)
		}
	}
}

func fmtSscan(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}

// rawPuts puts the encoded plan of a one-task job (fresh keys) from
// writers goroutines for d, with the store's own etcd client.
func rawPuts(ctx context.Context, store *etcdstore.Store, d time.Duration, writers int, graph *jobplanev1.JobGraph) RawResult {
	data, err := proto.Marshal(floorPlan("raw", graph))
	if err != nil {
		return RawResult{Error: err.Error()}
	}
	raw := store.Client()
	var (
		mu    sync.Mutex
		lat   []time.Duration
		acks  int
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range writers {
		wg.Go(func() {
			var mine []time.Duration
			var n int
			var ferr error
			for seq := 0; time.Now().Before(end) && ctx.Err() == nil; seq++ {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				_, err := raw.Put(cctx, fmt.Sprintf("/bench-raw/plans/%d-%d-%d", start.UnixNano(), w, seq), string(data))
				t1 := time.Now()
				cancel()
				if err != nil {
					ferr = err
					break
				}
				mine = append(mine, t1.Sub(t0))
				if t1.Before(end) {
					n++
				}
			}
			mu.Lock()
			lat, acks = append(lat, mine...), acks+n
			if first == nil {
				first = ferr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res := RawResult{Acks: acks, Seconds: d.Seconds(), P50Ms: LatencyMs(lat, 50), P99Ms: LatencyMs(lat, 99)}
	if first != nil {
		res.Error = first.Error()
	}
	return res
}

// Floor is a running floor process.
type Floor struct {
	// URL is the floor server's base URL.
	URL  string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	done chan struct{}
}

// floorStartTimeout bounds the floor's start, and floorStopTimeout its
// end.
const (
	floorStartTimeout = 30 * time.Second
	floorStopTimeout  = 10 * time.Second
)

// StartFloor starts the floor process: self (the bench binary) run with
// the argument "floor".
func StartFloor(ctx context.Context, self string) (*Floor, error) {
	cmd := exec.Command(self, "floor")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start floor: %w", err)
	}
	f := &Floor{cmd: cmd, in: in, out: bufio.NewReader(outPipe), done: make(chan struct{})}
	line, err := f.readLine(ctx, floorStartTimeout)
	if err != nil {
		f.Stop()
		return nil, fmt.Errorf("floor did not start: %w", err)
	}
	url, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		f.Stop()
		return nil, fmt.Errorf("floor said %q, want \"ready <url>\"", line)
	}
	f.URL = url
	return f, nil
}

// readLine reads the floor's next line, waiting at most timeout.
func (f *Floor) readLine(ctx context.Context, timeout time.Duration) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := f.out.ReadString('\n')
		ch <- result{strings.TrimSpace(l), err}
	}()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-ctx.Done():
		f.kill()
		return "", ctx.Err()
	case <-time.After(timeout):
		// The reader goroutine ends when the killed process's pipe closes.
		f.kill()
		return "", fmt.Errorf("no answer within %v", timeout)
	}
}

func (f *Floor) kill() { _ = f.cmd.Process.Kill() }

// RawPuts has the floor put the same plan bytes as its handler to its
// member with raw etcd puts from writers goroutines for d.
func (f *Floor) RawPuts(ctx context.Context, d time.Duration, writers int) (RawResult, error) {
	if _, err := fmt.Fprintf(f.in, "raw %g %d\n", d.Seconds(), writers); err != nil {
		return RawResult{}, err
	}
	line, err := f.readLine(ctx, d+callTimeout+5*time.Second)
	if err != nil {
		return RawResult{}, err
	}
	var res RawResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return RawResult{}, fmt.Errorf("floor answered %q: %w", line, err)
	}
	if res.Error != "" {
		return res, errors.New("floor raw puts: " + res.Error)
	}
	return res, nil
}

// Lifecycle makes the floor the lifecycle floor: from now on, each job
// it acknowledges is deployed to the TaskExecutor at teURL (a
// StandInTaskExecutor reporting to f.URL) and ended by its report.
func (f *Floor) Lifecycle(ctx context.Context, teURL string) error {
	_, err := f.lifecycleCommand(ctx, fmt.Sprintf("lifecycle %s", teURL), 0)
	return err
}

// Drain waits until the lifecycle floor has no job pending (each
// acknowledged job's finish write acknowledged, or its lifecycle failed),
// at most timeout, and returns its counts; with a timeout of 0 it only
// reads them.
func (f *Floor) Drain(ctx context.Context, timeout time.Duration) (LifecycleStats, error) {
	return f.lifecycleCommand(ctx, fmt.Sprintf("drain %g", timeout.Seconds()), timeout)
}

func (f *Floor) lifecycleCommand(ctx context.Context, cmd string, wait time.Duration) (LifecycleStats, error) {
	if _, err := fmt.Fprintln(f.in, cmd); err != nil {
		return LifecycleStats{}, err
	}
	line, err := f.readLine(ctx, wait+5*time.Second)
	if err != nil {
		return LifecycleStats{}, err
	}
	var res LifecycleStats
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return LifecycleStats{}, fmt.Errorf("floor answered %q: %w", line, err)
	}
	if res.Error != "" {
		return res, errors.New("floor " + cmd + ": " + res.Error)
	}
	return res, nil
}

// Stop ends the floor process (its stdin closes; SIGKILL after 10s) and
// reaps it.
func (f *Floor) Stop() {
	if f.cmd == nil {
		return
	}
	f.in.Close()
	done := make(chan struct{})
	go func() { f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(floorStopTimeout):
		f.kill()
		<-done
	}
	f.cmd = nil
}
