package main

import (
	"context"
	"io"
)

// runJobManager runs the Dispatcher, the ResourceManager and the
// JobMasters, without TaskExecutors, on an HA store. Several jobmanagers on
// one store are active–standby.
func runJobManager(args []string, _, stderr io.Writer) int {
	c := newCommand("jobmanager", "Runs a JobManager: the Dispatcher, the ResourceManager and the JobMasters,\n"+
		"active while it leads the election \"jobmanager\". TaskExecutors run as\n"+
		"`jobplane taskexecutor` processes pointed at this process (or the HA store).", stderr)
	var (
		store  storeFlags
		listen listenFlags
		jm     jobManagerFlags
	)
	store.register(c.fs, "data/jobmanager")
	listen.register(c.fs, "127.0.0.1:8080")
	jm.register(c.fs)
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
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
	// The RPC endpoint.
	g.actor(ep.Run)
	return exitCode(log, g.Run())
}
