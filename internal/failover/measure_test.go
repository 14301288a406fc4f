package failover

import (
	"context"
	"flag"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
)

var (
	failoverCycles = flag.Int("failover.cycles", 0, "TestMeasureFailover: SIGKILL and SIGTERM cycles of the leader to time (0 skips it)")
	failoverEtcd   = flag.Int("failover.etcd", 3, "TestMeasureFailover: etcd members; 0 for one etcd member embedded in a `jobplane hastore` process")
	failoverPeers  = flag.Bool("failover.peers", false, "TestMeasureFailover: three jobmanagers on their own embedded members (--etcd-peers) instead of -failover.etcd")
)

// TestMeasureFailover times failovers of the leader, when
// -failover.cycles asks for them (on -failover.etcd external etcd members,
// 0 for one member embedded in a `jobplane hastore` process, or with
// -failover.peers three jobmanagers on their own embedded members):
//
//	go test -run TestMeasureFailover -v ./internal/failover/ -args -failover.cycles=20 -failover.etcd=1
func TestMeasureFailover(t *testing.T) {
	if *failoverCycles <= 0 || testing.Short() {
		t.Skip("set -failover.cycles to measure failovers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*failoverCycles)*(10*ttl(t)+time.Minute))
	defer cancel()
	cfg := localcluster.ProcessClusterConfig{EtcdMembers: *failoverEtcd, EmbeddedStore: *failoverEtcd == 0}
	if *failoverPeers {
		cfg = localcluster.ProcessClusterConfig{EmbeddedPeers: true, JobManagers: 3}
	}
	kill, term, err := measureFailover(ctx, cfg, *failoverCycles)
	km, kx := summary(kill)
	tm, tx := summary(term)
	t.Logf("%d etcd members (0: embedded in a hastore process), embedded peers %v, session TTL %v", *failoverEtcd, *failoverPeers, ttl(t))
	t.Logf("SIGKILL → first recovered job RUNNING: median %v, max %v over %d cycles %v", km, kx, len(kill), kill)
	t.Logf("SIGTERM → the next leader answers:     median %v, max %v over %d cycles %v", tm, tx, len(term), term)
	if err != nil {
		t.Fatal(err)
	}
	if len(kill) != *failoverCycles || len(term) != *failoverCycles {
		t.Errorf("measured %d and %d cycles, want %d", len(kill), len(term), *failoverCycles)
	}
}

// summary is the median and the maximum.
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
		m, x := summary(tc.in)
		if m != tc.median || x != tc.worst {
			t.Errorf("summary(%v) = %v, %v; want %v, %v", tc.in, m, x, tc.median, tc.worst)
		}
	}
}

// BenchmarkFailover times failovers of the leader on the default timings,
// for `make bench` (row 7): SIGKILL → first recovered job RUNNING on the
// standby, and SIGTERM → the next leader answers, median and maximum over
// $FAILOVER_CYCLES cycles (default 20), on one etcd member embedded in a
// `jobplane hastore` process, on three etcd members, and on three
// jobmanagers' own embedded members. Each benchmark
// iteration runs every cycle; run it with -benchtime=1x.
func BenchmarkFailover(b *testing.B) {
	cycles := 20
	if v, err := strconv.Atoi(os.Getenv("FAILOVER_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	for _, tc := range []struct {
		name string
		cfg  localcluster.ProcessClusterConfig
	}{
		{"embedded-member", localcluster.ProcessClusterConfig{EmbeddedStore: true}},
		{"3-etcd-members", localcluster.ProcessClusterConfig{EtcdMembers: 3}},
		{"3-embedded-peers", localcluster.ProcessClusterConfig{EmbeddedPeers: true, JobManagers: 3}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var kill, term []time.Duration
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cycles)*(10*ttl(b)+time.Minute))
				k, t, err := measureFailover(ctx, tc.cfg, cycles)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				kill, term = append(kill, k...), append(term, t...)
			}
			km, kx := summary(kill)
			tm, tx := summary(term)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms(km), "failover-kill-p50-ms")
			b.ReportMetric(ms(kx), "failover-kill-max-ms")
			b.ReportMetric(ms(tm), "failover-term-p50-ms")
			b.ReportMetric(ms(tx), "failover-term-max-ms")
			b.ReportMetric(float64(len(kill)), "failover-cycles")
		})
	}
}
