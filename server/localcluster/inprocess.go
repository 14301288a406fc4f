package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// JobManager is one JobManager of an in-process cluster: its Dispatcher,
// ResourceManager and JobMasters, serving on a loopback endpoint of its
// own, which also serves the cluster's HA store (HAStoreService).
type JobManager struct {
	url        string
	dispatcher jobplanev1connect.DispatcherServiceClient
	client     *http.Client // the JobManager's own, for its calls to TaskExecutors
	run, serve *running
}

// URL returns the JobManager's base URL, such as "http://127.0.0.1:41235".
func (j *JobManager) URL() string { return j.url }

// Dispatcher returns a client of the JobManager's DispatcherService, which
// neither retries nor follows the leader: a standby answers UNAVAILABLE
// (NOT_LEADER).
func (j *JobManager) Dispatcher() jobplanev1connect.DispatcherServiceClient { return j.dispatcher }

// Stop stops the JobManager gracefully, as SIGTERM stops a process: it
// resigns its leadership, so that a standby takes over at once, and then
// its endpoint closes. It returns the error that stopped the JobManager
// or its endpoint, if any; later calls, and Cluster.Close, return the
// same and do nothing more.
func (j *JobManager) Stop() error {
	err := j.run.stop()
	j.client.CloseIdleConnections()
	return errors.Join(err, j.serve.stop())
}

// TaskExecutor is one TaskExecutor of an in-process cluster, serving on a
// loopback endpoint of its own.
type TaskExecutor struct {
	id, url    string
	cut        *atomic.Bool
	client     *http.Client
	registered chan struct{} // closed once it registered with a ResourceManager
	run        *running
}

// ID returns the TaskExecutor's id, under which the JobManagers know it.
func (te *TaskExecutor) ID() string { return te.id }

// URL returns the base URL at which the TaskExecutor serves
// TaskExecutorService.
func (te *TaskExecutor) URL() string { return te.url }

// Partition cuts the TaskExecutor off the cluster, both ways, as a
// network partition would, while it keeps running: calls to it go
// unanswered until their callers give up, and its own calls fail
// UNAVAILABLE. To the JobManagers it falls silent. The partition lasts
// until the cluster closes.
func (te *TaskExecutor) Partition() { te.cut.Store(true) }

// cutOff fails a TaskExecutor's calls once cut is set.
func cutOff(cut *atomic.Bool) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if cut.Load() {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("partitioned"))
			}
			return next(ctx, req)
		}
	}
}

// silence leaves the calls to a TaskExecutor unanswered once cut is set,
// until their callers give up, as a network that drops packets does.
func silence(cut *atomic.Bool) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if cut.Load() {
				<-ctx.Done()
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("partitioned"))
			}
			return next(ctx, req)
		}
	}
}

// signalRegistered closes registered once a TaskExecutor's registration
// with a ResourceManager succeeded.
func signalRegistered(registered chan struct{}) connect.UnaryInterceptorFunc {
	var once sync.Once
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err == nil && req.Spec().Procedure == clusterv1connect.ResourceManagerServiceRegisterTaskExecutorProcedure {
				once.Do(func() { close(registered) })
			}
			return resp, err
		}
	}
}

// running is a component's blocking Run on a goroutine of its own.
type running struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// goRun runs f until stop is called. If f returns before that, the
// component stopped by itself: failed is called with the reason.
func goRun(name string, f func(context.Context) error, failed func(error)) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		err := f(ctx)
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
		}
		if ctx.Err() == nil {
			if err == nil {
				err = fmt.Errorf("%s stopped by itself", name)
			}
			failed(err)
		}
		r.err = err
	}()
	return r
}

// stop ends the Run, waits for it and returns its error. It may be called
// more than once.
func (r *running) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// failure keeps the first error of a component that stopped by itself.
type failure struct {
	once sync.Once
	done chan struct{} // closed on the first failure
	err  error         // set before done closes
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

func (f *failure) set(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}
