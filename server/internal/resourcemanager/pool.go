package resourcemanager

import (
	"slices"
	"sync/atomic"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/internal/liveness"
)

// pool is what the ResourceManager knows under one leadership: the
// TaskExecutors, their slots and the allocations on them, and the jobs'
// requirements, indexed so that every change costs what it changes. A
// freed slot is matched with the jobs waiting for one, and a raised
// requirement with the free slots; nothing passes over every job or slot,
// and with no free slot, or no job waiting, allocating costs nothing.
//
// It is not safe for concurrent use: the ResourceManager holds its mutex.
type pool struct {
	executors   map[string]*executor
	order       []string // executor ids, sorted, for a stable placement
	jobs        map[string]*jobNeeds
	allocations map[string]*allocation
	byJob       map[string]map[string]*allocation // job id -> its allocations
	// waiting[head:] lists the jobs that may hold fewer slots than they
	// require, in the order they asked; entries are checked when taken.
	// Serving the oldest moves head, so that serving one job costs the
	// same with ten jobs waiting or a hundred thousand.
	waiting []string
	head    int
	queued  map[string]bool
	// freed are allocations that JobMasters freed (allocation id ->
	// TaskExecutor id), until a slot report no longer shows them: a report
	// sent before the FreeSlot must not allocate them again.
	freed map[string]string
	// total and used count all slots and the allocated ones.
	total, used int
	// offered counts, for each invokable, the registered TaskExecutors
	// that offer it, so that a submission checks its invokables without
	// a pass over the TaskExecutors (see NotOffered).
	offered map[string]int
}

type executor struct {
	id, address    string
	registrationID string
	heard          liveness.Mark // the last heartbeat (or registration)
	slots          int
	used           map[int]*allocation // by slot index
	invokables     []string
	client         clusterv1connect.TaskExecutorServiceClient
	// single is set once the TaskExecutor answered RequestSlots with
	// UNIMPLEMENTED: it gets one RequestSlot per slot from then on.
	single        atomic.Bool
	backoffUntil  time.Time // no slot requests before, after a failed one
	reportVersion uint64    // of the slot report applied last
	// told are the JobMasters this TaskExecutor was told of, by job, and
	// owed the jobs whose JobMaster to tell it at its next heartbeat.
	told map[string]election.Token
	owed map[string]bool
}

type jobNeeds struct {
	token      election.Token
	address    string
	required   int
	invokables []string
}

type allocation struct {
	id          string
	executor    string
	slot        int
	jobID       string
	requestedAt time.Time // zero once a slot report showed it
	// version is the TaskExecutor's slot report version right after it
	// took the allocation (RequestSlot's answer); zero until known. A
	// report at or past it that does not show the allocation means the
	// slot was freed since.
	version uint64
}

func newPool() *pool {
	return &pool{
		executors:   make(map[string]*executor),
		jobs:        make(map[string]*jobNeeds),
		allocations: make(map[string]*allocation),
		byJob:       make(map[string]map[string]*allocation),
		queued:      make(map[string]bool),
		freed:       make(map[string]string),
		offered:     make(map[string]int),
	}
}

// held is the number of allocations of a job.
func (p *pool) held(jobID string) int { return len(p.byJob[jobID]) }

// wake queues a job whose requirement may exceed what it holds.
func (p *pool) wake(jobID string) {
	if j := p.jobs[jobID]; j != nil && !p.queued[jobID] && j.required > p.held(jobID) {
		p.queued[jobID] = true
		p.waiting = append(p.waiting, jobID)
	}
}

// addExecutor adds (or replaces) a TaskExecutor with no allocations yet.
func (p *pool) addExecutor(e *executor) {
	p.removeExecutor(e.id)
	e.used = make(map[int]*allocation)
	e.told = make(map[string]election.Token)
	e.owed = make(map[string]bool)
	p.executors[e.id] = e
	i, _ := slices.BinarySearch(p.order, e.id)
	p.order = slices.Insert(p.order, i, e.id)
	p.total += e.slots
	for _, name := range e.invokables {
		p.offered[name]++
	}
}

// removeExecutor drops a TaskExecutor with its allocations, and returns
// the jobs that held some.
func (p *pool) removeExecutor(id string) map[string]bool {
	e := p.executors[id]
	if e == nil {
		return nil
	}
	affected := map[string]bool{}
	for _, a := range e.used {
		affected[a.jobID] = true
		p.removeAllocation(a.id)
	}
	p.total -= e.slots
	for _, name := range e.invokables {
		if p.offered[name]--; p.offered[name] <= 0 {
			delete(p.offered, name)
		}
	}
	delete(p.executors, id)
	if i, ok := slices.BinarySearch(p.order, id); ok {
		p.order = slices.Delete(p.order, i, i+1)
	}
	return affected
}

// setSlots changes a TaskExecutor's number of slots (a report says so),
// dropping allocations of slots it no longer has.
func (p *pool) setSlots(e *executor, n int) {
	for idx, a := range e.used {
		if idx >= n {
			p.removeAllocation(a.id)
		}
	}
	p.total += n - e.slots
	e.slots = n
}

// addAllocation records an allocation; a slot held by another allocation
// loses it.
func (p *pool) addAllocation(a *allocation) {
	e := p.executors[a.executor]
	if e == nil {
		return
	}
	if old := e.used[a.slot]; old != nil {
		p.removeAllocation(old.id)
	}
	p.allocations[a.id] = a
	e.used[a.slot] = a
	if p.byJob[a.jobID] == nil {
		p.byJob[a.jobID] = make(map[string]*allocation)
	}
	p.byJob[a.jobID][a.id] = a
	p.used++
	if j := p.jobs[a.jobID]; j != nil && e.told[a.jobID] != j.token {
		e.owed[a.jobID] = true // tell the TaskExecutor of the job's JobMaster
	}
}

// removeAllocation drops an allocation: its slot is free, and its job may
// need another.
func (p *pool) removeAllocation(id string) {
	a := p.allocations[id]
	if a == nil {
		return
	}
	delete(p.allocations, id)
	if e := p.executors[a.executor]; e != nil && e.used[a.slot] == a {
		delete(e.used, a.slot)
	}
	if m := p.byJob[a.jobID]; m != nil {
		delete(m, id)
		if len(m) == 0 {
			delete(p.byJob, a.jobID)
		}
	}
	p.used--
	p.wake(a.jobID)
}

// free is the number of free slots.
func (p *pool) free() int { return p.total - p.used }

// allocate matches free slots with waiting jobs, oldest request first,
// and hands each new allocation to request (which sends RequestSlot).
// Jobs that no free slot can serve stay queued; the scan stops as soon as
// no slot is free.
func (p *pool) allocate(now time.Time, request func(a *allocation, e *executor, j *jobNeeds)) {
	queue := p.waiting[p.head:]
	var kept []string // scanned but not served, in order
	n := 0            // jobs scanned
	for ; n < len(queue) && p.free() > 0; n++ {
		jobID := queue[n]
		j := p.jobs[jobID]
		if j == nil {
			delete(p.queued, jobID)
			continue
		}
		need := p.servable(j.invokables)
		for p.held(jobID) < j.required {
			e, slot := p.freeSlot(now, need)
			if e == nil {
				break
			}
			a := &allocation{id: newID(), executor: e.id, slot: slot, jobID: jobID, requestedAt: now}
			p.addAllocation(a)
			request(a, e, j)
		}
		if p.held(jobID) < j.required {
			kept = append(kept, jobID)
		} else {
			delete(p.queued, jobID)
		}
	}
	// The kept jobs go back at the end of the scanned part, ahead of the
	// jobs not scanned, and the head moves past the rest.
	gone := n - len(kept)
	copy(queue[gone:n], kept)
	clear(queue[:gone])
	p.head += gone
	if p.head > len(p.waiting)/2 {
		// Compacted once the served part is the larger: its cost is
		// repaid by the serves that made it.
		live := copy(p.waiting, p.waiting[p.head:])
		clear(p.waiting[live:])
		p.waiting, p.head = p.waiting[:live], 0
	}
}

// servable returns need if some registered TaskExecutor offers every
// invokable in it, and nil otherwise: any slot will do then, and the
// deployment fails with a clear cause instead of the job waiting for
// ever.
func (p *pool) servable(need []string) []string {
	for _, e := range p.executors {
		if offersAll(e.invokables, need) {
			return need
		}
	}
	return nil
}

// freeSlot finds a free slot on a TaskExecutor that offers every invokable
// in need (see servable).
func (p *pool) freeSlot(now time.Time, need []string) (*executor, int) {
	for _, id := range p.order {
		e := p.executors[id]
		if len(e.used) >= e.slots || !offersAll(e.invokables, need) || now.Before(e.backoffUntil) {
			continue
		}
		for s := range e.slots {
			if e.used[s] == nil {
				return e, s
			}
		}
	}
	return nil, 0
}

func offersAll(have, need []string) bool {
	for _, n := range need {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// applyReport reconciles allocations with a TaskExecutor's slot report of
// the given version (zero: unversioned): allocations it shows are
// confirmed (or learnt, after a failover), and the ones it shows free were
// released, unless the report may predate the allocation. A versioned
// report predates an allocation whose RequestSlot answered a later
// version; an unversioned one, one requested less than grace ago.
//
// It returns the jobs of the allocations it learnt from the report.
func (p *pool) applyReport(e *executor, report *clusterv1.SlotReport, version uint64, now time.Time, grace time.Duration) (learnt []string) {
	if n := len(report.GetSlots()); n != e.slots {
		p.setSlots(e, n)
	}
	shown := map[string]bool{}
	for _, s := range report.GetSlots() {
		idx, aid := int(s.GetSlotIndex()), s.GetAllocationId()
		a := e.used[idx]
		shown[aid] = true
		switch {
		case aid != "" && p.freed[aid] == e.id:
			// A report older than the FreeSlot its JobMaster made.
		case aid != "" && a != nil && a.id == aid:
			a.requestedAt = time.Time{}
		case aid != "":
			p.addAllocation(&allocation{id: aid, executor: e.id, slot: idx, jobID: s.GetJobId()})
			learnt = append(learnt, s.GetJobId())
		case a == nil:
		case a.requestedAt.IsZero(),
			version != 0 && a.version != 0 && version >= a.version,
			version == 0 && now.Sub(a.requestedAt) > grace:
			p.removeAllocation(a.id)
		}
	}
	for aid, ex := range p.freed {
		if ex == e.id && !shown[aid] {
			delete(p.freed, aid)
		}
	}
	return learnt
}

// allocated records that a TaskExecutor took an allocation, in its slot
// report of the given version. A report of that version or later that was
// applied already without it means the slot was freed meanwhile.
func (p *pool) allocated(id string, version uint64) {
	a := p.allocations[id]
	if a == nil || version == 0 {
		return
	}
	a.version = version
	if e := p.executors[a.executor]; e != nil && !a.requestedAt.IsZero() && e.reportVersion >= version {
		p.removeAllocation(id)
	}
}

// registerJob records a JobMaster for a job; a newer token replaces an
// older one, and the TaskExecutors holding the job's slots are told of it.
func (p *pool) registerJob(jobID string, token election.Token, address string) {
	j := p.jobs[jobID]
	if j != nil && j.token == token {
		return
	}
	p.jobs[jobID] = &jobNeeds{token: token, address: address}
	for _, a := range p.byJob[jobID] {
		if e := p.executors[a.executor]; e != nil {
			e.owed[jobID] = true
		}
	}
}

// declare sets a job's requirement.
func (p *pool) declare(jobID string, required int, invokables []string) {
	j := p.jobs[jobID]
	if j == nil {
		return
	}
	j.required, j.invokables = required, invokables
	p.wake(jobID)
}

// jobMastersOwed returns, and marks told, the JobMasters a TaskExecutor
// is to hear of.
func (p *pool) jobMastersOwed(e *executor) []*jobplanev1.LeaderInfo {
	var out []*jobplanev1.LeaderInfo
	for jobID := range e.owed {
		j := p.jobs[jobID]
		if j == nil || len(p.byJob[jobID]) == 0 {
			continue
		}
		e.told[jobID] = j.token
		out = append(out, &jobplanev1.LeaderInfo{Election: election.Job(jobID), Address: j.address, Token: protoToken(j.token)})
	}
	clear(e.owed)
	return out
}
