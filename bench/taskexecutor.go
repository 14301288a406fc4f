package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/component"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// RPCCounter counts the RPCs the bench TaskExecutors exchange with the
// JobManager, by direction; a stream counts once, when it opens.
type RPCCounter struct {
	// ToJobManager: calls a TaskExecutor makes to the ResourceManager
	// and JobMasters (heartbeats, slot offers, task states).
	ToJobManager atomic.Int64
	// FromJobManager: calls the JobManager makes to a TaskExecutor
	// (slot requests, task submissions, probes).
	FromJobManager atomic.Int64
	// ToStore: calls a TaskExecutor makes to the HA store the JobManager
	// serves (leader lookups and watches, session renewals).
	ToStore atomic.Int64
}

// Total returns the calls in every direction.
func (c *RPCCounter) Total() int64 {
	return c.ToJobManager.Load() + c.FromJobManager.Load() + c.ToStore.Load()
}

// counting is a connect.Interceptor that counts calls into n.
type counting struct{ n *atomic.Int64 }

func (c counting) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c.n.Add(1)
		return next(ctx, req)
	}
}

func (c counting) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c.n.Add(1)
		return next(ctx, spec)
	}
}

func (c counting) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c.n.Add(1)
		return next(ctx, conn)
	}
}

// TaskExecutors are TaskExecutors hosted in the bench process, each on a
// loopback endpoint of its own and with HTTP clients of its own, as
// separate processes would have; they find the ResourceManager through
// the HA store the JobManager serves.
type TaskExecutors struct {
	// Calls counts the RPCs between them and the JobManager.
	Calls *RPCCounter

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// taskExecutorStopTimeout bounds the wait for the TaskExecutors to stop.
const taskExecutorStopTimeout = 15 * time.Second

// StartTaskExecutors starts n TaskExecutors of slots slots each against
// the JobManager at jmURL, offering rec's invokables besides the
// built-ins. Their logs (warnings and errors) go to log.
func StartTaskExecutors(jmURL string, n, slots int, rec *Recorder, log *slog.Logger) (*TaskExecutors, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	tes := &TaskExecutors{Calls: &RPCCounter{}, cancel: cancel}
	toJM := connect.WithInterceptors(counting{&tes.Calls.ToJobManager})
	fromJM := connect.WithInterceptors(counting{&tes.Calls.FromJobManager})
	toStore := connect.WithInterceptors(counting{&tes.Calls.ToStore})
	for i := range n {
		store := hastorerpc.NewClient(hastorerpc.ClientConfig{
			HTTPClient: NewHTTPClient(H2C), BaseURL: jmURL, Options: []connect.ClientOption{toStore}, Logger: log,
		})
		te, err := component.NewTaskExecutor(component.TaskExecutorConfig{
			TaskExecutor: taskexecutor.Config{
				ID:    fmt.Sprintf("bench-te-%d", i),
				Slots: slots, Store: store, HTTPClient: NewHTTPClient(H2C),
				Invokables:    rec.Invokables(),
				ClientOptions: []connect.ClientOption{toJM},
				Logger:        log,
			},
			HandlerOptions: []connect.HandlerOption{fromJM},
		})
		if err != nil {
			tes.Stop()
			return nil, err
		}
		tes.run(ctx, te.Run)
	}
	return tes, nil
}

func (t *TaskExecutors) run(ctx context.Context, f func(context.Context) error) {
	t.wg.Go(func() {
		if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.mu.Lock()
			t.errs = append(t.errs, err)
			t.mu.Unlock()
		}
	})
}

// Stop stops every TaskExecutor and its endpoint, waiting at most 15s for
// them; it returns what stopped them other than the stop itself.
func (t *TaskExecutors) Stop() error {
	t.cancel()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(taskExecutorStopTimeout):
		return fmt.Errorf("task executors did not stop within %v", taskExecutorStopTimeout)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.errs...)
}
