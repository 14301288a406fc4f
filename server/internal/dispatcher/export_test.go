package dispatcher

import (
	"context"
	"testing"
)

// ExpireResults runs one round of the result retention now, as the
// leadership's ticker would.
func (d *Dispatcher) ExpireResults(ctx context.Context) {
	d.mu.Lock()
	ld := d.lead
	d.mu.Unlock()
	if ld != nil {
		d.expireResults(ctx, ld)
	}
}

// SetRecoveryPage makes recoveries read n plans at a time from a store
// that reads them a page at a time, until t ends.
func SetRecoveryPage(t testing.TB, n int) {
	old := recoveryPage
	recoveryPage = n
	t.Cleanup(func() { recoveryPage = old })
}

// SetHolderChunk makes recoveries read the plans of the jobs holding
// slots n at a time, until t ends.
func SetHolderChunk(t testing.TB, n int) {
	old := holderChunk
	holderChunk = n
	t.Cleanup(func() { holderChunk = old })
}
