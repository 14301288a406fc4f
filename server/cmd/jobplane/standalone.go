package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jobplane/jobplane/server/standalone"
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
		auth   authFlags
		count  int
	)
	store.register(c.fs, "data/standalone")
	listen.register(c.fs, "127.0.0.1:8080")
	listen.security.registerCluster(c.fs)
	debug.register(c.fs)
	jm.register(c.fs)
	te.register(c.fs)
	auth.register(c.fs)
	c.fs.IntVar(&count, "task-executors", 2, "TaskExecutors to run in the process, each on its own loopback port")
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	store.useTLS(listen)
	if err := errors.Join(listen.validate(), jm.validate(), debug.validate(), te.validate(), auth.validate(log)); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return exitUsage
	}
	auth.warnOpenCluster(listen, log)
	if count < 0 {
		fmt.Fprintln(stderr, "standalone: -task-executors must not be negative")
		return exitUsage
	}
	storeCfg, err := store.openConfig(log)
	if err != nil {
		fmt.Fprintf(stderr, "standalone: %v\n", err)
		return exitUsage
	}
	te.output.defaultDir(storeCfg.DataDir)
	closeLog, err := te.openAttemptLog()
	if err != nil {
		fmt.Fprintf(stderr, "standalone: %v\n", err)
		return exitError
	}
	defer closeLog()

	tel, err := setupTelemetry("jobplane-standalone", log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer tel.shutdown()
	cluster, err := standalone.New(context.Background(), standalone.Config{
		Listen: listen.cfg.Listen, Advertise: listen.cfg.Advertise, AddrFile: listen.cfg.AddrFile, ShutdownTimeout: listen.cfg.ShutdownTimeout,
		MaxRequestBytes: listen.cfg.MaxRequestBytes, MaxResponseBytes: listen.cfg.MaxResponseBytes,
		TLSCertFile: listen.cfg.TLSCertFile, TLSKeyFile: listen.cfg.TLSKeyFile, ClientCAFile: listen.cfg.ClientCAFile, ClientTLS: listen.security.files,
		ClusterListen: listen.security.clusterListen, ClusterAdvertise: listen.security.clusterAdvertise, ClusterAddrFile: listen.security.clusterAddrFile,
		Store:      storeCfg,
		SessionTTL: jm.sessionTTL, HeartbeatInterval: jm.heartbeatInterval, HeartbeatTimeout: jm.heartbeatTimeout, TaskLease: jm.lease(),
		MaxSubtasks: jm.maxSubtasks, ResultRetention: jm.resultRetention, SlotTimeout: jm.slotTimeout, SlotYield: jm.slotYieldConfig(),
		MaxJobs: jm.limits.maxJobs, MaxClusterSubtasks: jm.limits.maxClusterSubtasks, AdmissionWindow: jm.limits.window(), DispatcherOptions: append(auth.options, jm.limits.options...),
		TaskExecutors: count, Slots: te.slots, AllowExec: te.allowExec, Exec: te.exec.config(), CancelGrace: te.cancelGrace, AttemptLog: te.attemptLog,
		OutputDir: te.output.dir, OutputMaxAge: te.output.maxAge, OutputMaxBytes: te.output.maxBytes,
		Logger: log, Metrics: tel.MetricsHandler(),
	})
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	if err := addDebug(g, debug, listen.cfg.ShutdownTimeout, log); err != nil {
		cluster.Close()
		log.Error("cannot start", "err", err)
		return exitError
	}
	// The cluster: the HA store, the JobManager on the -listen endpoint,
	// and the TaskExecutors, until interrupted.
	g.actor(cluster.Run)
	return exitCode(log, g.Run())
}
