package hastore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// benchWriters is the number of concurrent writers in the put benchmarks.
const benchWriters = 64

// benchPlan is a plan of a typical size: ten vertices with some config.
func benchPlan(jobID string) *jobplanev1.ExecutionPlan {
	g := &jobplanev1.JobGraph{Name: "bench"}
	for i := range 10 {
		g.Vertices = append(g.Vertices, &jobplanev1.JobVertex{
			Id: fmt.Sprintf("v%d", i), Invokable: "noop", Parallelism: 4,
			Config: map[string]string{"key": "value", "path": "/some/where/else"},
		})
	}
	return &jobplanev1.ExecutionPlan{JobId: jobID, JobGraph: g, Digest: make([]byte, 32)}
}

// PutRate is the outcome of one concurrent put phase.
type PutRate struct {
	PerSecond float64
	P99       time.Duration
}

// MeasurePuts runs n puts from benchWriters goroutines and reports their
// rate and 99th-percentile latency.
func MeasurePuts(n int, put func(i int) error) (PutRate, error) {
	var (
		next    atomic.Int64
		mu      sync.Mutex
		lat     = make([]time.Duration, 0, n)
		wg      sync.WaitGroup
		firstEr atomic.Value
	)
	start := time.Now()
	for range benchWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n/benchWriters+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					break
				}
				t0 := time.Now()
				if err := put(i); err != nil {
					firstEr.CompareAndSwap(nil, err)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstEr.Load().(error); err != nil {
		return PutRate{}, err
	}
	slices.Sort(lat)
	return PutRate{PerSecond: float64(n) / elapsed.Seconds(), P99: lat[len(lat)*99/100]}, nil
}

// BenchmarkPlanPut compares fenced plan puts through the Store with raw
// etcd puts of the same bytes on the same embedded member, in one run.
func BenchmarkPlanPut(b *testing.B) {
	e := startEmbeddedB(b)
	ctx := context.Background()
	store, err := hastore.Open(ctx, hastore.OpenConfig{Endpoints: []string{e.Endpoint()}, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	raw, err := e.NewClient()
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	l, err := sess.Campaign(ctx, hastore.ElectionJobManager, "")
	if err != nil {
		b.Fatal(err)
	}
	data, _ := proto.Marshal(benchPlan("j"))
	plans := make([]*jobplanev1.ExecutionPlan, b.N)
	for i := range plans {
		plans[i] = benchPlan(fmt.Sprintf("j%d", i))
	}

	b.ResetTimer()
	// The phases alternate in rounds, so that neither gains from running
	// first on a smaller database.
	rawRate, fenced, err := alternate(b.N, func(i int) error {
		_, err := raw.Put(ctx, fmt.Sprintf("/raw/plans/j%d", i), string(data))
		return err
	}, func(i int) error {
		return store.PutExecutionPlan(ctx, l.Fence(), plans[i])
	})
	if err != nil {
		b.Fatal(err)
	}
	// The least any fenced write costs: one compare on the leader key and
	// the put, hand-written, with the same bytes.
	leaderKey := hastore.DefaultPrefix + "elections/" + hastore.ElectionJobManager + "/" + l.Token().SessionID
	minimal, err := MeasurePuts(b.N, func(i int) error {
		_, err := raw.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", int64(l.Token().Epoch))).
			Then(clientv3.OpPut(fmt.Sprintf("/raw/txn/j%d", i), string(data))).
			Commit()
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	ReportPutRates(b, rawRate, fenced)
	b.ReportMetric(minimal.PerSecond, "raw-txn-acks/s")
}

// alternate measures n puts of each kind in rounds of alternating phases
// and returns the combined rate and latency of each.
func alternate(n int, raw, fenced func(i int) error) (PutRate, PutRate, error) {
	const rounds = 4
	var rawAll, fencedAll []PutRate
	per := max(n/rounds, 1)
	for r := 0; r*per < n; r++ {
		lo := r * per
		cnt := min(per, n-lo)
		rr, err := MeasurePuts(cnt, func(i int) error { return raw(lo + i) })
		if err != nil {
			return PutRate{}, PutRate{}, err
		}
		fr, err := MeasurePuts(cnt, func(i int) error { return fenced(lo + i) })
		if err != nil {
			return PutRate{}, PutRate{}, err
		}
		rawAll, fencedAll = append(rawAll, rr), append(fencedAll, fr)
	}
	return combine(rawAll), combine(fencedAll), nil
}

// combine averages rates (by harmonic mean, as for equal op counts) and
// keeps the worst p99.
func combine(rates []PutRate) PutRate {
	var inv float64
	var out PutRate
	for _, r := range rates {
		inv += 1 / r.PerSecond
		out.P99 = max(out.P99, r.P99)
	}
	out.PerSecond = float64(len(rates)) / inv
	return out
}

// ReportPutRates reports a raw and a fenced phase side by side.
func ReportPutRates(b *testing.B, raw, fenced PutRate) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(raw.PerSecond, "raw-acks/s")
	b.ReportMetric(float64(raw.P99.Microseconds())/1000, "raw-p99-ms")
	b.ReportMetric(fenced.PerSecond, "fenced-acks/s")
	b.ReportMetric(float64(fenced.P99.Microseconds())/1000, "fenced-p99-ms")
	b.ReportMetric(fenced.PerSecond/raw.PerSecond, "ratio")
}

func startEmbeddedB(b *testing.B) *hastore.Member {
	b.Helper()
	m, err := hastore.StartMember(context.Background(), hastore.MemberConfig{Dir: b.TempDir(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}
