package dispatcher

import "context"

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
