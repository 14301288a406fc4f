package chaos

import (
	"math"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestRecorderTimesAndLanes(t *testing.T) {
	t.Parallel()
	r := NewRecorder()
	a := r.Call(Input{Op: OpSubmit, JobID: "a", Plan: "p"})
	b := r.Call(Input{Op: OpCancel, JobID: "b"})
	a.Return(Output{Outcome: OK, Created: true})
	c := r.Call(Input{Op: OpObserve, JobID: "c"})
	b.Return(Output{Outcome: Unknown})
	d := r.Call(Input{Op: OpObserve, JobID: "d"})
	c.Return(Output{Outcome: Unknown}) // tells nothing: dropped
	d.Return(Output{Outcome: NotFound})
	d.Return(Output{Outcome: OK})                      // a second Return does not count
	r.Call(Input{Op: OpSubmit, JobID: "e", Plan: "p"}) // in flight: unknown outcome
	r.Call(Input{Op: OpObserve, JobID: "f"})           // in flight: left out

	ops := r.Operations()
	byJob := make(map[string]porcupine.Operation)
	for _, op := range ops {
		byJob[op.Input.(Input).JobID] = op
	}
	if len(ops) != 4 || len(byJob) != 4 {
		t.Fatalf("Operations = %v, want the operations of a, b, d and e", ops)
	}
	for _, id := range []string{"c", "f"} {
		if _, ok := byJob[id]; ok {
			t.Errorf("observation %s recorded, want it left out", id)
		}
	}
	opA, opB, opD, opE := byJob["a"], byJob["b"], byJob["d"], byJob["e"]
	if !(opA.Call < opB.Call && opB.Call < opA.Return && opA.Return <= opD.Call && opD.Call < opD.Return && opD.Return <= opE.Call) {
		t.Errorf("times out of order: a %d..%d b %d d %d..%d e %d", opA.Call, opA.Return, opB.Call, opD.Call, opD.Return, opE.Call)
	}
	if opB.Return != math.MaxInt64 || opE.Return != math.MaxInt64 {
		t.Errorf("unknown outcome returns at %d and (in flight) %d, want the end of the history (%d)", opB.Return, opE.Return, int64(math.MaxInt64))
	}
	if got := opD.Output.(Output).Outcome; got != NotFound {
		t.Errorf("d's outcome = %v, want the first Return's, %v", got, NotFound)
	}
	if got := opE.Output.(Output).Outcome; got != Unknown {
		t.Errorf("in-flight e's outcome = %v, want %v", got, Unknown)
	}
	// Lanes: a took 0 and b 1; c took 0 once a returned; b kept 1 for
	// good; d took 2 (c still held 0); e took 0 once c and d returned.
	for _, tc := range []struct {
		op   porcupine.Operation
		lane int
	}{{opA, 0}, {opB, 1}, {opD, 2}, {opE, 0}} {
		if tc.op.ClientId != tc.lane {
			t.Errorf("%s in lane %d, want %d", tc.op.Input.(Input).JobID, tc.op.ClientId, tc.lane)
		}
	}
}

func TestRecorderIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	r := NewRecorder()
	const clients, each = 8, 50
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				p := r.Call(Input{Op: OpObserve, JobID: "j"})
				p.Return(Output{Outcome: NotFound})
			}
		})
	}
	wg.Wait()
	ops := r.Operations()
	if len(ops) != clients*each {
		t.Fatalf("%d operations recorded, want %d", len(ops), clients*each)
	}
	for _, op := range ops {
		if op.ClientId < 0 || op.ClientId >= clients {
			t.Errorf("lane %d, want fewer lanes than concurrent clients (%d)", op.ClientId, clients)
		}
		if op.Return < op.Call {
			t.Errorf("returned at %d before its call at %d", op.Return, op.Call)
		}
	}
	if err := CheckHistory(ops, 0, ""); err != nil {
		t.Errorf("CheckHistory = %v, want nil", err)
	}
}
