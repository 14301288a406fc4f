package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runTaskExecutor runs one TaskExecutor that finds the ResourceManager
// through an HA store served over HAStoreService.
func runTaskExecutor(args []string, _, stderr io.Writer) int {
	c := newCommand("taskexecutor", "Runs a TaskExecutor: it finds the ResourceManager through the HA store,\n"+
		"registers its slots there, and runs the tasks JobMasters deploy to it.", stderr)
	var (
		listen  listenFlags
		debug   debugFlags
		te      taskExecutorFlags
		hastore string
	)
	listen.register(c.fs, "127.0.0.1:0")
	debug.register(c.fs)
	te.register(c.fs)
	c.fs.StringVar(&hastore, "hastore", "http://127.0.0.1:8080", "base URL of the HAStoreService (a jobmanager, standalone or hastore process)")
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	if te.slots < 1 {
		fmt.Fprintln(stderr, "taskexecutor: -slots must be at least 1")
		return exitUsage
	}
	if err := debug.validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return exitUsage
	}
	closeLog, err := te.openAttemptLog()
	if err != nil {
		fmt.Fprintf(stderr, "taskexecutor: %v\n", err)
		return exitError
	}
	defer closeLog()
	st := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: endpoint.NewClient(), BaseURL: hastore, Options: endpoint.ClientOptions(), Logger: log})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	if err := addDebug(g, debug, listen.cfg.ShutdownTimeout, log); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	if err := addTaskExecutor(g, listen.cfg, st, te, log); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	return exitCode(log, g.Run())
}
