package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Config configures a bench run.
type Config struct {
	// JobPlane is the path of the jobplane binary under test. Required.
	JobPlane string
	// Self is the path of the bench binary, re-executed as the floor.
	// Required.
	Self string
	// Quick runs every scenario briefly (one run, short durations, small
	// counts), to catch breakage; its figures mean little.
	Quick bool
	// LogLevel is the JobManager's -log-level. Default: "warn".
	LogLevel string
	// JobManagerArgs are extra flags for every JobManager the bench starts
	// (say, --debug-listen 127.0.0.1:6060 to profile it during a run).
	JobManagerArgs []string
	// GoBench is a file holding the output of `go test -bench` for the
	// scheduler and HA-store benchmarks; empty skips that row.
	GoBench string
	// Only, if set, runs only the scenarios with these ids.
	Only []string
	// Progress receives a line per step. Default: io.Discard.
	Progress io.Writer
}

// env is what a scenario gets: the configuration and helpers scaled to
// the run's mode.
type env struct {
	Config
	log *slog.Logger // the bench TaskExecutors' logs, to a temporary file
}

// pick returns full, or quick in quick mode.
func pick[T any](e *env, full, quick T) T {
	if e.Quick {
		return quick
	}
	return full
}

// runs is how many times a scenario repeats its measurement.
func (e *env) runs() int { return pick(e, 3, 1) }

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(e.Progress, "bench: "+format+"\n", args...)
}

// Detail is a titled block of text that the report shows after the
// table, such as the windows of a run.
type Detail struct {
	Title string
	Text  string
}

// Outcome is what a scenario measured.
type Outcome struct {
	Rows    []Row
	Details []Detail
}

// scenario is one numbered row group of the table.
type scenario struct {
	id, name string
	// timeout bounds the scenario in the full and in the quick mode.
	timeout, quickTimeout time.Duration
	run                   func(ctx context.Context, e *env) (Outcome, error)
}

// scenarios are the bench's scenarios, in the order they run and report.
var scenarios = []scenario{
	{"1", "submission throughput beside the floor", 4 * time.Minute, time.Minute, runSubmission},
	{"2", "acks/s over time while jobs pile up", 5 * time.Minute, 30 * time.Second, runPileUp},
	{"3", "one-task job latency, back to back", 90 * time.Second, 20 * time.Second, runLatency},
	{"4", "2 x 1000 all-to-all pipelined job", 3 * time.Minute, 30 * time.Second, runBigJob},
	{"5", "10,000 running one-task jobs, then 10,000 waiting", 8 * time.Minute, 45 * time.Second, runScale},
	{"6", "scheduler and HA-store Go benchmarks", 10 * time.Second, 10 * time.Second, runGoBench},
	{"10", "heap per waiting job", 8 * time.Minute, 45 * time.Second, runWaitingHeap},
}

// Report is the outcome of a bench run.
type Report struct {
	Table   Table
	Details []Detail
	// Failed lists the scenarios that could not run, with why.
	Failed []string
	// Started and Duration time the run.
	Started  time.Time
	Duration time.Duration
	Quick    bool
}

// Run runs the scenarios that cfg selects, each bounded in time, and
// reports what they measured. A scenario that cannot run is reported as a
// row that says why, in Report.Failed, and the others still run. Run
// fails only when the configuration is unusable.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.JobPlane == "" || cfg.Self == "" {
		return nil, fmt.Errorf("bench: the jobplane binary and the bench binary are required")
	}
	if _, err := os.Stat(cfg.JobPlane); err != nil {
		return nil, fmt.Errorf("bench: jobplane binary: %w", err)
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	logDir, err := os.MkdirTemp("", "jobplane-bench-log-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(logDir)
	logFile, err := os.Create(filepath.Join(logDir, "taskexecutors.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	e := &env{Config: cfg, log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))}

	rep := &Report{Started: time.Now(), Quick: cfg.Quick}
	for _, s := range scenarios {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.id) {
			continue
		}
		if ctx.Err() != nil {
			rep.Failed = append(rep.Failed, s.id+": interrupted")
			continue
		}
		timeout := pick(e, s.timeout, s.quickTimeout)
		e.progress("%s. %s (at most %v)", s.id, s.name, timeout)
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, timeout)
		out, err := s.run(sctx, e)
		cancel()
		rep.Table.Add(out.Rows...)
		rep.Details = append(rep.Details, out.Details...)
		if err != nil {
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s (%s): %v", s.id, s.name, err))
			rep.Table.Add(Row{ID: s.id, Scenario: s.name, Note: "could not run: " + err.Error()})
			e.progress("%s. failed after %v: %v", s.id, time.Since(t0).Round(time.Millisecond), err)
			continue
		}
		e.progress("%s. done in %v", s.id, time.Since(t0).Round(time.Millisecond))
	}
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}
