package runner

import (
	"context"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// leaderProc returns the server instance that leads, and another one.
func (t *T) leaderProc() (leader, other *serverProc) {
	info, err := t.env.leader(t.ctx, election.JobManager)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.env.mu.Lock()
	defer t.env.mu.Unlock()
	for _, p := range t.env.servers {
		if p.url == info.Address {
			leader = p
		} else if !p.exited() {
			other = p
		}
	}
	if leader == nil {
		t.Fatalf("the leader's address %s is none of the started instances'; expected the server to publish the address it was given ({listen})", info.Address)
	}
	return leader, other
}

var recoveryCases = []Case{
	{Name: "recovery/standby-takes-over", Requires: []string{FeatureResourceManager, FeatureFailover, featureRunnerStarts}, Instances: 2,
		Doc: "SIGKILL of the leader: the standby leads, recovers the running job under its id with a new token, and finishes it", Run: func(t *T) {
			t.handoff(t.killLeader)
		}},
	{Name: "recovery/graceful-handoff", Requires: []string{FeatureResourceManager, FeatureFailover, featureRunnerStarts}, Instances: 2,
		Doc: "SIGTERM of the leader: the standby leads, recovers the running job with a new token, and finishes it", Run: func(t *T) {
			t.handoff(func(leader *serverProc) {
				if !leader.stop() {
					t.Errorf("the leader did not exit within 10s of SIGTERM (killed); expected a graceful stop")
				}
			})
		}},
	{Name: "recovery/session-expiry", Requires: []string{FeatureResourceManager},
		Doc: "the server's HA-store session expires (its lease revoked): it opens a new one, leads again, and runs the job on under a new token", Run: func(t *T) {
			id := t.job("j")
			t.mustSubmit(id, gatedGraph(2, id))
			t.waitRunning(id, 2)
			old, err := t.env.expire(t.ctx, election.Job(id))
			if err != nil {
				t.Fatalf("expire: %v", err)
			}
			info := t.regrant(id, old)
			if info.Token.SessionID == old.SessionID {
				t.Errorf("new token %s on the expired session; expected a new session", info.Token)
			}
			t.env.open(id)
			if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("job ended %v; expected FINISHED", r.GetStatus())
			}
		}},
	{Name: "recovery/restart-recovers-job", Requires: []string{FeatureResourceManager, featureRunnerStarts},
		Doc: "SIGKILL and restart of the only instance: each running job (three, listed by the store a page at a time) is recovered with a new token and finishes", Run: func(t *T) {
			ids := []string{t.job("a"), t.job("b"), t.job("c")}
			old := map[string]election.Token{}
			t.setup(func() {
				for _, id := range ids {
					t.mustSubmit(id, gatedGraph(2, id))
				}
				for _, id := range ids {
					t.waitRunning(id, 2)
					old[id] = t.leaderOf(election.Job(id)).Token
				}
			})
			leader, _ := t.leaderProc()
			t.killLeader(leader)
			if _, err := t.env.startServer(0); err != nil {
				t.Fatalf("restart: %v", err)
			}
			for _, id := range ids {
				t.regrant(id, old[id])
				t.env.open(id)
				if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
					t.Errorf("job %s ended %v; expected FINISHED", id, r.GetStatus())
				}
			}
		}},
	{Name: "recovery/restart-slots-held", Requires: []string{FeatureResourceManager, featureRunnerStarts},
		Doc: "SIGKILL and restart while three jobs hold parts of the slots they need (two running, one waiting for more than are free): each recovered job, offered again the slots its TaskExecutors hold for it, gets all it needs in turn and finishes; none waits for ever on slots the others hold idle", Run: restartSlotsHeld},
	{Name: "recovery/paused-leader-resumes-deposed", Requires: []string{FeatureResourceManager, FeatureFailover, featureRunnerStarts}, Instances: 2,
		Doc: "SIGSTOP of the leader until the standby took over, then SIGCONT: the old leader answers NOT_LEADER at once, and deploys and writes nothing with its old tokens", Run: pausedLeaderResumesDeposed},
	{Name: "recovery/cancel-survives-failover", Requires: []string{FeatureResourceManager, FeatureFailover, featureRunnerStarts}, Instances: 2,
		Doc: "a job canceled while INITIALIZING (with a request id and a reason), then SIGKILL of the leader: the cancel request was recorded before the answer, and the standby ends the job CANCELED without deploying anything, its result showing the request's id and reason", Run: cancelSurvivesFailover},
	{Name: "recovery/dirty-result-cleaned-not-rerun", Requires: []string{featureRunnerStarts}, Instances: -1,
		Doc: "a job found with a dirty result at startup is cleaned up (plan deleted, result marked clean), never run", Run: func(t *T) {
			id := t.job("j")
			t.seedDirtyResult(id)
			if _, err := t.env.startServer(0); err != nil {
				t.Fatalf("start: %v", err)
			}
			if !t.wait(30*time.Second, func() bool { return len(ok(t.events(id, "mark-clean"))) > 0 }) {
				t.Fatalf("the dirty result was not marked clean within 30s; expected the server to finish its cleanup")
			}
			t.barrier() // a re-run started after the cleanup would show by now
			if del := ok(t.events(id, "delete-plan")); len(del) == 0 {
				t.Errorf("the plan was never deleted; expected it deleted before the result was marked clean")
			}
			for _, op := range []string{"campaign", "RequestSlot", "SubmitTask"} {
				if evs := t.events(id, op); len(evs) > 0 {
					t.Errorf("%v; expected the finished job never to run again", evs[0])
				}
			}
			if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("result %v; expected the stored FINISHED result", r)
			}
		}},
	{Name: "recovery/revoke-while-watch-down", Requires: []string{FeatureResourceManager},
		Doc: "the server's WatchSession stream cut, its reconnection held while the job's leadership is revoked: once the stream is back, its snapshot lacks the leadership and the server campaigns again (or resigns) within 10s", Run: revokeWhileWatchDown},
	{Name: "recovery/job-leaderships-follow-jobmanager", Requires: []string{FeatureResourceManager},
		Doc: "the server's `jobmanager` leadership revoked while its session lives on: it resigns the jobs' leaderships (DispatcherService, since 1.2), so the running job is led under a new token within 30s and ends FINISHED", Run: jobLeadershipsFollowJobManager},
	{Name: "recovery/standby-answers-not-leader", Requires: []string{FeatureFailover, featureRunnerStarts}, Instances: 2,
		Doc: "a Dispatcher that does not lead answers NOT_LEADER with the leader's address, and writes nothing", Run: func(t *T) {
			leader, standby := t.leaderProc()
			if standby == nil {
				t.Fatalf("no standby instance running; expected 2 instances")
			}
			// The standby needs a moment to come up; it answers on its port.
			d := t.env.dispatcherAt(standby.url)
			id := t.job("j")
			var err error
			t.wait(30*time.Second, func() bool {
				_, err = d.SubmitJob(t.ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: noopGraph(1)})
				return connect.CodeOf(err) != connect.CodeUnavailable || isNotLeader(err)
			})
			if !isNotLeader(err) {
				t.Fatalf("standby answered %v; expected NOT_LEADER", err)
			}
			info, _ := errorDetail[*errdetails.ErrorInfo](err)
			addr := info.GetMetadata()["leader_address"]
			if addr != leader.url {
				t.Errorf("NOT_LEADER names leader %q; expected %q", addr, leader.url)
			}
			if nl, ok := errorDetail[*jobplanev1.NotLeaderDetails](err); !ok || nl.GetLeader().GetAddress() != leader.url {
				t.Errorf("NOT_LEADER carries NotLeaderDetails %v (%v); expected the leader's address %q in it", nl, ok, leader.url)
			}
			t.barrier()
			if evs := t.env.log.Events(func(e Event) bool { return e.Key == id && e.Source != "client" }); len(evs) > 0 {
				t.Errorf("events %v for the job sent to the standby; expected no write", evs)
			}
		}},
}

// pausedLeaderResumesDeposed stops the leader (SIGSTOP) until the standby
// has taken over, resumes it (SIGCONT), and checks that it acts no more as
// leader: its first answer is NOT_LEADER, and it deploys and writes
// nothing with its old tokens.
func pausedLeaderResumesDeposed(t *T) {
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(2, id))
	t.waitRunning(id, 2)
	oldJob := t.leaderOf(election.Job(id)).Token
	oldManager := t.leaderOf(election.JobManager).Token
	leader, standby := t.leaderProc()
	if standby == nil {
		t.Fatalf("no standby instance running; expected 2 instances")
	}
	leader.signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			leader.signal(syscall.SIGCONT)
		}
	}()
	// The standby takes over once the paused leader's session has expired.
	t.regrant(id, oldJob)
	var info election.Leader
	if !t.wait(t.waits.pausedLeader, func() bool {
		var err error
		info, err = t.env.etcd.Leader(t.ctx, election.JobManager)
		return err == nil && !info.Token.IsZero() && info.Token != oldManager && info.Address != ""
	}) {
		t.Fatalf("no new leader of %s within %v of pausing the old one (leader %+v); expected the standby to take over", election.JobManager, t.waits.pausedLeader, info)
	}
	from := t.env.log.Len()
	leader.signal(syscall.SIGCONT)
	resumed = true
	// Its very first answer: it stood still past its lease.
	d := t.env.dispatcherAt(leader.url)
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	_, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: t.job("after-pause"), JobGraph: noopGraph(1)})
	if !isNotLeader(err) {
		t.Errorf("the resumed old leader answered SubmitJob with %v; expected NOT_LEADER: it stood still past its lease, and another process leads", err)
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v; expected FINISHED under the new leader", r.GetStatus())
	}
	t.barrier()
	// What a deposed leader must not do: deploy, ask for slots, or write.
	// Giving back what it held (FreeSlot, resign) is fine, and so are the
	// TaskExecutors' own calls.
	acts := map[string]bool{"SubmitTask": true, "RequestSlot": true, "put-plan": true, "delete-plan": true,
		"create-dirty": true, "mark-clean": true, "delete-result": true, "confirm": true}
	for _, e := range t.env.log.Events(nil)[from:] {
		if acts[e.Op] && e.Err == nil && (e.Token == oldJob || e.Token == oldManager) {
			t.Errorf("%v after the old leader resumed; expected a deposed leader to deploy nothing and write nothing", e)
		}
	}
}

// cancelSurvivesFailover cancels a job whose JobMaster is not granted
// yet (its campaign held), kills the leader, and checks that the standby
// ends the job CANCELED without asking for a slot or deploying a task.
func cancelSurvivesFailover(t *T) {
	id := t.job("j")
	hold := make(chan struct{})
	t.env.store.arm(fault{op: "campaign", key: id, hold: hold})
	defer close(hold)
	t.mustSubmit(id, gatedGraph(1, id))
	leader, standby := t.leaderProc()
	if standby == nil {
		t.Fatalf("no standby instance running; expected 2 instances")
	}
	answer, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id, RequestId: "r1", Reason: "before the failover"})
	if err != nil {
		t.Fatalf("CancelJob(%s): %v; expected the job canceled", id, err)
	}
	if st := answer.GetStatus(); st != jobplanev1.JobStatus_JOB_STATUS_CANCELLING && st != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("CancelJob answered %v; expected CANCELLING", st)
	}
	// The answer's event is recorded once it arrived: the cancel request
	// must have taken effect in the store before it.
	answered := t.env.log.Events(func(e Event) bool { return e.Key == id && e.Source == "client" && e.Op == "CancelJob" && e.Err == nil })
	recorded := firstApplied(t.events(id, "request-cancel"), "request-cancel")
	if len(answered) == 0 || recorded < 0 || recorded > answered[0].Seq {
		t.Errorf("RequestJobCancel of the job took effect at #%d, CancelJob answered at %v; expected the cancellation recorded in the HA store before CancelJob answers", recorded, answered)
	}
	t.killLeader(leader)
	var last jobplanev1.JobStatus
	if !t.wait(t.waits.cancelFailover, func() bool {
		last = t.status(id)
		terminal := last == jobplanev1.JobStatus_JOB_STATUS_CANCELED || last == jobplanev1.JobStatus_JOB_STATUS_FINISHED || last == jobplanev1.JobStatus_JOB_STATUS_FAILED
		return terminal || len(t.events(id, "SubmitTask")) > 0 || len(t.events(id, "RequestSlot")) > 0
	}) {
		t.Fatalf("job %s still %v %v after the leader was killed; expected the standby to end it CANCELED", id, last, t.waits.cancelFailover)
	}
	for _, op := range []string{"RequestSlot", "SubmitTask"} {
		if evs := t.events(id, op); len(evs) > 0 {
			t.Fatalf("%v after the leader was killed; expected an acknowledged cancellation to survive it, nothing deployed", evs[0])
		}
	}
	r := t.result(id)
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v; expected CANCELED", r.GetStatus())
	}
	if c := r.GetCancellation(); c.GetRequestId() != "r1" || c.GetReason() != "before the failover" {
		t.Errorf("the result's cancellation is %v; expected the request's id r1 and reason, recorded with it before the failover", c)
	}
}

// runningBesideStandby submits graph(2, id) for a new job id, waits until
// two of its attempts run, and returns the id, the job's leader and the
// instance that leads, checking that another one stands by.
func (t *T) runningBesideStandby(graph func(n int32, gate string) *jobplanev1.JobGraph) (id string, old election.Leader, leader *serverProc) {
	id = t.job("j")
	t.mustSubmit(id, graph(2, id))
	t.waitRunning(id, 2)
	old = t.leaderOf(election.Job(id))
	leader, standby := t.leaderProc()
	if standby == nil {
		t.Fatalf("no standby instance running; expected 2 instances")
	}
	return id, old, leader
}

// killLeader SIGKILLs the leading instance and ends its session in the
// store at once, as the session's TTL would a while later: a standby or a
// restarted instance can lead without waiting the TTL out.
func (t *T) killLeader(leader *serverProc) {
	info := t.leaderOf(election.JobManager)
	leader.kill()
	if err := t.env.expireSession(t.ctx, info.Token.SessionID); err != nil {
		t.Fatalf("expire the killed leader's session: %v", err)
	}
	t.env.log.Add(Event{Source: "client", Op: "expire", Key: election.JobManager, Token: info.Token})
}

// handoff runs a job on the leader of two instances, ends the leader with
// end, and checks that the standby recovers the job under its id with a
// token of its own session and finishes it.
func (t *T) handoff(end func(leader *serverProc)) {
	id, old, leader := t.runningBesideStandby(gatedGraph)
	end(leader)
	info := t.regrant(id, old.Token)
	if info.Token.SessionID == old.Token.SessionID {
		t.Errorf("the job's new token %s is of the old leader's session; expected the standby's", info.Token)
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetJobId() != id {
		t.Errorf("result %v; expected job %s FINISHED", r, id)
	}
}

// seedDirtyResult writes, as a JobManager would have before crashing, the
// plan of a finished job and its dirty result.
func (t *T) seedDirtyResult(id string) {
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	sess, err := t.env.etcd.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	defer func() { _ = sess.Close(context.WithoutCancel(ctx)) }()
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	plan := &hastorev1.ExecutionPlan{JobId: id, JobGraph: noopGraph(1), SubmitTime: timestamppb.Now()}
	if err := t.env.etcd.PutExecutionPlan(ctx, l.Fence(), plan); err != nil {
		t.Fatalf("seed plan: %v", err)
	}
	t.env.log.Add(Event{Source: "client", Op: "put-plan", Key: id, Applied: true, Detail: "seed"})
	res := &jobplanev1.JobResult{JobId: id, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED, SubmitTime: plan.GetSubmitTime(), EndTime: timestamppb.Now(), Name: "noop"}
	if err := t.env.etcd.CreateDirtyJobResult(ctx, l.Fence(), res); err != nil {
		t.Fatalf("seed result: %v", err)
	}
	t.env.log.Add(Event{Source: "client", Op: "create-dirty", Key: id, Applied: true, Detail: "seed"})
	if err := l.Resign(ctx); err != nil {
		t.Fatalf("seed resign: %v", err)
	}
}

// revokeWhileWatchDown cuts the server's WatchSession stream, holds its
// reconnection, revokes the job's leadership meanwhile, and lets the
// stream start again: its snapshot lacks the leadership, which the server
// must then take as ended.
func revokeWhileWatchDown(t *T) {
	id := t.job("j")
	var session string
	t.setup(func() {
		t.mustSubmit(id, gatedGraph(2, id))
		t.waitRunning(id, 2)
		session = t.leaderOf(election.Job(id)).Token.SessionID
	})
	hold := make(chan struct{})
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	from := t.env.log.Len()
	t.env.store.arm(fault{op: "watch-session", key: session, hold: hold})
	t.env.store.cutWatches(session)
	if !t.wait(t.waits.revoke, func() bool {
		return len(t.env.log.Events(func(e Event) bool { return e.Seq > from && e.Op == "watch-session" && e.Key == session })) > 0
	}) {
		t.Fatalf("setup: the server did not reconnect WatchSession within %v of its stream ending; expected it to follow its session again at once", t.waits.revoke)
	}
	old, err := t.env.revoke(t.ctx, election.Job(id))
	if err != nil {
		t.Fatalf("revoke: %v", err)
	}
	release()
	if !t.reactsToRevoke(id) {
		t.Errorf("no campaign or resignation for job/%s within %v of a WatchSession snapshot without its leadership %s; expected the server to take a leadership missing from the snapshot as ended (WatchSession)", id, t.waits.revoke, old)
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v; expected FINISHED", r.GetStatus())
	}
}

// restartSlotsHeld runs two jobs of four subtasks whose sources finished
// (each holds two slots, if the server gives back the sources' slots) and
// a third of six subtasks that waits, holding the four slots left of the
// runner's eight, for two more. After a SIGKILL and restart the
// TaskExecutors offer each new JobMaster the slots its job held: two,
// two and four, every slot taken, each job short of what it needs. A
// server whose jobs keep idle slots while they wait for more deadlocks
// here; the jobs must all finish.
func restartSlotsHeld(t *T) {
	a, b, c := t.job("a"), t.job("b"), t.job("c")
	old := map[string]election.Token{}
	t.setup(func() {
		for _, id := range []string{a, b} {
			t.mustSubmit(id, gatedGraph(2, id))
			t.waitRunning(id, 2)
		}
		// The sources' slots given back, if the server does.
		t.wait(10*time.Second, func() bool { return len(ok(t.events(a, "FreeSlot")))+len(ok(t.events(b, "FreeSlot"))) >= 4 })
		t.mustSubmit(c, gatedGraph(3, c))
		// c takes the slots left and waits for more.
		t.wait(10*time.Second, func() bool { return len(ok(t.events(c, "RequestSlot"))) >= 4 })
		for _, id := range []string{a, b, c} {
			old[id] = t.leaderOf(election.Job(id)).Token
		}
	})
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	for _, id := range []string{a, b, c} {
		t.regrant(id, old[id])
		t.env.open(id)
	}
	for _, id := range []string{a, b, c} {
		if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Errorf("job %s ended %v (%s); expected FINISHED", id, r.GetStatus(), r.GetFailure().GetMessage())
		}
	}
}

// jobLeadershipsFollowJobManager revokes the server's `jobmanager`
// leadership while a job runs under its session. The session lives on, so
// the job's grant would outlive the revoke unless the server resigns it:
// the case expects the job's election granted anew (the server, leading
// `jobmanager` again, recovers the job under a new token) and the job to
// finish.
func jobLeadershipsFollowJobManager(t *T) {
	id := t.job("j")
	var old election.Token
	t.setup(func() {
		t.mustSubmit(id, gatedGraph(2, id))
		t.waitRunning(id, 2)
		old = t.leaderOf(election.Job(id)).Token
	})
	if _, err := t.env.revoke(t.ctx, election.JobManager); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if !t.wait(t.waits.failover, func() bool {
		info, err := t.env.etcd.Leader(t.ctx, election.Job(id))
		return err == nil && !info.Token.IsZero() && info.Token != old
	}) {
		t.Fatalf("job/%s was still led under %s, or by no one, %v after the server's jobmanager leadership was revoked; expected the server to resign the jobs' leaderships when it loses jobmanager (its session lives on) and, leading again, to recover the job under a new token", id, old, t.waits.failover)
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v; expected FINISHED", r.GetStatus())
	}
}
