package hastore

import (
	"context"
	"sync"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
)

// Leadership is a granted candidacy. Its Context is done when the
// leadership ends, for whatever reason; work done as the leader runs under
// that context, and every write it makes carries Fence.
//
// A leader acts (answers as the leader, deploys, writes) only while Valid
// reports true: its session certainly holds at the store. After a pause of
// the process the context may still look alive for a moment, while the
// session's lease has long expired and another leader was granted; Valid
// measures that on the monotonic clock, synchronously, so a request that
// was queued during the pause is never answered as leader.
type Leadership struct {
	fence      Fence
	store      Store
	ctx        context.Context
	cancel     context.CancelCauseFunc
	once       sync.Once
	validUntil func() time.Time
	onEnd      func()
}

// NewLeadership returns the leadership of a grant, for Store
// implementations. The leadership's context derives from parent; it ends
// when parent ends (cause ErrSessionEnded unless parent has a cause) or
// when end is called with the cause. validUntil reports until when the
// holding session certainly holds (Session.ValidUntil); nil means for as
// long as the context lives.
func NewLeadership(parent context.Context, f Fence, store Store, validUntil func() time.Time) (l *Leadership, end func(cause error)) {
	return NewLeadershipFunc(parent, f, store, validUntil, nil)
}

// NewLeadershipFunc is NewLeadership with onEnd, which runs once, right
// after the leadership's context is done, on the goroutine that ended it:
// end's caller, or one of its own when parent ended. A store that keeps
// a record of each leadership drops it there, with no goroutine or
// context of its own watching every leadership (a process leads every
// job it runs).
func NewLeadershipFunc(parent context.Context, f Fence, store Store, validUntil func() time.Time, onEnd func()) (l *Leadership, end func(cause error)) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	l = &Leadership{fence: f, store: store, ctx: ctx, cancel: cancel, validUntil: validUntil, onEnd: onEnd}
	stop := context.AfterFunc(parent, func() {
		cause := context.Cause(parent)
		if cause == context.Canceled || cause == context.DeadlineExceeded || cause == nil {
			cause = ErrSessionEnded
		}
		l.end(cause)
	})
	return l, func(cause error) { stop(); l.end(cause) }
}

func (l *Leadership) end(cause error) {
	l.once.Do(func() {
		l.cancel(cause)
		if l.onEnd != nil {
			l.onEnd()
		}
	})
}

// Election returns the election's name.
func (l *Leadership) Election() string { return l.fence.Election }

// Token returns the grant's token.
func (l *Leadership) Token() election.Token { return l.fence.Token }

// Fence returns the fence that writes made as this leader carry.
func (l *Leadership) Fence() Fence { return l.fence }

// Context returns a context that is done when the leadership ends;
// context.Cause tells why: ErrResigned, ErrSessionEnded or
// ErrLeaderDeleted.
func (l *Leadership) Context() context.Context { return l.ctx }

// Done is closed when the leadership has ended.
func (l *Leadership) Done() <-chan struct{} { return l.ctx.Done() }

// Valid reports whether the leadership certainly holds now: it has not
// ended, and its session's lease holds at the store by the measure of
// Session.ValidUntil. Past that instant the leadership ends shortly (the
// session ends once its lease may have expired), so a false answer is
// final in practice.
func (l *Leadership) Valid() bool {
	if l.ctx.Err() != nil {
		return false
	}
	return l.validUntil == nil || time.Now().Before(l.validUntil())
}

type leadershipKey struct{}

// WithLeadership returns ctx carrying l, for a call to a component of the
// same process: the callee may take l as the proof that the caller holds
// l's grant (LeadershipFrom), which no request from the network can carry.
func WithLeadership(ctx context.Context, l *Leadership) context.Context {
	return context.WithValue(ctx, leadershipKey{}, l)
}

// LeadershipFrom returns the leadership a call of this process carries
// (WithLeadership), or nil.
func LeadershipFrom(ctx context.Context) *Leadership {
	l, _ := ctx.Value(leadershipKey{}).(*Leadership)
	return l
}

// Confirm publishes address as the leader's. It fails with ErrStaleToken
// if the leadership has ended.
func (l *Leadership) Confirm(ctx context.Context, address string) error {
	return l.store.ConfirmLeadership(ctx, l.fence, address)
}

// Resign ends the leadership and waits until the store has recorded it.
func (l *Leadership) Resign(ctx context.Context) error {
	if err := l.store.Resign(ctx, l.fence); err != nil {
		return err
	}
	l.end(ErrResigned)
	return nil
}
