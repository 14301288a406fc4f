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
