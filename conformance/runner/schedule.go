package runner

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// schedule is a seeded random fault schedule over every call the server
// makes to the runner's HA store: each unary HAStoreService call, and
// each start of a stream, is faulted with probability p, until budget
// faults were injected. A fault fails the call (nothing done), loses its
// answer (the call took effect), or delays it.
//
// Whether a call is faulted, and how, is a function of the seed, the
// method, the call's job or election (none for session calls and
// streams) and how many such calls came before: the same seed faults the
// n-th Campaign of a job the same way in every run, whatever the order
// in which calls of different jobs interleave.
type schedule struct {
	seed   uint64
	p      float64
	budget int

	mu    sync.Mutex
	calls map[string]int // calls so far, by method and key
	fired int
}

func newSchedule(seed uint64, p float64, budget int) *schedule {
	return &schedule{seed: seed, p: p, budget: budget, calls: map[string]int{}}
}

// draw returns the fault for this call of method on key, if the
// schedule faults it.
func (sc *schedule) draw(method, key string) (fault, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	k := method + " " + key
	n := sc.calls[k]
	sc.calls[k] = n + 1
	if sc.fired >= sc.budget {
		return fault{}, false
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], sc.seed)
	h.Write(b[:])
	fmt.Fprintf(h, "%s|%d", k, n)
	r := rand.New(rand.NewPCG(h.Sum64(), sc.seed))
	if r.Float64() >= sc.p {
		return fault{}, false
	}
	sc.fired++
	switch r.IntN(3) {
	case 0:
		return fault{before: hastore.ErrUnavailable}, true
	case 1:
		return fault{after: hastore.ErrUnavailable}, true
	default:
		return fault{delay: time.Duration(50+r.IntN(350)) * time.Millisecond}, true
	}
}

// faults returns how many faults the schedule injected.
func (sc *schedule) faults() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.fired
}

// startSchedule faults the server's store calls by sc from now on, until
// stopSchedule.
func (s *store) startSchedule(sc *schedule) {
	s.mu.Lock()
	s.sched = sc
	s.mu.Unlock()
	s.log.Add(Event{Source: "client", Op: "fault", Detail: fmt.Sprintf("random schedule seed=%d p=%.2f budget=%d", sc.seed, sc.p, sc.budget)})
}

// stopSchedule ends the random fault schedule.
func (s *store) stopSchedule() {
	s.mu.Lock()
	sc := s.sched
	s.sched = nil
	s.mu.Unlock()
	if sc != nil {
		s.log.Add(Event{Source: "client", Op: "fault", Detail: fmt.Sprintf("random schedule ends after %d faults", sc.faults())})
	}
}

// drawFault returns the random schedule's fault for this call, if one
// runs and faults it.
func (s *store) drawFault(method, key string) (fault, bool) {
	s.mu.Lock()
	sc := s.sched
	s.mu.Unlock()
	if sc == nil {
		return fault{}, false
	}
	return sc.draw(method, key)
}

// peerKey is the context key of the address a store call came from.
type peerKey struct{}

func withPeer(ctx context.Context, peer string) context.Context {
	return context.WithValue(ctx, peerKey{}, peer)
}

// peerOf returns the address the store call of ctx came from, or "".
func peerOf(ctx context.Context) string {
	p, _ := ctx.Value(peerKey{}).(string)
	return p
}

// sawSession records, once per pair, that a call of session id (one that
// only its owner makes: OpenSession's answer, KeepAlive, Campaign,
// Withdraw, CloseSession, WatchSession) came from peer, as a
// "session-peer" event keyed by the session. The pairs tie a process's
// connections to its sessions (see processes).
func (s *store) sawSession(id, peer string) {
	if id == "" || peer == "" {
		return
	}
	s.mu.Lock()
	if s.peers == nil {
		s.peers = map[[2]string]bool{}
	}
	seen := s.peers[[2]string{id, peer}]
	s.peers[[2]string{id, peer}] = true
	s.mu.Unlock()
	if !seen {
		s.log.Add(Event{Source: "store", Op: "session-peer", Key: id, Peer: peer})
	}
}

// sessionOf returns the session a session call names, or "". A fenced
// call's token names a session too, but anyone can send a token: only
// the calls a session's owner makes tie it to where they came from.
func sessionOf(msg any) string {
	if m, ok := msg.(interface{ GetSessionId() string }); ok {
		return m.GetSessionId()
	}
	return ""
}

// rpcKey returns the job (or election) a store request is about, as the
// log keys it, or "".
func rpcKey(msg any) string {
	switch m := msg.(type) {
	case *hastorev1.PutExecutionPlanRequest:
		return m.GetPlan().GetJobId()
	case *hastorev1.CreateDirtyJobResultRequest:
		return m.GetResult().GetJobId()
	case interface{ GetJobId() string }:
		if m.GetJobId() != "" {
			return m.GetJobId()
		}
	}
	if m, ok := msg.(interface{ GetElection() string }); ok && m.GetElection() != "" {
		return jobOf(m.GetElection())
	}
	if m, ok := msg.(interface{ GetFence() *jobplanev1.Fence }); ok && m.GetFence() != nil {
		return jobOf(m.GetFence().GetElection())
	}
	return ""
}
