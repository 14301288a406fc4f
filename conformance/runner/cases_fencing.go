package runner

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// revokeRunning is revokeGranted, and then waits, as setup too, until the
// job runs again under its new token. It returns the job id, the revoked
// token and the new leader.
func (t *T) revokeRunning() (id string, old election.Token, info election.Leader) {
	id, old, info = t.revokeGranted()
	t.setup(func() {
		// The new JobMaster is in charge once it deploys under its token (a
		// server may publish its address before its JobMaster is routed).
		// All four subtasks deployed under it, and running reported: a
		// deployment still to come would look like the work of a call
		// the case sends next.
		if !t.wait(t.waits.failover, func() bool { return t.inChargeUnder(id, info.Token) }) {
			t.Fatalf("the job did not run again under the new token %s within %v; expected the new JobMaster to redeploy it (or adopt it, see inChargeUnder)", info.Token, t.waits.failover)
		}
	})
	return id, old, info
}

// revokeGranted starts a gated job, waits for it to run, revokes its
// leadership and waits for the server to be granted it again, all as
// setup. It returns the job id, the revoked token and the new leader.
func (t *T) revokeGranted() (id string, old election.Token, info election.Leader) {
	t.setup(func() {
		id = t.job("j")
		t.mustSubmit(id, gatedGraph(2, id))
		t.waitRunning(id, 2)
		var err error
		if old, err = t.env.revoke(t.ctx, election.Job(id)); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		info = t.regrant(id, old)
	})
	return id, old, info
}

// deployedSince reports whether the job was deployed after the grant of
// info.
func (t *T) deployedSince(id string, info election.Leader) bool {
	granted := -1
	for _, e := range t.events(id, "") {
		if e.Op == "granted" && e.Token == info.Token {
			granted = e.Seq
		}
		if e.Op == "SubmitTask" && granted >= 0 {
			return true
		}
	}
	return false
}

// leaderOf returns an election's current leader, or ends the case.
func (t *T) leaderOf(election string) election.Leader {
	info, err := t.env.etcd.Leader(t.ctx, election)
	if err != nil || info.Token.IsZero() {
		t.Fatalf("no leader of %q (%v); expected one", election, err)
	}
	return info
}

// jobMaster returns a client of the JobMaster of the job whose election
// leader is job (see env.jobMaster), or ends the case.
func (t *T) jobMaster(job election.Leader) clusterv1connect.JobMasterServiceClient {
	jm, err := t.env.jobMaster(t.ctx, job)
	if err != nil {
		t.Fatalf("the JobMaster's address: %v", err)
	}
	return jm
}

// regrant waits until the job's election has a leader other than old.
// It does not wait for an address: a job election need not publish one
// (LeaderInfo.address), and the runner calls the JobMaster at the
// jobmanager leader's cluster address when it publishes none.
func (t *T) regrant(id string, old election.Token) election.Leader {
	var info election.Leader
	if !t.wait(t.waits.failover, func() bool {
		var err error
		info, err = t.env.etcd.Leader(t.ctx, election.Job(id))
		return err == nil && !info.Token.IsZero() && info.Token != old
	}) {
		switch {
		case info.Token == old:
			t.Fatalf("job/%s was still led under %s %v later (leader %+v); expected that leadership ended and the job recovered under a new token", id, old, t.waits.failover, info)
		default:
			t.Fatalf("job/%s had no leader %v after its leadership %s ended; expected the server to recover the job: campaign for it again and be granted a new token", id, t.waits.failover, old)
		}
	}
	return info
}

func protoToken(tk election.Token) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: tk.SessionID, Epoch: tk.Epoch}
}

// staleRefused checks that err is ABORTED with STALE_FENCING_TOKEN.
func (t *T) staleRefused(call string, err error) {
	if connect.CodeOf(err) != connect.CodeAborted || reason(err) != "STALE_FENCING_TOKEN" {
		t.Errorf("%s with a revoked token answered %v; expected ABORTED (STALE_FENCING_TOKEN)", call, err)
	}
}

var fencingCases = []Case{
	{Name: "fencing/stale-resource-manager-token-refused", Requires: []string{FeatureResourceManager},
		Doc: "RegisterJobMaster under the current grant of the job's election answers the ResourceManager's current token; a declaration carrying an older one is NOT_REGISTERED and a newer one NOT_LEADER, and neither requests a slot", Run: staleReceiverRefused},
	{Name: "fencing/resource-manager-token-checked-first", Requires: []string{FeatureResourceManager},
		Doc: "a declaration or disconnection wrong in both tokens (a stale JobMaster token and another ResourceManager token) answers for the ResourceManager's token: NOT_REGISTERED or NOT_LEADER, not STALE_FENCING_TOKEN", Run: rmTokenCheckedFirst},
	{Name: "fencing/forged-job-master-token-refused", Requires: []string{FeatureResourceManager},
		Doc: "RegisterJobMaster under a token never granted, of an epoch above the job's current grant, is STALE_FENCING_TOKEN; the job's own JobMaster keeps its registration and the job finishes", Run: forgedJobMasterRefused},
	{Name: "fencing/stale-offer-refused", Requires: []string{FeatureResourceManager},
		Doc: "after a revoke and re-grant, the JobMaster refuses OfferSlots with the old token", Run: func(t *T) {
			id, old, leader := t.revokeRunning()
			jm := t.jobMaster(leader)
			_, err := jm.OfferSlots(t.ctx, &clusterv1.OfferSlotsRequest{
				JobId: id, JobMasterToken: protoToken(old), TaskExecutorId: t.env.tes[0].id,
				Offers: []*clusterv1.SlotOffer{{AllocationId: "conformance-stale", SlotIndex: 0}},
			})
			t.staleRefused("OfferSlots", err)
			t.env.open(id)
			t.result(id)
		}},
	{Name: "fencing/stale-state-update-refused", Requires: []string{FeatureResourceManager},
		Doc: "after a revoke and re-grant, the JobMaster refuses UpdateTaskExecutionState with the old token", Run: func(t *T) {
			id, old, leader := t.revokeRunning()
			jm := t.jobMaster(leader)
			_, err := jm.UpdateTaskExecutionState(t.ctx, &clusterv1.UpdateTaskExecutionStateRequest{
				JobId: id, JobMasterToken: protoToken(old), TaskExecutorId: t.env.tes[0].id,
				Status: &jobplanev1.TaskExecutionStatus{
					Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "sink", SubtaskIndex: 0},
					State:   jobplanev1.ExecutionState_EXECUTION_STATE_FAILED, FailureMessage: "sent with a revoked token",
				},
			})
			t.staleRefused("UpdateTaskExecutionState", err)
			t.env.open(id)
			if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("job ended %v; expected FINISHED (the stale failure report must not count)", r.GetStatus())
			}
		}},
	{Name: "fencing/deploy-with-current-token", Requires: []string{FeatureResourceManager},
		Doc: "every SubmitTask carries the token of the job's latest grant", Run: func(t *T) {
			id, _, info := t.revokeGranted()
			// The new JobMaster redeploys the job; whatever it deploys
			// must carry its token.
			if !t.wait(t.waits.failover, func() bool { return t.deployedSince(id, info) }) {
				t.Errorf("no SubmitTask for job %s within %v of its new grant %s; expected the new JobMaster to redeploy it", id, t.waits.failover, info.Token)
			}
			t.env.open(id)
			t.result(id)
			var current election.Token
			n := 0
			for _, e := range t.events(id, "") {
				switch {
				case e.Op == "granted" && e.Err == nil:
					current = e.Token
				case e.Op == "SubmitTask":
					n++
					if e.Token != current {
						t.Errorf("%v; expected the token of the latest grant, %s", e, current)
					}
				}
			}
			if n == 0 {
				t.Errorf("no SubmitTask recorded; expected some")
			}
		}},
	{Name: "fencing/no-deploy-after-revoke", Requires: []string{FeatureResourceManager},
		Doc: "once the server reacted to a revoke (resigned or campaigned again), no SubmitTask carries the revoked token", Run: func(t *T) {
			id := t.job("j")
			t.setup(func() {
				t.mustSubmit(id, gatedGraph(2, id))
				t.waitRunning(id, 2)
			})
			old, err := t.env.revoke(t.ctx, election.Job(id))
			if err != nil {
				t.Fatalf("revoke: %v", err)
			}
			if !t.reactsToRevoke(id) {
				t.Errorf("no campaign or resignation for job/%s within %v of its revoke; expected the server to learn of the revocation (WatchSession) and stop acting under the revoked token %s", id, t.waits.revoke, old)
			}
			t.env.open(id)
			t.result(id)
			seen := -1
			for _, e := range t.events(id, "") {
				if seen < 0 && e.Source == "store" && (e.Op == "campaign" || e.Op == "resign") && e.Seq > t.revokeSeq(id) {
					seen = e.Seq
				}
				if seen >= 0 && e.Op == "SubmitTask" && e.Token == old {
					t.Errorf("%v after the server saw the revoke (#%d); expected no deployment under the revoked token", e, seen)
				}
			}
			if seen < 0 {
				t.Errorf("the server never campaigned again or resigned after the revoke; expected it to")
			}
		}},
	{Name: "fencing/fresh-token-per-grant", Requires: []string{FeatureResourceManager},
		Doc: "each grant of a job's leadership yields a new token, and its deployments use it", Run: func(t *T) {
			id := t.job("j")
			t.mustSubmit(id, gatedGraph(2, id))
			tokens := map[election.Token]bool{}
			t.waitRunning(id, 2)
			for round := range 3 {
				old, err := t.env.revoke(t.ctx, election.Job(id))
				if err != nil {
					t.Fatalf("revoke %d: %v", round, err)
				}
				tokens[old] = true
				info := t.regrant(id, old)
				if tokens[info.Token] {
					t.Errorf("grant %d reused token %s; expected a new one", round+1, info.Token)
				}
				// Wait for the new JobMaster's deployments.
				if !t.wait(t.waits.failover, func() bool {
					for _, e := range t.events(id, "SubmitTask") {
						if e.Token == info.Token {
							return true
						}
					}
					return false
				}) {
					t.Fatalf("no deployment under the new token %s within %v; expected the job to run again", info.Token, t.waits.failover)
				}
				// Counted under the new token: the attempts keep their ids
				// across grants, and the old grant's reports of them may
				// still arrive after the new grant's.
				// All four subtasks deployed under it, and running reported: a
				// deployment still to come would look like the work of a call
				// the case sends next.
				if !t.wait(t.waits.failover, func() bool { return t.inChargeUnder(id, info.Token) }) {
					t.Fatalf("%d attempts reported RUNNING under the new token %s within %v; expected 2", len(t.runningUnder(id, info.Token)), info.Token, t.waits.failover)
				}
			}
			t.env.open(id)
			t.result(id)
		}},
	{Name: "fencing/stale-write-steps-down", Doc: "a plan put refused as stale makes the server step down cleanly: no put retried with that token, leadership regained with a new one, the process alive", Run: func(t *T) {
		t.dispatcher() // the server leads
		id := t.job("j")
		t.env.store.arm(fault{op: "put-plan", key: id, before: hastore.ErrStaleToken})
		if _, err := t.submit(id, noopGraph(1)); err == nil {
			t.Errorf("submit whose plan put was refused as stale succeeded; expected an error")
		}
		refused := t.events(id, "put-plan")
		if len(refused) == 0 {
			t.Fatalf("no plan put recorded; expected the refused one")
		}
		bad := refused[0].Token
		ctx, cancel := context.WithTimeout(t.ctx, t.waits.failover)
		defer cancel()
		for {
			info, err := t.env.etcd.Leader(ctx, election.JobManager)
			if err == nil && !info.Token.IsZero() && info.Token != bad && info.Address != "" {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the server did not lead again with a new token within %v (leader %+v); expected it to step down and campaign again", t.waits.failover, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.terminated(t.job("after"))
		for _, e := range t.env.log.Events(func(e Event) bool {
			return e.Source == "store" && e.Op == "put-plan" && e.Token == bad && e.Seq > refused[0].Seq
		}) {
			t.Errorf("%v after the refusal; expected no plan put with the refused token", e)
		}
		t.env.mu.Lock()
		servers := t.env.servers
		t.env.mu.Unlock()
		for i, p := range servers {
			if p.exited() {
				t.Errorf("server instance %d exited; expected it to step down and keep running", i)
			}
		}
	}},
}

// reactsToRevoke waits up to twice the revocation notice (10s for the
// reference server) for the server to campaign again for the job, or
// resign it, after the job's first revoke.
func (t *T) reactsToRevoke(id string) bool {
	return t.wait(t.waits.revoke, func() bool {
		for _, e := range t.events(id, "") {
			if e.Source == "store" && (e.Op == "campaign" || e.Op == "resign") && e.Seq > t.revokeSeq(id) {
				return true
			}
		}
		return false
	})
}

// revokeSeq returns the sequence number of the first revoke of the job.
func (t *T) revokeSeq(id string) int {
	if evs := t.events(id, "revoke"); len(evs) > 0 {
		return evs[0].Seq
	}
	return -1
}

// inChargeUnder says whether the JobMaster of token tk runs the whole of
// a gated job (gatedGraph(2, ...)) taken over from an earlier one, with
// none of its deployments still to come: it deployed all four subtasks
// and the two sinks reported RUNNING; or, on a server that adopts, each
// subtask was adopted under tk (the running sinks, and sources that
// finished while no JobMaster listened) or deployed again (sources that
// had finished and freed their slots, which no TaskExecutor held: after
// the task lease, which the failover wait covers (waits.failover), unless the
// server knows every TaskExecutor answered).
func (t *T) inChargeUnder(id string, tk election.Token) bool {
	if len(t.runningUnder(id, tk)) >= 2 && t.deployedUnder(id, tk) >= 4 {
		return true
	}
	// Adopting: every subtask adopted (running, or ended while no
	// JobMaster listened) or deployed anew under tk.
	adopted := map[string]bool{}
	for _, e := range t.events(id, "Adopted") {
		if e.Token == tk {
			adopted[e.Attempt] = true
		}
	}
	return len(adopted) > 0 && len(adopted)+t.deployedUnder(id, tk) >= 4
}

// runningUnder returns the attempts reported RUNNING under token.
// deployedUnder counts the job's distinct attempts deployed under tk.
func (t *T) deployedUnder(id string, tk election.Token) int {
	seen := map[string]bool{}
	for _, e := range t.events(id, "SubmitTask") {
		if e.Token == tk {
			seen[fmt.Sprint(e.Attempt)] = true
		}
	}
	return len(seen)
}

func (t *T) runningUnder(id string, tk election.Token) []string {
	var out []string
	for _, e := range t.events(id, "UpdateTaskExecutionState") {
		if e.Token == tk && e.State == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
			out = append(out, fmt.Sprint(e.Attempt))
		}
	}
	return out
}

// grantJob campaigns in the election of job id, as a JobMaster of the
// job would, on a session of the runner's own (closed when the case
// ends), and returns the grant. A case that registers a JobMaster of its
// own needs one: the ResourceManager registers a JobMaster token only if
// it is the current grant of the job's election (RegisterJobMaster).
func (t *T) grantJob(id string) *hastore.Leadership {
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	sess, err := t.env.etcd.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		t.Fatalf("open a session of the runner's: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.Job(id), "")
	if err != nil {
		t.Fatalf("campaign in job/%s: %v", id, err)
	}
	return l
}

// registerJobMaster registers a JobMaster of the runner's for job id under
// the grant l, and returns the ResourceManager token the call answered.
func (t *T) registerJobMaster(rm clusterv1connect.ResourceManagerServiceClient, id string, l *hastore.Leadership) *jobplanev1.FencingToken {
	reg, err := rm.RegisterJobMaster(t.ctx, &clusterv1.RegisterJobMasterRequest{JobId: id, JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: protoToken(l.Token())})
	if err != nil {
		t.Fatalf("RegisterJobMaster under %s, the current grant of job/%s: %v; expected it registered", l.Token(), id, err)
	}
	return reg.GetResourceManagerToken()
}

// staleReceiverRefused registers as a JobMaster would, under a grant of
// its own in the job's election, and then calls the ResourceManager with
// tokens of it that are not the current one.
func staleReceiverRefused(t *T) {
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	info := t.leaderOf(election.JobManager)
	rm := t.env.resourceManager(info)
	id := t.job("j")
	var grant *hastore.Leadership
	t.setup(func() { grant = t.grantJob(id) })
	jmToken := protoToken(grant.Token())
	reg, err := rm.RegisterJobMaster(ctx, &clusterv1.RegisterJobMasterRequest{JobId: id, JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: jmToken})
	if err != nil {
		t.Fatalf("RegisterJobMaster under %s, the current grant of job/%s: %v; expected it registered", grant.Token(), id, err)
	}
	current := reg.GetResourceManagerToken()
	if current.GetEpoch() != info.Token.Epoch || current.GetSessionId() != info.Token.SessionID {
		t.Errorf("RegisterJobMaster answered the ResourceManager token %v; expected the %s election's current one, %s", current, election.JobManager, info.Token)
	}
	for _, tc := range []struct {
		name   string
		token  *jobplanev1.FencingToken
		code   connect.Code
		reason string
	}{
		{"an older ResourceManager token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() - 1}, connect.CodeFailedPrecondition, "NOT_REGISTERED"},
		{"a newer ResourceManager token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() + 1}, connect.CodeUnavailable, "NOT_LEADER"},
	} {
		_, err := rm.DeclareResourceRequirements(ctx, &clusterv1.DeclareResourceRequirementsRequest{
			JobId: id, JobMasterToken: jmToken, ResourceManagerToken: tc.token,
			Requirements: []*clusterv1.ResourceRequirement{{Slots: 1}},
		})
		if connect.CodeOf(err) != tc.code || reason(err) != tc.reason {
			t.Errorf("DeclareResourceRequirements with %s answered %v; expected %v (%s): a ResourceManager acts only on calls meant for its current leadership", tc.name, err, tc.code, tc.reason)
		}
	}
	t.barrier()
	if evs := t.events(id, "RequestSlot"); len(evs) > 0 {
		t.Errorf("%v after declarations to a stale ResourceManager token; expected no slot requested for them", evs[0])
	}
	_, _ = rm.DisconnectJobMaster(ctx, &clusterv1.DisconnectJobMasterRequest{JobId: id, JobMasterToken: jmToken, ResourceManagerToken: current})
}

// rmTokenCheckedFirst registers two JobMasters of the runner's in turn,
// each under its grant of the job's election, and then sends the first
// one's (stale) token with a ResourceManager token that is not the
// current one: the ResourceManager's token is judged first.
func rmTokenCheckedFirst(t *T) {
	info := t.leaderOf(election.JobManager)
	rm := t.env.resourceManager(info)
	id := t.job("j")
	var first, second *jobplanev1.FencingToken
	var current *jobplanev1.FencingToken
	t.setup(func() {
		l := t.grantJob(id)
		first = protoToken(l.Token())
		t.registerJobMaster(rm, id, l)
		if err := l.Resign(t.ctx); err != nil {
			t.Fatalf("resign job/%s: %v", id, err)
		}
		l = t.grantJob(id)
		second = protoToken(l.Token())
		current = t.registerJobMaster(rm, id, l)
		// The first token alone is stale now.
		_, err := rm.DeclareResourceRequirements(t.ctx, &clusterv1.DeclareResourceRequirementsRequest{JobId: id, JobMasterToken: first, ResourceManagerToken: current})
		if connect.CodeOf(err) != connect.CodeAborted || reason(err) != "STALE_FENCING_TOKEN" {
			t.Fatalf("DeclareResourceRequirements with the current ResourceManager token and the first JobMaster's, whose successor registered, answered %v; expected ABORTED (STALE_FENCING_TOKEN)", err)
		}
	})
	for _, tc := range []struct {
		name   string
		token  *jobplanev1.FencingToken
		code   connect.Code
		reason string
	}{
		{"an older ResourceManager token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() - 1}, connect.CodeFailedPrecondition, "NOT_REGISTERED"},
		{"a newer ResourceManager token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() + 1}, connect.CodeUnavailable, "NOT_LEADER"},
	} {
		_, err := rm.DeclareResourceRequirements(t.ctx, &clusterv1.DeclareResourceRequirementsRequest{
			JobId: id, JobMasterToken: first, ResourceManagerToken: tc.token, Requirements: []*clusterv1.ResourceRequirement{{Slots: 1}}})
		if connect.CodeOf(err) != tc.code || reason(err) != tc.reason {
			t.Errorf("DeclareResourceRequirements with a stale JobMaster token and %s answered %v; expected %v (%s): the ResourceManager's token is checked first", tc.name, err, tc.code, tc.reason)
		}
		_, err = rm.DisconnectJobMaster(t.ctx, &clusterv1.DisconnectJobMasterRequest{JobId: id, JobMasterToken: first, ResourceManagerToken: tc.token})
		if connect.CodeOf(err) != tc.code || reason(err) != tc.reason {
			t.Errorf("DisconnectJobMaster with a stale JobMaster token and %s answered %v; expected %v (%s): the ResourceManager's token is checked first", tc.name, err, tc.code, tc.reason)
		}
	}
	_, _ = rm.DisconnectJobMaster(t.ctx, &clusterv1.DisconnectJobMasterRequest{JobId: id, JobMasterToken: second, ResourceManagerToken: current})
}

// forgedJobMasterRefused runs a gated job and registers a JobMaster for
// it under tokens never granted, of an epoch above the job's current
// grant: each must be refused, and the job's own JobMaster keep its
// registration and finish the job.
func forgedJobMasterRefused(t *T) {
	id := t.job("j")
	var job election.Leader
	t.setup(func() {
		t.mustSubmit(id, gatedGraph(2, id))
		t.waitRunning(id, 2)
		job = t.leaderOf(election.Job(id))
		// All four subtasks deployed and running reported: a deployment
		// still to come would look like the work of the forged calls.
		if !t.wait(30*time.Second, func() bool { return t.inChargeUnder(id, job.Token) }) {
			t.Fatalf("job %s did not run whole under its token %s within 30s", id, job.Token)
		}
	})
	rm := t.env.resourceManager(t.leaderOf(election.JobManager))
	from := t.env.log.Len()
	for _, forged := range []*jobplanev1.FencingToken{
		{SessionId: job.Token.SessionID, Epoch: job.Token.Epoch + 1_000_000},
		{SessionId: "conformance-forged", Epoch: job.Token.Epoch + 1},
	} {
		_, err := rm.RegisterJobMaster(t.ctx, &clusterv1.RegisterJobMasterRequest{JobId: id, JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: forged})
		if connect.CodeOf(err) != connect.CodeAborted || reason(err) != "STALE_FENCING_TOKEN" {
			t.Errorf("RegisterJobMaster under %v, an epoch above the current grant %s of job/%s that was never granted, answered %v; expected ABORTED (STALE_FENCING_TOKEN): only the current grant registers", forged, job.Token, id, err)
		}
	}
	t.barrier()
	if st := t.status(id); st != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("job %s is %v after the forged registrations; expected it still RUNNING under its own JobMaster", id, st)
	}
	for _, e := range t.env.log.Events(nil)[from:] {
		if e.Key == id && (e.Op == "RequestSlot" || e.Op == "SubmitTask" || e.Op == "CancelTask") {
			t.Errorf("%v after the forged registrations; expected them to change nothing", e)
		}
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED, its own JobMaster still registered", r.GetStatus(), r.GetFailure().GetMessage())
	}
}
