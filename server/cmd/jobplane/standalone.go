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

// runStandalone runs a whole jobplane cluster in one process.
func runStandalone(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("standalone", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logs     logFlags
		store    storeFlags
		epConfig endpoint.Config
	)
	logs.register(fs)
	store.register(fs, "data/standalone")
	fs.StringVar(&epConfig.Listen, "listen", "127.0.0.1:8080", "address to serve Connect, gRPC and gRPC-Web on (HTTP/1.1 and h2c); port 0 picks a free port")
	fs.StringVar(&epConfig.AddrFile, "listen-addr-file", "", "write the bound address to this file once listening")
	fs.DurationVar(&epConfig.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "how long in-flight requests get to finish on shutdown")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobplane standalone [flags]")
		fmt.Fprintln(fs.Output(), "\nRuns a jobplane server in one process on an embedded HA store, which it")
		fmt.Fprintln(fs.Output(), "also serves as HAStoreService.")
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, err := logs.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "standalone: %v\n", err)
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
	// Signals: SIGINT or SIGTERM starts a graceful shutdown of every actor.
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	// The RPC endpoint: serves until interrupted, then drains in-flight
	// requests for up to -shutdown-timeout.
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
