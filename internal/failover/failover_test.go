package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/internal/chaos"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

// ttl is the jobmanagers' session TTL, the binary's default, on which
// these tests run them; every bound on a failover derives from it.
func ttl(t testing.TB) time.Duration {
	t.Helper()
	d, err := localcluster.DefaultSessionTTL()
	if err != nil {
		t.Fatalf("no session TTL: %v", err)
	}
	return d
}

// within returns a context for one phase of a test: generous beside the
// TTL, for a loaded machine.
func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// phase is the bound of one failover phase: a few TTLs and room for a
// loaded machine.
func phase(t *testing.T) time.Duration { return 3*ttl(t) + 20*time.Second }

// start starts a cluster and an SDK client of it, and runs n jobs of two
// subtasks that sleep for an hour (ids job-0, job-1, ...) until they all
// run at the leader, which it returns.
func start(t *testing.T, cfg localcluster.ProcessClusterConfig, n int) (*localcluster.ProcessCluster, *sdk.Client, *localcluster.JobManagerProcess, []string) {
	return startJobs(t, cfg, n, nil)
}

// restarting gives a job a restart strategy that outlasts any test: its
// tasks, stopped by their TaskExecutors when the JobMaster falls silent,
// run again.
func restarting(g *jobplanev1.JobGraph) {
	g.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 1000, Delay: durationpb.New(100 * time.Millisecond)},
	}}}
}

// startJobs is start with the jobs' graphs changed by edit, if not nil.
func startJobs(t *testing.T, cfg localcluster.ProcessClusterConfig, n int, edit func(*jobplanev1.JobGraph)) (*localcluster.ProcessCluster, *sdk.Client, *localcluster.JobManagerProcess, []string) {
	t.Helper()
	begin := time.Now()
	if _, _, err := localcluster.Binaries(); err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v", time.Since(begin))
	begin = time.Now()
	c := localcluster.NewProcessCluster(t, cfg)
	t.Logf("started in %v", time.Since(begin))
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := within(t, phase(t))
	var ids []string
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		g := sleepJob(id, 2, time.Hour)
		if edit != nil {
			edit(g)
		}
		if _, err := cl.Submit(ctx, g, sdk.WithJobID(id)); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l != c.JobManagers()[0] && !cfg.EmbeddedPeers {
		t.Fatalf("%s leads, want the first jobmanager", l.Name)
	}
	if err := waitRunning(ctx, l, ids...); err != nil {
		t.Fatal(err)
	}
	return c, cl, l, ids
}

// checkAttempts runs the attempt-log check, and returns the attempts.
func checkAttempts(t *testing.T, c *localcluster.ProcessCluster) []chaos.Interval {
	t.Helper()
	ivs, err := chaos.Attempts(c.TaskExecutors())
	if err != nil {
		t.Fatal(err)
	}
	if err := chaos.CheckAttempts(ivs); err != nil {
		t.Error(err)
	}
	return ivs
}

// checkRecovered checks that every job ran again after the instant at,
// only under JobMaster tokens it had not run under before at.
func checkRecovered(t *testing.T, ivs []chaos.Interval, at time.Time, ids []string) {
	t.Helper()
	old := chaos.Epochs(ivs, at)
	again := map[string]bool{}
	for _, iv := range ivs {
		if iv.Start.Before(at) {
			continue
		}
		again[iv.JobID] = true
		if old[iv.JobID][iv.Epoch] {
			t.Errorf("after the failover, an attempt started under an old token: %v", iv)
		}
	}
	for _, id := range ids {
		if len(old[id]) == 0 {
			t.Errorf("job %s ran nothing before the failover", id)
		}
		if !again[id] {
			t.Errorf("job %s was not recovered: no attempt started after the failover", id)
		}
	}
}

// noLease runs jobmanagers without a task lease: the tests that use it
// check the recovery that deploys a job anew under the new leader
// (adoption, the default, has tests of its own: adopt_test.go).
var noLease = []string{"--task-lease", "0"}

// finish cancels the jobs and waits until each is CANCELED, through the
// SDK (which follows the leader): none of them was lost.
func finish(t *testing.T, cl *sdk.Client, ids []string, want jobplanev1.JobStatus) {
	t.Helper()
	ctx := within(t, phase(t))
	begin := time.Now()
	defer func() { t.Logf("%d jobs %v after %v", len(ids), want, time.Since(begin)) }()
	for _, id := range ids {
		if want == jobplanev1.JobStatus_JOB_STATUS_CANCELED {
			if _, err := cl.Cancel(ctx, id); err != nil {
				t.Errorf("cancel %s: %v", id, err)
				continue
			}
		}
		res, err := cl.Wait(ctx, id)
		if err != nil {
			t.Errorf("result of %s: %v", id, err)
			continue
		}
		if res.GetStatus() != want {
			t.Errorf("job %s ended %v, want %v", id, res.GetStatus(), want)
		}
	}
}

// submitter submits short jobs through the SDK, one after the other, until
// stop is closed, and returns the ids of those acknowledged.
func submitter(t *testing.T, cl *sdk.Client, prefix string, stop <-chan struct{}) func() []string {
	t.Helper()
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("%s-%d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := cl.Submit(ctx, sleepJob(id, 1, 100*time.Millisecond), sdk.WithJobID(id))
			cancel()
			if err == nil {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	return func() []string {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return acked
	}
}

// SIGKILL of the leader: a standby leads after the TTL, recovers every
// running job under a new token, and loses no acknowledged job, also of
// those submitted while the leader was dead; on three etcd processes,
// and on the jobmanagers' own embedded members, where the killed process
// takes its member with it.
func TestKillLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  localcluster.ProcessClusterConfig
	}{
		{"3-etcd-members", localcluster.ProcessClusterConfig{JobManagers: 3, JobManagerArgs: noLease}},
		{"3-embedded-peers", localcluster.ProcessClusterConfig{JobManagers: 3, EmbeddedPeers: true, JobManagerArgs: noLease}},
	} {
		t.Run(tc.name, func(t *testing.T) { killLeader(t, tc.cfg) })
	}
}

func killLeader(t *testing.T, cfg localcluster.ProcessClusterConfig) {
	c, cl, l, ids := start(t, cfg, 3)
	if cfg.EmbeddedPeers {
		// The leader keeps etcd's leadership off its own member, so that
		// its death costs no etcd election.
		ctx := within(t, phase(t))
		for {
			el, err := c.EtcdLeader(ctx)
			if err == nil && el != nil && el != l {
				t.Logf("etcd's leader is %s's member; the JobManager leader is %s", el.Name, l.Name)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("etcd's leader is still the JobManager leader %s's member (%v)", l.Name, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	acked := submitter(t, cl, "during", stop)

	killed := time.Now()
	l.Kill()
	ctx := within(t, phase(t))
	next, err := c.WaitLeader(ctx, l)
	if err != nil {
		close(stop)
		acked()
		t.Fatal(err)
	}
	at, err := waitAnyRunning(ctx, next, ids...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL of %s: %s leads; first recovered job RUNNING after %v (session TTL %v)", l.Name, next.Name, at.Sub(killed), ttl(t))
	if err := waitRunning(ctx, next, ids...); err != nil {
		t.Fatal(err)
	}
	close(stop)
	during := acked()
	if len(during) == 0 {
		t.Error("no submission was acknowledged across the failover")
	}

	// Every job is still known to the new leader, and reaches its end.
	for _, id := range append(append([]string(nil), ids...), during...) {
		if _, _, _, err := jobState(ctx, next, id); err != nil {
			t.Errorf("job %s, acknowledged, unknown to the new leader: %v", id, err)
		}
	}
	finish(t, cl, during, jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	checkRecovered(t, checkAttempts(t, c), killed, ids)
}

// SIGTERM of the leader: it hands over at once, well within the TTL.
func TestTermLeader(t *testing.T) {
	c, cl, l, ids := start(t, localcluster.ProcessClusterConfig{JobManagers: 3, JobManagerArgs: noLease}, 2)
	termed := time.Now()
	if err := l.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx := within(t, phase(t))
	next, err := c.WaitLeader(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	handoff := time.Since(termed)
	t.Logf("SIGTERM of %s: %s answers as the leader after %v (session TTL %v)", l.Name, next.Name, handoff, ttl(t))
	if handoff >= ttl(t) {
		t.Errorf("handoff took %v, not within the session TTL %v: the leader did not resign", handoff, ttl(t))
	}
	if err := l.Wait(ctx); err != nil {
		t.Errorf("the old leader did not exit: %v", err)
	}
	if err := waitRunning(ctx, next, ids...); err != nil {
		t.Fatal(err)
	}
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	checkRecovered(t, checkAttempts(t, c), termed, ids)
}

// SIGSTOP of the leader past the TTL, then SIGCONT: the old leader answers
// NOT_LEADER, deploys and writes nothing under its old session, and
// rejoins as a standby that leads again when the new leader dies.
func TestPauseLeader(t *testing.T) {
	c, cl, l, ids := start(t, localcluster.ProcessClusterConfig{JobManagers: 2, JobManagerArgs: noLease}, 2)
	ctx := within(t, 3*phase(t))
	old, err := candidacyOf(ctx, c, l)
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchStore(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	stopped := time.Now()
	if err := l.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next, err := c.WaitLeader(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGSTOP of %s: %s leads after %v", l.Name, next.Name, time.Since(stopped))
	// The TaskExecutors follow at once, not held by calls to the paused
	// leader.
	followed := time.Now()
	if err := c.WaitTaskExecutors(within(t, 5*time.Second), len(c.TaskExecutors())); err != nil {
		t.Fatalf("the TaskExecutors did not register with the new leader: %v", err)
	}
	t.Logf("every TaskExecutor registered with %s after %v", next.Name, time.Since(followed))
	if err := waitRunning(ctx, next, ids...); err != nil {
		t.Fatal(err)
	}

	resumed := time.Now()
	if err := l.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// From its first answer on, it does not lead.
	var addr string
	if err := waitFor(ctx, func(ctx context.Context) error {
		leads, a, err := l.Probe(ctx)
		if leads {
			t.Errorf("%s answered as the leader %v after SIGCONT", l.Name, time.Since(resumed))
			return nil
		}
		addr = a
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if addr != next.URL() {
		t.Errorf("the old leader names %q as the leader, want %q", addr, next.URL())
	}
	// It rejoins: a candidacy of a new session.
	if err := waitFor(ctx, func(ctx context.Context) error {
		cd, err := candidacyOf(ctx, c, l)
		if err == nil && cd.Lease == old.Lease {
			return errors.New("still the old session's candidacy")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if leader, err := c.Leader(ctx); err != nil || leader != next {
		t.Errorf("leader after the old one rejoined: %v, %v; want %s", leader, err, next.Name)
	}

	// Nothing written under the old session after the stop.
	hexLease := fmt.Sprintf("%x", old.Lease)
	for _, ev := range w.Events() {
		if ev.Put && (ev.Lease == old.Lease || strings.HasSuffix(ev.Key, "/"+hexLease)) {
			t.Errorf("written under the paused leader's session after the stop: rev %d %s (lease %x)", ev.Revision, ev.Key, ev.Lease)
		}
	}
	if err := w.Close(); err != nil {
		t.Errorf("store watch: %v", err)
	}
	// Nothing deployed under its JobMasters' tokens after the stop.
	ivs := checkAttempts(t, c)
	checkRecovered(t, ivs, stopped, ids)

	// The rejoined standby leads again once the new leader dies.
	next.Kill()
	again, err := c.WaitLeader(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if again != l {
		t.Fatalf("%s leads, want the rejoined %s", again.Name, l.Name)
	}
	if err := waitRunning(ctx, l, ids...); err != nil {
		t.Fatal(err)
	}
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	checkAttempts(t, c)
}

// One etcd member of three killed: the service goes on. Two: no leader and
// nothing written until one returns; then the jobs recover and nothing is
// lost.
//
// The jobs restart: while etcd elects a new leader, no session is renewed,
// and with short timings (a heartbeat timeout near etcd's own election
// timeout) the TaskExecutors stop the tasks of the JobMasters that could
// not prove their leadership in time.
func TestEtcdMembersDie(t *testing.T) {
	c, cl, _, ids := startJobs(t, localcluster.ProcessClusterConfig{JobManagers: 2, JobManagerArgs: noLease}, 2, restarting)
	ctx := within(t, 3*phase(t))
	order, err := etcdLeaderFirst(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	// One member down (the raft leader): a job submitted now runs and
	// finishes.
	order[0].Kill()
	if _, err := cl.Submit(ctx, sleepJob("one-down", 1, 100*time.Millisecond), sdk.WithJobID("one-down")); err != nil {
		t.Fatalf("submit with one member down: %v", err)
	}
	finish(t, cl, []string{"one-down"}, jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	if l, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	} else if err := waitRunning(ctx, l, ids...); err != nil {
		t.Fatal(err)
	}

	// Two down: no quorum. The leader steps down; nothing is written.
	survivor := order[2]
	lostQuorum := time.Now()
	order[1].Kill()
	if err := waitFor(ctx, func(ctx context.Context) error {
		if jm, err := c.Leader(ctx); err == nil {
			return fmt.Errorf("%s still leads", jm.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("without an etcd quorum, no jobmanager leads after %v (session TTL %v)", time.Since(lostQuorum), ttl(t))
	// By now the survivor has applied all it will ever learn of.
	before, err := memberRevision(ctx, survivor)
	if err != nil {
		t.Fatal(err)
	}
	for _, jm := range c.JobManagers() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := jm.Dispatcher().SubmitJob(sctx, &jobplanev1.SubmitJobRequest{JobId: "no-quorum", JobGraph: sleepJob("no-quorum", 1, time.Millisecond)})
		cancel()
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("submit to %s without a quorum: %v, want UNAVAILABLE", jm.Name, err)
		}
	}
	if after, err := memberRevision(ctx, survivor); err != nil || after != before {
		t.Errorf("the surviving member's revision went from %d to %d (%v) without a quorum", before, after, err)
	}

	// One returns: a leader again, every job recovered, the refused
	// submission left nothing behind, and new jobs run.
	returned := time.Now()
	if err := order[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctx, next, ids...); err != nil {
		t.Fatal(err)
	}
	t.Logf("quorum back: %s leads with every job running after %v", next.Name, time.Since(returned))
	if _, err := cl.Get(ctx, "no-quorum"); sdk.Reason(err) != jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND {
		t.Errorf("the submission refused without a quorum: get = %v, want JOB_NOT_FOUND", err)
	}
	if _, err := cl.Submit(ctx, sleepJob("quorum-back", 1, 100*time.Millisecond), sdk.WithJobID("quorum-back")); err != nil {
		t.Fatalf("submit after the quorum returned: %v", err)
	}
	finish(t, cl, []string{"quorum-back"}, jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	if err := order[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	checkRecovered(t, checkAttempts(t, c), lostQuorum, ids)
}

// A partition between the leader and every etcd member: it steps down
// within the TTL, a standby leads, and no subtask runs under two
// JobMasters.
func TestPartitionLeader(t *testing.T) {
	c, cl, l, ids := start(t, localcluster.ProcessClusterConfig{JobManagers: 2, EtcdProxies: true, JobManagerArgs: noLease}, 2)
	ctx := within(t, 3*phase(t))
	cut := time.Now()
	if err := l.CutEtcd(); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, func(ctx context.Context) error {
		leads, _, err := l.Probe(ctx)
		if err == nil && leads {
			return errors.New("still leads")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	down := time.Since(cut)
	t.Logf("partitioned from etcd, %s stepped down after %v (session TTL %v)", l.Name, down, ttl(t))
	// The session's validity ends a TTL after its last renewal at the
	// latest; a second is room for a loaded machine's scheduling.
	if limit := ttl(t) + time.Second; down > limit {
		t.Errorf("the partitioned leader stepped down after %v, later than %v", down, limit)
	}
	next, err := c.WaitLeader(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctx, next, ids...); err != nil {
		t.Fatal(err)
	}
	if err := l.HealEtcd(); err != nil {
		t.Fatal(err)
	}
	// Healed, it stays a standby.
	if err := waitFor(ctx, func(ctx context.Context) error {
		_, err := candidacyOf(ctx, c, l)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if leader, err := c.Leader(ctx); err != nil || leader != next {
		t.Errorf("leader after healing: %v, %v; want %s", leader, err, next.Name)
	}
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	checkRecovered(t, checkAttempts(t, c), cut, ids)
}

// etcdLeaderFirst returns the etcd members, the raft leader first.
func etcdLeaderFirst(ctx context.Context, c *localcluster.ProcessCluster) ([]*localcluster.EtcdMember, error) {
	var leader, rest []*localcluster.EtcdMember
	for _, m := range c.Etcd() {
		st, err := memberStatus(ctx, m)
		if err != nil {
			return nil, err
		}
		if st.Leader == st.Header.MemberId {
			leader = append(leader, m)
		} else {
			rest = append(rest, m)
		}
	}
	if len(leader) != 1 {
		return nil, fmt.Errorf("%d etcd members say they lead", len(leader))
	}
	return append(leader, rest...), nil
}

func memberStatus(ctx context.Context, m *localcluster.EtcdMember) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return cli.Status(ctx, m.ClientURL())
}

// memberRevision is the store revision a member has applied, as it says
// on its own (no quorum needed).
func memberRevision(ctx context.Context, m *localcluster.EtcdMember) (int64, error) {
	st, err := memberStatus(ctx, m)
	if err != nil {
		return 0, err
	}
	return st.Header.Revision, nil
}
