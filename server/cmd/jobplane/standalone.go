package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runStandalone runs a whole jobplane cluster in one process.
func runStandalone(args []string, _, stderr io.Writer) int {
	c := newCommand("standalone", "Runs a whole jobplane cluster in one process: the Dispatcher, the\n"+
		"ResourceManager, the JobMasters and TaskExecutors, on an embedded HA store\n"+
		"that it also serves as HAStoreService.", stderr)
	var (
		store  storeFlags
		listen listenFlags
		debug  debugFlags
		jm     jobManagerFlags
		te     taskExecutorFlags
		count  int
	)
	store.register(c.fs, "data/standalone")
	listen.register(c.fs, "127.0.0.1:8080")
	debug.register(c.fs)
	jm.register(c.fs)
	te.register(c.fs)
	c.fs.IntVar(&count, "task-executors", 2, "TaskExecutors to run in the process, each on its own loopback port")
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	if err := errors.Join(jm.validate(), debug.validate()); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return exitUsage
	}
	if count < 0 {
		fmt.Fprintln(stderr, "standalone: -task-executors must not be negative")
		return exitUsage
	}
	closeLog, err := te.openAttemptLog()
	if err != nil {
		fmt.Fprintf(stderr, "standalone: %v\n", err)
		return exitError
	}
	defer closeLog()

	return runServer(log, listen.cfg, store, debug, func(g *group, ep *endpoint.Endpoint, st hastore.Store) error {
		if err := addJobManager(g, ep, st, jm, log); err != nil {
			return err
		}
		for range count {
			if err := addTaskExecutor(g, endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: listen.cfg.ShutdownTimeout, MaxRequestBytes: listen.cfg.MaxRequestBytes}, st, te, log); err != nil {
				return fmt.Errorf("TaskExecutor: %w", err)
			}
		}
		return nil
	})
}
