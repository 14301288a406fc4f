package main

import (
	"context"
	"io"
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
	ep, st, err := openServer(listen.cfg, store, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer st.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	// The RPC endpoint serving HAStoreService.
	g.actor(ep.Run)
	return exitCode(log, g.Run())
}
