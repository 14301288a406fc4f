package jobmaster

import (
	"context"
	"slices"
	"sync"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// suspend stops the JobMaster without a result: its attempts are canceled
// and its slots freed, best effort and bounded. Under a task lease the
// running attempts are left to the successor, which adopts them, and
// only the idle slots are freed.
func (jm *JobMaster) suspend() {
	jm.stopFailovers()
	if jm.cfg.TaskLease > 0 {
		jm.logger().Info("suspending; the running attempts are left for the next JobMaster to adopt", "live", jm.live)
		jm.release(context.Background(), true)
		jm.suspended()
		return
	}
	jm.logger().Info("suspending")
	// Cancel every attempt at once, under one deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var wg sync.WaitGroup
	for _, s := range jm.slots {
		if s.ev < 0 || jobstatus.IsExecTerminal(jm.graph.State(s.ev)) {
			continue
		}
		if e := jm.executors[s.executor]; e != nil {
			req := &clusterv1.CancelTaskRequest{JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), Attempt: jm.attemptID(s.ev)}
			client := e.client
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = client.CancelTask(ctx, req)
			}()
		}
	}
	wg.Wait()
	cancel()
	jm.release(context.Background(), false)
	jm.suspended()
}

// suspended tells OnStatus that the JobMaster suspended.
func (jm *JobMaster) suspended() {
	if jm.cfg.OnStatus != nil {
		s := jm.summaryLocked()
		s.Status = jobstatus.Suspended
		jm.cfg.OnStatus(s)
	}
}

// trimSlots gives back idle slots the job no longer needs (their regions
// finished), so that other jobs can use them while this one runs.
//
// A slot is given back only once the ResourceManager knows the job needs
// fewer: freed while it still counts the higher need, the slot would be
// allocated to the job again.
func (jm *JobMaster) trimSlots() {
	if jm.declaring || jm.declared > jm.neededLocked() {
		return // declare sends the lower need first, then trims
	}
	excess := len(jm.slots) - jm.neededLocked()
	if excess <= 0 {
		return
	}
	var idle []*slotRef
	for _, s := range jm.slots {
		if len(idle) == excess {
			break
		}
		if s.ev < 0 {
			idle = append(idle, s)
		}
	}
	jm.giveBack(idle, "no longer needed")
}

// armYield has yieldSlots run after the yield delay, unless it is due
// already: the job holds idle slots while a region waits for more.
func (jm *JobMaster) armYield() {
	if jm.yieldArmed || jm.yieldDelay <= 0 {
		return
	}
	jm.yieldArmed = true
	jm.cfg.Router.after(jm.yieldDelay, func() { jm.post(jm.yieldSlots) })
}

// yieldSlots gives back every idle slot of a job that holds fewer than a
// waiting region needs, and doubles the delay before it does so again
// (armYield, once it holds idle slots again). The job's requirement stays
// declared, so the ResourceManager hands the slots out again, oldest
// request first: to this job if it asked first, else to a job that asked
// before it.
//
// Without it, jobs that each hold part of what they need could wait for
// one another until the slot timeout: after a failover, the
// TaskExecutors offer the new JobMasters the slots their jobs held
// before, outside the ResourceManager's order, and three recovered jobs
// of four subtasks each may hold three, two and three of eight slots.
// Slots given back go to the job first in the ResourceManager's line,
// which gets all it needs once the others gave back theirs. As the
// ResourceManager learns of freed slots from the TaskExecutors' reports,
// one at a time, a round may still leave two jobs short; the next comes
// after twice the delay. A job that holds no idle slot arms nothing.
func (jm *JobMaster) yieldSlots() {
	jm.yieldArmed = false
	if jm.status != jobstatus.Running {
		return
	}
	var idle []*slotRef
	for _, s := range jm.slots {
		if s.ev < 0 {
			idle = append(idle, s)
		}
	}
	short := 0 // subtasks of a region that waits for more slots than idle
	for _, r := range jm.ready {
		if jm.restarting[r] != nil || !jm.graph.Released(r) {
			continue
		}
		waiting := 0
		for _, ev := range jm.graph.Region(r) {
			if jm.graph.State(ev) == jobstatus.ExecCreated {
				waiting++
			}
		}
		if waiting > len(idle) {
			short = waiting
			break
		}
	}
	if len(idle) == 0 || short == 0 {
		return // nothing held, or no region waits for slots
	}
	jm.yieldDelay = min(2*jm.yieldDelay, jm.cfg.SlotTimeout)
	jm.logger().Info("giving back idle slots while waiting for more", "region_subtasks", short, "idle_slots", len(idle))
	jm.giveBack(idle, "given back while the job waits for more")
}

// giveBack frees the given idle slots at their TaskExecutors, one
// FreeSlots call per TaskExecutor, and forgets them.
func (jm *JobMaster) giveBack(idle []*slotRef, reason string) {
	byExecutor := map[string][]string{} // TaskExecutor id -> allocation ids
	var order []string
	for _, s := range idle {
		delete(jm.slots, s.allocationID)
		if jm.executors[s.executor] == nil {
			continue
		}
		setKey(&jm.dropped, s.allocationID, s.executor) // freed again while the TaskExecutor still shows it
		if byExecutor[s.executor] == nil {
			order = append(order, s.executor)
		}
		byExecutor[s.executor] = append(byExecutor[s.executor], s.allocationID)
	}
	token := protoToken(jm.cfg.Token)
	for _, id := range order {
		client, aids := jm.executors[id].client, byExecutor[id]
		jm.goRPC(func(ctx context.Context) {
			// Not cut off when the JobMaster stops: the slots are no longer listed
			// for release, so this call is the only one to free them.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if freed := client.freeSlots(ctx, jm.cfg.JobID, token, aids, reason); len(freed) < len(aids) {
				jm.logger().Debug("freeing idle slots", "task_executor", id, "slots", len(aids), "freed", len(freed))
			}
		})
	}
}

// release frees every slot (or, with keepLive, every slot but those of
// live attempts) and disconnects from the ResourceManager.
func (jm *JobMaster) release(ctx context.Context, keepLive bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	token := protoToken(jm.cfg.Token)
	held := map[string]string{} // allocation id -> TaskExecutor id
	for aid, s := range jm.slots {
		if keepLive && s.ev >= 0 && isLive(jm.graph.State(s.ev)) {
			continue
		}
		held[aid] = s.executor
	}
	for aid, executor := range jm.dropped {
		held[aid] = executor
	}
	byExecutor := map[string][]string{}
	for aid, executor := range held {
		if jm.executors[executor] != nil {
			byExecutor[executor] = append(byExecutor[executor], aid)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		freed []string
	)
	for executor, aids := range byExecutor {
		client := jm.executors[executor].client
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := client.freeSlots(ctx, jm.cfg.JobID, token, aids, "job ended")
			mu.Lock()
			freed = append(freed, ok...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	jm.slots, jm.dropped = map[string]*slotRef{}, map[string]string{}
	// The slots the TaskExecutors freed count as free at the
	// ResourceManager at once, before the job's result is written; the
	// others are freed by their TaskExecutors, which stop hearing from this
	// JobMaster.
	slices.Sort(freed)
	_, _ = jm.cfg.ResourceManager.DisconnectJobMaster(ctx, &clusterv1.DisconnectJobMasterRequest{
		JobId: jm.cfg.JobID, JobMasterToken: token, ResourceManagerToken: jm.rmToken.Load(), Reason: "job ended", FreedAllocationIds: freed,
	})
}
