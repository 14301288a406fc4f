package resourcemanager

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// The jobs of allocations a TaskExecutor shows that the ResourceManager
// did not know of, in its registration or in a heartbeat's slot report,
// go to Config.OnHeld (a new leader's Dispatcher launches them at once,
// for their tasks to be adopted); allocations it knows do not.
func TestOnHeldNamesTheJobsOfLearntAllocations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, quiet := openStore(ctx, t)
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan []string, 4)
	rm, err := New(Config{HTTPClient: http.DefaultClient, HeartbeatInterval: time.Second, HeartbeatTimeout: 10 * time.Second,
		Logger: quiet, Elections: store, OnHeld: func(ids []string) { held <- ids }})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rm.Lead(lctx, l) }()
	defer func() { stop(); <-done }()

	token := &jobplanev1.FencingToken{SessionId: l.Token().SessionID, Epoch: l.Token().Epoch}
	report := func(jobs ...string) *clusterv1.SlotReport {
		r := &clusterv1.SlotReport{}
		for i, job := range jobs {
			s := &clusterv1.SlotStatus{SlotIndex: int32(i)}
			if job != "" {
				s.AllocationId, s.JobId = "alloc-"+job, job
			}
			r.Slots = append(r.Slots, s)
		}
		return r
	}
	var reg *clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse
	for {
		reg, err = rm.Local().RegisterTaskExecutor(ctx, &clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest{
			TaskExecutorId: "te-1", Address: "http://127.0.0.1:1", ResourceManagerToken: token, SlotReport: report("a", "", "b"),
		})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("RegisterTaskExecutor: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // until it leads
	}
	next := func(what string) []string {
		t.Helper()
		select {
		case ids := <-held:
			return ids
		case <-ctx.Done():
			t.Fatalf("%s: OnHeld not called", what)
			return nil
		}
	}
	if got := next("registration"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("OnHeld after the registration: %v, want [a b]", got)
	}
	// A heartbeat showing the same allocations and a new one: only the
	// new one's job.
	if _, err := rm.Local().Heartbeat(ctx, &clusterv1.ResourceManagerServiceHeartbeatRequest{
		TaskExecutorId: "te-1", RegistrationId: reg.GetRegistrationId(), ResourceManagerToken: token,
		SlotReport: report("a", "c", "b"), SlotReportVersion: 2,
	}); err != nil {
		t.Fatal(err)
	}
	if got := next("heartbeat"); !slices.Equal(got, []string{"c"}) {
		t.Errorf("OnHeld after the heartbeat: %v, want [c]", got)
	}
	select {
	case ids := <-held:
		t.Errorf("OnHeld called again with %v", ids)
	default:
	}
}
