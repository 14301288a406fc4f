package chaos

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// ErrUndecided is returned (wrapped) by CheckHistory when the checker ran
// out of time before deciding: the history may or may not keep the
// promises.
var ErrUndecided = errors.New("chaos: the linearizability check did not decide in time")

// CheckHistory checks the history ops (of Input and Output, as a Recorder
// makes it) against Model, for at most timeout (0: no bound). It returns
// nil when the history keeps the contract's promises. When it does not,
// it writes porcupine's visualization of the history as HTML to htmlPath
// (unless htmlPath is empty), with the faults as annotations, and
// returns an error that lists, for each job whose operations break a
// promise, those operations in call order. When the checker times out it
// returns an error wrapping ErrUndecided.
func CheckHistory(ops []porcupine.Operation, timeout time.Duration, htmlPath string, faults ...porcupine.Annotation) error {
	ops = compact(ops)
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	info.AddAnnotations(faults)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("%w (%d operations, %v)", ErrUndecided, len(ops), timeout)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: the history of %d operations breaks the contract's promises", len(ops))
	if htmlPath != "" {
		if err := porcupine.VisualizePath(Model, info, htmlPath); err != nil {
			fmt.Fprintf(&b, " (writing the visualization: %v)", err)
		} else {
			fmt.Fprintf(&b, " (visualization: %s)", htmlPath)
		}
	}
	for _, part := range partitionByJob(ops) {
		if porcupine.CheckOperationsTimeout(Model, part, timeout) != porcupine.Illegal {
			continue
		}
		fmt.Fprintf(&b, "\njob %s:", part[0].Input.(Input).JobID)
		sorted := append([]porcupine.Operation(nil), part...)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
		for _, op := range sorted {
			fmt.Fprintf(&b, "\n  %s", FormatOperation(op))
		}
	}
	return errors.New(b.String())
}

// FormatOperation renders a recorded operation on one line: its lane,
// its call and return times since the Recorder's start ("end" for an
// operation of unknown outcome), what it asked and what it got.
func FormatOperation(op porcupine.Operation) string {
	ret := "end"
	if op.Return != math.MaxInt64 {
		ret = time.Duration(op.Return).String()
	}
	return fmt.Sprintf("[lane %d] %v..%s %s", op.ClientId, time.Duration(op.Call), ret, describe(op.Input.(Input), op.Output.(Output)))
}

// compact drops from ops the operations of unknown outcome that cannot
// change the check's answer, and returns the rest (ops itself is left
// as it is). The checker may place each operation of unknown outcome
// anywhere after its call, so k of them in one job cost it up to 2^k
// orders; a client retrying through a failover makes dozens. Dropped:
//
//   - every cancel of unknown outcome: Model lets it change nothing;
//   - every submission of unknown outcome but the earliest called of each
//     job and plan: placing a later one anywhere is the same as placing
//     the earliest there (its call came first, and both may take effect
//     until the end), and once one took effect the others change nothing.
func compact(ops []porcupine.Operation) []porcupine.Operation {
	type key struct{ job, plan string }
	earliest := make(map[key]int) // index in ops of the earliest unknown submission
	for i, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Op != OpSubmit || out.Outcome != Unknown {
			continue
		}
		k := key{in.JobID, in.Plan}
		if j, ok := earliest[k]; !ok || op.Call < ops[j].Call {
			earliest[k] = i
		}
	}
	kept := make([]porcupine.Operation, 0, len(ops))
	for i, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Outcome == Unknown {
			if in.Op == OpCancel {
				continue
			}
			if in.Op == OpSubmit && earliest[key{in.JobID, in.Plan}] != i {
				continue
			}
		}
		kept = append(kept, op)
	}
	return kept
}
