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
