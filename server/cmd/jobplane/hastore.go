package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// runHAStore serves HAStoreService on its own, over an embedded etcd
// member or an external cluster.
func runHAStore(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("hastore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logs   logFlags
		store  storeFlags
		listen listenFlags
	)
	logs.register(fs)
	store.register(fs, "data/hastore")
	listen.register(fs, "127.0.0.1:7001")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobplane hastore [flags]")
		fmt.Fprintln(fs.Output(), "\nServes a jobplane HA store (HAStoreService) for servers in other processes.")
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, err := logs.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hastore: %v\n", err)
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
	// The RPC endpoint serving HAStoreService.
	g.actor(ep.Run)
	return exitCode(log, g.Run())
}
