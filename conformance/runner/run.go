// Package runner is the jobplane conformance runner: it checks a server,
// over the network, for the promises of the contract (submission
// idempotency, persist-before-run ordering, fencing, recovery and the job
// lifecycle). It hosts the HA store and the TaskExecutors the server
// uses, records every call they see, injects faults, and starts (and
// kills) the server, or checks one the user started.
package runner

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// Config configures a run.
type Config struct {
	// ServerCommand starts one server instance, run by /bin/sh; see
	// README.md for its placeholders. Empty: the user starts the server,
	// pointed at the store on HAStoreListen.
	ServerCommand string
	// HAStoreListen is the address the runner's HA store listens on when
	// the user starts the server.
	HAStoreListen string
	// Features the server declares (see the Feature constants).
	Features map[string]bool
	// Run and Skip select cases by name pattern: a pattern matches a
	// case's name, a group of it, or by path.Match.
	Run, Skip []string
	// KnownFailing cases must fail; one that passes fails the run.
	// KnownFlaky cases may fail without failing the run.
	KnownFailing, KnownFlaky []string
	// Parallel is the number of cases run at once (each with its own
	// store, TaskExecutors and server). Default: 2.
	Parallel int
	// Verbose prints every case's outcome; Trace prints the recorded
	// events (and the server's output) of failing cases, and with Verbose
	// of every case.
	Verbose, Trace bool
	// Out receives the report. Default: os.Stdout.
	Out io.Writer
	// ReportJSON and ReportJUnit, if set, are files to write reports to.
	ReportJSON, ReportJUnit string
	// CaseTimeout bounds one case. Default: 2m times TimingScale.
	CaseTimeout time.Duration
	// TimingScale multiplies every wait the runner derives from the
	// server's advertised timings (see README.md, "Timings the suite takes
	// from the server"), for slow machines. Default (and at least): 1.
	TimingScale float64
	// StoreCommand, instead of a server, checks an HA store: it starts one
	// store process, run by /bin/sh, for each of the StoreCases, with
	// {listen} and {data} replaced (see README.md).
	StoreCommand string
	// TaskExecutorCommand, instead of a server, checks a TaskExecutor: it
	// starts one TaskExecutor process, run by /bin/sh, for each of the
	// TaskExecutorCases, with {hastore}, {listen}, {data} and {id}
	// replaced (see README.md), and plays the JobManager side itself.
	TaskExecutorCommand string
	// StoreMaxPlanBytes is the store's plan size limit. Default: 1 MiB.
	StoreMaxPlanBytes int
	// Token, if set, is the bearer token sent with every call to the
	// server's public API (DispatcherService), for a server that
	// authenticates its clients. Its principal must be an admin of the
	// server's policy, as cases ask about jobs that do not exist.
	Token string
	// StopAtFirstCatch starts no more cases once one failed by its own
	// assertion (see CaughtByAssertion); the rest are skipped. For
	// mutation testing, where one catch is enough.
	StopAtFirstCatch bool
	// Protocol is the RPC protocol of every call the runner and its
	// TaskExecutors make to the server: "connect" (the default), "grpc"
	// or "grpcweb" (see Protocols). Run fails on any other.
	Protocol string
	// TLSCA, if set, is a PEM file of the authorities the server's
	// certificate chains to: the server serves TLS (HTTP/2 by ALPN) at
	// https://{listen}, and the runner trusts only these authorities.
	// Empty: the server serves h2c at http://{listen}. Run fails on a
	// file that holds no certificate.
	TLSCA string

	// Seed seeds the random fault schedules (faults/random-schedule): the
	// same seed faults the same store calls the same way, and draws the
	// same client operations. 0: Run draws one. A failing case that used
	// it names it, so that the run can be replayed with it.
	Seed uint64

	// wire is Protocol and TLSCA as Run checked them.
	wire wire
}

// Cases returns every case, in order.
func Cases() []Case {
	var all []Case
	for _, g := range [][]Case{idempotencyCases, persistCases, fencingCases, tokenCases(), rmTokenCases(), faultCases(), recoveryCases, adoptionCases, checkpointCases, lifecycleCases, surfaceCases, runCases, timingCases, invokableCases, restartCases, raceCases} {
		all = append(all, g...)
	}
	return all
}

// Result is the outcome of one case.
type Result struct {
	Name     string        `json:"name"`
	Outcome  string        `json:"outcome"` // "passed", "failed" or "skipped"
	Messages []string      `json:"messages,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Known is "failing" or "flaky" when the case is listed as such.
	Known string `json:"known,omitempty"`
}

// Summary counts a run's outcomes.
type Summary struct {
	Results                 []Result
	Passed, Failed, Skipped int
}

// Matches reports whether pattern selects at least one case, of either
// mode.
func Matches(pattern string) bool {
	for _, c := range append(append(Cases(), StoreCases()...), TaskExecutorCases()...) {
		if matches(c.Name, []string{pattern}) {
			return true
		}
	}
	return false
}

// matches reports whether name is selected by any of patterns.
func matches(name string, patterns []string) bool {
	for _, p := range patterns {
		p = strings.TrimSuffix(p, "/")
		if p == name || strings.HasPrefix(name, p+"/") {
			return true
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Run runs the selected cases and writes the report.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 2
	}
	cfg.TimingScale = max(cfg.TimingScale, 1)
	if cfg.CaseTimeout <= 0 {
		cfg.CaseTimeout = time.Duration(float64(2*time.Minute) * cfg.TimingScale)
	}
	if cfg.StoreMaxPlanBytes <= 0 {
		cfg.StoreMaxPlanBytes = hastore.DefaultMaxPlanBytes
	}
	for cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	var err error
	if cfg.wire, err = newWire(cfg.Protocol, cfg.TLSCA); err != nil {
		return Summary{}, err
	}
	features := map[string]bool{}
	for k, v := range cfg.Features {
		features[k] = v
	}
	var shared *env
	cases := Cases()
	if cfg.StoreCommand != "" {
		cases = StoreCases()
	} else if cfg.TaskExecutorCommand != "" {
		cases = TaskExecutorCases()
	} else if cfg.ServerCommand != "" {
		features[featureRunnerStarts] = true
	} else {
		// The user's server uses one store for the whole run; cases run
		// one at a time on it.
		cfg.Parallel = 1
		shared, err = newEnv(ctx, envConfig{hastoreListen: cfg.HAStoreListen, token: cfg.Token, wire: cfg.wire, taskExecutors: 2, slots: 4})
		if err != nil {
			return Summary{}, err
		}
		defer shared.close()
		fmt.Fprintf(cfg.Out, "HA store listening at %s; start the server pointed at it.\n", shared.storeHS.URL())
	}

	for _, c := range cases {
		if c.Name == "faults/random-schedule" && (len(cfg.Run) == 0 || matches(c.Name, cfg.Run)) && !matches(c.Name, cfg.Skip) {
			fmt.Fprintf(cfg.Out, "Random fault seed: %d (replay with --seed %d)\n", cfg.Seed, cfg.Seed)
		}
	}

	results := make([]Result, len(cases))
	sem := make(chan struct{}, cfg.Parallel)
	var caught atomic.Bool
	var wg sync.WaitGroup
	var outMu sync.Mutex
	// note prints a line about the run once, whichever case has it first.
	var noted sync.Map
	note := func(line string) {
		if _, dup := noted.LoadOrStore(line, true); dup {
			return
		}
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintln(cfg.Out, line)
	}
	for i, c := range cases {
		res := Result{Name: c.Name}
		switch {
		case matches(c.Name, cfg.KnownFailing):
			res.Known = "failing"
		case matches(c.Name, cfg.KnownFlaky):
			res.Known = "flaky"
		}
		if len(cfg.Run) > 0 && !matches(c.Name, cfg.Run) || matches(c.Name, cfg.Skip) {
			res.Outcome = "skipped"
			results[i] = res
			continue
		}
		if missing := missingFeature(c, features); missing != "" {
			res.Outcome = "skipped"
			res.Messages = []string{"needs feature " + missing}
			results[i] = res
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		if caught.Load() {
			<-sem
			wg.Done()
			res.Outcome = "skipped"
			res.Messages = []string{"not run: an earlier case caught a failure (StopAtFirstCatch)"}
			results[i] = res
			continue
		}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			var msgs []string
			var skipped, trace string
			switch {
			case cfg.StoreCommand != "":
				msgs, skipped, trace = runStoreCase(ctx, cfg, c)
			case cfg.TaskExecutorCommand != "":
				msgs, trace = runTaskExecutorCase(ctx, cfg, c, i)
			default:
				msgs, trace = runCase(ctx, cfg, c, i, shared, note)
			}
			res.Duration = time.Since(start)
			res.Outcome = "passed"
			if len(msgs) > 0 {
				res.Outcome = "failed"
			} else if skipped != "" {
				res.Outcome, msgs = "skipped", []string{skipped}
			}
			switch {
			case res.Known == "failing" && res.Outcome == "passed":
				res.Outcome = "failed"
				msgs = []string{"listed as known failing, but passed; remove it from the list"}
			case res.Known == "failing" || res.Known == "flaky" && res.Outcome == "failed":
				res.Outcome = "passed"
			}
			res.Messages = msgs
			results[i] = res
			if cfg.StopAtFirstCatch && res.Outcome == "failed" && CaughtByAssertion(res) {
				caught.Store(true)
			}
			outMu.Lock()
			defer outMu.Unlock()
			switch {
			case res.Outcome == "failed":
				for _, m := range msgs {
					fmt.Fprintf(cfg.Out, "FAILED: %s: %s\n", c.Name, m)
				}
				if cfg.Trace {
					fmt.Fprint(cfg.Out, trace)
				}
			case cfg.Verbose:
				note := ""
				if res.Known != "" && len(msgs) > 0 {
					note = fmt.Sprintf(" (known %s: %s)", res.Known, strings.Join(msgs, "; "))
				}
				fmt.Fprintf(cfg.Out, "PASSED: %s (%.1fs)%s\n", c.Name, res.Duration.Seconds(), note)
				fmt.Fprint(cfg.Out, trace)
			}
		}()
	}
	wg.Wait()

	sum := Summary{Results: results}
	for _, r := range results {
		switch r.Outcome {
		case "passed":
			sum.Passed++
		case "failed":
			sum.Failed++
		default:
			sum.Skipped++
			if cfg.Verbose {
				fmt.Fprintf(cfg.Out, "SKIPPED: %s %s\n", r.Name, strings.Join(r.Messages, "; "))
			}
		}
	}
	if err := writeReports(cfg, sum); err != nil {
		return sum, err
	}
	fmt.Fprintf(cfg.Out, "Total cases: %d\n", len(results))
	line := fmt.Sprintf("%d passed, %d failed", sum.Passed, sum.Failed)
	if sum.Skipped > 0 {
		line += fmt.Sprintf(", %d skipped", sum.Skipped)
	}
	fmt.Fprintln(cfg.Out, line)
	return sum, nil
}

func missingFeature(c Case, features map[string]bool) string {
	for _, f := range c.Requires {
		if !features[f] {
			return f
		}
	}
	return ""
}

// runCase runs one case in an environment of its own (or the shared
// one) and returns its failures and, for --trace, its recorded events.
// note prints a line about the run once (what the runner took the
// server's timings to be).
func runCase(ctx context.Context, cfg Config, c Case, index int, shared *env, note func(string)) (failures []string, trace string) {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, seedKey{}, cfg.Seed), cfg.CaseTimeout)
	defer cancel()
	e := shared
	if e == nil {
		var err error
		e, err = newEnv(ctx, envConfig{serverCommand: cfg.ServerCommand, token: cfg.Token, wire: cfg.wire, taskExecutors: 2, slots: 4})
		if err != nil {
			return []string{"environment: " + err.Error()}, ""
		}
		defer e.close()
	}
	t := &T{ctx: ctx, env: e, ids: fmt.Sprintf("c%02d-%s-", index, path.Base(c.Name)), scale: cfg.TimingScale, note: note}
	t.waits = deriveWaits(nil, t.scale)
	start := e.log.Len()
	failures, _ = t.run(cfg.CaseTimeout, func() {
		if shared == nil {
			t.setup(func() { t.startServers(c) })
		} else {
			// The user's server: give its start a while.
			t.setup(func() { t.ready(slices.Contains(c.Requires, FeatureResourceManager), 3*t.waits.start) })
			// Leave the shared store as found: the case's jobs end.
			defer t.cancelSubmitted()
		}
		c.Run(t)
	})
	// Whatever the case tested, its trace must keep every promise.
	failures = append(failures, checkInvariants(e.log, start, t.ids)...)
	if cfg.Trace && (len(failures) > 0 || cfg.Verbose) {
		var b strings.Builder
		fmt.Fprintf(&b, "--- events of %s\n", c.Name)
		evs := e.log.Events(nil)[start:]
		for _, ev := range evs {
			fmt.Fprintf(&b, "    %7.3fs %v\n", ev.Time.Sub(evs[0].Time).Seconds(), ev)
		}
		e.mu.Lock()
		for i, p := range e.servers {
			fmt.Fprintf(&b, "--- output of server instance %d (last lines)\n%s\n", i, lastLines(p.output(), 400))
		}
		e.mu.Unlock()
		trace = b.String()
	}
	return failures, trace
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// startServers starts the case's server instances and waits until one
// leads and, with a ResourceManager, every TaskExecutor registered.
func (t *T) startServers(c Case) {
	n := c.Instances
	if n < 0 {
		return // the case starts them
	}
	if n == 0 {
		n = 1
	}
	for i := range n {
		if _, err := t.env.startServer(i); err != nil {
			t.Fatalf("%v", err)
		}
		if i == 0 {
			t.dispatcher() // the first leads before the others start
		}
	}
	t.ready(slices.Contains(c.Requires, FeatureResourceManager), t.waits.start)
}

// ready waits until the leading Dispatcher serves (a new leader may still
// be taking up its leadership) and, if withTaskExecutors, the runner's
// TaskExecutors registered with the ResourceManager. Then the case's waits
// follow the timings the server advertises (the reference server's
// defaults when it advertises none, which the run's output says).
func (t *T) ready(withTaskExecutors bool, d time.Duration) {
	var (
		last    *jobplanev1.GetClusterOverviewResponse
		lastErr error
	)
	if !t.wait(d, func() bool {
		ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
		defer cancel()
		dispatcher, err := t.env.dispatcher(ctx)
		if err != nil {
			lastErr = err
			return false
		}
		last, lastErr = dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		return lastErr == nil && (!withTaskExecutors || int(last.GetTaskExecutorCount()) >= len(t.env.tes))
	}) {
		t.Fatalf("within %v: GetClusterOverview of the leading Dispatcher answered %v, %v; expected it to serve, with the runner's %d TaskExecutors registered (they find the ResourceManager as the leader of %q)",
			d, last, lastErr, len(t.env.tes), election.JobManager)
	}
	t.timings = last.GetTimings()
	t.limits = last.GetLimits()
	t.waits = deriveWaits(t.timings, t.scale)
	if t.note == nil {
		return
	}
	if t.timings == nil {
		t.note("NOTE: the server advertises no timings (GetClusterOverview.timings, contract 1.2); the runner waits as for the reference server's defaults")
	} else {
		t.note(fmt.Sprintf("Timings the server advertises: %s; the runner waits up to %v for a failover, %v for a result", describe(t.timings), t.waits.failover, t.waits.result))
	}
}

// writeReports writes the JSON and JUnit reports the config asks for.
func writeReports(cfg Config, sum Summary) error {
	if cfg.ReportJSON != "" {
		b, err := json.MarshalIndent(struct {
			Passed  int      `json:"passed"`
			Failed  int      `json:"failed"`
			Skipped int      `json:"skipped"`
			Cases   []Result `json:"cases"`
		}{sum.Passed, sum.Failed, sum.Skipped, sum.Results}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.ReportJSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if cfg.ReportJUnit != "" {
		type failure struct {
			Message string `xml:"message,attr"`
			Text    string `xml:",chardata"`
		}
		type testcase struct {
			Name      string    `xml:"name,attr"`
			Classname string    `xml:"classname,attr"`
			Time      float64   `xml:"time,attr"`
			Failure   *failure  `xml:"failure,omitempty"`
			Skipped   *struct{} `xml:"skipped,omitempty"`
		}
		type suite struct {
			XMLName  xml.Name   `xml:"testsuite"`
			Name     string     `xml:"name,attr"`
			Tests    int        `xml:"tests,attr"`
			Failures int        `xml:"failures,attr"`
			Skipped  int        `xml:"skipped,attr"`
			Cases    []testcase `xml:"testcase"`
		}
		s := suite{Name: "jobplane-conformance", Tests: len(sum.Results), Failures: sum.Failed, Skipped: sum.Skipped}
		for _, r := range sum.Results {
			tc := testcase{Name: r.Name, Classname: path.Dir(r.Name), Time: r.Duration.Seconds()}
			switch r.Outcome {
			case "failed":
				tc.Failure = &failure{Message: strings.Join(r.Messages, "; "), Text: strings.Join(r.Messages, "\n")}
			case "skipped":
				tc.Skipped = &struct{}{}
			}
			s.Cases = append(s.Cases, tc)
		}
		b, err := xml.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.ReportJUnit, append([]byte(xml.Header), append(b, '\n')...), 0o644); err != nil {
			return err
		}
	}
	return nil
}
