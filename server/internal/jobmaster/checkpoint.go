package jobmaster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// Checkpoint defaults and limits.
const (
	// DefaultCheckpointTimeout is how long a checkpoint may take when the
	// job's config does not say.
	DefaultCheckpointTimeout = 10 * time.Minute
	// DefaultMaxInlineStateBytes is the largest state a subtask may give
	// inline (ServerLimits.max_inline_state_bytes).
	DefaultMaxInlineStateBytes = 64 << 10
	// DefaultMaxCheckpointBytes bounds a checkpoint's encoding; it must fit
	// the HA store's limit (the plan limit, 1 MiB by default).
	DefaultMaxCheckpointBytes = 1 << 20
)

// coordinator is the JobMaster's checkpoint coordinator: it triggers the
// job's periodic checkpoints, one at a time, on every RUNNING subtask,
// collects their states, and stores each completed checkpoint with one
// HA-store write; a checkpoint counts as completed only once that write
// returned. It keeps the latest completed checkpoint's states, from which
// every subtask deployed again starts. Owned by the draining goroutine.
type coordinator struct {
	cfg     *jobplanev1.CheckpointConfig
	store   hastore.Checkpoints
	timeout time.Duration
	retain  int
	// loading is set while the latest checkpoint is read from the store;
	// nothing is deployed meanwhile.
	loading bool
	loadTry time.Duration // the backoff of the next read
	lastID  uint64        // the greatest id the job used, as stored
	// states are the latest completed checkpoint's, by execution vertex;
	// from is its name (its decimal id), empty if none.
	states map[int32]*jobplanev1.SubtaskState
	from   string
	// restoredFrom is what a subtask was last deployed from.
	restoredFrom string
	counts       *jobplanev1.CheckpointCounts
	latest       *jobplanev1.CheckpointInfo // the latest completed checkpoint's
	failures     int                        // checkpoints failed in a row
	pending      *pendingCheckpoint
	// savepoints are the savepoints asked for while another checkpoint
	// was in flight, in order.
	savepoints []*savepointRequest
	// lastTrigger is when the latest periodic checkpoint was triggered;
	// next is when the next one is due; stopTimer stops its wake-up.
	lastTrigger time.Time
	next        time.Time
	stopTimer   func() bool
	// idle: the last periodic trigger found no subtask running, and no
	// trigger is armed until one runs.
	idle bool
}

// savepointRequest is a user's request for a savepoint (Savepoint):
// done is closed once sp or err is set.
type savepointRequest struct {
	done chan struct{}
	sp   *hastorev1.Savepoint
	err  error
}

func (r *savepointRequest) end(sp *hastorev1.Savepoint, err error) {
	r.sp, r.err = sp, err
	close(r.done)
}

// pendingCheckpoint is the checkpoint in flight.
type pendingCheckpoint struct {
	id       uint64
	trigger  time.Time
	attempts map[int32]int // the triggered execution vertices, with their attempt numbers
	waiting  int           // TaskExecutors yet to answer
	states   map[int32]*jobplanev1.SubtaskState
	storing  bool // every ack is in; the store write is in flight
	stop     func() bool
	// savepoint, if set, makes it a savepoint of that request.
	savepoint *savepointRequest
}

// initCheckpoints sets up the coordinator from the job's config, and
// starts reading the latest checkpoint when the job may have one (an
// earlier JobMaster of the job ran).
func (jm *JobMaster) initCheckpoints() {
	cp := jm.cfg.Graph.GetConfig().GetCheckpoints()
	restore := jm.cfg.Graph.GetConfig().GetRestoreFromSavepoint()
	if jm.cfg.Checkpoints == nil {
		if cp.GetInterval().AsDuration() > 0 || restore != "" {
			jm.logger().Warn("the HA store keeps no checkpoints; the job runs without them")
		}
		return
	}
	// A job without periodic checkpoints that restores from no savepoint
	// gets its coordinator with its first savepoint: until then it has
	// nothing to coordinate, and a waiting job is kept small.
	if cp.GetInterval().AsDuration() <= 0 && restore == "" {
		return
	}
	c := jm.newCoordinator()
	// A job without periodic checkpoints never has any to read; its
	// savepoints are not restored from but by a job that names them.
	if jm.cfg.Adopt && c.enabled() || restore != "" {
		c.loading = true
		jm.loadCheckpoint(jm.cfg.Adopt)
	}
	jm.scheduleCheckpoint()
}

// newCoordinator sets up the job's checkpoint coordinator from its config.
func (jm *JobMaster) newCoordinator() *coordinator {
	cp := jm.cfg.Graph.GetConfig().GetCheckpoints()
	c := &coordinator{cfg: cp, store: jm.cfg.Checkpoints, counts: &jobplanev1.CheckpointCounts{}, stopTimer: func() bool { return false }}
	c.timeout = cp.GetTimeout().AsDuration()
	if c.timeout <= 0 {
		c.timeout = DefaultCheckpointTimeout
	}
	c.retain = max(int(cp.GetRetained()), 1)
	c.lastTrigger = time.Now()
	jm.ckpt = c
	return c
}

// loadCheckpoint reads the job's latest checkpoint (with latest: a
// JobMaster that took the job over, or one whose checkpoint write had an
// unknown outcome), or else the savepoint the job restores from,
// retrying with a backoff while the store fails.
func (jm *JobMaster) loadCheckpoint(latest bool) {
	c := jm.ckpt
	jm.goRPC(func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var cp *hastorev1.CompletedCheckpoint
		var last uint64
		var err error
		if latest {
			cp, last, err = c.store.LatestCheckpoint(rctx, jm.cfg.JobID)
		}
		var sp *hastorev1.Savepoint
		if restore := jm.cfg.Graph.GetConfig().GetRestoreFromSavepoint(); err == nil && cp == nil && restore != "" {
			sp, err = c.store.GetSavepoint(rctx, restore)
		}
		cancel()
		jm.post(func() {
			if errors.Is(err, hastore.ErrSavepointNotFound) {
				c.loading = false
				jm.failJob(fmt.Sprintf("the savepoint %q the job restores from does not exist (deleted after the job was submitted?)", jm.cfg.Graph.GetConfig().GetRestoreFromSavepoint()))
				return
			}
			if err != nil {
				if errors.Is(err, hastore.ErrCheckpointsUnsupported) {
					jm.logger().Warn("the HA store keeps no checkpoints; the job runs without them")
					c.stopTimer()
					jm.ckpt, jm.noCheckpoints = nil, true
					jm.progress()
					return
				}
				c.loadTry = min(max(2*c.loadTry, 50*time.Millisecond), 5*time.Second)
				jm.logger().Warn("reading the job's latest checkpoint failed; retrying", "err", err, "backoff", c.loadTry)
				jm.cfg.Router.after(c.loadTry, func() { jm.post(func() { jm.loadCheckpoint(latest) }) })
				return
			}
			c.loading = false
			if latest {
				c.lastID = max(c.lastID, last)
			}
			if cp != nil {
				jm.takeCheckpoint(cp)
				if cp.GetCounts() != nil && c.counts.GetTriggered() == 0 {
					c.counts = proto.CloneOf(cp.GetCounts()) // a new JobMaster counts on
				}
				jm.logger().Info("restoring from checkpoint", "checkpoint", cp.GetCheckpointId(), "states", len(cp.GetStates()))
			} else if sp != nil {
				jm.takeStates(sp.GetStates(), sp.GetSavepointId())
				jm.logger().Info("restoring from savepoint", "savepoint", sp.GetSavepointId(), "states", len(sp.GetStates()))
			}
			jm.progress()
		})
	})
}

// takeCheckpoint makes cp the one subtasks deployed from now on start
// from.
func (jm *JobMaster) takeCheckpoint(cp *hastorev1.CompletedCheckpoint) {
	jm.takeStates(cp.GetStates(), strconv.FormatUint(cp.GetCheckpointId(), 10))
	jm.ckpt.latest = checkpointInfo(cp.GetCheckpointId(), cp.GetTriggerTime(), cp.GetAckTime(), cp.GetStates())
}

// takeStates makes states, named from, the ones subtasks deployed from
// now on start from; states that name no subtask of the job are ignored.
func (jm *JobMaster) takeStates(states []*jobplanev1.SubtaskState, from string) {
	c := jm.ckpt
	c.states = make(map[int32]*jobplanev1.SubtaskState, len(states))
	for _, st := range states {
		if vi, ok := jm.vertexByID[st.GetVertexId()]; ok && st.GetSubtaskIndex() >= 0 && st.GetSubtaskIndex() < jm.cfg.Graph.GetVertices()[vi].GetParallelism() {
			c.states[jm.graph.ExecutionVertex(vi, int(st.GetSubtaskIndex()))] = st
		}
	}
	c.from = from
}

// checkpointInfo describes a checkpoint or savepoint without its states.
func checkpointInfo(id uint64, trigger, ack *timestamppb.Timestamp, states []*jobplanev1.SubtaskState) *jobplanev1.CheckpointInfo {
	info := &jobplanev1.CheckpointInfo{CheckpointId: id, TriggerTime: trigger, AckTime: ack}
	for _, st := range states {
		if st.GetState() != nil {
			info.SubtaskStates++
			info.StateBytes += int64(len(st.GetInline()))
		}
	}
	return info
}

// CheckpointInfo describes a stored checkpoint without its states.
func CheckpointInfo(cp *hastorev1.CompletedCheckpoint) *jobplanev1.CheckpointInfo {
	return checkpointInfo(cp.GetCheckpointId(), cp.GetTriggerTime(), cp.GetAckTime(), cp.GetStates())
}

// SavepointInfo describes a stored savepoint without its states.
func SavepointInfo(sp *hastorev1.Savepoint) *jobplanev1.SavepointInfo {
	return &jobplanev1.SavepointInfo{SavepointId: sp.GetSavepointId(), JobId: sp.GetJobId(),
		Checkpoint: checkpointInfo(sp.GetCheckpointId(), sp.GetTriggerTime(), sp.GetAckTime(), sp.GetStates())}
}

// checkpointStats is the job's checkpoint statistics; nil when it keeps
// no checkpoints.
func (jm *JobMaster) checkpointStats() *jobplanev1.CheckpointStats {
	c := jm.ckpt
	if c == nil || !c.enabled() && c.from == "" && c.latest == nil {
		return nil
	}
	st := &jobplanev1.CheckpointStats{Counts: proto.CloneOf(c.counts), Latest: c.latest, RestoredFrom: c.restoredFrom}
	if c.pending != nil && c.pending.savepoint == nil {
		st.InProgressId = c.pending.id
	}
	return st
}

// restoredState returns the state ev's next attempt starts from, and the
// checkpoint it comes from.
func (jm *JobMaster) restoredState(ev int32) (*jobplanev1.SubtaskState, string) {
	c := jm.ckpt
	if c == nil || c.states[ev] == nil {
		return nil, ""
	}
	c.restoredFrom = c.from
	return c.states[ev], c.from
}

// checkpointsEnabled reports whether the job takes periodic checkpoints.
func (c *coordinator) enabled() bool {
	return c != nil && c.cfg.GetInterval().AsDuration() > 0
}

// scheduleCheckpoint arms the next periodic trigger: an interval after
// the last, and at least the minimum pause after now (the end of the
// last checkpoint).
func (jm *JobMaster) scheduleCheckpoint() {
	c := jm.ckpt
	if !c.enabled() {
		return
	}
	c.stopTimer()
	at := c.lastTrigger.Add(c.cfg.GetInterval().AsDuration())
	if pause := c.cfg.GetMinPause().AsDuration(); pause > 0 {
		at = later(at, time.Now().Add(pause))
	}
	c.next = at
	c.stopTimer = jm.cfg.Router.after(time.Until(at), func() { jm.post(jm.triggerCheckpoint) })
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// triggerCheckpoint starts a periodic checkpoint when one is due; one
// in flight reschedules it when it ends.
func (jm *JobMaster) triggerCheckpoint() {
	c := jm.ckpt
	if !c.enabled() || c.pending != nil || time.Now().Before(c.next) {
		return
	}
	c.lastTrigger = time.Now()
	if c.loading || jm.status != jobstatus.Running {
		jm.scheduleCheckpoint()
		return
	}
	switch why := jm.trigger(nil); why {
	case "":
	case noneRuns:
		// Nothing to keep: no wake-up until a subtask runs (a waiting job
		// costs nothing).
		c.idle = true
	default:
		jm.logger().Debug("no checkpoint", "cause", why)
		jm.scheduleCheckpoint()
	}
}

// noneRuns is trigger's answer when no subtask runs.
const noneRuns = "no subtask runs"

// checkpointRunning wakes the periodic checkpoints of a job that had no
// subtask running, now that one runs.
func (jm *JobMaster) checkpointRunning() {
	if c := jm.ckpt; c != nil && c.idle {
		c.idle = false
		jm.scheduleCheckpoint()
	}
}

// Savepoint takes a savepoint of the job and returns it once it is
// durable; it fails with SAVEPOINT_FAILED if the savepoint could not be
// taken, and UNIMPLEMENTED if the store keeps no checkpoints.
func (jm *JobMaster) Savepoint(ctx context.Context) (*hastorev1.Savepoint, error) {
	req := &savepointRequest{done: make(chan struct{})}
	if err := jm.do(ctx, func() { jm.requestSavepoint(req) }); err != nil {
		return nil, err
	}
	select {
	case <-req.done:
		return req.sp, req.err
	case <-jm.done:
		select {
		case <-req.done: // ended as the JobMaster stopped: its own answer
			return req.sp, req.err
		default:
			return nil, jm.notLeader()
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// savepointFailed is the error of a savepoint that could not be taken.
func (jm *JobMaster) savepointFailed(why string) error {
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_FAILED, "no savepoint: "+why, map[string]string{"job_id": jm.cfg.JobID})
}

func (jm *JobMaster) requestSavepoint(req *savepointRequest) {
	c := jm.ckpt
	if c == nil && jm.cfg.Checkpoints != nil && !jm.noCheckpoints {
		c = jm.newCoordinator()
	}
	switch {
	case c == nil:
		req.end(nil, connect.NewError(connect.CodeUnimplemented, errors.New("the server's HA store keeps no checkpoints, so no savepoints")))
	case jm.status != jobstatus.Running:
		req.end(nil, jm.savepointFailed(fmt.Sprintf("the job is %v, not RUNNING; retry once it runs", jm.status)))
	case c.loading:
		req.end(nil, jm.savepointFailed("the job is being restored; retry once it runs"))
	case c.pending != nil:
		c.savepoints = append(c.savepoints, req)
	default:
		if why := jm.trigger(req); why != "" {
			req.end(nil, jm.savepointFailed(why))
		}
	}
}

// trigger starts a checkpoint, or a savepoint for sp: every RUNNING
// subtask is asked for its state, one call per TaskExecutor. It returns
// why it started none.
func (jm *JobMaster) trigger(sp *savepointRequest) (why string) {
	c := jm.ckpt
	byExecutor := map[string][]int32{}
	for ev := range int32(jm.graph.Subtasks()) {
		if jm.graph.State(ev) == jobstatus.ExecRunning && jm.tasks[ev].slot != nil {
			id := jm.tasks[ev].slot.executor
			byExecutor[id] = append(byExecutor[id], ev)
		}
	}
	if len(byExecutor) == 0 {
		return noneRuns
	}
	for id := range byExecutor {
		if jm.executors[id] == nil {
			return "TaskExecutor " + id + " is not registered"
		}
	}
	c.lastID++
	if sp == nil {
		c.counts.Triggered++
	}
	p := &pendingCheckpoint{id: c.lastID, trigger: time.Now(), attempts: map[int32]int{}, states: map[int32]*jobplanev1.SubtaskState{}, waiting: len(byExecutor), savepoint: sp}
	c.pending = p
	p.stop = jm.cfg.Router.after(c.timeout, func() {
		jm.post(func() {
			if !p.storing { // a store write in flight ends by its own deadline
				jm.checkpointFailed(p, fmt.Sprintf("checkpoint %d timed out after %v", p.id, c.timeout))
			}
		})
	})
	token := protoToken(jm.cfg.Token)
	for id, evs := range byExecutor {
		e := jm.executors[id]
		attempts := make([]*jobplanev1.ExecutionAttemptId, len(evs))
		for i, ev := range evs {
			attempts[i] = jm.attemptID(ev)
			p.attempts[ev] = jm.graph.Attempt(ev)
		}
		client := e.client
		jm.goRPC(func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			resp, err := client.TriggerCheckpoint(ctx, &clusterv1.TriggerCheckpointRequest{
				JobId: jm.cfg.JobID, JobMasterToken: token, CheckpointId: p.id, Attempts: attempts, Savepoint: sp != nil,
			})
			jm.post(func() { jm.acknowledged(p, id, evs, resp, err) })
		})
	}
	return ""
}

// acknowledged takes one TaskExecutor's answer to a pending checkpoint.
func (jm *JobMaster) acknowledged(p *pendingCheckpoint, executor string, evs []int32, resp *clusterv1.TriggerCheckpointResponse, err error) {
	c := jm.ckpt
	if c == nil || c.pending != p {
		return // discarded meanwhile
	}
	if err != nil {
		jm.checkpointFailed(p, fmt.Sprintf("checkpoint %d: TaskExecutor %s: %v", p.id, executor, err))
		return
	}
	if len(resp.GetAcks()) != len(evs) {
		jm.checkpointFailed(p, fmt.Sprintf("checkpoint %d: TaskExecutor %s answered %d of %d attempts", p.id, executor, len(resp.GetAcks()), len(evs)))
		return
	}
	limit := jm.maxInlineState()
	for i, ack := range resp.GetAcks() {
		ev := evs[i]
		if why := ack.GetDeclined(); why != "" {
			jm.checkpointFailed(p, fmt.Sprintf("checkpoint %d declined by %s: %s", p.id, jm.attemptName(ev), why))
			return
		}
		st := ack.GetState()
		if n := len(st.GetInline()); n > limit {
			jm.checkpointFailed(p, fmt.Sprintf("checkpoint %d: %s gave %d bytes of state, over the limit of %d; write larger state elsewhere and give a pointer", p.id, jm.attemptName(ev), n, limit))
			return
		}
		if st.GetState() != nil {
			v, subtask := jm.vertex(ev)
			p.states[ev] = &jobplanev1.SubtaskState{VertexId: v.GetId(), SubtaskIndex: int32(subtask), State: st.GetState()}
		}
	}
	if p.waiting--; p.waiting > 0 {
		return
	}
	jm.storeCheckpoint(p)
}

// storeCheckpoint writes the checkpoint whose every ack is in: the
// subtasks' states, and for each subtask not asked (not running) the
// state it had in the latest completed checkpoint, which it still starts
// from.
func (jm *JobMaster) storeCheckpoint(p *pendingCheckpoint) {
	c := jm.ckpt
	p.storing = true
	now := time.Now()
	var states []*jobplanev1.SubtaskState
	for ev := range int32(jm.graph.Subtasks()) {
		st := p.states[ev]
		if _, asked := p.attempts[ev]; !asked {
			st = c.states[ev]
		}
		if st != nil {
			states = append(states, st)
		}
	}
	var (
		cp   *hastorev1.CompletedCheckpoint
		save *hastorev1.Savepoint
		msg  proto.Message
	)
	if p.savepoint != nil {
		save = &hastorev1.Savepoint{
			SavepointId: savepointID(jm.cfg.JobID, jm.cfg.RunID, p.id), JobId: jm.cfg.JobID, CheckpointId: p.id,
			TriggerTime: timestamppb.New(p.trigger), AckTime: timestamppb.New(now), States: states,
		}
		msg = save
	} else {
		c.counts.Completed++ // as of this checkpoint, if it completes
		counts := proto.CloneOf(c.counts)
		c.counts.Completed--
		cp = &hastorev1.CompletedCheckpoint{
			JobId: jm.cfg.JobID, CheckpointId: p.id, TriggerTime: timestamppb.New(p.trigger), AckTime: timestamppb.New(now),
			Counts: counts, RestoredFrom: c.from, States: states,
		}
		msg = cp
	}
	if n := proto.Size(msg); n > DefaultMaxCheckpointBytes {
		jm.checkpointFailed(p, fmt.Sprintf("checkpoint %d is %d bytes, over the store's limit of %d; give pointers to larger state", p.id, n, DefaultMaxCheckpointBytes))
		return
	}
	fence := hastore.Fence{Election: election.Job(jm.cfg.JobID), Token: jm.cfg.Token}
	jm.goRPC(func(ctx context.Context) {
		if !jm.valid() {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		if save != nil {
			err = c.store.AddSavepoint(ctx, fence, save)
		} else {
			_, err = c.store.AddCheckpoint(ctx, fence, cp, c.retain)
		}
		jm.post(func() {
			if c.pending != p {
				return
			}
			if err != nil {
				jm.checkpointFailed(p, fmt.Sprintf("storing checkpoint %d failed: %v", p.id, err))
				if !errors.Is(err, hastore.ErrStaleToken) && !errors.Is(err, hastore.ErrInvalidArgument) && jm.ckpt == c && !c.loading {
					// The write may have been applied after all (its answer
					// lost), or the store knows a greater id: read back what
					// it holds before anything is deployed again.
					c.loading = true
					jm.loadCheckpoint(true)
				}
				return
			}
			p.stop()
			c.pending = nil
			telemetry.CheckpointEnded(context.Background(), save != nil, true, time.Since(p.trigger), time.Since(now))
			if save != nil {
				jm.logger().Info("savepoint completed", "savepoint", save.GetSavepointId(), "states", len(states), "took", time.Since(p.trigger))
				p.savepoint.end(save, nil)
			} else {
				c.failures = 0
				c.counts.Completed++
				jm.takeCheckpoint(cp)
				jm.logger().Debug("checkpoint completed", "checkpoint", p.id, "states", len(states), "bytes", proto.Size(cp), "took", time.Since(p.trigger))
			}
			jm.checkpointEnded()
		})
	})
}

// checkpointEnded starts what waited for the checkpoint in flight to end:
// the next savepoint asked for, or else the next periodic checkpoint.
func (jm *JobMaster) checkpointEnded() {
	c := jm.ckpt
	for len(c.savepoints) > 0 && c.pending == nil {
		req := c.savepoints[0]
		c.savepoints = c.savepoints[1:]
		jm.requestSavepoint(req)
	}
	jm.scheduleCheckpoint()
}

// checkpointFailed discards the pending checkpoint p and counts it; past
// the tolerated failures in a row, the job's running subtasks restart (as
// the restart strategy says) from the latest completed checkpoint.
func (jm *JobMaster) checkpointFailed(p *pendingCheckpoint, why string) {
	c := jm.ckpt
	if c == nil || c.pending != p {
		return
	}
	if p.storing && jm.cutOff.Load() {
		return // the leadership ended with the write in flight; its outcome is unknown
	}
	p.stop()
	c.pending = nil
	telemetry.CheckpointEnded(context.Background(), p.savepoint != nil, false, 0, 0)
	if p.savepoint != nil {
		jm.logger().Info("savepoint failed", "checkpoint", p.id, "cause", why)
		p.savepoint.end(nil, jm.savepointFailed(why))
		jm.checkpointEnded()
		return
	}
	c.counts.Failed++
	c.failures++
	jm.logger().Info("checkpoint failed", "checkpoint", p.id, "cause", why, "in_a_row", c.failures)
	jm.checkpointEnded()
	if tol := c.cfg.TolerableFailures; tol != nil && c.failures > int(*tol) && jm.status == jobstatus.Running {
		c.failures = 0
		jm.jobFailed(fmt.Sprintf("%d checkpoints failed in a row, more than the %d tolerated; the last: %s", int(*tol)+1, *tol, why))
	}
}

// abortCheckpointOf discards the pending checkpoint if ev's attempt was
// asked for its state and has stopped other than FINISHED: its state
// could be newer than what the subtask restarts from.
func (jm *JobMaster) abortCheckpointOf(ev int32, to jobplanev1.ExecutionState) {
	c := jm.ckpt
	if c == nil || c.pending == nil || c.pending.storing || to == jobstatus.ExecFinished {
		return
	}
	if _, asked := c.pending.attempts[ev]; asked {
		jm.checkpointFailed(c.pending, fmt.Sprintf("checkpoint %d: %s stopped (%v) before the checkpoint completed", c.pending.id, jm.attemptName(ev), to))
	}
}

// stopCheckpoints stops the coordinator's timers when the JobMaster
// stops.
func (jm *JobMaster) stopCheckpoints() {
	c := jm.ckpt
	if c == nil {
		return
	}
	c.stopTimer()
	if p := c.pending; p != nil {
		p.stop()
		if p.savepoint != nil {
			p.savepoint.end(nil, jm.savepointFailed(fmt.Sprintf("the job's JobMaster stopped (the job is %v)", jm.status)))
		}
	}
	for _, req := range c.savepoints {
		req.end(nil, jm.savepointFailed(fmt.Sprintf("the job's JobMaster stopped (the job is %v)", jm.status)))
	}
	c.savepoints = nil
}

// failJob fails the job without a restart.
func (jm *JobMaster) failJob(msg string) {
	jm.logger().Info("job failed", "cause", msg)
	jm.restartOrFail(&jobplanev1.FailureInfo{Message: msg, Time: timestamppb.Now()}, nil, false)
}

// jobFailed fails the job as a whole, as a task failure would fail its
// region: every region restarts, or the job fails, as the restart
// strategy says.
func (jm *JobMaster) jobFailed(msg string) {
	jm.logger().Info("job failed", "cause", msg)
	all := make([]int, jm.graph.Regions())
	for r := range all {
		all[r] = r
	}
	jm.restartOrFail(&jobplanev1.FailureInfo{Message: msg, Time: timestamppb.Now()}, all, true)
}

// attemptName names ev's current attempt for messages.
func (jm *JobMaster) attemptName(ev int32) string {
	v, subtask := jm.vertex(ev)
	return fmt.Sprintf("subtask %s[%d] attempt %d", v.GetId(), subtask, jm.graph.Attempt(ev))
}

// maxInlineState is the largest state a subtask may give inline.
func (jm *JobMaster) maxInlineState() int {
	if jm.cfg.MaxInlineStateBytes > 0 {
		return jm.cfg.MaxInlineStateBytes
	}
	return DefaultMaxInlineStateBytes
}

// savepointID names a savepoint of a run of a job: the job id, the first
// 16 hex digits of the SHA-256 of the run id, and the checkpoint id; at
// most 105 bytes for a job id of 64. The run is in the name because
// savepoints outlive their run, and a later run of the job id counts
// checkpoint ids from 1 again (DispatcherService.TriggerSavepoint).
func savepointID(jobID, runID string, checkpoint uint64) string {
	sum := sha256.Sum256([]byte(runID))
	return fmt.Sprintf("sp-%s-%x-%d", jobID, sum[:8], checkpoint)
}
