package hastore

import "context"

type deferrableKey struct{}

// Deferrable returns ctx marked so that the store writes made under it may
// wait behind writes made without the mark: a store that queues its
// writes (the etcd store's group commit) sends them only once it has sent
// the others queued before them. A JobManager that takes over a hundred
// thousand jobs campaigns for each of them at once; its campaigns are
// deferrable, so that a submission's plan write, or a running job's
// checkpoint, does not wait behind all of them. Writes to the same keys
// keep their order whatever their marks. Other stores may ignore it.
func Deferrable(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferrableKey{}, true)
}

// IsDeferrable reports whether ctx carries Deferrable's mark.
func IsDeferrable(ctx context.Context) bool {
	d, _ := ctx.Value(deferrableKey{}).(bool)
	return d
}
