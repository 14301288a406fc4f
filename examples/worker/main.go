// Command worker is a jobplane worker with one task function, "greet":
// run it beside a cluster (jobplane standalone --task-executors 0), then
// submit a job whose vertex has invokable "greet".
//
// Each subtask prints a greeting, then waits config "linger" (a duration,
// default none) or until it is canceled.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/sdk/worker"
)

func main() {
	server := flag.String("server", "http://127.0.0.1:8080", "base URL of the jobplane cluster")
	slots := flag.Int("slots", 2, "subtasks to run at once")
	flag.Parse()

	w, err := worker.New(worker.Config{Server: *server, Slots: *slots})
	if err != nil {
		log.Fatal(err)
	}
	w.Register("greet", func(ctx context.Context, t worker.Task) error {
		fmt.Printf("hello %s from subtask %d of %d\n", t.Config["name"], t.SubtaskIndex, t.Subtasks)
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
