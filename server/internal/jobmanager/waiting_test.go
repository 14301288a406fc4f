package jobmanager_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

// A job waiting for slots costs no goroutine: with hundreds of jobs
// waiting (no TaskExecutor at all), the process has about as many
// goroutines as with none. Each job's JobMaster runs only while something
// happens to it.
func TestWaitingJobsKeepNoGoroutine(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The process settles before the count.
	settled := func() int {
		n := runtime.NumGoroutine()
		for range 50 {
			time.Sleep(20 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				return m
			}
			n = m
		}
		return n
	}
	before := settled()
	const jobs = 300
	g := &jobplanev1.JobGraph{Name: "waits", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	for i := range jobs {
		submit(t, c, fmt.Sprintf("wait-%d", i), g)
	}
	for {
		resp, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetRunningJobCount() >= jobs {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d jobs running (waiting for slots)", resp.GetRunningJobCount(), jobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after := settled(); after-before > jobs/10 {
		t.Errorf("%d goroutines with %d jobs waiting for slots, %d before: want about as many (no goroutine per job)", after, jobs, before)
	}
}
