package hacluster_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/hacluster"
)

var (
	failoverCycles = flag.Int("failover.cycles", 0, "TestMeasureFailover: SIGKILL and SIGTERM cycles of the leader to time (0 skips it)")
	failoverEtcd   = flag.Int("failover.etcd", 3, "TestMeasureFailover: etcd members; 0 for one etcd member embedded in a `jobplane hastore` process")
)

// TestMeasureFailover times failovers of the leader, when
// -failover.cycles asks for them (on -failover.etcd external etcd members,
// or 0 for one member embedded in a `jobplane hastore` process):
//
//	go test -run TestMeasureFailover -v ./internal/hacluster/ -args -failover.cycles=20 -failover.etcd=1
func TestMeasureFailover(t *testing.T) {
	if *failoverCycles <= 0 || testing.Short() {
		t.Skip("set -failover.cycles to measure failovers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*failoverCycles)*(10*hacluster.SessionTTL()+time.Minute))
	defer cancel()
	kill, term, err := hacluster.MeasureFailover(ctx, hacluster.Config{EtcdMembers: *failoverEtcd, EmbeddedStore: *failoverEtcd == 0}, *failoverCycles)
	km, kx := hacluster.Summary(kill)
	tm, tx := hacluster.Summary(term)
	t.Logf("%d etcd members (0: embedded in a hastore process), session TTL %v, timing flags %q", *failoverEtcd, hacluster.SessionTTL(), hacluster.TimingFlags)
	t.Logf("SIGKILL → first recovered job RUNNING: median %v, max %v over %d cycles %v", km, kx, len(kill), kill)
	t.Logf("SIGTERM → the next leader answers:     median %v, max %v over %d cycles %v", tm, tx, len(term), term)
	if err != nil {
		t.Fatal(err)
	}
	if len(kill) != *failoverCycles || len(term) != *failoverCycles {
		t.Errorf("measured %d and %d cycles, want %d", len(kill), len(term), *failoverCycles)
	}
}

// Summary is the median and the maximum.
func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		in            []time.Duration
		median, worst time.Duration
	}{
		{nil, 0, 0},
		{[]time.Duration{3}, 3, 3},
		{[]time.Duration{4, 1, 3}, 3, 4},
		{[]time.Duration{4, 1, 3, 2}, 2, 4},
	} {
		m, x := hacluster.Summary(tc.in)
		if m != tc.median || x != tc.worst {
			t.Errorf("Summary(%v) = %v, %v; want %v, %v", tc.in, m, x, tc.median, tc.worst)
		}
	}
}
