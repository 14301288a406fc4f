package storetest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Rate is the outcome of a measured run of concurrent writes.
type Rate struct {
	// PerSecond is the number of acknowledged writes per second.
	PerSecond float64
	// P99 is the 99th-percentile latency of one write.
	P99 time.Duration
}

// Measure runs n calls of write (with indexes 0 to n-1) from the given
// number of concurrent writers, and returns their rate and latency, or the
// first error.
func Measure(n, writers int, write func(i int) error) (Rate, error) {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, n)
		wg    sync.WaitGroup
		first atomic.Value
	)
	start := time.Now()
	for range writers {
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
				if err := write(i); err != nil {
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
	elapsed := time.Since(start)
	if err, _ := first.Load().(error); err != nil {
		return Rate{}, err
	}
	slices.Sort(lat)
	return Rate{PerSecond: float64(n) / elapsed.Seconds(), P99: lat[len(lat)*99/100]}, nil
}

// BenchPlan is a plan of a typical size for measurements: ten vertices
// with some configuration.
func BenchPlan(jobID string) *hastorev1.ExecutionPlan {
	g := &jobplanev1.JobGraph{Name: "bench"}
	for i := range 10 {
		g.Vertices = append(g.Vertices, &jobplanev1.JobVertex{
			Id: fmt.Sprintf("v%d", i), Invokable: "noop", Parallelism: 4,
			Config: map[string]string{"key": "value", "path": "/some/where/else"},
		})
	}
	return &hastorev1.ExecutionPlan{JobId: jobID, JobGraph: g, Digest: make([]byte, 32)}
}
