package runner

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/component"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/localcluster"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// envConfig shapes an environment.
type envConfig struct {
	// serverCommand starts one server instance (empty: the user runs the
	// server, pointed at the store).
	serverCommand string
	// hastoreListen is where the store listens ("": a free loopback port).
	hastoreListen string
	// taskExecutors and slots per TaskExecutor.
	taskExecutors, slots int
	// token is sent with the calls to the server's public API.
	token string
	// wire is the protocol the runner's clients of the server speak, and
	// whether the server serves TLS.
	wire wire
}

// env is what a case runs against: an instrumented HA store on an
// embedded etcd member, served as HAStoreService; instrumented
// TaskExecutors; and the server under test.
type env struct {
	cfg     envConfig
	log     *Log
	dir     string
	etcd    *etcdstore.Store
	store   *store
	storeHS *httpServer
	http    *http.Client
	logger  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	tes    []*taskExec
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool // no server starts any more
	servers []*serverProc
	gates   map[string]chan struct{}
	// counters are the runs of "counter" tasks, by job and attempt key.
	counters map[string]*counterRun
	// canceledUnasked are the jobs whose attempts' failures the runner's
	// TaskExecutors report as CANCELED (see reportFailuresAsCanceled).
	canceledUnasked map[string]bool
}

type taskExec struct {
	id  string
	url string
	// cut: the runner has cut the TaskExecutor off the network; every
	// call it sends or receives fails as unreachable.
	cut atomic.Bool

	mu sync.Mutex
	// leased: when the TaskExecutor sent the latest heartbeat whose
	// answer granted a task lease (to the attempts of every job it
	// follows at that process).
	leased time.Time
}

// leasedSince reports whether a heartbeat the TaskExecutor sent at or
// after since was answered with a task lease.
func (te *taskExec) leasedSince(since time.Time) bool {
	te.mu.Lock()
	defer te.mu.Unlock()
	return !te.leased.Before(since)
}

func newEnv(ctx context.Context, cfg envConfig) (*env, error) {
	dir, err := os.MkdirTemp("", "jobplane-conformance-")
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, log: &Log{}, dir: dir, http: newHTTPClient(cfg.token, cfg.wire.rootCAs), gates: map[string]chan struct{}{}, counters: map[string]*counterRun{}, canceledUnasked: map[string]bool{},
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	e.etcd, err = etcdstore.Open(octx, etcdstore.OpenConfig{DataDir: filepath.Join(dir, "etcd"), Logger: e.logger})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("open the HA store: %w", err)
	}
	e.store = &store{Store: e.etcd, log: e.log, watches: map[string][]*watchConn{}}
	path, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: e.store, Logger: e.logger}).Path(connect.WithInterceptors(e.store.interceptor()))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	if e.storeHS, err = serve(cfg.hastoreListen, mux); err != nil {
		e.close()
		return nil, fmt.Errorf("serve the HA store: %w", err)
	}
	for i := range cfg.taskExecutors {
		if err := e.startTaskExecutor(i); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

// startTaskExecutor starts a reference TaskExecutor whose calls are
// recorded. Besides the built-ins it offers "gate", which runs until the
// case opens the gate named by its config key "gate", and "counter" (see
// counterInvokable).
func (e *env) startTaskExecutor(i int) error {
	id := fmt.Sprintf("te-%d", i)
	tx := &taskExec{id: id}
	record := connect.WithInterceptors(e.taskInterceptor(tx))
	te, err := component.NewTaskExecutor(component.TaskExecutorConfig{
		TaskExecutor: taskexecutor.Config{
			ID: id, Slots: e.cfg.slots, Store: e.etcd, HTTPClient: e.http,
			Invokables:    map[string]taskexecutor.Invokable{"gate": e.gateInvokable, "counter": e.counterInvokable},
			ClientOptions: append(e.cfg.wire.options(), record), Logger: e.logger,
			AttemptLog: attemptEvents{log: e.log, id: id},
		},
		HandlerOptions: []connect.HandlerOption{record},
	})
	if err != nil {
		return err
	}
	tx.url = te.URL()
	e.tes = append(e.tes, tx)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = te.Run(e.ctx)
	}()
	return nil
}

func (e *env) gate(name string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[name]
	if g == nil {
		g = make(chan struct{})
		e.gates[name] = g
	}
	return g
}

// open opens a gate: its tasks finish.
func (e *env) open(name string) {
	g := e.gate(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-g:
	default:
		close(g)
	}
}

func (e *env) gateInvokable(ctx context.Context, t taskexecutor.Task) error {
	select {
	case <-e.gate(t.Config["gate"]):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// counterRun is one attempt of a "counter" task: the state it started
// from, and the count it gave for each checkpoint.
type counterRun struct {
	restored *taskexecutor.State
	from     string
	given    map[uint64]int64
}

// counterInvokable counts, one step every 2ms, from its restored count (a
// decimal number) until the gate named by config "gate" opens; it gives
// its count when asked at a checkpoint, and fails when the gate named by
// config "fail" opens, unless that gate was open when it started (so the
// attempt that replaces it runs on).
func (e *env) counterInvokable(ctx context.Context, t taskexecutor.Task) error {
	run := &counterRun{restored: t.Restored, from: t.RestoredFrom, given: map[uint64]int64{}}
	var n atomic.Int64
	if st := t.Restored; st != nil {
		v, err := strconv.ParseInt(string(st.Data), 10, 64)
		if err != nil {
			return fmt.Errorf("restored state %q is no count: %w", st.Data, err)
		}
		n.Store(v)
	}
	key := counterKey(t.JobID, t.VertexID, t.SubtaskIndex, t.Attempt)
	e.mu.Lock()
	e.counters[key] = run
	e.mu.Unlock()
	fail := e.gate(t.Config["fail"])
	select {
	case <-fail:
		fail = nil // open already: this attempt runs on
	default:
	}
	if t.OnCheckpoint != nil {
		t.OnCheckpoint(func(_ context.Context, id uint64) (taskexecutor.State, error) {
			v := n.Load()
			e.mu.Lock()
			run.given[id] = v
			e.mu.Unlock()
			return taskexecutor.State{Data: padCount(v, t.Config["pad"])}, nil
		})
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-e.gate(t.Config["gate"]):
			return nil
		case <-fail:
			return errors.New("the counter failed as the case asked")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			n.Add(1)
		}
	}
}

// padCount is the decimal count, led by zeros to pad bytes if the
// config's "pad" asks for more than its digits.
func padCount(v int64, pad string) []byte {
	b := strconv.AppendInt(nil, v, 10)
	n, _ := strconv.Atoi(pad)
	if n <= len(b) {
		return b
	}
	return append(bytes.Repeat([]byte{'0'}, n-len(b)), b...)
}

func counterKey(job, vertex string, subtask, attempt int) string {
	return fmt.Sprintf("%s:%s/%d#%d", job, vertex, subtask, attempt)
}

// counter returns a copy of the run of a counter attempt, and whether it
// ran.
func (e *env) counter(job, vertex string, subtask, attempt int) (counterRun, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.counters[counterKey(job, vertex, subtask, attempt)]
	if !ok {
		return counterRun{}, false
	}
	c := *r
	c.given = maps.Clone(r.given)
	return c, true
}

// taskInterceptor records a TaskExecutor's task calls: those it
// receives before they are handled, those it sends before they leave. A
// batch call is recorded as its items, each under the one-item call's
// name (a SubmitTasks of three attempts as three SubmitTask events), and
// so are the deployments an OfferSlots answer carries, so that cases hold
// whichever form a server uses. A TaskExecutor the runner has cut off
// sends and receives nothing: each call fails, unrecorded, as if the
// network had dropped it.
func (e *env) taskInterceptor(tx *taskExec) connect.UnaryInterceptorFunc {
	id := tx.id
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if tx.cut.Load() {
				return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the runner cut TaskExecutor %s off the network", id))
			}
			e.cancelUnasked(req.Any())
			sent := time.Now()
			ev := Event{Source: id}
			switch m := req.Any().(type) {
			case *clusterv1.RequestSlotsRequest:
				for _, s := range m.GetSlots() {
					e.log.Add(Event{Source: id, Op: "RequestSlot", Key: s.GetJobId(), Token: token(s.GetJobMasterToken()), Detail: s.GetAllocationId()})
				}
			case *clusterv1.SubmitTasksRequest:
				for _, d := range m.GetTasks() {
					e.log.Add(Event{Source: id, Op: "SubmitTask", Key: m.GetJobId(), Token: token(m.GetJobMasterToken()), Attempt: attemptKey(d.GetAttempt())})
				}
			case *clusterv1.FreeSlotsRequest:
				for _, aid := range m.GetAllocationIds() {
					e.log.Add(Event{Source: id, Op: "FreeSlot", Key: m.GetJobId(), Token: token(m.GetJobMasterToken()), Detail: aid})
				}
			case *clusterv1.UpdateTaskExecutionStatesRequest:
				e.logStates(id, m)
			case *clusterv1.UpdateTaskExecutionStatesOfJobsRequest:
				for _, job := range m.GetJobs() {
					e.logStates(id, job)
				}
			case *clusterv1.RequestSlotRequest:
				ev.Op, ev.Key, ev.Token, ev.Detail = "RequestSlot", m.GetJobId(), token(m.GetJobMasterToken()), m.GetAllocationId()
			case *clusterv1.SubmitTaskRequest:
				ev.Op, ev.Key, ev.Token, ev.Attempt = "SubmitTask", m.GetJobId(), token(m.GetJobMasterToken()), attemptKey(m.GetAttempt())
			case *clusterv1.CancelTaskRequest:
				ev.Op, ev.Key, ev.Token, ev.Attempt = "CancelTask", m.GetJobId(), token(m.GetJobMasterToken()), attemptKey(m.GetAttempt())
			case *clusterv1.FreeSlotRequest:
				ev.Op, ev.Key, ev.Token, ev.Detail = "FreeSlot", m.GetJobId(), token(m.GetJobMasterToken()), m.GetAllocationId()
			case *clusterv1.UpdateTaskExecutionStateRequest:
				ev.Op, ev.Key, ev.Token, ev.Attempt = "UpdateTaskExecutionState", m.GetJobId(), token(m.GetJobMasterToken()), attemptKey(m.GetStatus().GetAttempt())
				ev.State = m.GetStatus().GetState()
			case *clusterv1.OfferSlotsRequest:
				ev.Op, ev.Key, ev.Token = "OfferSlots", m.GetJobId(), token(m.GetJobMasterToken())
			case *clusterv1.TriggerCheckpointRequest:
				ev.Op, ev.Key, ev.Token, ev.Detail = "TriggerCheckpoint", m.GetJobId(), token(m.GetJobMasterToken()), strconv.FormatUint(m.GetCheckpointId(), 10)
			case *clusterv1.AdoptAttemptsRequest:
				for _, j := range m.GetJobs() {
					e.log.Add(Event{Source: id, Op: "AdoptAttempts", Key: j.GetJobId(), Token: token(j.GetJobMasterToken()), Detail: j.GetJobMasterAddress()})
				}
			}
			if ev.Op != "" {
				e.log.Add(ev)
			}
			resp, err := next(ctx, req)
			// What an AdoptAttempts answer lists becomes the caller's.
			if adopt, ok := req.Any().(*clusterv1.AdoptAttemptsRequest); ok && err == nil {
				e.cancelUnasked(resp.Any())
				for i, j := range resp.Any().(*clusterv1.AdoptAttemptsResponse).GetJobs() {
					if i >= len(adopt.GetJobs()) {
						break
					}
					for _, h := range j.GetAttempts() {
						e.log.Add(Event{Source: id, Op: "Adopted", Key: j.GetJobId(), Token: token(adopt.GetJobs()[i].GetJobMasterToken()),
							Attempt: attemptKey(h.GetStatus().GetAttempt()), State: h.GetStatus().GetState()})
					}
				}
			}
			// A heartbeat answered with a task lease: the lease holds the
			// attempts from the heartbeat's sending.
			if _, ok := req.Any().(*clusterv1.HeartbeatFromTaskExecutorRequest); ok && err == nil {
				if hb := resp.Any().(*clusterv1.HeartbeatFromTaskExecutorResponse); hb.GetTaskLease().AsDuration() > 0 && !hb.GetFullRequested() {
					tx.mu.Lock()
					tx.leased = sent
					tx.mu.Unlock()
				}
			}
			// Deployments in an offer's answer are received as the
			// answer is, before they are handled.
			if offer, ok := req.Any().(*clusterv1.OfferSlotsRequest); ok && err == nil {
				for _, d := range resp.Any().(*clusterv1.OfferSlotsResponse).GetDeployments() {
					e.log.Add(Event{Source: id, Op: "SubmitTask", Key: offer.GetJobId(), Token: token(offer.GetJobMasterToken()), Attempt: attemptKey(d.GetAttempt())})
				}
			}
			return resp, err
		}
	}
}

// reportFailuresAsCanceled makes the runner's TaskExecutors report every
// failed attempt of the job as CANCELED: to its JobMaster, an attempt its
// TaskExecutor stopped without being asked (as one that shuts down, or
// stops hearing from the JobMaster, does).
func (e *env) reportFailuresAsCanceled(job string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.canceledUnasked[job] = true
}

// cancelUnasked rewrites, in a TaskExecutor's state report or its
// answer to AdoptAttempts, the FAILED attempts of the jobs of
// reportFailuresAsCanceled as CANCELED.
func (e *env) cancelUnasked(msg any) {
	var reports []*clusterv1.UpdateTaskExecutionStatesRequest
	switch m := msg.(type) {
	case *clusterv1.UpdateTaskExecutionStateRequest:
		reports = append(reports, &clusterv1.UpdateTaskExecutionStatesRequest{JobId: m.GetJobId(), Statuses: []*jobplanev1.TaskExecutionStatus{m.GetStatus()}})
	case *clusterv1.UpdateTaskExecutionStatesRequest:
		reports = append(reports, m)
	case *clusterv1.UpdateTaskExecutionStatesOfJobsRequest:
		reports = m.GetJobs()
	case *clusterv1.AdoptAttemptsResponse:
		for _, j := range m.GetJobs() {
			var sts []*jobplanev1.TaskExecutionStatus
			for _, h := range j.GetAttempts() {
				sts = append(sts, h.GetStatus())
			}
			reports = append(reports, &clusterv1.UpdateTaskExecutionStatesRequest{JobId: j.GetJobId(), Statuses: sts})
		}
	default:
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range reports {
		if !e.canceledUnasked[r.GetJobId()] {
			continue
		}
		for _, st := range r.GetStatuses() {
			if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_FAILED {
				st.State = jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED
			}
		}
	}
}

// logStates records one job's batch of state changes, sent by
// TaskExecutor id, as UpdateTaskExecutionState events.
func (e *env) logStates(id string, m *clusterv1.UpdateTaskExecutionStatesRequest) {
	for _, st := range m.GetStatuses() {
		e.log.Add(Event{Source: id, Op: "UpdateTaskExecutionState", Key: m.GetJobId(), Token: token(m.GetJobMasterToken()),
			Attempt: attemptKey(st.GetAttempt()), State: st.GetState()})
	}
}

// serverProc is one server instance the runner started.
type serverProc struct {
	url  string // the base URL it was told to listen at
	proc *localcluster.Process
	log  *Log // where its kills, stops, pauses and resumes are recorded
	// ended: the runner sent it SIGKILL or SIGTERM.
	ended atomic.Bool
}

// startServer starts server instance i with the configured command. The
// placeholders {hastore}, {listen}, {data} and {instance} are replaced,
// and JOBPLANE_HASTORE_URL, JOBPLANE_LISTEN, JOBPLANE_DATA_DIR and
// JOBPLANE_INSTANCE are set, with the same values.
func (e *env) startServer(i int) (*serverProc, error) {
	if e.cfg.serverCommand == "" {
		return nil, errors.New("the runner starts no server (no --server-command)")
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	vars := map[string]string{
		"hastore": e.storeHS.URL(), "listen": addr,
		"data": filepath.Join(e.dir, fmt.Sprintf("server-%d", i)), "instance": strconv.Itoa(i),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("the environment is closed")
	}
	p, err := startProc(fmt.Sprintf("server-%d", i), filepath.Join(e.dir, "output", fmt.Sprintf("server-%d", i)), e.cfg.serverCommand, vars)
	if err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	p.url = e.cfg.wire.scheme() + "://" + addr
	p.log = e.log
	e.log.Add(Event{Source: "client", Op: "start", Key: p.url})
	e.servers = append(e.servers, p)
	return p, nil
}

// startProc runs command by /bin/sh in the runner's working directory,
// in a process group of its own, with each placeholder {k} replaced by
// vars[k] and also set as the environment variable JOBPLANE_K
// (JOBPLANE_HASTORE_URL for hastore, JOBPLANE_DATA_DIR for data). Its url
// is http:// and vars["listen"]; its output goes to a log in dir.
func startProc(name, dir, command string, vars map[string]string) (*serverProc, error) {
	line := command
	environ := os.Environ()
	for k, v := range vars {
		line = strings.ReplaceAll(line, "{"+k+"}", v)
		name := map[string]string{"hastore": "HASTORE_URL", "data": "DATA_DIR"}[k]
		if name == "" {
			name = strings.ToUpper(k)
		}
		environ = append(environ, "JOBPLANE_"+name+"="+v)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	// The group takes signals whole: a command that runs the server as a
	// child of its own (go run, a wrapper script) is stopped with it.
	proc, err := localcluster.StartProcess(context.Background(), localcluster.Command{
		Name: name, Dir: dir, WorkDir: wd, Path: "/bin/sh", Env: environ, Group: true,
		Args: func() []string { return []string{"-c", "exec " + line} },
	})
	if err != nil {
		return nil, err
	}
	return &serverProc{url: "http://" + vars["listen"], proc: proc}, nil
}

// freePort returns a loopback address with a port that was free a moment
// ago, for a server to listen on: outside the ephemeral range, which the
// runner's own connections draw from (see internal/freeport).
func freePort() (string, error) { return freeport.Addr() }

// signal sends sig to the server's process group, and records it. A
// server that has exited takes no signal.
func (p *serverProc) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		p.ended.Store(true)
	}
	if p.log != nil {
		op := map[syscall.Signal]string{syscall.SIGKILL: "kill", syscall.SIGTERM: "stop", syscall.SIGSTOP: "pause", syscall.SIGCONT: "resume"}[sig]
		p.log.Add(Event{Source: "client", Op: op, Key: p.url})
	}
	_ = p.proc.Signal(sig)
}

// exited reports whether the server has exited.
func (p *serverProc) exited() bool {
	select {
	case <-p.proc.Exited():
		return true
	default:
		return false
	}
}

// exitState is how the server's last run exited (nil while it runs).
func (p *serverProc) exitState() *os.ProcessState {
	runs := p.proc.Runs()
	return runs[len(runs)-1].State
}

// output is the end of what the server wrote to stdout and stderr.
func (p *serverProc) output() string { return p.proc.Log() }

// exits describes the server instances that exited without the runner
// ending them, with their last lines of output; "" when none did.
func (e *env) exits() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for i, p := range e.servers {
		if p.exited() && !p.ended.Load() {
			fmt.Fprintf(&b, "; server instance %d exited by itself (%v), its last output:\n%s", i, p.exitState(), lastLines(p.output(), 20))
		}
	}
	return b.String()
}

// allExitedByThemselves reports whether no server instance runs and the
// last one started exited without the runner ending it: none will lead.
func (e *env) allExitedByThemselves() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.servers {
		if !p.exited() {
			return false
		}
	}
	return len(e.servers) > 0 && !e.servers[len(e.servers)-1].ended.Load()
}

// kill SIGKILLs the server and waits for it.
func (p *serverProc) kill() {
	p.signal(syscall.SIGKILL)
	p.proc.Kill()
}

// stop asks the server to stop (SIGTERM), and kills it after 10s; it
// reports whether the server stopped by itself.
func (p *serverProc) stop() bool {
	p.signal(syscall.SIGTERM)
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-p.proc.Exited():
		return true
	case <-timer.C:
		p.kill()
		return false
	}
}

// leader waits for the election's leader to have an address.
func (e *env) leader(ctx context.Context, name string) (election.Leader, error) {
	for {
		info, err := e.etcd.Leader(ctx, name)
		if err == nil && !info.Token.IsZero() && info.Address != "" {
			return info, nil
		}
		if e.allExitedByThemselves() {
			return info, fmt.Errorf("no leader of %q with an address, and no server instance running%s", name, e.exits())
		}
		select {
		case <-ctx.Done():
			return info, fmt.Errorf("no leader of %q with an address: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dispatcher returns a client of the leading Dispatcher.
func (e *env) dispatcher(ctx context.Context) (jobplanev1connect.DispatcherServiceClient, error) {
	info, err := e.leader(ctx, election.JobManager)
	if err != nil {
		return nil, err
	}
	return e.dispatcherAt(info.Address), nil
}

// dispatcherAt returns a client of the Dispatcher at address whose calls
// are recorded: a SubmitJob answer as an "ack", another call as its
// method's name, keyed by the job id the request names.
func (e *env) dispatcherAt(address string) jobplanev1connect.DispatcherServiceClient {
	record := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			sent := e.log.Len()
			resp, err := next(ctx, req)
			withID, _ := req.Any().(interface{ GetJobId() string })
			ev := Event{Source: "client", Op: path.Base(req.Spec().Procedure), Err: err, Sent: sent}
			if withID != nil {
				ev.Key = withID.GetJobId()
			}
			if err == nil {
				switch r := resp.Any().(type) {
				case *jobplanev1.SubmitJobResponse:
					ev.Op, ev.Status, ev.Detail = "ack", r.GetStatus(), fmt.Sprintf("created=%v", r.GetCreated())
				case *jobplanev1.GetJobResponse:
					ev.Status = r.GetJob().GetSummary().GetStatus()
				case *jobplanev1.GetJobResultResponse:
					ev.Status = r.GetResult().GetStatus()
				case *jobplanev1.CancelJobResponse:
					ev.Status = r.GetStatus()
				}
			} else if _, submit := req.Any().(*jobplanev1.SubmitJobRequest); submit {
				ev.Op = "ack"
			}
			e.log.Add(ev)
			return resp, err
		}
	})
	return jobplanev1connect.NewDispatcherServiceClient(e.http, address, append(e.cfg.wire.options(), connect.WithInterceptors(record))...)
}

// slowDispatcher returns a client of the leading Dispatcher, unrecorded,
// whose HTTP/2 streams have a receive window of 1 KiB: a stream it leaves
// unread holds the server's sends after a few messages. Calls go over
// HTTP/2 (h2c, or TLS by ALPN), the transport of the runner's other clients.
func (e *env) slowDispatcher(ctx context.Context) (jobplanev1connect.DispatcherServiceClient, error) {
	info, err := e.leader(ctx, election.JobManager)
	if err != nil {
		return nil, err
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	var rt http.RoundTripper = &http.Transport{Protocols: p, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: e.cfg.wire.rootCAs, MinVersion: tls.VersionTLS12},
		HTTP2:           &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 10}}
	if e.cfg.token != "" {
		rt = bearer{base: rt, token: e.cfg.token}
	}
	return jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: rt}, info.Address, e.cfg.wire.options()...), nil
}

// resourceManager returns a client of the ResourceManager of the
// jobmanager election's leader info: at its cluster address, or at its
// address when it publishes none.
func (e *env) resourceManager(info election.Leader) clusterv1connect.ResourceManagerServiceClient {
	return clusterv1connect.NewResourceManagerServiceClient(e.http, info.Cluster(), e.cfg.wire.options()...)
}

// jobMaster returns a client of the JobMaster that job leads: at the
// cluster address of its job election's leader record when that record
// has an address, else at the cluster address of the jobmanager
// election's leader, which serves the JobMaster service too (a job
// election need not publish an address; see LeaderInfo.address).
func (e *env) jobMaster(ctx context.Context, job election.Leader) (clusterv1connect.JobMasterServiceClient, error) {
	address := job.Cluster()
	if address == "" {
		info, err := e.leader(ctx, election.JobManager)
		if err != nil {
			return nil, err
		}
		address = info.Cluster()
	}
	return clusterv1connect.NewJobMasterServiceClient(e.http, address, e.cfg.wire.options()...), nil
}

// revoke ends the current leadership of an election by deleting its
// leader key, as an operator or a lost lease would; the server's
// candidacy is revoked and it may campaign again. It returns the token
// that was revoked.
func (e *env) revoke(ctx context.Context, name string) (election.Token, error) {
	info, err := e.etcd.Leader(ctx, name)
	if err != nil || info.Token.IsZero() {
		return election.Token{}, fmt.Errorf("no leader of %q to revoke: %v", name, err)
	}
	key := etcdstore.DefaultPrefix + "elections/" + name + "/" + info.Token.SessionID
	if _, err := e.etcd.Client().Delete(ctx, key); err != nil {
		return election.Token{}, err
	}
	e.log.Add(Event{Source: "client", Op: "revoke", Key: jobOf(name), Token: info.Token})
	return info.Token, nil
}

// expire revokes the lease of the session that leads an election, as if
// the session's owner stopped renewing it: every leadership of that
// session ends at once. It returns the leader's token.
func (e *env) expire(ctx context.Context, name string) (election.Token, error) {
	info, err := e.etcd.Leader(ctx, name)
	if err != nil || info.Token.IsZero() {
		return election.Token{}, fmt.Errorf("no leader of %q whose session to expire: %v", name, err)
	}
	if err := e.expireSession(ctx, info.Token.SessionID); err != nil {
		return election.Token{}, err
	}
	e.log.Add(Event{Source: "client", Op: "expire", Key: jobOf(name), Token: info.Token})
	return info.Token, nil
}

// expireSession ends a session at once, as its TTL would once its owner
// stopped renewing it.
func (e *env) expireSession(ctx context.Context, id string) error {
	lease, err := strconv.ParseInt(id, 16, 64)
	if err != nil {
		return fmt.Errorf("session id %q is no lease: %w", id, err)
	}
	_, err = e.etcd.Client().Revoke(ctx, clientv3.LeaseID(lease))
	return err
}

// close stops everything the environment started.
func (e *env) close() {
	e.mu.Lock()
	e.closed = true
	servers := e.servers
	e.mu.Unlock()
	for _, p := range servers {
		if !p.exited() {
			p.kill()
		}
	}
	e.cancel()
	e.wg.Wait()
	if e.storeHS != nil {
		e.storeHS.Close()
	}
	if e.etcd != nil {
		_ = e.etcd.Close()
	}
	e.http.CloseIdleConnections()
	_ = os.RemoveAll(e.dir)
}

// attemptEvents turns a runner TaskExecutor's attempt log (one JSON
// record per write) into "attempt-start" and "attempt-stop" events: what
// ran there, and when, as the TaskExecutor saw it, for the invariant that
// no subtask runs twice at once.
type attemptEvents struct {
	log *Log
	id  string
}

func (a attemptEvents) Write(p []byte) (int, error) {
	var r taskexecutor.AttemptRecord
	if err := json.Unmarshal(p, &r); err != nil {
		return 0, fmt.Errorf("attempt log record %q: %w", p, err)
	}
	a.log.Add(Event{
		Source: a.id, Op: "attempt-" + r.Event, Key: r.JobID, Token: election.Token{Epoch: r.Epoch},
		Attempt: attemptKey(&jobplanev1.ExecutionAttemptId{VertexId: r.VertexID, SubtaskIndex: int32(r.SubtaskIndex), AttemptNumber: int32(r.Attempt)}),
	})
	return len(p), nil
}
