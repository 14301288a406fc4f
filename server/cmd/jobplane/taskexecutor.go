package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/jobplane/jobplane/server/component"
)

// runTaskExecutor runs one TaskExecutor that follows the ResourceManager's
// leader through any of the cluster's processes serving HAStoreService.
func runTaskExecutor(args []string, _, stderr io.Writer) int {
	c := newCommand("taskexecutor", "Runs a TaskExecutor: it follows the ResourceManager's leader through any\n"+
		"of the cluster's processes named by -hastore, registers its slots with the\n"+
		"leader, and runs the tasks JobMasters deploy to it.", stderr)
	var (
		listen  listenFlags
		debug   debugFlags
		te      taskExecutorFlags
		servers string
	)
	listen.register(c.fs, "127.0.0.1:0")
	debug.register(c.fs)
	te.register(c.fs)
	c.fs.BoolVar(&te.suite, "conformance-invokables", false, "also offer the conformance suite's invokables (conformance.gate, conformance.fail, conformance.value; see conformance/README.md), for `jobplane-conformance --taskexecutor-command`")
	c.fs.StringVar(&servers, "hastore", "http://127.0.0.1:8080", "comma-separated base URLs of the cluster's processes that serve HAStoreService (any of its jobmanager, standalone or hastore processes): "+
		"the TaskExecutor follows the leader through the first that answers, and moves to the next when that one's stream breaks, cannot be opened or stays silent for "+component.ObserveIdleTimeout.String())
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	urls, err := parseBaseURLs(servers)
	if err == nil && te.slots < 1 {
		err = errors.New("-slots must be at least 1")
	}
	if err := errors.Join(err, listen.validate(), debug.validate(), te.validate()); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return exitUsage
	}
	closeLog, err := te.openAttemptLog()
	if err != nil {
		fmt.Fprintf(stderr, "taskexecutor: %v\n", err)
		return exitError
	}
	defer closeLog()
	tel, err := setupTelemetry("jobplane-taskexecutor", log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer tel.shutdown()
	leaders, err := component.NewLeaderObserver(urls, listen.newClient(), log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	if err := addDebug(g, debug, listen.cfg.ShutdownTimeout, log); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	if err := addTaskExecutor(g, listen, leaders, te, tel.MetricsHandler(), log); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	return exitCode(log, g.Run())
}

// parseBaseURLs splits a comma-separated list of base URLs, each an
// absolute http:// or https:// URL.
func parseBaseURLs(list string) ([]string, error) {
	var urls []string
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("-hastore: %q is not a base URL such as http://host1:8080", raw)
		}
		urls = append(urls, strings.TrimSuffix(raw, "/"))
	}
	return urls, nil
}
