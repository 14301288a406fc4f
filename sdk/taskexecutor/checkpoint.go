package taskexecutor

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// State is a subtask's part of a checkpoint: the bytes its task gives, or
// a pointer to state it wrote elsewhere. Set at most one of the two; a
// zero State means the task keeps nothing.
type State struct {
	// Data is the state itself, kept in the HA store with the checkpoint
	// (the JobManager limits its size: ServerLimits.max_inline_state_bytes).
	Data []byte
	// Pointer names state the task wrote elsewhere, such as a file or
	// object URL; jobplane keeps it and hands it back, and never reads it.
	Pointer string
}

// SnapshotFunc gives a task's state for a checkpoint. It is called on a
// goroutine of its own while the task runs, once per checkpoint, so it
// must synchronize with the task; ctx ends when the checkpoint is given
// up or the attempt ends. An error declines the checkpoint, which is
// then discarded.
type SnapshotFunc func(ctx context.Context, checkpointID uint64) (State, error)

// stateOf converts a SubtaskState to a State; nil when it holds none.
func stateOf(s *jobplanev1.SubtaskState) *State {
	switch v := s.GetState().(type) {
	case *jobplanev1.SubtaskState_Inline:
		return &State{Data: v.Inline}
	case *jobplanev1.SubtaskState_Pointer:
		return &State{Pointer: v.Pointer}
	}
	return nil
}

// subtaskState converts a task's state to the SubtaskState of attempt a.
func subtaskState(a *jobplanev1.ExecutionAttemptId, st *State) *jobplanev1.SubtaskState {
	out := &jobplanev1.SubtaskState{VertexId: a.GetVertexId(), SubtaskIndex: a.GetSubtaskIndex()}
	switch {
	case st == nil:
	case st.Pointer != "":
		out.State = &jobplanev1.SubtaskState_Pointer{Pointer: st.Pointer}
	case st.Data != nil:
		out.State = &jobplanev1.SubtaskState_Inline{Inline: st.Data}
	}
	return out
}

// snapshot is one checkpoint's request to one attempt; done is closed once
// ack is set.
type snapshot struct {
	id   uint64
	done chan struct{}
	ack  *clusterv1.CheckpointAck
}

// snapshotLocked returns the attempt's answer to checkpoint id, asking its
// task once per id (a repeated trigger waits for the same answer). A task
// that registered no SnapshotFunc answers with the state it was restored
// from: it has not said it keeps any other. te.mu must be held.
func (te *TaskExecutor) snapshotLocked(t *task, id uint64, ctx context.Context) *snapshot {
	if s := t.snapshot; s != nil && s.id == id {
		return s
	}
	s := &snapshot{id: id, done: make(chan struct{})}
	t.snapshot = s
	a := t.req.GetAttempt()
	fn := t.snapshotFn
	if fn == nil {
		s.ack = &clusterv1.CheckpointAck{Attempt: a, State: subtaskState(a, stateOf(t.req.GetRestoredState()))}
		close(s.done)
		return s
	}
	te.goRunLocked(func() {
		defer close(s.done)
		st, err := callSnapshot(ctx, fn, id)
		if err != nil {
			s.ack = &clusterv1.CheckpointAck{Attempt: a, Declined: fmt.Sprintf("the task declined checkpoint %d on TaskExecutor %s: %v", id, te.cfg.ID, err)}
			return
		}
		if st.Pointer != "" && st.Data != nil {
			s.ack = &clusterv1.CheckpointAck{Attempt: a, Declined: fmt.Sprintf("the task gave both state bytes and a pointer for checkpoint %d; give one", id)}
			return
		}
		s.ack = &clusterv1.CheckpointAck{Attempt: a, State: subtaskState(a, &st)}
	})
	return s
}

// callSnapshot calls fn, turning a panic into an error.
func callSnapshot(ctx context.Context, fn SnapshotFunc, id uint64) (st State, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("snapshot panicked: %v", p)
		}
	}()
	return fn(ctx, id)
}

// TriggerCheckpoint asks the named attempts for their state (see the
// proto). The wait is bounded by the call's deadline and by each
// attempt's end.
func (h *handler) TriggerCheckpoint(ctx context.Context, req *clusterv1.TriggerCheckpointRequest) (*clusterv1.TriggerCheckpointResponse, error) {
	te := h.te
	fields := jobFields(req.GetJobId(), req.GetJobMasterToken())
	if req.GetCheckpointId() == 0 {
		fields = append(fields, apierror.Field{Path: "checkpoint_id", Description: "required"})
	}
	if len(req.GetAttempts()) == 0 {
		fields = append(fields, apierror.Field{Path: "attempts", Description: "required"})
	}
	for i, a := range req.GetAttempts() {
		if a.GetVertexId() == "" {
			fields = append(fields, apierror.Field{Path: fmt.Sprintf("attempts[%d].vertex_id", i), Description: "required"})
		}
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	token := tokenOf(req.GetJobMasterToken())
	snaps := make([]*snapshot, len(req.GetAttempts()))
	te.mu.Lock()
	if err := te.checkJobLocked(ctx, req.GetJobId(), token); err != nil {
		te.mu.Unlock()
		return nil, err
	}
	if err := te.followLocked(req.GetJobId(), token); err != nil {
		te.mu.Unlock()
		return nil, err
	}
	for i, a := range req.GetAttempts() {
		t := te.taskLocked(req.GetJobId(), a)
		if t == nil || t.token != token || t.ended || t.state != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
			snaps[i] = &snapshot{done: closed, ack: &clusterv1.CheckpointAck{Attempt: a,
				Declined: fmt.Sprintf("the attempt is not running under this JobMaster on TaskExecutor %s", te.cfg.ID)}}
			continue
		}
		snaps[i] = te.snapshotLocked(t, req.GetCheckpointId(), t.ctx)
	}
	te.mu.Unlock()
	resp := &clusterv1.TriggerCheckpointResponse{Acks: make([]*clusterv1.CheckpointAck, len(snaps))}
	for i, s := range snaps {
		select {
		case <-s.done:
			resp.Acks[i] = s.ack
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("checkpoint %d: waiting for the tasks' state: %w", req.GetCheckpointId(), ctx.Err()))
		}
	}
	return resp, nil
}

// closed is a closed channel.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// taskLocked returns the job's task of attempt a here, or nil. te.mu must
// be held.
func (te *TaskExecutor) taskLocked(jobID string, a *jobplanev1.ExecutionAttemptId) *task {
	for _, s := range te.slots {
		if s.jobID == jobID && s.task != nil && sameAttempt(s.task.req.GetAttempt(), a) {
			return s.task
		}
	}
	return nil
}
