package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jobplane/jobplane/sdk/election/electionrpc"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// shutdownTimeout bounds how long Run waits for calls still being served
// once the worker stops.
const shutdownTimeout = 5 * time.Second

// Worker is a TaskExecutor that runs registered Funcs, besides the
// built-in invokables every TaskExecutor offers: "noop" (finishes at
// once), "sleep" (config "duration", default 1s), "fail" (config
// "message", "delay", "attempts", "subtasks"), "count" and "exec" (offered
// only with Config.AllowExec). Register the functions, then Run it.
type Worker struct {
	cfg Config

	mu      sync.Mutex
	funcs   map[string]Func
	started bool
}

// New returns a Worker for cfg, with the defaults that Config documents.
// It fails if cfg does not Validate. Nothing is opened or contacted until
// Run.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg.withDefaults(), funcs: make(map[string]Func)}, nil
}

// Register offers f as the invokable name: the cluster deploys to this
// worker the subtasks of every vertex whose invokable is name. A built-in's
// name (noop, sleep, fail, exec) replaces the built-in.
//
// Register must be called before Run; like http.ServeMux.Handle, it panics
// when called once Run has started, with an empty name, a nil f, or a name
// already registered.
func (w *Worker) Register(name string, f Func) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.started:
		panic("worker: Register called after Run")
	case name == "":
		panic("worker: Register with an empty name")
	case f == nil:
		panic(fmt.Sprintf("worker: Register(%q) with a nil Func", name))
	case w.funcs[name] != nil:
		panic(fmt.Sprintf("worker: %q is registered twice", name))
	}
	w.funcs[name] = f
}

// Run serves TaskExecutorService on Config.Listen, registers the worker
// with the cluster's ResourceManager (found through Config.Server, and
// followed across failovers), and runs the subtasks deployed to it, until
// ctx is done. Then it cancels the running subtasks (their Funcs' contexts
// are canceled), waits for their Funcs to return, closes the listener and
// returns nil.
//
// A Func that does not return once its context is canceled holds Run up
// until it does. Run fails at once if the address cannot be bound or Run
// was called before. A cluster that cannot be reached is no error: the worker keeps
// trying (and logs why at Warn level) until it can or ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	w.started = true
	invokables := make(map[string]taskexecutor.Invokable, len(w.funcs))
	for name, f := range w.funcs {
		invokables[name] = w.invokable(name, f)
	}
	w.mu.Unlock()

	client := w.cfg.HTTPClient
	if client == nil {
		client = transport.NewClient(w.cfg.TLSConfig)
		defer client.CloseIdleConnections()
	}
	ln, err := net.Listen("tcp", w.cfg.Listen)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer ln.Close()
	address := w.cfg.Advertise
	if address == "" {
		if address, err = advertise(ln.Addr()); err != nil {
			return err
		}
	}
	leaders, err := electionrpc.NewObserver(electionrpc.Config{HTTPClient: client, BaseURL: w.cfg.Server, Logger: w.cfg.Logger})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	tcfg := taskexecutor.Config{
		ID: w.cfg.ID, Address: address, Slots: w.cfg.Slots, Store: leaders, HTTPClient: client,
		Invokables: invokables, AllowExec: w.cfg.AllowExec, Logger: w.cfg.Logger,
		OutputDir: w.cfg.OutputDir, OutputMaxBytes: w.cfg.OutputMaxBytes,
	}
	if w.cfg.OutputDir != "" {
		tcfg.OutputRetention = w.cfg.OutputMaxAge
	}
	te, err := taskexecutor.New(tcfg)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle(te.Handler())
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			cancel(err)
		}
		served <- err
	}()
	w.cfg.Logger.Info("worker running", "task_executor", te.ID(), "address", address, "server", w.cfg.Server, "slots", w.cfg.Slots)

	runErr := te.Run(runCtx)
	// The TaskExecutor's tasks have all returned; calls still in flight
	// get a moment to be answered.
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	_ = srv.Shutdown(sctx)
	scancel()
	_ = srv.Close()
	serveErr := <-served
	if runErr != nil {
		return fmt.Errorf("worker: %w", runErr)
	}
	if !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("worker: serve: %w", serveErr)
	}
	return nil
}

// invokable adapts f to the TaskExecutor: it fills Task, and turns a
// panic in f into the subtask's failure rather than the worker's crash.
func (w *Worker) invokable(name string, f Func) taskexecutor.Invokable {
	return func(ctx context.Context, t taskexecutor.Task) (err error) {
		logger := t.Logger
		if logger == nil {
			logger = w.cfg.Logger.With("job", t.JobID, "vertex", t.VertexID, "subtask", t.SubtaskIndex, "attempt", t.Attempt)
		}
		task := NewTask(t, logger)
		defer func() {
			if p := recover(); p != nil {
				task.Logger.Error("task panicked", "invokable", name, "panic", p, "stack", string(debug.Stack()))
				err = fmt.Errorf("%s panicked: %v", name, p)
			}
		}()
		return f(ctx, task)
	}
}
