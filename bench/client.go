package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// Protocol is the HTTP version a bench client speaks.
type Protocol int

// The protocols clients use.
const (
	// H2C is HTTP/2 without TLS, with prior knowledge: all of a client's
	// calls share one connection.
	H2C Protocol = iota
	// HTTP1 is HTTP/1.1: one connection per call in flight.
	HTTP1
)

func (p Protocol) String() string {
	if p == HTTP1 {
		return "HTTP/1.1"
	}
	return "h2c"
}

// NewHTTPClient returns an HTTP client for p. An HTTP/1.1 client keeps
// enough idle connections for 64 concurrent callers, so that the run
// measures calls rather than connection setup.
func NewHTTPClient(p Protocol) *http.Client {
	var protos http.Protocols
	if p == HTTP1 {
		protos.SetHTTP1(true)
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: &protos, MaxIdleConnsPerHost: 256}}
}

// NewDispatcher returns a DispatcherService client of the server at url
// over p.
func NewDispatcher(url string, p Protocol) jobplanev1connect.DispatcherServiceClient {
	return jobplanev1connect.NewDispatcherServiceClient(NewHTTPClient(p), url)
}

// OneTaskGraph is a job of one vertex of parallelism 1 that runs
// invokable.
func OneTaskGraph(invokable string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name:     "bench",
		Vertices: []*jobplanev1.JobVertex{{Id: "a", Invokable: invokable, Parallelism: 1}},
	}
}

// AllToAllGraph is a job of two vertices of parallelism p each, joined
// ALL_TO_ALL by a PIPELINED edge: one pipelined region of 2p subtasks.
func AllToAllGraph(invokable string, p int32) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name: "bench-all-to-all",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "a", Invokable: invokable, Parallelism: p},
			{Id: "b", Invokable: invokable, Parallelism: p},
		},
		Edges: []*jobplanev1.JobEdge{{
			SourceVertexId: "a", TargetVertexId: "b",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED,
		}},
	}
}

// callTimeout bounds every single call of the bench.
const callTimeout = 10 * time.Second

// Load is the outcome of a timed run of concurrent submissions.
type Load struct {
	// Acks counts submissions acknowledged before the run's end.
	Acks int
	// Errors counts failed submissions; FirstErr is one of them.
	Errors   int
	FirstErr error
	// Duration is the run's length.
	Duration time.Duration
	// Latencies of the acknowledged submissions (all of them, also those
	// that finished after the end).
	Latencies []time.Duration
	// AckOffsets are the acknowledgements' times since the run's start.
	AckOffsets []time.Duration
}

// Rate returns acknowledgements per second.
func (l Load) Rate() float64 { return float64(l.Acks) / l.Duration.Seconds() }

// Windows returns the acks per second in consecutive windows of length w.
func (l Load) Windows(w time.Duration) []float64 {
	n := int(l.Duration / w)
	counts := make([]float64, n)
	for _, off := range l.AckOffsets {
		if i := int(off / w); i < n {
			counts[i]++
		}
	}
	for i := range counts {
		counts[i] /= w.Seconds()
	}
	return counts
}

// SubmitLoad submits one-task jobs of graph from clients goroutines for
// d, each a fresh job id starting with prefix, each client sending its
// next submission as soon as the last was answered. Calls in flight at
// the end are waited for (at most callTimeout) but counted only in the
// latencies.
func SubmitLoad(ctx context.Context, c jobplanev1connect.DispatcherServiceClient, clients int, d time.Duration, prefix string, graph *jobplanev1.JobGraph) Load {
	var (
		mu  sync.Mutex
		out = Load{Duration: d}
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range clients {
		wg.Go(func() {
			var lat, offs []time.Duration
			var errs int
			var first error
			for seq := 0; time.Now().Before(end) && ctx.Err() == nil; seq++ {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				_, err := c.SubmitJob(cctx, &jobplanev1.SubmitJobRequest{JobId: fmt.Sprintf("%s-%d-%d", prefix, w, seq), JobGraph: graph})
				t1 := time.Now()
				cancel()
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				lat = append(lat, t1.Sub(t0))
				if t1.Before(end) {
					offs = append(offs, t1.Sub(start))
				}
			}
			mu.Lock()
			out.Latencies = append(out.Latencies, lat...)
			out.AckOffsets = append(out.AckOffsets, offs...)
			out.Errors += errs
			if out.FirstErr == nil {
				out.FirstErr = first
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	out.Acks = len(out.AckOffsets)
	return out
}

// SubmitCount submits the one-task jobs prefix-from … prefix-(to-1) of
// graph from clients goroutines, each sending its next submission as soon
// as the last was answered, and returns when every one was answered or
// ctx is done. Load.Duration is the time it took; Latencies and
// AckOffsets are left empty.
func SubmitCount(ctx context.Context, c jobplanev1connect.DispatcherServiceClient, clients, from, to int, prefix string, graph *jobplanev1.JobGraph) Load {
	var (
		mu   sync.Mutex
		out  Load
		next = from
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= to {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				_, err := c.SubmitJob(cctx, &jobplanev1.SubmitJobRequest{JobId: fmt.Sprintf("%s-%07d", prefix, i), JobGraph: graph})
				cancel()
				mu.Lock()
				if err == nil {
					out.Acks++
				} else {
					out.Errors++
					if out.FirstErr == nil {
						out.FirstErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out.Duration = time.Since(start)
	return out
}
