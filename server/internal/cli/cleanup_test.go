package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/sdk"
)

// A purge or an id reuse refused because the ended job's cleanup is not
// done yet is tried again, saying so once, until it is done; the wait is
// bounded by the request's context.
func TestAfterCleanupWaitsForTheCleanup(t *testing.T) {
	var errOut bytes.Buffer
	a := &app{s: Streams{Err: &errOut}}
	calls := 0
	err := a.afterCleanup(context.Background(), "j", func() error {
		calls++
		if calls < 3 {
			return sdk.ErrCleanupPending
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("afterCleanup = %v after %d calls; want nil after 3", err, calls)
	}
	if n := strings.Count(errOut.String(), "waiting for it"); n != 1 {
		t.Errorf("said %d times %q; want once", n, errOut.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	err = a.afterCleanup(ctx, "j", func() error { calls++; return sdk.ErrCleanupPending })
	if !errors.Is(err, sdk.ErrCleanupPending) || calls != 1 {
		t.Errorf("afterCleanup with its context done = %v after %d calls; want ErrCleanupPending after 1", err, calls)
	}
	other := errors.New("refused")
	if err := a.afterCleanup(context.Background(), "j", func() error { return other }); err != other {
		t.Errorf("afterCleanup = %v; want the other error as is", err)
	}
}
