package dispatcher_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
)

// unreachableStore is a store that no read reaches: Leader waits until its
// context ends, as on a server partitioned from etcd.
type unreachableStore struct{ hastore.Store }

func (unreachableStore) Leader(ctx context.Context, _ string) (election.Leader, error) {
	<-ctx.Done()
	return election.Leader{}, ctx.Err()
}

// A Dispatcher that does not lead answers NOT_LEADER at once, also when
// the store cannot tell it who leads.
func TestNotLeaderWithoutStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	d, err := dispatcher.New(dispatcher.Config{
		Store: unreachableStore{store}, Logger: quiet,
		Jobs: jobsOf(store, func(*hastorev1.ExecutionPlan, bool, *hastore.Leadership, func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			return &stuckRunner{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := dispatcher.NewHandler(d)
	start := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	_, err = h.GetClusterOverview(cctx, &jobplanev1.GetClusterOverviewRequest{})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the answer took %v", took)
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) {
		t.Fatalf("err = %v, want UNAVAILABLE NOT_LEADER", err)
	}
}
