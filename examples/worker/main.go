// Command worker is a jobplane worker with one task function, "greet", for
// the cluster at $JOBPLANE_SERVER (default http://127.0.0.1:8080): run it
// beside `jobplane standalone`, then submit a job whose vertex has
// invokable "greet".
//
// Each subtask prints a greeting, then waits config "linger" (a duration,
// default none) or until it is canceled.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/sdk/worker"
)

func main() {
	w, err := worker.New(worker.Config{Server: cmp.Or(os.Getenv("JOBPLANE_SERVER"), "http://127.0.0.1:8080"), Slots: 4})
	if err != nil {
		log.Fatal(err)
	}
	w.Register("greet", func(ctx context.Context, t worker.Task) error {
		fmt.Printf("hello %s from subtask %d of %d\n", t.Config["name"], t.SubtaskIndex, t.Subtasks)
		t.Logger.Info("greeted", "name", t.Config["name"]) // kept for `jobplane logs`
		linger, _ := time.ParseDuration(t.Config["linger"])
		select {
		case <-time.After(linger):
			return nil
		case <-ctx.Done():
			fmt.Printf("subtask %d canceled\n", t.SubtaskIndex)
			return ctx.Err()
		}
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
