package etcdmember_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// Churn that would exceed the quota several times over, were history kept,
// never makes the store refuse a write: the member compacts and
// defragments as it goes.
func TestChurnStaysWithinQuota(t *testing.T) {
	const (
		quota     = 8 << 20
		planBytes = 64 << 10
		churn     = 3 * quota // bytes written and deleted in all
	)
	m := newMember(t, etcdmember.Config{
		QuotaBytes:          quota,
		MaintenanceInterval: 50 * time.Millisecond,
		CompactionRetention: time.Hour, // only maintenance reclaims space here
	})
	s := newStore(t, m)
	// About 400 rounds of five fsynced writes: a few seconds alone, more
	// than a minute on a loaded machine with -race.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	p := testPlan("churn")
	p.JobGraph.Name = string(make([]byte, planBytes))
	f := l.Fence()
	for i := range churn / planBytes {
		p.JobId = fmt.Sprintf("j%d", i)
		if err := s.PutExecutionPlan(ctx, f, p); err != nil {
			t.Fatalf("write %d (%d MiB written): %v", i, i*planBytes>>20, err)
		}
		// The plan goes as a finished job's does, and its result after it.
		res := &jobplanev1.JobResult{JobId: p.JobId, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
		err := errors.Join(s.CreateDirtyJobResult(ctx, f, res), s.DeleteExecutionPlan(ctx, f, p.JobId),
			s.MarkJobResultClean(ctx, f, p.JobId), s.DeleteJobResultEntry(ctx, f, p.JobId))
		if err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	// And it still accepts writes afterwards.
	if err := s.PutExecutionPlan(ctx, l.Fence(), testPlan("after")); err != nil {
		t.Fatalf("write after churn: %v", err)
	}
}

// A second member on a held data directory fails at once, naming the
// directory and the holder's pid, instead of blocking in etcd's own file
// lock; once the holder closes, the directory can be used again.
func TestHeldDataDirFailsFast(t *testing.T) {
	dir := t.TempDir()
	startCtx, cancelStart := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelStart()
	first, err := etcdmember.Start(startCtx, etcdmember.Config{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	wantMsg := fmt.Sprintf("hastore: data directory %s is in use by another process (pid %d)", dir, os.Getpid())
	for _, tc := range []struct {
		name string
		open func(ctx context.Context) (io.Closer, error)
	}{
		{"Start", func(ctx context.Context) (io.Closer, error) {
			return etcdmember.Start(ctx, etcdmember.Config{Dir: dir, Logger: quietLogger()})
		}},
		{"Open", func(ctx context.Context) (io.Closer, error) {
			return etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dir, Logger: quietLogger()})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				c   io.Closer
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			// Without the lock the call blocks in etcd's own file lock,
			// deaf to its context: wait for it only so long.
			go func() {
				c, err := tc.open(ctx)
				done <- result{c, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("still starting after 5s on a held data directory")
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("failed after %v, want within 1s", took)
			}
			if r.err == nil {
				r.c.Close()
				t.Fatal("a second member started on a held data directory")
			}
			if !errors.Is(r.err, etcdmember.ErrDataDirInUse) || r.err.Error() != wantMsg {
				t.Errorf("err = %v (ErrDataDirInUse: %v), want %q", r.err, errors.Is(r.err, etcdmember.ErrDataDirInUse), wantMsg)
			}
		})
	}

	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m, err := etcdmember.Start(startCtx, etcdmember.Config{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Start after the holder closed: %v", err)
	}
	m.Close()
}
