package runner

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// FeatureCheckpoints: the server carries out JobConfig.checkpoints,
// stores completed checkpoints and savepoints in the HA store
// (HAStoreService.AddCheckpoint, AddSavepoint), deploys restarted
// subtasks with their state from the latest completed checkpoint, and
// serves the savepoint calls of DispatcherService (contract 1.2).
const FeatureCheckpoints = "supports_checkpoints"

var checkpointRequires = []string{FeatureResourceManager, featureRunnerStarts, FeatureCheckpoints}

var checkpointCases = []Case{
	{Name: "checkpoint/completed-when-durable", Requires: checkpointRequires, Instances: 1,
		Doc: "a checkpoint whose store write (AddCheckpoint) the store holds is not reported completed (GetJob's checkpoint statistics) until the write is durable, and is once it is", Run: completedWhenDurable},
	{Name: "checkpoint/restore-latest-durable", Requires: checkpointRequires, Instances: 1,
		Doc: "a checkpoint whose store write failed is discarded: a subtask restarted after it starts from its own state in the latest durable checkpoint, never from the discarded one, nor afresh", Run: restoreLatestDurable},
	{Name: "checkpoint/ids-increase-across-failover", Requires: append([]string{FeatureFailover}, checkpointRequires...), Instances: 2,
		Doc: "SIGKILL of the leader of a checkpointing job: the new JobMaster completes checkpoints with ids above the old one's (none refused as not increasing), and a subtask restarted then starts from the latest durable checkpoint", Run: idsIncreaseAcrossFailover},
	{Name: "checkpoint/savepoint-survives-job-and-failover", Requires: append([]string{FeatureFailover}, checkpointRequires...), Instances: 2,
		Doc: "TriggerSavepoint with stop: the savepoint is durable in the store with the subtask's state before the answer, the job ends CANCELED, the savepoint is listed after the leader is SIGKILLed, a job submitted to restore from it starts from its state, and DeleteSavepoint removes it", Run: savepointSurvives},
	{Name: "checkpoint/savepoint-names-the-run", Requires: checkpointRequires, Instances: 1,
		Doc: "a savepoint with stop of a job, then one of a second run of the job id (JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE), which counts checkpoint ids from 1 again: the second gets another id, no AddSavepoint is refused SAVEPOINT_EXISTS, and the store keeps both", Run: savepointNamesTheRun},
	{Name: "checkpoint/inline-state-limit", Requires: checkpointRequires, Instances: 1,
		Doc: "a subtask whose state is one byte over the advertised ServerLimits.max_inline_state_bytes: none of its checkpoints is stored or reported completed, and a savepoint of it is ABORTED (SAVEPOINT_FAILED) with none stored; one whose state is exactly the limit is checkpointed", Run: inlineStateLimit},
}

// counterGraph is one vertex "v" of n "counter" subtasks that run until
// gate opens and fail when gate+"-fail" opens, checkpointing every
// interval (none if 0), keeping up to 100 checkpoints, and restarting
// at once on failure.
func counterGraph(gate string, n int32, interval time.Duration) *jobplanev1.JobGraph {
	cfg := &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 10},
	}}}
	if interval > 0 {
		cfg.Checkpoints = &jobplanev1.CheckpointConfig{Interval: durationpb.New(interval), Retained: 100}
	}
	return &jobplanev1.JobGraph{Name: "counter", Config: cfg, Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "counter", Parallelism: n,
		Config: map[string]string{"gate": gate, "fail": gate + "-fail"}}}}
}

// durable returns the job's checkpoints the store holds, in id order.
func (t *T) durable(id string) []*hastorev1.CompletedCheckpoint {
	cps, err := t.env.etcd.ListCheckpoints(t.ctx, id, 0, 0)
	if err != nil {
		t.Fatalf("reading the job's checkpoints from the store: %v", err)
	}
	return cps
}

// waitDurable waits until the store holds n checkpoints of the job.
func (t *T) waitDurable(id string, n int) []*hastorev1.CompletedCheckpoint {
	var cps []*hastorev1.CompletedCheckpoint
	if !t.wait(30*time.Second, func() bool { cps = t.durable(id); return len(cps) >= n }) {
		t.Fatalf("job %s: %d checkpoints durable within 30s of running; expected %d (checkpoints every 50ms)", id, len(cps), n)
	}
	return cps
}

// checkpointStats returns the job's checkpoint statistics as GetJob
// answers them; nil on error.
func (t *T) checkpointStats(id string) *jobplanev1.CheckpointStats {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	resp, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id})
	if err != nil {
		return nil
	}
	return resp.GetJob().GetCheckpoints()
}

func completedWhenDurable(t *T) {
	id := t.job("j")
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	t.env.store.arm(fault{op: "add-checkpoint", key: id, hold: hold})
	t.mustSubmit(id, counterGraph(id, 2, 50*time.Millisecond))
	t.waitRunning(id, 2)
	if !t.wait(30*time.Second, func() bool { return len(t.events(id, "TriggerCheckpoint")) >= 1 }) {
		t.Fatalf("job %s: no checkpoint asked of its running subtasks within 30s (TriggerCheckpoint); expected one every 50ms", id)
	}
	// The first checkpoint's write is held (one checkpoint is in flight at
	// a time): for a second, a checkpoint reported completed must be
	// durable by then. (A server's store client may give up on the held
	// call and write again; the store then holds what it reports.)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		st := t.checkpointStats(id)
		if st.GetLatest() == nil {
			continue
		}
		if cps := t.durable(id); !slices.ContainsFunc(cps, func(cp *hastorev1.CompletedCheckpoint) bool {
			return cp.GetCheckpointId() == st.GetLatest().GetCheckpointId()
		}) {
			t.Fatalf("GetJob reported checkpoint %d completed (%d completed) while the store held %v; expected a checkpoint completed only once AddCheckpoint succeeded", st.GetLatest().GetCheckpointId(), st.GetCounts().GetCompleted(), ids(cps))
		}
	}
	release()
	var st *jobplanev1.CheckpointStats
	if !t.wait(30*time.Second, func() bool { st = t.checkpointStats(id); return st.GetLatest() != nil }) {
		t.Fatalf("no checkpoint reported completed within 30s of the store write's release (statistics %v); expected the completed checkpoints in JobDetails.checkpoints", st)
	}
	if cps := t.durable(id); !slices.ContainsFunc(cps, func(cp *hastorev1.CompletedCheckpoint) bool {
		return cp.GetCheckpointId() == st.GetLatest().GetCheckpointId()
	}) {
		t.Errorf("GetJob reported checkpoint %d completed; the store holds %v", st.GetLatest().GetCheckpointId(), ids(cps))
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED", r.GetStatus(), r.GetFailure().GetMessage())
	}
}

func ids(cps []*hastorev1.CompletedCheckpoint) []uint64 {
	out := make([]uint64, len(cps))
	for i, cp := range cps {
		out[i] = cp.GetCheckpointId()
	}
	return out
}

func restoreLatestDurable(t *T) {
	id := t.job("j")
	t.mustSubmit(id, counterGraph(id, 1, 50*time.Millisecond))
	t.waitRunning(id, 1)
	t.waitDurable(id, 1)
	// The next write fails, changing nothing; the one after is held, so
	// that nothing newer becomes durable before the restart.
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	t.env.store.arm(fault{op: "add-checkpoint", key: id, before: hastore.ErrUnavailable})
	t.env.store.arm(fault{op: "add-checkpoint", key: id, hold: hold})
	if !t.wait(30*time.Second, func() bool {
		return slices.ContainsFunc(t.events(id, "add-checkpoint"), func(e Event) bool { return e.Err != nil && !e.Applied })
	}) {
		t.Fatalf("job %s: no further checkpoint written within 30s; expected one every 50ms", id)
	}
	// Give the server the moment it takes to learn of the refusal; the
	// restart must start from what is durable whenever it comes.
	time.Sleep(100 * time.Millisecond)
	t.env.open(id + "-fail")
	var run counterRun
	if !t.wait(30*time.Second, func() bool { var ok bool; run, ok = t.env.counter(id, "v", 0, 1); return ok }) {
		t.Fatalf("job %s: subtask v/0 did not start again within 30s of its attempt 0 failing; expected a restart", id)
	}
	durable := t.durable(id) // the held write has not landed: attempt 1 started first
	release()
	t.restoredFromDurable(id, 0, run, durable, 1)
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED", r.GetStatus(), r.GetFailure().GetMessage())
	}
}

// restoredFromDurable checks that attempt (of subtask v/subtask) started
// from a checkpoint among durable, at least as new as the one of index
// min-1 there, with the state an earlier attempt gave it for that
// checkpoint.
func (t *T) restoredFromDurable(id string, subtask int, run counterRun, durable []*hastorev1.CompletedCheckpoint, atLeast int) {
	if run.restored == nil || run.from == "" {
		t.Errorf("subtask v/%d started again afresh (no restored state); expected its state in the latest durable checkpoint (the store holds %v)", subtask, ids(durable))
		return
	}
	k, err := strconv.ParseUint(run.from, 10, 64)
	if err != nil {
		t.Errorf("subtask v/%d started from %q; expected a checkpoint id (the store holds %v)", subtask, run.from, ids(durable))
		return
	}
	i := slices.IndexFunc(durable, func(cp *hastorev1.CompletedCheckpoint) bool { return cp.GetCheckpointId() == k })
	switch {
	case i < 0:
		t.Errorf("subtask v/%d started from checkpoint %d, which the store does not hold (it holds %v): a discarded checkpoint", subtask, k, ids(durable))
		return
	case i < atLeast-1:
		t.Errorf("subtask v/%d started from checkpoint %d; the store held newer ones (%v) when it started", subtask, k, ids(durable))
	}
	var want []byte
	for _, st := range durable[i].GetStates() {
		if st.GetVertexId() == "v" && int(st.GetSubtaskIndex()) == subtask {
			want = st.GetInline()
		}
	}
	if string(run.restored.Data) != string(want) {
		t.Errorf("subtask v/%d started from %q; checkpoint %d holds %q for it", subtask, run.restored.Data, k, want)
	}
	for a := range 10 {
		if earlier, ok := t.env.counter(id, "v", subtask, a); ok {
			if v, gave := earlier.given[k]; gave && strconv.FormatInt(v, 10) != string(want) {
				t.Errorf("checkpoint %d holds %q for subtask v/%d; its attempt %d gave %d", k, want, subtask, a, v)
			}
		}
	}
}

func idsIncreaseAcrossFailover(t *T) {
	id, old, leader := t.runningBesideStandby(func(n int32, gate string) *jobplanev1.JobGraph { return counterGraph(gate, n, 50*time.Millisecond) })
	before := t.waitDurable(id, 2)
	last := before[len(before)-1].GetCheckpointId()
	t.killLeader(leader)
	info := t.regrant(id, old.Token)
	if !t.wait(30*time.Second, func() bool {
		return slices.ContainsFunc(t.events(id, "add-checkpoint"), func(e Event) bool { return e.Applied && e.Token == info.Token })
	}) {
		t.Errorf("no checkpoint stored under the job's new token %s within 30s (store answers: %v); expected the new JobMaster to go on checkpointing above id %d",
			info.Token, errorsOf(t.events(id, "add-checkpoint")), last)
	}
	for _, e := range t.events(id, "add-checkpoint") {
		if errors.Is(e.Err, hastore.ErrCheckpointIDNotIncreasing) {
			t.Errorf("the store refused a checkpoint as not increasing (%v); expected ids above every id the job used, across leaders", e)
			break
		}
	}
	if cps := t.durable(id); cps[len(cps)-1].GetCheckpointId() <= last {
		t.Errorf("the latest durable checkpoint is %d, the old leader's last %d; expected newer ones from the new JobMaster", cps[len(cps)-1].GetCheckpointId(), last)
	}
	// A restart now starts each subtask from the latest durable state.
	durable := t.durable(id)
	started := map[int]int{} // subtask -> attempts started before the failure
	for s := range 2 {
		for a := range 10 {
			if _, ok := t.env.counter(id, "v", s, a); ok {
				started[s] = a + 1
			}
		}
	}
	t.env.open(id + "-fail")
	for s := range 2 {
		var run counterRun
		if !t.wait(30*time.Second, func() bool {
			for a := started[s]; a < 10; a++ {
				if r, ok := t.env.counter(id, "v", s, a); ok {
					run = r
					return true
				}
			}
			return false
		}) {
			t.Fatalf("subtask v/%d did not start again within 30s of failing; expected a restart", s)
		}
		t.restoredFromDurable(id, s, run, t.durable(id), len(durable))
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED", r.GetStatus(), r.GetFailure().GetMessage())
	}
}

// errorsOf lists the errors of events.
func errorsOf(evs []Event) []string {
	var out []string
	for _, e := range evs {
		if e.Err != nil {
			out = append(out, e.Err.Error())
		}
	}
	return out
}

// savepoint takes a savepoint of the job (with stop, if stop), asking
// again while the answer is SAVEPOINT_FAILED or NOT_LEADER (the job's
// JobMaster may not run yet), for up to 30s.
func (t *T) savepoint(id string, stop bool) *jobplanev1.SavepointInfo {
	var sp *jobplanev1.SavepointInfo
	if !t.wait(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		defer cancel()
		resp, err := t.dispatcher().TriggerSavepoint(ctx, &jobplanev1.TriggerSavepointRequest{JobId: id, Stop: stop})
		if err != nil && reason(err) != "SAVEPOINT_FAILED" && !isNotLeader(err) {
			t.Fatalf("TriggerSavepoint(%s, stop %v): %v; expected a savepoint of the running job", id, stop, err)
		}
		sp = resp.GetSavepoint()
		return err == nil
	}) {
		t.Fatalf("TriggerSavepoint(%s, stop %v) did not succeed within 30s of the job running", id, stop)
	}
	return sp
}

func savepointSurvives(t *T) {
	id := t.job("j")
	t.mustSubmit(id, counterGraph(id, 1, 0))
	t.waitRunning(id, 1)
	sp := t.savepoint(id, true)
	stored, err := t.env.etcd.GetSavepoint(t.ctx, sp.GetSavepointId())
	if err != nil {
		t.Fatalf("the store has no savepoint %q after TriggerSavepoint answered it (%v); expected it durable before the answer", sp.GetSavepointId(), err)
	}
	run, _ := t.env.counter(id, "v", 0, 0)
	var state []byte
	for _, st := range stored.GetStates() {
		if st.GetVertexId() == "v" && st.GetSubtaskIndex() == 0 {
			state = st.GetInline()
		}
	}
	if v, ok := run.given[stored.GetCheckpointId()]; !ok || strconv.FormatInt(v, 10) != string(state) || stored.GetJobId() != id {
		t.Errorf("savepoint %s of job %s holds %q for v/0 under checkpoint %d; the subtask gave %v; expected its state", sp.GetSavepointId(), stored.GetJobId(), state, stored.GetCheckpointId(), run.given)
	}
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v after a savepoint with stop; expected CANCELED", r.GetStatus())
	}
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	if !t.wait(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		defer cancel()
		resp, err := t.dispatcher().ListSavepoints(ctx, &jobplanev1.ListSavepointsRequest{JobId: id})
		return err == nil && slices.ContainsFunc(resp.GetSavepoints(), func(s *jobplanev1.SavepointInfo) bool { return s.GetSavepointId() == sp.GetSavepointId() })
	}) {
		t.Fatalf("the new leader did not list savepoint %s of job %s within 30s; expected savepoints to outlive their job and the leader", sp.GetSavepointId(), id)
	}
	id2 := t.job("restored")
	g := counterGraph(id2, 1, 0)
	g.Config.RestoreFromSavepoint = sp.GetSavepointId()
	t.mustSubmit(id2, g)
	var run2 counterRun
	if !t.wait(30*time.Second, func() bool { var ok bool; run2, ok = t.env.counter(id2, "v", 0, 0); return ok }) {
		t.Fatalf("job %s restoring from savepoint %s did not run within 30s", id2, sp.GetSavepointId())
	}
	if run2.from != sp.GetSavepointId() || run2.restored == nil || string(run2.restored.Data) != string(state) {
		t.Errorf("job %s started from %v (restored from %q); expected savepoint %s's state %q", id2, run2.restored, run2.from, sp.GetSavepointId(), state)
	}
	t.env.open(id2)
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	if _, err := t.dispatcher().DeleteSavepoint(ctx, &jobplanev1.DeleteSavepointRequest{SavepointId: sp.GetSavepointId()}); err != nil {
		t.Errorf("DeleteSavepoint(%s): %v; expected it deleted", sp.GetSavepointId(), err)
	}
	if _, err := t.env.etcd.GetSavepoint(t.ctx, sp.GetSavepointId()); !errors.Is(err, hastore.ErrSavepointNotFound) {
		t.Errorf("the store still has savepoint %s after DeleteSavepoint (%v); expected it removed", sp.GetSavepointId(), err)
	}
}

// savepointNamesTheRun takes a savepoint of each of two runs of one job
// id. Without checkpoints, each run's first savepoint is its checkpoint 1
// (the store forgets the job's last_checkpoint_id with the first run's
// plan): an id made of the job and checkpoint ids alone is the same for
// both, and the store refuses the second.
func savepointNamesTheRun(t *T) {
	id := t.job("j")
	g := counterGraph(id, 1, 0)
	first := t.mustSubmit(id, g)
	t.waitRunning(id, 1)
	sp1 := t.savepoint(id, true)
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_CANCELED, "the first run, stopped by its savepoint")
	second := t.submitDuplicate(id, g)
	if second.GetRunId() == first.GetRunId() {
		t.Fatalf("the ALLOW_DUPLICATE submission answered run_id %q, the first run's; expected a new run", second.GetRunId())
	}
	sp2 := t.savepoint(id, true)
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_CANCELED, "the second run, stopped by its savepoint")
	for _, e := range t.env.log.Events(func(e Event) bool { return e.Op == "add-savepoint" }) {
		if errors.Is(e.Err, hastore.ErrSavepointExists) {
			t.Errorf("AddSavepoint(%s) was refused SAVEPOINT_EXISTS (%v); expected each savepoint of each run to have an id new to the store (a new run counts checkpoint ids from 1 again: the id must name the run)", e.Key, e.Err)
		}
	}
	if sp1.GetSavepointId() == sp2.GetSavepointId() {
		t.Errorf("both runs' savepoints are %s; expected another id for the second run's", sp1.GetSavepointId())
	}
	for _, sp := range []*jobplanev1.SavepointInfo{sp1, sp2} {
		if stored, err := t.env.etcd.GetSavepoint(t.ctx, sp.GetSavepointId()); err != nil || stored.GetJobId() != id {
			t.Errorf("the store has %v (%v) for savepoint %s; expected a savepoint of job %s (savepoints outlive their run)", stored, err, sp.GetSavepointId(), id)
		}
	}
}

// inlineStateLimit checkpoints two jobs whose subtask gives a state of
// exactly the advertised inline limit, and one byte over it.
func inlineStateLimit(t *T) {
	limits := t.advertisedLimits()
	limit := limits.GetMaxInlineStateBytes()
	if limit <= 0 || limit > 8<<20 {
		t.Fatalf("ServerLimits.max_inline_state_bytes is %d; expected a positive limit (at most 8 MiB) from a server that keeps checkpoints", limit)
	}
	over, at := t.job("over"), t.job("at")
	gOver := counterGraph(over, 1, 50*time.Millisecond)
	gOver.Vertices[0].Config["pad"] = strconv.FormatInt(limit+1, 10)
	t.mustSubmit(over, gOver)
	t.waitRunning(over, 1)
	if !t.wait(30*time.Second, func() bool { return len(ok(t.events(over, "TriggerCheckpoint"))) >= 3 }) {
		t.Fatalf("job %s: %d checkpoints asked of its running subtask within 30s (TriggerCheckpoint); expected one every 50ms (a failed checkpoint fails nothing more: tolerable_failures is unset)", over, len(ok(t.events(over, "TriggerCheckpoint"))))
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		resp, err := t.dispatcher().TriggerSavepoint(ctx, &jobplanev1.TriggerSavepointRequest{JobId: over})
		cancel()
		if err == nil || reason(err) != "SAVEPOINT_FAILED" {
			t.Errorf("TriggerSavepoint(%s) of a subtask whose state is %d bytes answered %v, %v; expected ABORTED (SAVEPOINT_FAILED): the state is over the limit of %d", over, limit+1, resp.GetSavepoint(), err, limit)
		}
	}
	if cps := t.durable(over); len(cps) > 0 {
		t.Errorf("the store holds checkpoints %v of job %s, whose subtask gave %d bytes of state; expected none: the advertised max_inline_state_bytes is %d, and the JobMaster must discard a checkpoint over it", ids(cps), over, limit+1, limit)
	}
	if st := t.checkpointStats(over); st.GetLatest() != nil {
		t.Errorf("GetJob reports checkpoint %d of job %s completed; expected none over the inline limit", st.GetLatest().GetCheckpointId(), over)
	}
	if sps, err := t.env.etcd.ListSavepoints(t.ctx, over, "", 0); err != nil || len(sps) > 0 {
		t.Errorf("the store holds %d savepoints of job %s (%v); expected none over the inline limit", len(sps), over, err)
	}
	if limit+4096 <= limits.GetMaxCheckpointBytes() {
		gAt := counterGraph(at, 1, 50*time.Millisecond)
		gAt.Vertices[0].Config["pad"] = strconv.FormatInt(limit, 10)
		t.mustSubmit(at, gAt)
		t.waitRunning(at, 1)
		cps := t.waitDurable(at, 1)
		for _, st := range cps[0].GetStates() {
			if n := len(st.GetInline()); n != int(limit) {
				t.Errorf("checkpoint %d of job %s holds %d bytes for %s/%d; expected the subtask's %d", cps[0].GetCheckpointId(), at, n, st.GetVertexId(), st.GetSubtaskIndex(), limit)
			}
		}
		t.env.open(at)
		t.endsCleanly(at, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the job at the limit")
	}
	t.env.open(over)
	t.endsCleanly(over, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the job over the limit")
}
