package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runHAStore serves HAStoreService on its own, over an embedded etcd
// member or an external cluster.
func runHAStore(args []string, _, stderr io.Writer) int {
	c := newCommand("hastore", "Serves a jobplane HA store (HAStoreService) for servers in other processes.", stderr)
	var (
		store  storeFlags
		listen listenFlags
		debug  debugFlags
	)
	store.register(c.fs, "data/hastore")
	listen.register(c.fs, "127.0.0.1:7001")
	debug.register(c.fs)
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	store.useTLS(listen)
	if err := errors.Join(listen.validate(), debug.validate(), store.validate()); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return exitUsage
	}
	return runServer(log, "jobplane-hastore", listen, store, debug, func(*group, *endpoint.Endpoint, hastore.Store) error { return nil })
}
