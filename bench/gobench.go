package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GoBenchmark is one benchmark of `go test -bench` output: every metric
// it reported, one value per run (-count).
type GoBenchmark struct {
	// Package is the import path the benchmark ran in.
	Package string
	// Name is the benchmark's name without the GOMAXPROCS suffix.
	Name string
	// Metrics maps a unit ("ns/op", "B/op", "fenced-acks/s") to its
	// values, one per run.
	Metrics map[string][]float64
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// ParseGoBench reads `go test -bench` output and returns its benchmarks
// in the order they first appear.
func ParseGoBench(r io.Reader) ([]*GoBenchmark, error) {
	var (
		out   []*GoBenchmark
		byKey = map[string]*GoBenchmark{}
		pkg   string
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line
		}
		name := procsSuffix.ReplaceAllString(f[0], "")
		b := byKey[pkg+" "+name]
		if b == nil {
			b = &GoBenchmark{Package: pkg, Name: name, Metrics: map[string][]float64{}}
			byKey[pkg+" "+name] = b
			out = append(out, b)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("bench: %q: value %q: %w", line, f[i], err)
			}
			b.Metrics[f[i+1]] = append(b.Metrics[f[i+1]], v)
		}
	}
	return out, sc.Err()
}

// goBenchRows turns benchmarks into table rows: time per operation for
// the scheduler's, and for the HA store's each custom acks/s and p99
// beside its raw etcd counterpart, which they measure in the same run.
func goBenchRows(bs []*GoBenchmark) []Row {
	var rows []Row
	for _, b := range bs {
		if sub, ok := strings.CutPrefix(b.Name, "BenchmarkCheckpoints/"); ok && checkpointIDs[sub] != "" {
			rows = append(rows, checkpointRows(checkpointIDs[sub], b)...)
			continue
		}
		if b.Name == "BenchmarkRecoveryAtScale" {
			rows = append(rows, recoveryRows(b)...)
			continue
		}
		if b.Name == "BenchmarkDashboardFirstPage" {
			rows = append(rows, dashboardRows(b)...)
			continue
		}
		short := b.Package[strings.LastIndexByte(b.Package, '/')+1:] + "." + strings.TrimPrefix(b.Name, "Benchmark")
		if ns, ok := b.Metrics["ns/op"]; ok {
			ms := make([]float64, len(ns))
			for i, v := range ns {
				ms[i] = v / 1e6
			}
			note := ""
			if bop, aop := b.Metrics["B/op"], b.Metrics["allocs/op"]; len(bop) > 0 && len(aop) > 0 {
				note = fmt.Sprintf("%.2f MiB/op, %s allocs/op", Median(bop)/(1<<20), FormatNumber(Median(aop)))
			}
			rows = append(rows, Row{ID: "6", Scenario: short, Measure: "ms/op", Value: SpreadOf(ms), Target: schedulerTarget(b.Name), Note: note})
			continue
		}
		units := make([]string, 0, len(b.Metrics))
		for u := range b.Metrics {
			units = append(units, u)
		}
		slices.Sort(units)
		for _, u := range units {
			if target, ok := adoptionTargets[u]; ok {
				row := Row{ID: "8", Scenario: fmt.Sprintf("adoption across a change of leader, default timings, %s one-task jobs on 10 TaskExecutors", FormatNumber(Median(b.Metrics["adopt-jobs"]))),
					Measure: strings.TrimPrefix(u, "adopt-"), Value: SpreadOf(b.Metrics[u]), Target: target,
					Note: fmt.Sprintf("%s cycles per run (internal/failover): kill = SIGKILL, term = SIGTERM of the leader → the next leader reports every job running; floor: the same cycles with one job, side by side; restarts: tasks started again (each job's one task runs on, adopted)", FormatNumber(Median(b.Metrics["adopt-cycles"])))}
				if floor := b.Metrics["adopt-floor-"+strings.TrimPrefix(u, "adopt-")]; len(floor) > 0 && u != "adopt-restarts" {
					row.Floor = SpreadOf(floor)
				}
				rows = append(rows, row)
				continue
			}
			if target, ok := failoverTargets[u]; ok {
				rows = append(rows, Row{ID: "7", Scenario: "failover of the leader, default timings, " + strings.TrimPrefix(b.Name, "BenchmarkFailover/"),
					Measure: strings.TrimPrefix(u, "failover-"), Value: SpreadOf(b.Metrics[u]), Target: target,
					Note: fmt.Sprintf("%s cycles per run (internal/failover): kill = SIGKILL → first recovered job RUNNING on the standby; term = SIGTERM → the next leader answers", FormatNumber(Median(b.Metrics["failover-cycles"])))})
				continue
			}
			if strings.HasPrefix(u, "raw") || !(strings.HasSuffix(u, "acks/s") || strings.HasSuffix(u, "p99-ms")) {
				continue
			}
			row := Row{ID: "6", Scenario: short, Measure: u, Value: SpreadOf(b.Metrics[u])}
			if strings.HasSuffix(u, "acks/s") {
				row.Floor = SpreadOf(b.Metrics["raw-acks/s"])
				if txn := b.Metrics["raw-txn-acks/s"]; len(txn) > 0 {
					row.Note = fmt.Sprintf("floor: raw etcd puts; a hand-written fenced txn: %s acks/s", FormatNumber(Median(txn)))
				} else {
					row.Note = "floor: raw etcd puts"
				}
			} else {
				row.Floor = SpreadOf(b.Metrics["raw-p99-ms"])
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// failoverTargets are DESIGN.md §6's failover targets, by the metric of
// BenchmarkFailover (internal/failover); TTL + 1 s is 3 s with the
// default session TTL of 2 s.
var failoverTargets = map[string]string{
	"failover-kill-p50-ms": "≤ 3000",
	"failover-kill-max-ms": "≤ TTL + 1 s",
	"failover-term-p50-ms": "≤ 300",
	"failover-term-max-ms": "≤ 300",
}

// adoptionTargets are issue 29's targets for BenchmarkAdoption
// (internal/failover): a change of leader restarts no task, and every job
// runs under the new leader within 2 s (median) and 3 s (worst) of a
// SIGKILL. The SIGKILL figures include the session TTL (2 s by default),
// which the one-job floor shows.
var adoptionTargets = map[string]string{
	"adopt-kill-p50-ms": "≤ 2000",
	"adopt-kill-max-ms": "≤ 3000",
	"adopt-term-p50-ms": "",
	"adopt-term-max-ms": "",
	"adopt-restarts":    "0",
}

// checkpointIDs are the rows of BenchmarkCheckpoints' sub-benchmarks
// (internal/failover).
var checkpointIDs = map[string]string{"one-job": "9a", "many-jobs": "9b", "taskexecutor-kill": "9c"}

// checkpointTargets are issue 30's targets for BenchmarkCheckpoints, by
// row and metric; each metric listed becomes a row (in key order), an
// empty target a row without one. 9a: the JobManager's cores with one job
// of 100 subtasks checkpointing every second, one HA-store write per
// completed checkpoint, and a checkpoint durable within 20 ms (p50) of
// its last acknowledgement; 9b: the JobManager's cores and RSS growth
// with 1,000 one-subtask jobs checkpointing every 10 s; 9c: the work a
// SIGKILLed TaskExecutor loses, at most one checkpoint interval (1 s)
// and the checkpoint's own duration, restored from the latest completed
// checkpoint.
var checkpointTargets = map[string]string{
	"9a ckpt-cores":                 "≤ 0.1",
	"9a ckpt-writes-per-checkpoint": "1",
	"9a ckpt-store-p50-ms":          "≤ 20",
	"9b ckpt-cores":                 "≤ 0.2",
	"9b ckpt-rss-growth-mib":        "≤ 100",
	"9b ckpt-writes-per-checkpoint": "1",
	"9b ckpt-store-p50-ms":          "",
	"9c ckpt-lost-p50-ms":           "",
	"9c ckpt-lost-max-ms":           "≤ 1000 + own",
	"9c ckpt-not-latest":            "0",
}

// checkpointRows turns one of BenchmarkCheckpoints' sub-benchmarks into
// row id (9a, 9b or 9c), one row per metric of checkpointTargets.
func checkpointRows(id string, b *GoBenchmark) []Row {
	med := func(unit string) string { return FormatNumber(Median(b.Metrics[unit])) }
	var scenario, note string
	switch id {
	case "9c":
		scenario = fmt.Sprintf("work lost when the TaskExecutor of a one-subtask `count` job checkpointing every 1 s is SIGKILLed, %s runs", med("ckpt-kills"))
		note = fmt.Sprintf("internal/failover: 3 TaskExecutors; each run SIGKILLs the job's TaskExecutor at a random phase of its checkpoints once 2 completed; lost = SIGKILL − ack_time of the checkpoint the next attempt restored (restored_from in its output), at most %s ms from that checkpoint's trigger_time; own = a checkpoint's trigger → last ack, at most %s ms; not-latest: runs restored from a checkpoint older than the latest completed before the SIGKILL; the next attempt ran %s ms (p50; max %s) after the SIGKILL (the loss noticed, restart, deploy: not lost work)",
			med("ckpt-lost-trigger-max-ms"), med("ckpt-own-max-ms"), med("ckpt-redeploy-p50-ms"), med("ckpt-redeploy-max-ms"))
	default:
		what := fmt.Sprintf("one job of %s `count` subtasks", med("ckpt-subtasks"))
		if id == "9b" {
			what = fmt.Sprintf("%s one-subtask `count` jobs", med("ckpt-jobs"))
		}
		scenario = fmt.Sprintf("checkpoints every %s s, %s, %s s window", med("ckpt-interval-s"), what, med("ckpt-window-s"))
		note = fmt.Sprintf("internal/failover: the jobmanager process (JobMasters and the store, on one etcd member) over the window; floor: the same jobs without checkpoints, on a cluster of their own; %s checkpoints completed in the window, %s failed",
			med("ckpt-completed"), med("ckpt-failed"))
	}
	var keys []string
	for k := range checkpointTargets {
		if strings.HasPrefix(k, id+" ") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var rows []Row
	for _, k := range keys {
		unit := strings.TrimPrefix(k, id+" ")
		if len(b.Metrics[unit]) == 0 {
			continue
		}
		row := Row{ID: id, Scenario: scenario, Measure: strings.TrimPrefix(unit, "ckpt-"), Value: SpreadOf(b.Metrics[unit]), Target: checkpointTargets[k], Note: note}
		switch unit {
		case "ckpt-cores":
			row.Floor = SpreadOf(b.Metrics["ckpt-floor-cores"])
			row.Note += fmt.Sprintf("; cost of checkpoints: %.3f cores (with − without)", Median(b.Metrics["ckpt-cores"])-Median(b.Metrics["ckpt-floor-cores"]))
		case "ckpt-rss-growth-mib":
			// A growth may be negative, which makes a ratio meaningless:
			// the floor's is in the note.
			row.Note += fmt.Sprintf("; RSS (VmRSS) at the window's end minus at its start; without checkpoints %s MiB; at the end %s MiB (without checkpoints %s MiB)", med("ckpt-floor-rss-growth-mib"), med("ckpt-rss-mib"), med("ckpt-floor-rss-mib"))
		case "ckpt-writes-per-checkpoint":
			row.Note += fmt.Sprintf("; the jobmanager's fenced store writes (jobplane_hastore_write_duration_seconds count) over its completed checkpoints; other writes in the steady state: %s by the jobmanager without checkpoints, %s by the TaskExecutors' HA-store process", med("ckpt-floor-writes"), med("ckpt-te-store-writes"))
		case "ckpt-store-p50-ms":
			row.Note += fmt.Sprintf("; last ack → durable write (jobplane_checkpoint_store_duration_seconds over the window): p50 interpolated in its bucket (≤ %s ms), mean %s ms; trigger → durable p50 %s ms", med("ckpt-store-p50-bucket-ms"), med("ckpt-store-mean-ms"), med("ckpt-took-p50-ms"))
		}
		rows = append(rows, row)
	}
	return rows
}

// recoveryTargets are issue 33's target 6 for BenchmarkRecoveryAtScale
// (internal/failover), row 11, in the order of the rows: a JobManager
// that takes over 100,000 waiting and 10,000 running jobs serves its
// first SubmitJob within 2 s and has every running task adopted within
// 5 s. Both count from the takeover, the new leader's grant: from the
// SIGKILL they add the session TTL (2 s by default), which rows 7 and 8
// hold to their own targets and the one-job floor shows. Beside them: the
// same from the SIGKILL, the new leader's RSS, and what must stay zero.
var recoveryTargets = []struct{ unit, target string }{
	{"recover-grant-ack-ms", "≤ 2000"},
	{"recover-grant-adopted-ms", "≤ 5000"},
	{"recover-kill-grant-ms", ""},
	{"recover-kill-ack-ms", ""},
	{"recover-kill-adopted-ms", ""},
	{"recover-rss-mib", ""},
	{"recover-restarts", "0"},
	{"recover-not-adopted", "0"},
	{"recover-failed", "0"},
}

// recoveryRows turns BenchmarkRecoveryAtScale into row 11, one row per
// metric of recoveryTargets that it reported, each beside its one-job
// floor where that is a figure of the same kind.
func recoveryRows(b *GoBenchmark) []Row {
	med := func(unit string) string { return FormatNumber(Median(b.Metrics[unit])) }
	scenario := fmt.Sprintf("takeover after a SIGKILL of the leader, %s jobs waiting + %s running (one task each, 10 TaskExecutors), default timings",
		med("recover-waiting"), med("recover-running"))
	note := "internal/failover, two jobmanagers on one etcd member: grant = the new leader logs its leadership; ack = a client retrying SubmitJob of a fresh job at the standby (1 s per call) is acknowledged; adopted = the new leader's log shows the running task of every job that ran before the SIGKILL adopted; floor: the same takeover with one running job, side by side"
	var rows []Row
	for _, t := range recoveryTargets {
		if len(b.Metrics[t.unit]) == 0 {
			continue
		}
		measure := strings.TrimPrefix(t.unit, "recover-")
		row := Row{ID: "11", Scenario: scenario, Measure: measure, Value: SpreadOf(b.Metrics[t.unit]), Target: t.target}
		switch measure {
		case "grant-ack-ms":
			row.Note = note
		case "rss-mib":
			row.Note = fmt.Sprintf("the new leader's VmRSS once every task was adopted; its peak (VmHWM) %s MiB; the old leader's VmRSS before the SIGKILL %s MiB", med("recover-peak-rss-mib"), med("recover-old-rss-mib"))
		case "restarts":
			row.Note = "attempts of the running jobs started after they first ran (TaskExecutors' attempt logs)"
		case "not-adopted":
			row.Note = "running jobs not adopted by the end of the wait, or not RUNNING at the new leader after it"
		case "failed":
			row.Note = "jobs FAILED at the new leader at the end"
		}
		if floor := b.Metrics["recover-floor-"+measure]; len(floor) > 0 && (strings.HasSuffix(measure, "-ms") || measure == "rss-mib") {
			row.Floor = SpreadOf(floor)
		}
		rows = append(rows, row)
	}
	return rows
}

// schedulerTarget is DESIGN.md §6's target for a scheduler benchmark.
func schedulerTarget(name string) string {
	if !strings.Contains(name, "Build") && !strings.Contains(name, "InitialSchedule") {
		return ""
	}
	switch {
	case strings.Contains(name, "2x4000-"):
		return "≤ 100"
	case strings.Contains(name, "2x10000-"):
		return "≤ 500"
	}
	return ""
}

// runGoBench reports row 6 from the file of `go test -bench` output that
// `make bench` wrote before the harness ran.
func runGoBench(_ context.Context, e *env) (Outcome, error) {
	if e.GoBench == "" {
		return Outcome{Rows: []Row{{ID: "6", Scenario: "Go benchmarks", Note: "not run (no -gobench file given)"}}}, nil
	}
	data, err := os.ReadFile(e.GoBench)
	if err != nil {
		return Outcome{}, err
	}
	bs, err := ParseGoBench(strings.NewReader(string(data)))
	if err != nil {
		return Outcome{}, err
	}
	if len(bs) == 0 {
		return Outcome{}, fmt.Errorf("no benchmark results in %s", e.GoBench)
	}
	return Outcome{
		Rows:    goBenchRows(bs),
		Details: []Detail{{Title: "Row 6: go test -bench output, verbatim", Text: string(data)}},
	}, nil
}

// dashboardRows turns BenchmarkDashboardFirstPage (ui/bench/firstpage.mjs,
// in chromium) into row 12: the dashboard's first page drawn within 1 s of
// its load with 10,000 jobs in the cluster (issue 34), the jobs page and
// the cluster page, each beside the floor measured in the same run.
func dashboardRows(b *GoBenchmark) []Row {
	scenario := fmt.Sprintf("the dashboard's first page drawn, %s jobs in the cluster (chromium, headless, a new context each run)", FormatNumber(Median(b.Metrics["ui-jobs"])))
	floor := SpreadOf(b.Metrics["ui-floor-ms"])
	note := "ui/bench/firstpage.mjs on a standalone: from the navigation's start (performance.now()) to the first job's row (jobs) or the leader (cluster) shown; floor: the same page with its script blocked (DOMContentLoaded) plus one ListJobs of the page's 50 fetched from it"
	var rows []Row
	for _, m := range []struct{ unit, measure string }{{"ui-jobs-ms", "jobs page ms"}, {"ui-cluster-ms", "cluster page ms"}} {
		if len(b.Metrics[m.unit]) == 0 {
			continue
		}
		rows = append(rows, Row{ID: "12", Scenario: scenario, Measure: m.measure, Value: SpreadOf(b.Metrics[m.unit]), Floor: floor, Target: "≤ 1000", Note: note})
		note = ""
	}
	return rows
}
