package runner

import "sync"

// Gate is the admission window of a Dispatcher's term: at most window
// runners at a time are launched and still wait for their first slots
// (seated). The others wait in the gate, in the order they came, as a
// runner with no leadership, no JobMaster and no goroutine: a job waiting
// for slots behind a full window costs the process only its record
// (issue 33: a waiting job costs a few bytes). A seat frees once its job
// first deploys or adopts an attempt, or its runner's first term ends;
// the oldest waiting runner takes it. A runner hurried out of the gate
// (its job canceled, or holding slots) launches without a seat.
//
// A Gate is safe for concurrent use.
type Gate struct {
	mu     sync.Mutex
	window int
	seated int
	// queue[head:] waits for seats, oldest first; entries taken out of
	// order (a canceled job goes at once) are left in place, marked. A
	// runner waits only while every seat is taken (release admits as
	// long as one is free), so a free seat means nobody waits for it.
	queue   []*gateEntry
	head    int
	waiting int // entries of queue[head:] not gone
	closed  bool
}

// NewGate returns a gate of window seats; window <= 0 seats everyone.
func NewGate(window int) *Gate { return &Gate{window: window} }

// Free reports whether a seat is free now: a job submitted then may
// launch at once (Runner.Admit with now set). A nil gate seats everyone.
func (g *Gate) Free() bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.closed && g.roomLocked()
}

// roomLocked reports whether a seat is free; g.mu must be held.
func (g *Gate) roomLocked() bool { return g.window <= 0 || g.seated < g.window }

// Waiting counts the runners waiting for a seat.
func (g *Gate) Waiting() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// wait queues e for a seat; it returns false, with nothing queued, if a
// seat was free (taken for e: the caller admits it) or the gate is
// closed (closed reports it).
func (g *Gate) wait(e *gateEntry) (queued, closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return false, true
	case g.roomLocked():
		g.seated++
		return false, false
	}
	g.queue = append(g.queue, e)
	g.waiting++
	return true, false
}

// force takes a seat past the window.
func (g *Gate) force() {
	g.mu.Lock()
	g.seated++
	g.mu.Unlock()
}

// hurry takes e out of the queue, to launch it without a seat; it
// returns false if e was no longer queued (admitted or dropped).
func (g *Gate) hurry(e *gateEntry) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e.gone || g.closed {
		return false
	}
	e.gone = true
	g.waiting--
	return true
}

// release frees a seat, and admits the oldest runners waiting for as
// many seats as are free.
func (g *Gate) release() {
	g.mu.Lock()
	g.seated--
	var admit []*gateEntry
	for !g.closed && g.roomLocked() && g.head < len(g.queue) {
		e := g.queue[g.head]
		g.queue[g.head] = nil
		g.head++
		if e.gone {
			continue
		}
		e.gone = true
		g.waiting--
		g.seated++
		admit = append(admit, e)
	}
	if g.head == len(g.queue) {
		g.queue, g.head = g.queue[:0], 0
	} else if g.head > len(g.queue)/2 {
		n := copy(g.queue, g.queue[g.head:])
		clear(g.queue[n:])
		g.queue, g.head = g.queue[:n], 0
	}
	g.mu.Unlock()
	for _, e := range admit {
		e.admit()
	}
}

// Close ends the gate with its term: the runners still waiting end
// without a seat (each calls its done with SUSPENDED), on a goroutine of
// the gate's, and no runner waits from now on.
func (g *Gate) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	var drop []*gateEntry
	for _, e := range g.queue[g.head:] {
		if !e.gone {
			e.gone = true
			drop = append(drop, e)
		}
	}
	g.queue, g.head, g.waiting = nil, 0, 0
	g.mu.Unlock()
	if len(drop) > 0 {
		go func() {
			for _, e := range drop {
				e.drop()
			}
		}()
	}
}
