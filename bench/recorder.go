package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// Names of the bench's invokables, offered by every bench TaskExecutor.
const (
	// InvokableStart records when it started, then finishes at once.
	InvokableStart = "bench-start"
	// InvokableBlock counts itself running until it is canceled.
	InvokableBlock = "bench-block"
)

// Recorder is what the bench invokables report to: when the subtasks of
// an expected job started, and how many blocking subtasks run.
type Recorder struct {
	mu     sync.Mutex
	expect map[string]*expectation

	running atomic.Int64 // bench-block subtasks running now
	blocked atomic.Int64 // bench-block subtasks ever started
}

type expectation struct {
	want, seen int
	ch         chan time.Time
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{expect: make(map[string]*expectation)} }

// Invokables returns the bench invokables, reporting to r.
func (r *Recorder) Invokables() map[string]taskexecutor.Invokable {
	return map[string]taskexecutor.Invokable{
		InvokableStart: func(_ context.Context, t taskexecutor.Task) error {
			r.started(t.JobID, time.Now())
			return nil
		},
		InvokableBlock: func(ctx context.Context, _ taskexecutor.Task) error {
			r.blocked.Add(1)
			r.running.Add(1)
			defer r.running.Add(-1)
			<-ctx.Done()
			return ctx.Err()
		},
	}
}

// Expect registers that job jobID will start n subtasks of bench-start;
// the channel receives the time the n-th started. Register before the
// job is submitted; call Forget once done with it.
func (r *Recorder) Expect(jobID string, n int) <-chan time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &expectation{want: n, ch: make(chan time.Time, 1)}
	r.expect[jobID] = e
	return e.ch
}

// Forget drops the expectation of jobID.
func (r *Recorder) Forget(jobID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.expect, jobID)
}

func (r *Recorder) started(jobID string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.expect[jobID]
	if e == nil {
		return
	}
	e.seen++
	if e.seen == e.want {
		e.ch <- at
	}
}

// Running returns how many bench-block subtasks run now.
func (r *Recorder) Running() int64 { return r.running.Load() }

// Blocked returns how many bench-block subtasks have ever started.
func (r *Recorder) Blocked() int64 { return r.blocked.Load() }
