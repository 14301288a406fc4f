package resourcemanager

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// servedInOrder frees one slot at a time and returns the jobs served, in
// order.
func servedInOrder(t *testing.T, p *pool, rounds int) []string {
	t.Helper()
	var served []string
	for range rounds {
		var got []*allocation
		p.allocate(time.Now(), func(a *allocation, _ *executor, _ *jobNeeds) { got = append(got, a) })
		for _, a := range got {
			served = append(served, a.jobID)
			delete(p.jobs, a.jobID) // the job ends: its slot is free again
			p.removeAllocation(a.id)
		}
	}
	return served
}

func TestPoolServesOldestFirstAndKeepsUnservable(t *testing.T) {
	p := newPool()
	p.addExecutor(&executor{id: "te", slots: 1, invokables: []string{"noop"}})
	p.addExecutor(&executor{id: "te-other", slots: 1, invokables: []string{"other"}})
	var want []string
	for i := range 10 {
		id := fmt.Sprintf("job-%02d", i)
		p.registerJob(id, election.Token{Epoch: 1}, "http://jm")
		p.declare(id, 1, []string{"noop"})
		want = append(want, id)
		if i == 2 {
			// Waits for "other", whose only slot is taken first.
			p.registerJob("blocked", election.Token{Epoch: 1}, "http://jm")
			p.declare("blocked", 1, []string{"other"})
		}
	}
	p.addAllocation(&allocation{id: "a-other", executor: "te-other", slot: 0, jobID: "elsewhere"})

	if got := servedInOrder(t, p, 10); !slices.Equal(got, want) {
		t.Fatalf("served %v, want the oldest first: %v", got, want)
	}
	// The job that no free slot could serve kept its place and is served
	// as soon as a slot for it frees.
	if q := p.waiting[p.head:]; !slices.Equal(q, []string{"blocked"}) || len(p.queued) != 1 {
		t.Fatalf("queue after serving: %v (%d waiting), want [blocked], the one job waiting (the jobs_waiting gauge)", q, len(p.queued))
	}
	p.removeAllocation("a-other")
	if got := servedInOrder(t, p, 1); !slices.Equal(got, []string{"blocked"}) {
		t.Fatalf("served %v after its slot freed, want [blocked]", got)
	}
	if q := p.waiting[p.head:]; len(q) != 0 || len(p.queued) != 0 {
		t.Fatalf("queue %v (%d waiting), want empty", q, len(p.queued))
	}
}

// BenchmarkPoolServe serves the oldest job of a queue as its slot frees;
// a serve costs the same with 100 jobs waiting or 100,000 (the queue is
// not copied).
func BenchmarkPoolServe(b *testing.B) {
	for _, waiting := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("waiting=%d", waiting), func(b *testing.B) {
			p := newPool()
			p.addExecutor(&executor{id: "te", slots: 1, invokables: []string{"noop"}})
			declare := func(i int) {
				id := fmt.Sprintf("job-%d", i)
				p.registerJob(id, election.Token{Epoch: 1}, "http://jm")
				p.declare(id, 1, []string{"noop"})
			}
			for i := range waiting {
				declare(i)
			}
			var a *allocation
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if a != nil {
					delete(p.jobs, a.jobID)
					p.removeAllocation(a.id)
				}
				declare(waiting + i) // the queue stays as long
				p.allocate(time.Now(), func(got *allocation, _ *executor, _ *jobNeeds) { a = got })
			}
		})
	}
}

// The pool counts the TaskExecutors offering each invokable as they come
// and go, and a registration again replaces what the TaskExecutor
// offered: NotOffered answers from these counts.
func TestPoolCountsOfferedInvokables(t *testing.T) {
	p := newPool()
	p.addExecutor(&executor{id: "a", slots: 1, invokables: []string{"noop", "x"}})
	p.addExecutor(&executor{id: "b", slots: 1, invokables: []string{"x", "y"}})
	p.addExecutor(&executor{id: "b", slots: 1, invokables: []string{"x", "z"}}) // registered again
	want := map[string]int{"noop": 1, "x": 2, "z": 1}
	if !maps.Equal(p.offered, want) {
		t.Fatalf("offered %v, want %v", p.offered, want)
	}
	p.removeExecutor("a")
	if want := map[string]int{"x": 1, "z": 1}; !maps.Equal(p.offered, want) {
		t.Fatalf("offered after a left %v, want %v", p.offered, want)
	}
	p.removeExecutor("b")
	p.removeExecutor("b")
	if len(p.offered) != 0 {
		t.Fatalf("offered with no TaskExecutor %v, want none", p.offered)
	}
}

// NotOffered names the vertices whose invokable no registered
// TaskExecutor offers, with what is offered; it says nothing with no
// TaskExecutor registered, or while not leading, and allocates nothing
// when every invokable is offered (SubmitJob is a hot path).
func TestNotOffered(t *testing.T) {
	vertices := []*jobplanev1.JobVertex{{Invokable: "noop"}, {Invokable: "nosuch"}, {Invokable: "x"}, {Invokable: "nosuch"}}
	rm := &ResourceManager{}
	if missing, offered := rm.NotOffered(vertices); missing != nil || offered != nil {
		t.Errorf("not leading: %v, %v; want nothing", missing, offered)
	}
	rm.pool = newPool()
	if missing, offered := rm.NotOffered(vertices); missing != nil || offered != nil {
		t.Errorf("no TaskExecutor: %v, %v; want nothing", missing, offered)
	}
	rm.pool.addExecutor(&executor{id: "a", slots: 1, invokables: []string{"x", "noop"}})
	missing, offered := rm.NotOffered(vertices)
	if !slices.Equal(missing, []int{1, 3}) || !slices.Equal(offered, []string{"noop", "x"}) {
		t.Errorf("NotOffered = %v, %v; want [1 3], [noop x]", missing, offered)
	}
	if allocs := testing.AllocsPerRun(100, func() { rm.NotOffered(vertices[:1]) }); allocs != 0 {
		t.Errorf("NotOffered of offered invokables allocates %v times, want 0", allocs)
	}

	// A new leadership refuses nothing while it may not know every
	// TaskExecutor: one of the store's members has not registered again
	// (it may offer what is missing), or, without a membership, within
	// the grace a TaskExecutor has to find the new leader.
	rm.members = newMembers()
	if missing, _ := rm.NotOffered(vertices); missing != nil {
		t.Errorf("membership not read yet: missing %v, want nothing", missing)
	}
	rm.members.loaded = true
	rm.members.seen["a"], rm.members.seen["b"] = time.Now(), time.Now()
	if missing, _ := rm.NotOffered(vertices); missing != nil {
		t.Errorf("member b not registered again: missing %v, want nothing", missing)
	}
	rm.pool.addExecutor(&executor{id: "b", slots: 1, invokables: []string{"noop"}})
	if missing, _ := rm.NotOffered(vertices); !slices.Equal(missing, []int{1, 3}) {
		t.Errorf("every member registered: missing %v, want [1 3]", missing)
	}
	rm.members = nil
	rm.cfg.HeartbeatInterval = time.Hour
	rm.leadSince = time.Now()
	if missing, _ := rm.NotOffered(vertices); missing != nil {
		t.Errorf("no membership, within the grace: missing %v, want nothing", missing)
	}
}
