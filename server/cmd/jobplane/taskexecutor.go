package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runTaskExecutor runs one TaskExecutor that finds the ResourceManager
// through an HA store served over HAStoreService.
func runTaskExecutor(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("taskexecutor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logs    logFlags
		listen  listenFlags
		te      taskExecutorFlags
		hastore string
	)
	logs.register(fs)
	listen.register(fs, "127.0.0.1:0")
	te.register(fs)
	fs.StringVar(&hastore, "hastore", "http://127.0.0.1:8080", "base URL of the HAStoreService (a jobmanager, standalone or hastore process)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobplane taskexecutor [flags]")
		fmt.Fprintln(fs.Output(), "\nRuns a TaskExecutor: it finds the ResourceManager through the HA store,")
		fmt.Fprintln(fs.Output(), "registers its slots there, and runs the tasks JobMasters deploy to it.")
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, err := logs.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "taskexecutor: %v\n", err)
		return exitUsage
	}
	if te.slots < 1 {
		fmt.Fprintln(stderr, "taskexecutor: -slots must be at least 1")
		return exitUsage
	}
	st := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: endpoint.NewClient(), BaseURL: hastore, Logger: log})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	if err := addTaskExecutor(g, listen.cfg, st, te, log); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	return exitCode(log, g.Run())
}
