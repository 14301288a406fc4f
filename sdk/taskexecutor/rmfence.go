package taskexecutor

import (
	"context"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// grantWait bounds how long a call under a ResourceManager token newer
// than the newest seen waits for the HA store to show that token as the
// grant of `jobmanager`. A ResourceManager calls a TaskExecutor only
// once it registered there, which the TaskExecutor does after observing
// its grant, so the wait is only for a watch that lags the grant: a
// store's watch delivers within milliseconds, and an observer that lost
// its stream reopens it within a second (electionrpc retries at most a
// second apart). Two seconds cover that, stay well below the
// ResourceManager's 10s call timeout, and bound how long a forged token
// holds its call.
const grantWait = 2 * time.Second

// rmFence keeps the ResourceManager token this TaskExecutor follows: the
// newest it has seen, which is only ever a grant of `jobmanager` that the
// HA store showed, so that a caller cannot make up a newer one and lock
// the real ResourceManager out.
type rmFence struct {
	mu sync.Mutex
	// newest is the newest token seen: observed as the grant, or taken in
	// a call once the grant showed it.
	newest election.Token
	// grant is the grant the observation of `jobmanager` shows last
	// (zero: no leader, or nothing observed yet); watching says the
	// observation runs and has answered since it (re)started.
	grant    election.Token
	watching bool
	// changed is closed, and replaced, whenever grant or watching change.
	changed chan struct{}
}

// observe records the leader of `jobmanager` the store shows: its token
// is seen from now on, so calls under older ones are refused.
func (f *rmFence) observe(l election.Leader) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grant, f.watching = l.Token, true
	if l.Token.Epoch > f.newest.Epoch {
		f.newest = l.Token
	}
	f.notifyLocked()
}

// lost records that the observation failed: until it answers again, a
// newer token cannot be checked.
func (f *rmFence) lost() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watching = false
	f.notifyLocked()
}

func (f *rmFence) notifyLocked() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// check admits a call under the ResourceManager token t. The newest token
// seen passes at once; an older one, or another of the same epoch (never
// granted), is refused STALE_FENCING_TOKEN. A newer one becomes the
// newest only if it is the grant the store shows, waiting for the
// observation up to grantWait (and ctx); otherwise it is refused
// STALE_FENCING_TOKEN naming the grant, or STORE_UNAVAILABLE if the
// observation is not running. A refusal changes nothing.
func (f *rmFence) check(ctx context.Context, t election.Token) error {
	f.mu.Lock()
	if t == f.newest { // the steady state: as cheap as a lock
		f.mu.Unlock()
		return nil
	}
	defer f.mu.Unlock()
	return f.checkNewerLocked(ctx, t)
}

// checkNewerLocked is check for a token other than the newest; f.mu must
// be held, and is held again when it returns.
func (f *rmFence) checkNewerLocked(ctx context.Context, t election.Token) error {
	var deadline <-chan time.Time
	for {
		switch {
		case t == f.newest:
			return nil
		case t.Epoch <= f.newest.Epoch:
			return f.staleLocked()
		case t == f.grant:
			f.newest = t
			return nil
		}
		if deadline == nil {
			timer := time.NewTimer(grantWait)
			defer timer.Stop()
			deadline = timer.C
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
			f.mu.Lock()
			continue
		case <-ctx.Done():
			f.mu.Lock()
			return apierror.Complete(ctx.Err())
		case <-deadline:
			f.mu.Lock()
		}
		if !f.watching {
			return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE,
				"the HA store could not be observed to check the ResourceManager's token; nothing was done, retry",
				map[string]string{"election": election.JobManager})
		}
		if t == f.grant { // shown as the timer fired
			f.newest = t
			return nil
		}
		return f.staleLocked()
	}
}

// staleLocked is the refusal of a token that is not the current one: it
// names the grant the store shows, else the newest seen.
func (f *rmFence) staleLocked() error {
	current := f.grant
	if current.IsZero() || current.Epoch < f.newest.Epoch {
		current = f.newest
	}
	return apierror.StaleToken(election.JobManager, current.SessionID, current.Epoch)
}
