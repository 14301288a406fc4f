package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/worker"
)

// A worker with one function, and a job that runs it on two subtasks.
func Example() {
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()

	w, err := worker.New(worker.Config{Server: serverURL, Slots: 2, Logger: quiet()})
	if err != nil {
		log.Fatal(err)
	}
	w.Register("wordcount", func(ctx context.Context, t worker.Task) error {
		// Each subtask counts every Subtasks-th word, from its own index on.
		words, n := strings.Fields(t.Config["text"]), 0
		for i := t.SubtaskIndex; i < len(words); i += t.Subtasks {
			n++
		}
		fmt.Printf("subtask %d of %d counted %d words\n", t.SubtaskIndex, t.Subtasks, n)
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	client, err := sdk.New([]string{serverURL})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	// A job naming an invokable that no worker offers fails at once, so
	// wait until the worker has joined the cluster.
	for joined := false; !joined && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		for te, err := range client.TaskExecutors(ctx) {
			joined = joined || err == nil && slices.Contains(te.GetInvokables(), "wordcount")
		}
	}

	b := jobgraph.NewBuilder("wordcount")
	b.Vertex("count", "wordcount").Parallelism(2).Config("text", "to be or not to be")
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	result, err := client.Execute(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result.GetStatus())

	stop() // the worker stops, and Run returns nil
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// subtask 0 of 2 counted 3 words
	// subtask 1 of 2 counted 3 words
	// JOB_STATUS_FINISHED
}

// A function that keeps its progress in the job's checkpoints: it counts
// from where its restored state says, gives its count whenever the job
// checkpoints, and its first attempt fails halfway; the restarted attempt
// goes on from the latest completed checkpoint instead of from zero.
func ExampleTask_OnCheckpoint() {
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()

	w, err := worker.New(worker.Config{Server: serverURL, Slots: 1, Logger: quiet()})
	if err != nil {
		log.Fatal(err)
	}
	w.Register("counter", func(ctx context.Context, t worker.Task) error {
		var n atomic.Int64
		if t.Restored != nil {
			v, err := strconv.ParseInt(string(t.Restored.Data), 10, 64)
			if err != nil {
				return err
			}
			n.Store(v)
			fmt.Printf("attempt %d restored from a checkpoint: %v; its count is above zero: %v\n", t.Attempt, t.RestoredFrom != "", v > 0)
		}
		t.OnCheckpoint(func(context.Context, uint64) (worker.State, error) {
			return worker.State{Data: strconv.AppendInt(nil, n.Load(), 10)}, nil
		})
		for ; n.Load() < 200; n.Add(1) {
			if t.Attempt == 0 && n.Load() == 100 {
				return errors.New("the first attempt fails halfway")
			}
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	client, err := sdk.New([]string{serverURL})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	for joined := false; !joined && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		for te, err := range client.TaskExecutors(ctx) {
			joined = joined || err == nil && slices.Contains(te.GetInvokables(), "counter")
		}
	}

	b := jobgraph.NewBuilder("counter").Checkpoints(20*time.Millisecond).FixedDelayRestart(3, 0)
	b.Vertex("count", "counter")
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	result, err := client.Execute(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result.GetStatus())

	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 restored from a checkpoint: true; its count is above zero: true
	// JOB_STATUS_FINISHED
}

// A function that returns a value and counts with accumulators: each
// subtask returns what it found, and the job's result sums each
// accumulator over the subtasks (one finished attempt each, so a restart
// never counts twice).
func ExampleTask_SetValue() {
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()

	w, err := worker.New(worker.Config{Server: serverURL, Slots: 2, Logger: quiet()})
	if err != nil {
		log.Fatal(err)
	}
	w.Register("longest", func(ctx context.Context, t worker.Task) error {
		// Each subtask looks at every Subtasks-th word, from its own index on.
		words, longest := strings.Fields(t.Config["text"]), ""
		for i := t.SubtaskIndex; i < len(words); i += t.Subtasks {
			t.Add("words", 1)
			t.Add("letters", int64(len(words[i])))
			if len(words[i]) > len(longest) {
				longest = words[i]
			}
		}
		t.SetValue([]byte(longest))
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	client, err := sdk.New([]string{serverURL})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	for joined := false; !joined && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		for te, err := range client.TaskExecutors(ctx) {
			joined = joined || err == nil && slices.Contains(te.GetInvokables(), "longest")
		}
	}

	b := jobgraph.NewBuilder("longest")
	b.Vertex("find", "longest").Parallelism(2).Config("text", "the quick brown fox jumps over the lazy dog")
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	result, err := client.Execute(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range result.GetValues() {
		fmt.Printf("subtask %d: %s\n", v.GetAttempt().GetSubtaskIndex(), v.GetValue())
	}
	fmt.Println("words:", result.GetAccumulators()["words"], "letters:", result.GetAccumulators()["letters"])

	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Output:
	// subtask 0: brown
	// subtask 1: quick
	// words: 9 letters: 35
}
