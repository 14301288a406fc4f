package hastore

import (
	"context"
	"sync"
)

// Leadership is a granted candidacy. Its Context is done when the
// leadership ends, for whatever reason; work done as the leader runs under
// that context, and every write it makes carries Fence.
type Leadership struct {
	fence  Fence
	store  Store
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
}

// NewLeadership returns the leadership of a grant, for Store
// implementations. The leadership's context derives from parent; it ends
// when parent ends (cause ErrSessionEnded unless parent has a cause) or
// when end is called with the cause.
func NewLeadership(parent context.Context, f Fence, store Store) (l *Leadership, end func(cause error)) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	l = &Leadership{fence: f, store: store, ctx: ctx, cancel: cancel}
	stop := context.AfterFunc(parent, func() {
		cause := context.Cause(parent)
		if cause == context.Canceled || cause == context.DeadlineExceeded || cause == nil {
			cause = ErrSessionEnded
		}
		l.end(cause)
	})
	return l, func(cause error) { stop(); l.end(cause) }
}

func (l *Leadership) end(cause error) { l.once.Do(func() { l.cancel(cause) }) }

// Election returns the election's name.
func (l *Leadership) Election() string { return l.fence.Election }

// Token returns the grant's token.
func (l *Leadership) Token() Token { return l.fence.Token }

// Fence returns the fence that writes made as this leader carry.
func (l *Leadership) Fence() Fence { return l.fence }

// Context returns a context that is done when the leadership ends;
// context.Cause tells why: ErrResigned, ErrSessionEnded or
// ErrLeaderDeleted.
func (l *Leadership) Context() context.Context { return l.ctx }

// Done is closed when the leadership has ended.
func (l *Leadership) Done() <-chan struct{} { return l.ctx.Done() }

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
