package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// committed is a store on its own client whose transactions are counted,
// with a leader to write as.
type committed struct {
	store  *etcdstore.Store
	txns   *txnCounter
	leader *hastore.Leadership
}

func newCommitted(t *testing.T, e *embedded, cfg etcdstore.Config) *committed {
	t.Helper()
	cfg.Client = e.client(t)
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	txns := countTxns(cfg.Client)
	s, err := etcdstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	return &committed{store: s, txns: txns, leader: l}
}

// lineUp sends first, holds its transaction in flight, and starts each
// of writes in turn once the one before it waits in the committer's
// queue. It returns a function that releases the held transaction and
// then returns first's error, the writes' errors, and the Then sizes of
// the transactions sent from the hold on.
func (c *committed) lineUp(t *testing.T, first func() error, writes ...func() error) (finish func() (firstErr error, errs []error, sizes []int)) {
	t.Helper()
	before, _ := c.txns.snapshot()
	h := c.txns.hold()
	firstDone := make(chan error, 1)
	go func() { firstDone <- first() }()
	select {
	case <-h.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the first write never reached etcd")
	}
	done := make([]chan error, len(writes))
	for i, w := range writes {
		done[i] = make(chan error, 1)
		go func() { done[i] <- w() }()
		awaitQueued(t, c.store, i+1)
	}
	return func() (error, []error, []int) {
		t.Helper()
		close(h.release)
		firstErr := <-firstDone
		errs := make([]error, len(writes))
		for i := range done {
			errs[i] = <-done[i]
		}
		after, _ := c.txns.snapshot()
		return firstErr, errs, after[len(before):]
	}
}

// awaitQueued waits until n writes wait in the store's committer.
func awaitQueued(t *testing.T, s *etcdstore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for etcdstore.QueuedWrites(s) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queued writes = %d, want %d", etcdstore.QueuedWrites(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitSent waits until n transactions have been sent and returns their
// Then sizes.
func awaitSent(t *testing.T, txns *txnCounter, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sizes, _ := txns.snapshot()
		if len(sizes) >= n {
			return sizes
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions sent = %d, want %d", len(sizes), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func bigPlan(jobID string, bytes int) *hastorev1.ExecutionPlan {
	p := testPlan(jobID)
	p.JobGraph.Name = string(make([]byte, bytes))
	return p
}

// Writes that queue while a transaction is in flight go out together, as
// one transaction, and each is applied.
func TestGroupCommitBatchesConcurrentWrites(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	const n = 40
	writes := make([]func() error, n)
	for i := range writes {
		writes[i] = func() error { return c.store.PutExecutionPlan(ctx, f, testPlan(fmt.Sprintf("j%d", i))) }
	}
	firstErr, errs, sizes := c.lineUp(t, func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("first")) }, writes...)()
	if err := errors.Join(append(errs, firstErr)...); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 2 || sizes[1] != n {
		t.Errorf("transactions sent (Then sizes) = %v, want [1 %d]: the first alone, then all queued writes in one", sizes, n)
	}
	ids, err := c.store.ListExecutionPlans(ctx, "", 0)
	if err != nil || len(ids) != n+1 {
		t.Errorf("plans after the batch: %d (%v), want %d", len(ids), err, n+1)
	}
}

// Each write of one batch gets its own answer: a stale fence, a result
// that exists and successes side by side, and the refused writes change
// nothing.
func TestGroupCommitMixedOutcomes(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	stale := hastore.Fence{Election: f.Election, Token: election.Token{SessionID: f.Token.SessionID, Epoch: f.Token.Epoch + 1000}}
	result := func(id string) *jobplanev1.JobResult {
		return &jobplanev1.JobResult{JobId: id, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.store.CreateDirtyJobResult(ctx, f, result("done")))
	must(c.store.CreateDirtyJobResult(ctx, f, result("dirty")))
	must(c.store.CreateDirtyJobResult(ctx, f, result("clean")))
	must(c.store.CreateDirtyJobResult(ctx, f, result("repeated")))
	must(c.store.PutExecutionPlan(ctx, f, testPlan("kept")))
	must(c.store.PutExecutionPlan(ctx, f, testPlan("same")))
	must(c.store.PutExecutionPlan(ctx, f, testPlan("unfinished")))
	other := testPlan("kept")
	other.JobGraph.Name = "another"
	failed := result("done")
	failed.Status = jobplanev1.JobStatus_JOB_STATUS_FAILED

	cases := []struct {
		name  string
		write func() error
		want  error
	}{
		{"plan under a stale fence", func() error { return c.store.PutExecutionPlan(ctx, stale, testPlan("stale")) }, hastore.ErrStaleToken},
		{"another result of a job with one", func() error { return c.store.CreateDirtyJobResult(ctx, f, failed) }, hastore.ErrResultExists},
		{"the same result again", func() error { return c.store.CreateDirtyJobResult(ctx, f, result("repeated")) }, nil},
		{"another plan of a job with one", func() error { return c.store.PutExecutionPlan(ctx, f, other) }, hastore.ErrPlanExists},
		{"the same plan again", func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("same")) }, nil},
		{"plan delete without a result", func() error { return c.store.DeleteExecutionPlan(ctx, f, "unfinished") }, hastore.ErrResultNotFound},
		{"plan of a job with a result", func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("done")) }, hastore.ErrResultExists},
		{"delete of a dirty result", func() error { return c.store.DeleteJobResultEntry(ctx, f, "dirty") }, hastore.ErrResultDirty},
		{"confirm under a stale fence", func() error { return c.store.ConfirmLeadership(ctx, stale, "http://stale") }, hastore.ErrStaleToken},
		{"plan", func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("fresh")) }, nil},
		{"new result", func() error { return c.store.CreateDirtyJobResult(ctx, f, result("new")) }, nil},
		{"clean mark", func() error { return c.store.MarkJobResultClean(ctx, f, "clean") }, nil},
	}
	writes := make([]func() error, len(cases))
	for i, tc := range cases {
		writes[i] = tc.write
	}
	firstErr, errs, sizes := c.lineUp(t, func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("first")) }, writes...)()
	must(firstErr)
	for i, tc := range cases {
		if !errors.Is(errs[i], tc.want) || (tc.want == nil) != (errs[i] == nil) {
			t.Errorf("%s: err = %v, want %v", tc.name, errs[i], tc.want)
		}
	}
	if len(sizes) != 2 || sizes[1] != len(cases) {
		t.Errorf("transactions sent (Then sizes) = %v, want [1 %d]", sizes, len(cases))
	}
	if _, err := c.store.GetExecutionPlan(ctx, "stale"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan written under a stale fence: err = %v", err)
	}
	if _, err := c.store.GetExecutionPlan(ctx, "done"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan of a job with a result was written: err = %v", err)
	}
	if p, err := c.store.GetExecutionPlan(ctx, "kept"); err != nil || p.GetJobGraph().GetName() == "another" {
		t.Errorf("plan kept = %v, %v; want the first one", p, err)
	}
	if _, err := c.store.GetExecutionPlan(ctx, "unfinished"); err != nil {
		t.Errorf("plan of a job without a result was deleted: err = %v", err)
	}
	for id, want := range map[string]hastorev1.JobResultState{
		"dirty":    hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY,
		"done":     hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY,
		"repeated": hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY,
		"clean":    hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN,
		"new":      hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY,
	} {
		if e, err := c.store.GetJobResultEntry(ctx, id); err != nil || e.GetState() != want {
			t.Errorf("entry %s = %v, %v; want %v", id, e, err, want)
		}
	}
	if info, err := c.store.Leader(ctx, election.JobManager); err != nil || info.Address != "" {
		t.Errorf("leader after a stale confirm = %+v, %v", info, err)
	}
}

// Writes to one key never share a transaction (etcd refuses that), and
// apply in the order they were queued; writes to other keys still share.
func TestGroupCommitSameKeyInOrder(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	put := func(id string) func() error {
		return func() error { return c.store.PutExecutionPlan(ctx, f, testPlan(id)) }
	}
	confirm := func(address string) func() error {
		return func() error { return c.store.ConfirmLeadership(ctx, f, address) }
	}
	firstErr, errs, sizes := c.lineUp(t, put("other"),
		put("x"), confirm("http://one"), put("y"), confirm("http://two"), put("z"), confirm("http://three"))()
	if err := errors.Join(append(errs, firstErr)...); err != nil {
		t.Fatal(err)
	}
	// [x one y z] [two] [three]: each confirmation writes the leader key.
	if want := "[1 4 1 1]"; fmt.Sprint(sizes) != want {
		t.Errorf("transactions sent (Then sizes) = %v, want %s", sizes, want)
	}
	if _, refused := c.txns.snapshot(); refused != 0 {
		t.Errorf("%d transactions refused", refused)
	}
	if info, err := c.store.Leader(ctx, election.JobManager); err != nil || info.Address != "http://three" {
		t.Errorf("leader = %+v, %v; want the address confirmed last", info, err)
	}
}

// A batch stays within the member's limits: at most MaxTxnOps ops on any
// level, and MaxRequestBytes in all. etcd refuses no transaction, and
// every write is applied.
func TestGroupCommitSplitsAtLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		member    etcdmember.Config
		planBytes int
		writes    int
		minTxns   int
	}{
		// A fenced plan put is three levels deep: 13 fit in 16 ops.
		{"max txn ops", etcdmember.Config{MaxTxnOps: 16}, 0, 30, 3},
		// Two plans fit in 512 KiB, less the margin, three don't.
		{"max request bytes", etcdmember.Config{MaxRequestBytes: 512 << 10}, 150 << 10, 8, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCommitted(t, startEmbedded(t, tc.member), etcdstore.Config{
				MaxTxnOps: int(tc.member.MaxTxnOps), MaxRequestBytes: int(tc.member.MaxRequestBytes),
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f := c.leader.Fence()
			writes := make([]func() error, tc.writes)
			for i := range writes {
				writes[i] = func() error {
					return c.store.PutExecutionPlan(ctx, f, bigPlan(fmt.Sprintf("j%d", i), tc.planBytes))
				}
			}
			firstErr, errs, sizes := c.lineUp(t, func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("first")) }, writes...)()
			if err := errors.Join(append(errs, firstErr)...); err != nil {
				t.Fatal(err)
			}
			if _, refused := c.txns.snapshot(); refused != 0 {
				t.Errorf("etcd refused %d transactions; sent (Then sizes) %v", refused, sizes)
			}
			sum := 0
			for _, n := range sizes[1:] {
				sum += n
			}
			if sum != tc.writes || len(sizes)-1 < tc.minTxns {
				t.Errorf("transactions sent after the first (Then sizes) = %v: want %d writes in at least %d", sizes[1:], tc.writes, tc.minTxns)
			}
		})
	}
}

// A caller that gives up gets its context's error at once, without
// cancelling the others' writes in its batch; a write given up before it
// was sent is never sent.
func TestGroupCommitCancelOneWaiter(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	put := func(ctx context.Context, id string) func() error {
		return func() error { return c.store.PutExecutionPlan(ctx, f, testPlan(id)) }
	}
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	qctx, qcancel := context.WithCancel(ctx)
	defer qcancel()
	finish := c.lineUp(t, put(ctx, "first"), put(actx, "a"), put(ctx, "b"))
	// Hold the batch of a and b too, once the first is released.
	second := c.txns.hold()
	errs := make(chan error, 1)
	go func() {
		firstErr, errs2, _ := finish()
		errs <- errors.Join(firstErr, errs2[1])
		if !errors.Is(errs2[0], context.Canceled) {
			t.Errorf("a: err = %v, want context.Canceled", errs2[0])
		}
	}()
	<-second.waiting // a and b are in flight
	qerr := make(chan error, 1)
	go func() { qerr <- put(qctx, "queued")() }()
	awaitQueued(t, c.store, 1)
	acancel()
	qcancel()
	if err := <-qerr; !errors.Is(err, context.Canceled) {
		t.Errorf("queued write: err = %v, want context.Canceled", err)
	}
	close(second.release)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.GetExecutionPlan(ctx, "b"); err != nil {
		t.Errorf("b, batched with a cancelled write: %v", err)
	}
	if _, err := c.store.GetExecutionPlan(ctx, "queued"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("a write given up before it was sent was written: err = %v", err)
	}
}

// Close fails the write in flight and the writes queued with
// ErrUnavailable, and later writes too; the committer's goroutine is gone
// once Close returns (TestMain checks for leaks).
func TestGroupCommitClose(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	put := func(id string) func() error {
		return func() error { return c.store.PutExecutionPlan(ctx, f, testPlan(id)) }
	}
	finish := c.lineUp(t, put("first"), put("a"), put("b"))
	if err := c.store.Close(); err != nil {
		t.Fatal(err)
	}
	firstErr, errs, _ := finish()
	for i, err := range append([]error{firstErr}, errs...) {
		if !errors.Is(err, hastore.ErrUnavailable) {
			t.Errorf("write %d: err = %v, want ErrUnavailable", i, err)
		}
	}
	if err := put("after")(); !errors.Is(err, hastore.ErrUnavailable) {
		t.Errorf("write after Close: err = %v, want ErrUnavailable", err)
	}
}

// Candidacies of one election never share a transaction, which would give
// them one create revision and so one epoch; candidacies of different
// elections do.
func TestGroupCommitCandidacies(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, y := election.Job("x"), election.Job("y")
	elections := []string{x, x, y}
	sessions := make([]hastore.Session, len(elections))
	for i := range sessions {
		sess, err := c.store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close(context.Background()) })
		sessions[i] = sess
	}
	before, _ := c.txns.snapshot()
	h := c.txns.hold()
	firstErr := make(chan error, 1)
	go func() { firstErr <- c.store.PutExecutionPlan(ctx, c.leader.Fence(), testPlan("first")) }()
	<-h.waiting
	type grant struct {
		l   *hastore.Leadership
		err error
	}
	granted := make([]chan grant, len(elections))
	for i, election := range elections {
		granted[i] = make(chan grant, 1)
		go func() {
			l, err := sessions[i].Campaign(ctx, election, fmt.Sprintf("http://%d", i))
			granted[i] <- grant{l, err}
		}()
		awaitQueued(t, c.store, i+1)
	}
	close(h.release)
	if err := <-firstErr; err != nil {
		t.Fatal(err)
	}
	leaders := make([]*hastore.Leadership, len(elections))
	for _, i := range []int{0, 2} {
		g := <-granted[i]
		if g.err != nil {
			t.Fatalf("campaign %d: %v", i, g.err)
		}
		leaders[i] = g.l
	}
	// The second candidacy of x waits for the first batch and is sent
	// after it; its campaign goes on waiting, so wait for its transaction.
	after := awaitSent(t, c.txns, len(before)+3)
	// A candidacy sent alone is its own transaction, whose Then holds its
	// put and its read of the election's oldest key.
	if got, want := fmt.Sprint(after[len(before):]), "[1 2 2]"; got != want {
		t.Errorf("transactions sent (Then sizes) = %s, want %s: the first, the candidacies of x and y, the second of x (alone: put and read)", got, want)
	}
	if info, err := c.store.Leader(ctx, x); err != nil || info.Token != leaders[0].Token() {
		t.Errorf("leader of x = %+v, %v; want the first candidacy %v", info, err, leaders[0].Token())
	}
	if err := leaders[0].Resign(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-granted[1]
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.l.Token().Epoch <= leaders[0].Token().Epoch {
		t.Errorf("epoch of the second leader of x = %d, want above the first's %d", g.l.Token().Epoch, leaders[0].Token().Epoch)
	}
}

// A candidacy whose lease is gone makes etcd refuse the whole transaction
// it shares; the committer sends it again in halves, so the other writes
// still apply and the campaign fails as it would alone.
func TestGroupCommitLeaseGoneInBatch(t *testing.T) {
	t.Parallel()
	e := startEmbedded(t, etcdmember.Config{})
	c := newCommitted(t, e, etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := c.store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var lease int64
	if _, err := fmt.Sscanf(sess.ID(), "%x", &lease); err != nil {
		t.Fatal(err)
	}
	// Behind the session's back: it learns of it only at its next renewal.
	if _, err := e.client(t).Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	f := c.leader.Fence()
	firstErr, errs, sizes := c.lineUp(t, func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("first")) },
		func() error {
			_, err := sess.Campaign(ctx, election.Job("gone"), "")
			return err
		},
		func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("beside")) })()
	if firstErr != nil || errs[1] != nil {
		t.Fatalf("writes beside the dead candidacy: %v, %v", firstErr, errs[1])
	}
	if !errors.Is(errs[0], hastore.ErrSessionNotFound) {
		t.Errorf("campaign on a revoked lease: err = %v, want ErrSessionNotFound", errs[0])
	}
	// Refused: the batch, and the candidacy resent alone (its own
	// transaction: its put and its read of the election's oldest key).
	if _, refused := c.txns.snapshot(); refused != 2 || fmt.Sprint(sizes) != "[1 2 2 1]" {
		t.Errorf("transactions sent (Then sizes) %v, %d refused; want [1 2 2 1], 2: the batch refused and resent in halves", sizes, refused)
	}
}

// A job's plan deletes remove its checkpoint prefix, and still share a
// batch with writes outside it; a checkpoint write of the same job claims
// the prefix, so it waits for a later batch and sees the job finished.
func TestGroupCommitBatchesCheckpointPrefixDeletes(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	sess, err := c.store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	fences := map[string]hastore.Fence{}
	for _, id := range []string{"a", "b"} {
		if err := c.store.PutExecutionPlan(ctx, f, testPlan(id)); err != nil {
			t.Fatal(err)
		}
		l, err := sess.Campaign(ctx, election.Job(id), "")
		if err != nil {
			t.Fatal(err)
		}
		fences[id] = l.Fence()
	}
	if _, err := c.store.AddCheckpoint(ctx, fences["b"], &hastorev1.CompletedCheckpoint{JobId: "b", CheckpointId: 1}, 1); err != nil {
		t.Fatal(err)
	}
	add := func(jobID string, id uint64) func() error {
		return func() error {
			_, err := c.store.AddCheckpoint(ctx, fences[jobID], &hastorev1.CompletedCheckpoint{JobId: jobID, CheckpointId: id}, 1)
			return err
		}
	}
	firstErr, errs, sizes := c.lineUp(t,
		func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("first")) },
		func() error {
			return c.store.FinishJob(ctx, f, &jobplanev1.JobResult{JobId: "b", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED})
		},
		add("a", 1),
		add("b", 2),
	)()
	if firstErr != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors = %v, %v; want the plan put, FinishJob and a's checkpoint to succeed", firstErr, errs)
	}
	if !errors.Is(errs[2], hastore.ErrJobTerminal) {
		t.Errorf("checkpoint of b queued behind its FinishJob: err = %v, want ErrJobTerminal", errs[2])
	}
	// The first write; the reads of the two checkpoint writes (3 ops
	// each); FinishJob with a's checkpoint; b's checkpoint alone.
	if want := "[1 3 3 2 1]"; fmt.Sprint(sizes) != want {
		t.Errorf("transactions sent (Then sizes) = %v, want %s", sizes, want)
	}
	if cp, last, err := c.store.LatestCheckpoint(ctx, "b"); err != nil || cp != nil || last != 0 {
		t.Errorf("LatestCheckpoint of b after FinishJob = %v, %d, %v; want none", cp, last, err)
	}
	if cp, _, err := c.store.LatestCheckpoint(ctx, "a"); err != nil || cp.GetCheckpointId() != 1 {
		t.Errorf("LatestCheckpoint of a = %v, %v; want checkpoint 1", cp, err)
	}
}

// A cancel request and a FINISHED (or FAILED) result of one job never
// share a batch: each reads the key the other writes (the request is put
// only while the job has no result, the result only while it has no
// request), and in one transaction both would see the state before the
// other and both apply, so the job would end FINISHED after its cancel
// was acknowledged. Queued together, they apply in the order they were
// made: here the request first, and the result is refused.
func TestGroupCommitCancelRequestAndResultApart(t *testing.T) {
	t.Parallel()
	c := newCommitted(t, startEmbedded(t, etcdmember.Config{}), etcdstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := c.leader.Fence()
	for _, id := range []string{"j", "k"} {
		if err := c.store.PutExecutionPlan(ctx, f, testPlan(id)); err != nil {
			t.Fatal(err)
		}
	}
	firstErr, errs, _ := c.lineUp(t,
		func() error { return c.store.PutExecutionPlan(ctx, f, testPlan("other")) },
		func() error { return c.store.RequestCancel(ctx, f, "j", nil) },
		func() error {
			return c.store.CreateDirtyJobResult(ctx, f, &jobplanev1.JobResult{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED})
		},
		func() error {
			return c.store.FinishJob(ctx, f, &jobplanev1.JobResult{JobId: "k", Status: jobplanev1.JobStatus_JOB_STATUS_FAILED})
		},
		func() error { return c.store.RequestCancel(ctx, f, "k", nil) },
	)()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if errs[0] != nil || !errors.Is(errs[1], hastore.ErrCancelRequested) {
		t.Errorf("RequestCancel then CreateDirtyJobResult(FINISHED) queued together: %v, %v; want the request taken and the result refused (ErrCancelRequested)", errs[0], errs[1])
	}
	var terminal *hastore.JobTerminalError
	if errs[2] != nil || !errors.As(errs[3], &terminal) || terminal.Status != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Errorf("FinishJob(FAILED) then RequestCancel queued together: %v, %v; want the result written and the request refused as terminal (FAILED)", errs[2], errs[3])
	}
}
