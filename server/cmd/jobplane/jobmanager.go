package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// runJobManager runs the Dispatcher, the ResourceManager and the
// JobMasters, without TaskExecutors, on an HA store. Several jobmanagers on
// one store are active–standby.
func runJobManager(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("jobmanager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logs   logFlags
		store  storeFlags
		listen listenFlags
		jm     jobManagerFlags
	)
	logs.register(fs)
	store.register(fs, "data/jobmanager")
	listen.register(fs, "127.0.0.1:8080")
	jm.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobplane jobmanager [flags]")
		fmt.Fprintln(fs.Output(), "\nRuns a JobManager: the Dispatcher, the ResourceManager and the JobMasters,")
		fmt.Fprintln(fs.Output(), "active while it leads the election \"jobmanager\". TaskExecutors run as")
		fmt.Fprintln(fs.Output(), "`jobplane taskexecutor` processes pointed at this process (or the HA store).")
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, err := logs.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "jobmanager: %v\n", err)
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
	// The RPC endpoint.
	g.actor(ep.Run)
	return exitCode(log, g.Run())
}
