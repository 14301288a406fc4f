package sdk_test

import (
	"context"
	"slices"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/internal/servertest"
)

// An answer lost after the server acted: Submit retries with the same id
// and the server recognizes the job, so exactly one job exists.
func TestSubmitRetriesALostAnswerWithoutASecondJob(t *testing.T) {
	url := startStandalone(t)
	p := newProxy(t, url)
	c := newClient(t, []string{p.URL()}, sdk.WithHTTP1())
	ctx := testContext(t, 60*time.Second)

	p.mu.Lock()
	p.dropFirstAnswer = true
	p.mu.Unlock()
	s, err := c.Submit(ctx, sleepGraph("lost-answer", 1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	dropped := p.dropped
	p.mu.Unlock()
	if dropped != 1 || s.Created {
		t.Fatalf("dropped %d answers, Submit = %+v; want one answer lost, and the retry to find the job the first attempt created", dropped, s)
	}
	direct := newClient(t, []string{url})
	if n := countJobs(t, ctx, direct); n != 1 {
		t.Fatalf("%d jobs on the server, want 1", n)
	}
	if res, err := c.Wait(ctx, s.JobID); err != nil || res.GetStatus() != finished {
		t.Fatalf("Wait = %v, %v", res, err)
	}
}

// A watch whose connection is cut resumes where it left off: it sees the
// same changes as a watch that was never cut, none repeated.
func TestWatchResumesAcrossDroppedConnections(t *testing.T) {
	url := startStandalone(t)
	p := newProxy(t, url)
	c := newClient(t, []string{p.URL()})
	direct := newClient(t, []string{url})
	ctx := testContext(t, 60*time.Second)

	g := &jobplanev1.JobGraph{Name: "cut", Vertices: []*jobplanev1.JobVertex{{
		Id: "flaky", Invokable: "fail", Parallelism: 1, Config: map[string]string{"delay": "300ms"},
	}}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 2},
	}}}}
	s, err := direct.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	want := make(chan []jobplanev1.JobStatus, 1)
	go func() { want <- statuses(ctx, direct, s.JobID) }()

	var got []jobplanev1.JobStatus
	for sum, err := range c.Watch(ctx, s.JobID) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sum.GetStatus())
		p.cut() // every connection cut after every message
	}
	w := <-want
	if !slices.Equal(got, w) || got[len(got)-1] != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("watch through cuts saw %v, an uncut watch %v; want the same, ending FAILED", got, w)
	}
}

// Two JobManagers on one HA store; the leader is SIGKILLed while a job
// runs and a client submits: the client follows the new leader, its
// submission creates one job, and its watch of the running job reaches
// the end.
func TestClientFollowsTheLeaderAcrossSIGKILL(t *testing.T) {
	dir := t.TempDir()
	storeURL := servertest.SpawnT(t, dir, "hastore", "--data-dir", dir+"/store").URL
	jmArgs := []string{"jobmanager", "--hastore", storeURL, "--session-ttl", "3s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "1900ms"}
	procs := map[string]*servertest.Process{}
	var urls []string
	for range 2 {
		p := servertest.SpawnT(t, dir, jmArgs...)
		procs[p.URL] = p
		urls = append(urls, p.URL)
	}
	servertest.SpawnT(t, dir, "taskexecutor", "--hastore", storeURL, "--slots", "4")
	for _, u := range urls {
		if err := waitLeaderKnown(u); err != nil {
			t.Fatal(err)
		}
	}

	c := newClient(t, urls, sdk.WithCallTimeout(3*time.Second))
	ctx := testContext(t, 90*time.Second)
	if err := waitReady(urls[0], 1); err != nil {
		t.Fatal(err)
	}
	o, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := o.GetLeader().GetAddress()
	if procs[leader] == nil || c.Leader() != leader {
		t.Fatalf("leader %q (client: %q), want one of %v", leader, c.Leader(), urls)
	}
	running, err := c.Submit(ctx, sleepGraph("across", 2, 3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan []jobplanev1.JobStatus, 1)
	watchErr := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		var seen []jobplanev1.JobStatus
		for sum, err := range c.Watch(ctx, running.JobID) {
			if err != nil {
				watchErr <- err
				return
			}
			if len(seen) == 0 {
				close(started)
			}
			seen = append(seen, sum.GetStatus())
		}
		watched <- seen
	}()
	<-started

	procs[leader].Kill()
	killed := time.Now()
	s, err := c.Submit(ctx, sleepGraph("after-kill", 1, 10*time.Millisecond), sdk.WithJobID("after-kill"))
	if err != nil {
		t.Fatalf("Submit across the leader's death: %v", err)
	}
	t.Logf("Submit answered %v after the kill, by %s", time.Since(killed).Round(time.Millisecond), c.Leader())
	if c.Leader() == leader {
		t.Fatalf("the dead leader %s answered", leader)
	}
	if res, err := c.Wait(ctx, s.JobID); err != nil || res.GetStatus() != finished {
		t.Fatalf("Wait(after-kill) = %v, %v", res, err)
	}
	select {
	case err := <-watchErr:
		t.Fatalf("watch across the leader change: %v", err)
	case seen := <-watched:
		if seen[len(seen)-1] != finished {
			t.Fatalf("watch saw %v, want it to end FINISHED", seen)
		}
	}
	if n := countJobs(t, ctx, c); n != 2 {
		t.Fatalf("%d jobs after the failover, want 2", n)
	}
}

// waitLeaderKnown waits until the jobmanager at url answers: as leader,
// or as a standby that names one.
func waitLeaderKnown(url string) error {
	c, err := sdk.New([]string{url}, sdk.WithCallTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Cluster(ctx)
	return err
}

func countJobs(t *testing.T, ctx context.Context, c *sdk.Client) int {
	t.Helper()
	n := 0
	for _, err := range c.List(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func statuses(ctx context.Context, c *sdk.Client, jobID string) []jobplanev1.JobStatus {
	var out []jobplanev1.JobStatus
	for sum, err := range c.Watch(ctx, jobID) {
		if err != nil {
			return append(out, jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED)
		}
		out = append(out, sum.GetStatus())
	}
	return out
}
