package batch

import (
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// SingleCalls bounds the one-item calls in flight for one Send.
const SingleCalls = 16

// Send delivers items to one receiver and returns the outcome of each, in
// order. It sends the runs that split cuts through many, which returns the
// outcome of each item of its run and the call's error. A receiver that
// answers the first run UNIMPLEMENTED lacks the batch call: single records
// that for later Sends, and the items go through one, one item per call,
// at most SingleCalls at a time.
func Send[T, O any](single *atomic.Bool, items []T, split func([]T) [][]T, many func(run []T) ([]O, error), one func(item T) O) []O {
	if !single.Load() {
		out := make([]O, 0, len(items))
		for i, run := range split(items) {
			o, err := many(run)
			if i == 0 && connect.CodeOf(err) == connect.CodeUnimplemented {
				single.Store(true)
				break
			}
			out = append(out, o...)
		}
		if len(out) == len(items) {
			return out
		}
	}
	out := make([]O, len(items))
	sem := make(chan struct{}, SingleCalls)
	var wg sync.WaitGroup
	for i, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = one(it)
		}()
	}
	wg.Wait()
	return out
}
