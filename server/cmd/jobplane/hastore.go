package main

import (
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
	)
	store.register(c.fs, "data/hastore")
	listen.register(c.fs, "127.0.0.1:7001")
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	return runServer(log, listen.cfg, store, func(*group, *endpoint.Endpoint, hastore.Store) error { return nil })
}
