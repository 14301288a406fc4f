package hastorerpc_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

const benchWriters = 64

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

// measure runs n calls of put from benchWriters goroutines and returns
// their rate and 99th-percentile latency.
func measure(n int, put func(i int) error) (perSecond float64, p99 time.Duration, err error) {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, n)
		wg    sync.WaitGroup
		first atomic.Value
	)
	start := time.Now()
	for range benchWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					break
				}
				t0 := time.Now()
				if err := put(i); err != nil {
					first.CompareAndSwap(nil, err)
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
	if err, _ := first.Load().(error); err != nil {
		return 0, 0, err
	}
	slices.Sort(lat)
	return float64(n) / time.Since(start).Seconds(), lat[len(lat)*99/100], nil
}

// BenchmarkRemotePlanPut compares fenced plan puts through the remote
// Store over h2c with raw etcd puts of the same bytes on the same member.
func BenchmarkRemotePlanPut(b *testing.B) {
	srv := &server{dir: b.TempDir(), addr: "127.0.0.1:0"}
	srv.start(b)
	defer srv.stop()
	ctx := context.Background()
	store := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: newHTTPClient(b, h2c), BaseURL: srv.url(), Logger: quietLogger()})
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close(ctx)
	l, err := sess.Campaign(ctx, hastore.ElectionJobManager, "")
	if err != nil {
		b.Fatal(err)
	}
	raw := srv.store.Client()
	data, _ := proto.Marshal(benchPlan("j"))
	plans := make([]*jobplanev1.ExecutionPlan, b.N)
	for i := range plans {
		plans[i] = benchPlan(fmt.Sprintf("j%d", i))
	}
	b.ResetTimer()
	rawRate, rawP99, err := measure(b.N, func(i int) error {
		_, err := raw.Put(ctx, fmt.Sprintf("/raw/plans/j%d", i), string(data))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	rate, p99, err := measure(b.N, func(i int) error {
		return store.PutExecutionPlan(ctx, l.Fence(), plans[i])
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rawRate, "raw-acks/s")
	b.ReportMetric(float64(rawP99.Microseconds())/1000, "raw-p99-ms")
	b.ReportMetric(rate, "remote-acks/s")
	b.ReportMetric(float64(p99.Microseconds())/1000, "remote-p99-ms")
	b.ReportMetric(rate/rawRate, "ratio")
}
