package resourcemanager

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
)

// countedElections reads a store's elections, counting the reads, and
// fails every read while down is set.
type countedElections struct {
	Elections
	mu    sync.Mutex
	reads int
	down  bool
}

func (c *countedElections) Leader(ctx context.Context, name string) (election.Leader, error) {
	c.mu.Lock()
	c.reads++
	down := c.down
	c.mu.Unlock()
	if down {
		return election.Leader{}, hastore.ErrUnavailable
	}
	return c.Elections.Leader(ctx, name)
}

func (c *countedElections) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

func (c *countedElections) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

// leadingRM starts a ResourceManager leading on a store of its own, whose
// elections it reads through the counter returned; l is its leadership.
func leadingRM(ctx context.Context, t *testing.T) (hastore.Store, *countedElections, *ResourceManager, *hastore.Leadership) {
	t.Helper()
	store, quiet := openStore(ctx, t)
	elections := &countedElections{Elections: store}
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := New(Config{HTTPClient: http.DefaultClient, Logger: quiet, Elections: elections})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rm.Lead(lctx, l) }()
	t.Cleanup(func() { stop(); <-done })
	return store, elections, rm, l
}

// A JobMaster of the same process that shows its leadership
// (hastore.WithLeadership) registers with no store read, even with the
// store down. A leadership of another token, or one that has ended, proves
// nothing: the store is read, as for a call from the network.
func TestRegisterJobMasterTakesALocalLeadership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, elections, rm, _ := leadingRM(ctx, t)
	h := rm.Local()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	register := func(jobID string, shown *hastore.Leadership, tk election.Token) error {
		_, err := h.RegisterJobMaster(hastore.WithLeadership(ctx, shown), &clusterv1.RegisterJobMasterRequest{JobId: jobID, JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: protoToken(tk)})
		return err
	}
	unavailable := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE) {
			t.Errorf("registering %s with the store down: %v; want UNAVAILABLE (STORE_UNAVAILABLE): the store must be read", what, err)
		}
	}
	a, err := sess.Campaign(ctx, election.Job("a"), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sess.Campaign(ctx, election.Job("b"), "")
	if err != nil {
		t.Fatal(err)
	}
	elections.setDown(true)
	if err := register("a", a, a.Token()); err != nil {
		t.Errorf("registering under the leadership shown: %v; want it registered with no read", err)
	}
	if n := elections.count(); n != 0 {
		t.Errorf("%d store reads to register under the leadership shown; want none", n)
	}
	unavailable("job b under job a's leadership", register("b", a, b.Token()))
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	unavailable("under a leadership that has ended", register("b", b, b.Token()))
	elections.setDown(false)
	if err := register("b", b, b.Token()); connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("registering under a leadership that has ended: %v; want ABORTED (the store shows no grant)", err)
	}
}

// RegisterJobMaster takes a JobMaster token it has not registered only if
// it is the current grant of the job's election, read from the store once
// per such registration: an earlier grant and a forged newer epoch are
// stale, and an unreadable store registers nothing. The registered token
// registers again without a read, and calls under it read nothing.
func TestRegisterJobMasterChecksTheGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, elections, rm, l := leadingRM(ctx, t)
	h := rm.Local()

	// grant campaigns in the job's election on a session of its own,
	// ending the previous grant first.
	var granted *hastore.Leadership
	grant := func() election.Token {
		t.Helper()
		if granted != nil {
			if err := granted.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		if granted, err = s.Campaign(ctx, election.Job("j"), ""); err != nil {
			t.Fatal(err)
		}
		return granted.Token()
	}
	register := func(tk election.Token) error {
		_, err := h.RegisterJobMaster(ctx, &clusterv1.RegisterJobMasterRequest{JobId: "j", JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: protoToken(tk)})
		return err
	}
	registered := func() election.Token {
		rm.mu.Lock()
		defer rm.mu.Unlock()
		if j := rm.pool.jobs["j"]; j != nil {
			return j.token
		}
		return election.Token{}
	}
	stale := func(what string, err error, current election.Token) {
		t.Helper()
		d, ok := apierror.Detail[*jobplanev1.StaleTokenDetails](err)
		if connect.CodeOf(err) != connect.CodeAborted || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) || !ok ||
			d.GetCurrent().GetEpoch() != current.Epoch || d.GetCurrent().GetSessionId() != current.SessionID {
			t.Errorf("registering %s: %v; want ABORTED (STALE_FENCING_TOKEN) naming the current grant %s", what, err, current)
		}
	}

	first := grant()
	forged := election.Token{SessionID: first.SessionID, Epoch: first.Epoch + 1000}
	stale("a forged epoch above the first grant", register(forged), first)
	if got := registered(); !got.IsZero() {
		t.Errorf("registered %s after the forged token; want nothing", got)
	}
	if err := register(first); err != nil {
		t.Fatalf("registering the current grant: %v", err)
	}
	reads := elections.count()
	for range 3 {
		if err := register(first); err != nil {
			t.Fatalf("registering the registered token again: %v", err)
		}
		_, err := h.DeclareResourceRequirements(ctx, &clusterv1.DeclareResourceRequirementsRequest{JobId: "j", JobMasterToken: protoToken(first), ResourceManagerToken: protoToken(l.Token())})
		if err != nil {
			t.Fatalf("declaring under the registered token: %v", err)
		}
	}
	if n := elections.count() - reads; n != 0 {
		t.Errorf("%d store reads for calls under the registered token; want none", n)
	}

	second := grant()
	stale("a forged epoch above the second grant", register(election.Token{SessionID: "forged", Epoch: second.Epoch + 1}), second)
	if got := registered(); got != first {
		t.Errorf("registered %s after the forged token; want the first grant %s still", got, first)
	}
	elections.setDown(true)
	if err := register(second); connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE) {
		t.Errorf("registering the second grant with the store down: %v; want UNAVAILABLE (STORE_UNAVAILABLE)", err)
	}
	if got := registered(); got != first {
		t.Errorf("registered %s with the store down; want the first grant %s still", got, first)
	}
	elections.setDown(false)
	reads = elections.count()
	if err := register(second); err != nil {
		t.Fatalf("registering the second grant: %v", err)
	}
	if n := elections.count() - reads; n != 1 {
		t.Errorf("%d store reads to register a new grant; want 1", n)
	}
	if got := registered(); got != second {
		t.Errorf("registered %s; want the second grant %s", got, second)
	}

	// An earlier grant is stale with or without a registration: once the
	// registration is gone, the store says so.
	stale("the first grant", register(first), second)
	if _, err := h.DisconnectJobMaster(ctx, &clusterv1.DisconnectJobMasterRequest{JobId: "j", JobMasterToken: protoToken(second), ResourceManagerToken: protoToken(l.Token())}); err != nil {
		t.Fatal(err)
	}
	stale("the first grant after the second disconnected", register(first), second)
	if got := registered(); !got.IsZero() {
		t.Errorf("registered %s; want nothing", got)
	}
}
