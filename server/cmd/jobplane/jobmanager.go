package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runJobManager runs the Dispatcher, the ResourceManager and the
// JobMasters, without TaskExecutors, on an HA store. Several jobmanagers on
// one store are active–standby.
func runJobManager(args []string, _, stderr io.Writer) int {
	c := newCommand("jobmanager", "Runs a JobManager: the Dispatcher, the ResourceManager and the JobMasters,\n"+
		"active while it leads the election \"jobmanager\". TaskExecutors run as\n"+
		"`jobplane taskexecutor` processes pointed at any of the cluster's jobmanagers\n"+
		"(or its HA store); each jobmanager answers for the leader.", stderr)
	var (
		store  storeFlags
		listen listenFlags
		debug  debugFlags
		jm     jobManagerFlags
		auth   authFlags
	)
	store.register(c.fs, "data/jobmanager")
	store.registerRemote(c.fs)
	listen.register(c.fs, "127.0.0.1:8080")
	listen.security.registerCluster(c.fs)
	debug.register(c.fs)
	jm.register(c.fs)
	auth.register(c.fs)
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	store.useTLS(listen)
	if err := errors.Join(listen.validate(), jm.validate(), debug.validate(), store.validate(), auth.validate(log)); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return exitUsage
	}
	auth.warnOpenCluster(listen, log)
	jm.dispatcherOptions = append(jm.dispatcherOptions, auth.options...)
	return runServer(log, "jobplane-jobmanager", listen, store, debug, func(g *group, ep *endpoint.Endpoint, st hastore.Store) error {
		return addJobManager(g, ep, st, listen.newClient(), jm, log)
	})
}
