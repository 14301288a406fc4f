package hastore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
)

// Churn that would exceed the quota several times over, were history kept,
// never makes the store refuse a write: the member compacts and
// defragments as it goes.
func TestChurnStaysWithinQuota(t *testing.T) {
	const (
		quota     = 16 << 20
		planBytes = 64 << 10
		churn     = 4 * quota // bytes written and deleted in all
	)
	e := startEmbedded(t, hastore.MemberConfig{
		QuotaBytes:          quota,
		MaintenanceInterval: 50 * time.Millisecond,
		CompactionRetention: time.Hour, // only maintenance reclaims space here
	})
	s := e.store(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := sess.Campaign(ctx, hastore.ElectionJobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	p := testPlan("churn")
	p.JobGraph.Name = string(make([]byte, planBytes))
	for i := range churn / planBytes {
		p.JobId = fmt.Sprintf("j%d", i%8)
		if err := s.PutExecutionPlan(ctx, l.Fence(), p); err != nil {
			t.Fatalf("write %d (%d MiB written): %v", i, i*planBytes>>20, err)
		}
		if i%2 == 1 {
			if err := s.DeleteExecutionPlan(ctx, l.Fence(), p.JobId); err != nil {
				t.Fatalf("delete %d: %v", i, err)
			}
		}
	}
	// And it still accepts writes afterwards.
	if err := s.PutExecutionPlan(ctx, l.Fence(), testPlan("after")); err != nil {
		t.Fatalf("write after churn: %v", err)
	}
}
