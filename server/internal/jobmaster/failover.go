package jobmaster

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// failover restarts a set of regions (a union of restart sets) once the
// restart delay has passed and every attempt in them has stopped.
type failover struct {
	regions []int
	live    int  // attempts of its regions not yet stopped
	due     bool // the restart delay has passed
	stop    func() bool
}

// attemptFailed fails ev's attempt. Unless its region is already being
// restarted (or the job is stopping), the failure counts against the
// restart strategy, which either restarts the region and everything
// downstream of it, or fails the job.
func (jm *JobMaster) attemptFailed(ev int32, msg, executor string) {
	info := &jobplanev1.FailureInfo{Message: msg, Time: timestamppb.Now(), Attempt: jm.attemptID(ev), TaskExecutorId: executor}
	jm.tasks[ev].failure = info
	jm.setState(ev, jobstatus.ExecFailed)
	if jm.status != jobstatus.Running || jm.restarting[jm.graph.RegionOf(ev)] != nil {
		jm.progress()
		return
	}
	a := info.GetAttempt()
	jm.logger().Info("task failed", "vertex", a.GetVertexId(), "subtask", a.GetSubtaskIndex(), "attempt", a.GetAttemptNumber(), "cause", msg)
	jm.restartOrFail(info, jm.graph.RestartSet(ev), true)
}

// restartOrFail records a failure that restarts or fails the job: with
// restart, the regions of set restart if the restart strategy allows it,
// and otherwise (or without restart) the job fails.
func (jm *JobMaster) restartOrFail(info *jobplanev1.FailureInfo, set []int, restart bool) {
	jm.failure = info
	jm.exceptions = append([]*jobplanev1.FailureInfo{info}, jm.exceptions[:min(len(jm.exceptions), maxExceptions-1)]...)
	var delay time.Duration
	if restart {
		delay, restart = jm.restart.next(jm.clock.Now())
	}
	if !restart {
		jm.setStatus(jobstatus.Failing)
		jm.stopAll(jobstatus.Failed)
	} else {
		telemetry.JobRestarted(context.Background())
		before := jm.status
		jm.failover(set, delay)
		if jm.status == before && jm.cfg.OnStatus != nil {
			// A restart of some regions leaves the job RUNNING: its
			// watchers are told of the restart all the same (WatchJob,
			// since contract 1.2). A restart of every region moved the job
			// to RESTARTING, which setStatus reported with this count.
			jm.cfg.OnStatus(jm.summaryLocked())
		}
	}
	jm.progress()
}

// failover cancels the attempts of the regions in set, merged with any
// pending failover they overlap, and restarts them all after delay.
func (jm *JobMaster) failover(set []int, delay time.Duration) {
	f := &failover{}
	in := make(map[int]bool, len(set))
	add := func(r int) {
		if !in[r] {
			in[r] = true
			f.regions = append(f.regions, r)
		}
	}
	for _, r := range set {
		if old := jm.restarting[r]; old != nil {
			old.stop()
			jm.failovers = slices.DeleteFunc(jm.failovers, func(x *failover) bool { return x == old })
			for _, or := range old.regions {
				add(or)
			}
		}
		add(r)
	}
	for _, r := range f.regions {
		jm.restarting[r] = f
		for _, ev := range jm.graph.Region(r) {
			if isLive(jm.graph.State(ev)) {
				f.live++
			}
		}
	}
	jm.failovers = append(jm.failovers, f)
	if len(f.regions) == jm.graph.Regions() {
		jm.setStatus(jobstatus.Restarting)
	}
	jm.logger().Info("restarting regions", "regions", len(f.regions), "delay", delay)
	f.stop = func() bool { return false }
	if delay <= 0 {
		f.due = true
	} else {
		f.stop = jm.clock.AfterFunc(delay, func() {
			jm.post(func() {
				f.due = true
				jm.progress()
			})
		})
	}
	for _, r := range f.regions {
		for _, ev := range jm.graph.Region(r) {
			jm.stopAttempt(ev)
		}
	}
}

// stopAttempt cancels ev's attempt if it was deployed; an attempt waiting
// for a slot just stays CREATED.
func (jm *JobMaster) stopAttempt(ev int32) {
	switch jm.graph.State(ev) {
	case jobstatus.ExecDeploying:
		jm.tasks[ev].cancelOn = true
		jm.cancelAttempt(ev)
	case jobstatus.ExecScheduled, jobstatus.ExecInitializing, jobstatus.ExecRunning:
		jm.cancelAttempt(ev)
	}
}

// restartDue restarts the regions of every failover whose delay passed
// and whose attempts have all stopped.
func (jm *JobMaster) restartDue() {
	kept := jm.failovers[:0]
	for _, f := range jm.failovers {
		if !f.due || f.live > 0 {
			kept = append(kept, f)
			continue
		}
		for _, r := range f.regions {
			jm.restarting[r] = nil
			for _, ev := range jm.graph.Region(r) {
				jm.forgetResult(ev) // only the attempt that finally finishes counts
				jm.tasks[ev] = task{}
			}
		}
		for _, r := range jm.graph.Restart(f.regions) {
			if jm.queued[r] {
				jm.waitForSlots(r) // a restarted region waits for slots anew
			} else {
				jm.enqueue(r)
			}
		}
	}
	clear(jm.failovers[len(kept):])
	jm.failovers = kept
	if jm.status == jobstatus.Restarting && len(jm.failovers) == 0 {
		jm.setStatus(jobstatus.Running)
	}
}

// stopFailovers drops every pending failover.
func (jm *JobMaster) stopFailovers() {
	for _, f := range jm.failovers {
		f.stop()
		for _, r := range f.regions {
			jm.restarting[r] = nil
		}
	}
	jm.failovers = nil
}

// stopAll cancels every attempt; the job moves to end once all are
// terminal (see progress).
func (jm *JobMaster) stopAll(end jobplanev1.JobStatus) {
	jm.endStatus = end
	jm.stopFailovers()
	for ev := range int32(jm.graph.Subtasks()) {
		if jm.graph.State(ev) == jobstatus.ExecCreated {
			jm.setState(ev, jobstatus.ExecCanceled)
			continue
		}
		jm.stopAttempt(ev)
	}
}

// cancelAttempt asks the TaskExecutor to cancel an attempt; if it cannot
// be reached, the attempt counts as canceled.
func (jm *JobMaster) cancelAttempt(ev int32) {
	t := &jm.tasks[ev]
	t.canceled = true
	if jm.graph.State(ev) != jobstatus.ExecDeploying {
		jm.setState(ev, jobstatus.ExecCanceling)
	}
	if t.slot == nil || jm.executors[t.slot.executor] == nil {
		jm.setState(ev, jobstatus.ExecCanceled)
		return
	}
	executor := t.slot.executor
	client := jm.executors[executor].client
	req := &clusterv1.CancelTaskRequest{JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), Attempt: jm.attemptID(ev)}
	attempt := jm.graph.Attempt(ev)
	jm.goRPC(func(ctx context.Context) {
		// Retry a while: an attempt counts as canceled without the
		// TaskExecutor's word only once it cannot be reached at all.
		var err error
		for try := range 5 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = client.CancelTask(cctx, req)
			cancel()
			if err == nil || ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
			}
		}
		jm.logger().Warn("canceling an attempt failed; counting it as canceled once it is known to have stopped", "attempt", req.GetAttempt(), "err", err)
		jm.post(func() {
			if jm.graph.Attempt(ev) == attempt && !jobstatus.IsExecTerminal(jm.graph.State(ev)) {
				jm.orphan(ev, attempt, executor)
				jm.setState(ev, jobstatus.ExecCanceled)
				jm.progress()
			}
		})
	})
}
