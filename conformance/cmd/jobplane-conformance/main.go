// Command jobplane-conformance checks a jobplane server, over the network,
// for the promises of the contract: submission idempotency,
// persist-before-run ordering, fencing, recovery and the job lifecycle.
//
//	jobplane-conformance --server-command 'jobplane jobmanager --hastore {hastore} --listen {listen}'
//	jobplane-conformance --hastore-listen 127.0.0.1:7001   # then start the server yourself
//	jobplane-conformance --store-command 'jobplane hastore --listen {listen} --data-dir {data}'
//	jobplane-conformance --taskexecutor-command 'jobplane taskexecutor --hastore {hastore} --listen {listen} --conformance-invokables'
//
// It prints one line per failure, then "Total cases: N" and, last,
// "N passed, N failed" (", N skipped" may follow). Exit status: 0 when
// every case passed, 1 when some failed, 2 for bad usage.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jobplane/jobplane/conformance/runner"
)

const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	defaultConf = `{"features": {"implements_resource_manager": true, "supports_failover": true, "supports_adoption": true, "supports_checkpoints": true, "checks_invokables": true}}`
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// patterns is a repeatable flag of case name patterns; "@file" reads
// them from a file, one per line ('#' starts a comment).
type patterns []string

func (p *patterns) String() string { return strings.Join(*p, ",") }

func (p *patterns) Set(v string) error {
	if file, ok := strings.CutPrefix(v, "@"); ok {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			line, _, _ := strings.Cut(s.Text(), "#")
			if line = strings.TrimSpace(line); line != "" {
				*p = append(*p, line)
			}
		}
		return s.Err()
	}
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*p = append(*p, x)
		}
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jobplane-conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg        runner.Config
		run, skip  patterns
		knownFail  patterns
		knownFlaky patterns
		configFile string
		tokenFile  string
		list       bool
	)
	fs.StringVar(&cfg.ServerCommand, "server-command", "", "start each server instance with this shell command; {hastore}, {listen}, {data} and {instance} are replaced (also set as JOBPLANE_HASTORE_URL, JOBPLANE_LISTEN, JOBPLANE_DATA_DIR, JOBPLANE_INSTANCE)")
	fs.StringVar(&cfg.HAStoreListen, "hastore-listen", "", "without --server-command: serve the runner's HA store here, and check the server you start pointed at it")
	fs.StringVar(&cfg.StoreCommand, "store-command", "", "check an HA store instead of a server: start a store for each store case with this shell command; {listen} and {data} are replaced (also set as JOBPLANE_LISTEN, JOBPLANE_DATA_DIR)")
	fs.StringVar(&cfg.TaskExecutorCommand, "taskexecutor-command", "", "check a TaskExecutor instead of a server: start one for each taskexecutor case with this shell command, the runner playing the JobManager side; {hastore}, {listen}, {data} and {id} are replaced (also set as JOBPLANE_HASTORE_URL, JOBPLANE_LISTEN, JOBPLANE_DATA_DIR, JOBPLANE_ID)")
	fs.IntVar(&cfg.StoreMaxPlanBytes, "store-max-plan-bytes", 1<<20, "with --store-command: the store's limit on an encoded execution plan")
	fs.StringVar(&configFile, "config", "", `JSON file declaring the server's features, e.g. `+defaultConf+` (default: all of them)`)
	fs.Var(&run, "run", "run only cases matching these patterns (comma-separated, repeatable, or @file)")
	fs.Var(&skip, "skip", "skip cases matching these patterns")
	fs.Var(&knownFail, "known-failing", "cases that must fail (patterns or @file); one that passes fails the run")
	fs.Var(&knownFlaky, "known-flaky", "cases whose failures do not fail the run")
	fs.Float64Var(&cfg.TimingScale, "timing-scale", 1, "multiply every wait the runner derives from the server's advertised timings (GetClusterOverview.timings), and the case timeout, by this factor (at least 1), for slow machines")
	fs.IntVar(&cfg.Parallel, "parallel", 2, "cases run at once, each with its own store, TaskExecutors and server")
	fs.BoolVar(&cfg.Verbose, "v", false, "print every case's outcome")
	fs.BoolVar(&cfg.Trace, "trace", false, "print the recorded HA-store and TaskExecutor events of failing cases")
	fs.StringVar(&cfg.ReportJSON, "report-json", "", "write a JSON report to this file")
	fs.StringVar(&cfg.ReportJUnit, "report-junit", "", "write a JUnit XML report to this file")
	fs.BoolVar(&list, "list", false, "list the cases and what each checks, and exit")
	fs.StringVar(&cfg.Protocol, "protocol", "connect", "the RPC protocol of every call the runner and its TaskExecutors make to the server (or, with --store-command, to the store): connect, grpc or grpcweb")
	fs.StringVar(&cfg.TLSCA, "tls-ca", "", "PEM file of the certificate authorities the server's (or store's) certificate chains to: it then serves TLS at https://{listen} (HTTP/2 by ALPN), and the runner trusts only these authorities")
	fs.StringVar(&tokenFile, "token-file", "", "send the bearer token in this file (default: $JOBPLANE_TOKEN) with every call to the server's DispatcherService, for a server that authenticates its clients; its principal must be an admin of the server's policy, as cases ask about jobs that do not exist")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "jobplane-conformance: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if list {
		for _, c := range append(append(runner.Cases(), runner.StoreCases()...), runner.TaskExecutorCases()...) {
			fmt.Fprintf(stdout, "%s\n    %s\n", c.Name, c.Doc)
		}
		return exitOK
	}
	cfg.Token = os.Getenv("JOBPLANE_TOKEN")
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "jobplane-conformance: --token-file: %v\n", err)
			return exitUsage
		}
		if cfg.Token = strings.TrimSpace(string(b)); cfg.Token == "" {
			fmt.Fprintf(stderr, "jobplane-conformance: --token-file %s is empty\n", tokenFile)
			return exitUsage
		}
	}
	if n := btoi(cfg.ServerCommand != "") + btoi(cfg.HAStoreListen != "") + btoi(cfg.StoreCommand != "") + btoi(cfg.TaskExecutorCommand != ""); n != 1 {
		fmt.Fprintln(stderr, "jobplane-conformance: give one of --server-command, --hastore-listen (and start the server yourself), --store-command (to check an HA store) or --taskexecutor-command (to check a TaskExecutor)")
		return exitUsage
	}
	if err := runner.CheckWire(cfg.Protocol, cfg.TLSCA); err != nil {
		fmt.Fprintf(stderr, "jobplane-conformance: --protocol, --tls-ca: %v\n", err)
		return exitUsage
	}
	raw := []byte(defaultConf)
	if configFile != "" {
		var err error
		if raw, err = os.ReadFile(configFile); err != nil {
			fmt.Fprintf(stderr, "jobplane-conformance: %v\n", err)
			return exitUsage
		}
	}
	var conf struct {
		Features map[string]bool `json:"features"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		fmt.Fprintf(stderr, "jobplane-conformance: config %s: %v\n", configFile, err)
		return exitUsage
	}
	cfg.Features = conf.Features
	// A pattern that selects no case is a typo or a stale entry.
	for flagName, ps := range map[string]patterns{"run": run, "skip": skip, "known-failing": knownFail, "known-flaky": knownFlaky} {
		for _, p := range ps {
			if !runner.Matches(p) {
				fmt.Fprintf(stderr, "jobplane-conformance: --%s %q matches no case (see --list)\n", flagName, p)
				return exitUsage
			}
		}
	}
	for _, f := range []string{cfg.ReportJSON, cfg.ReportJUnit} {
		if f == "" {
			continue
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			fmt.Fprintf(stderr, "jobplane-conformance: report: %v\n", err)
			return exitUsage
		}
	}
	cfg.Run, cfg.Skip, cfg.KnownFailing, cfg.KnownFlaky = run, skip, knownFail, knownFlaky
	cfg.Out = stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := runner.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "jobplane-conformance: %v\n", err)
		return exitFailed
	}
	if sum.Failed > 0 {
		return exitFailed
	}
	return exitOK
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
