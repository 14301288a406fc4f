package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/oklog/run"

	jobplanev1connect "github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// runHAStore serves HAStoreService on its own, over an embedded etcd
// member or an external cluster.
func runHAStore(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("hastore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logs     logFlags
		store    storeFlags
		epConfig endpoint.Config
	)
	logs.register(fs)
	store.register(fs, "data/hastore")
	fs.StringVar(&epConfig.Listen, "listen", "127.0.0.1:7001", "address to serve HAStoreService on (Connect, gRPC, gRPC-Web; HTTP/1.1 and h2c)")
	fs.StringVar(&epConfig.AddrFile, "listen-addr-file", "", "write the bound address to this file once listening")
	fs.DurationVar(&epConfig.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "how long in-flight requests get to finish on shutdown")
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

	ep, err := endpoint.Listen(epConfig, log)
	if err != nil {
		log.Error("cannot listen", "err", err)
		return exitError
	}
	st, err := store.open(context.Background(), log)
	if err != nil {
		ep.Close()
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer st.Close()
	path, handler := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: st, Logger: log}).Path()
	ep.Mount(jobplanev1connect.HAStoreServiceName, path, handler)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var g run.Group
	// Signals: SIGINT or SIGTERM starts a graceful shutdown.
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	// The RPC endpoint serving HAStoreService.
	{
		epCtx, epCancel := context.WithCancel(ctx)
		g.Add(func() error { return ep.Run(epCtx) }, func(error) { epCancel() })
	}
	err = g.Run()
	if errors.Is(err, run.ErrSignal) {
		log.Info("shut down", "cause", err.Error())
		return exitOK
	}
	log.Error("stopped", "err", err)
	return exitError
}
