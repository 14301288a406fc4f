package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runStandalone runs a whole jobplane cluster in one process.
func runStandalone(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("standalone", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logs   logFlags
		store  storeFlags
		listen listenFlags
		jm     jobManagerFlags
		te     taskExecutorFlags
		count  int
	)
	logs.register(fs)
	store.register(fs, "data/standalone")
	listen.register(fs, "127.0.0.1:8080")
	jm.register(fs)
	te.register(fs)
	fs.IntVar(&count, "task-executors", 2, "TaskExecutors to run in the process, each on its own loopback port")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobplane standalone [flags]")
		fmt.Fprintln(fs.Output(), "\nRuns a whole jobplane cluster in one process: the Dispatcher, the")
		fmt.Fprintln(fs.Output(), "ResourceManager, the JobMasters and TaskExecutors, on an embedded HA store")
		fmt.Fprintln(fs.Output(), "that it also serves as HAStoreService.")
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, err := logs.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "standalone: %v\n", err)
		return exitUsage
	}
	if count < 0 {
		fmt.Fprintln(stderr, "standalone: -task-executors must not be negative")
		return exitUsage
	}

	ep, st, err := openServer(listen.cfg, store, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer st.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	if err := addJobManager(g, ep, st, jm, log); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	// The RPC endpoint: serves until interrupted, then drains in-flight
	// requests for up to -shutdown-timeout.
	g.actor(ep.Run)
	for range count {
		if err := addTaskExecutor(g, endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: listen.cfg.ShutdownTimeout}, st, te, log); err != nil {
			log.Error("cannot start a TaskExecutor", "err", err)
			return exitError
		}
	}
	return exitCode(log, g.Run())
}
