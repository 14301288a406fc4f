package bench

import (
	"strings"
	"testing"
)

const sampleGoBench = `goos: linux
pkg: github.com/jobplane/jobplane/server/internal/scheduler
BenchmarkBuild/2x4000-all-to-all-blocking=false-2   	   12193	    102154 ns/op	  131416 B/op	      11 allocs/op
BenchmarkBuild/2x4000-all-to-all-blocking=false-2   	   12000	    100000 ns/op	  131416 B/op	      11 allocs/op
PASS
pkg: github.com/jobplane/jobplane/server/hastore
BenchmarkPlanPut-2   	    2332	      3410 fenced-acks/s	       203.1 fenced-p99-ms	         0.4784 ratio	      7129 raw-acks/s	        29.59 raw-p99-ms	     10218 raw-txn-acks/s	   98099 B/op	    1155 allocs/op
ok  	github.com/jobplane/jobplane/server/hastore	1.804s
`

func TestParseGoBench(t *testing.T) {
	t.Parallel()
	bs, err := ParseGoBench(strings.NewReader(sampleGoBench))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 {
		t.Fatalf("parsed %d benchmarks, want 2", len(bs))
	}
	if got := bs[0].Name; got != "BenchmarkBuild/2x4000-all-to-all-blocking=false" {
		t.Errorf("name = %q, want the GOMAXPROCS suffix removed", got)
	}
	if got := bs[0].Metrics["ns/op"]; len(got) != 2 || got[1] != 100000 {
		t.Errorf("ns/op = %v, want both runs", got)
	}
	if got := bs[1].Package; got != "github.com/jobplane/jobplane/server/hastore" {
		t.Errorf("package = %q", got)
	}

	rows := goBenchRows(bs)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3 (scheduler ms/op; fenced acks/s and p99): %+v", len(rows), rows)
	}
	if r := rows[0]; r.Measure != "ms/op" || r.Value.Median != 0.101077 || r.Target != "≤ 100" {
		t.Errorf("scheduler row = %+v, want ms/op median 0.101077 and target ≤ 100", r)
	}
	if r := rows[1]; r.Measure != "fenced-acks/s" || r.Floor.Median != 7129 {
		t.Errorf("store row = %+v, want fenced-acks/s beside raw 7129", r)
	}
	if r := rows[2]; r.Measure != "fenced-p99-ms" || r.Floor.Median != 29.59 {
		t.Errorf("store row = %+v, want fenced-p99-ms beside raw 29.59", r)
	}
}

func TestAdoptionRows(t *testing.T) {
	t.Parallel()
	const out = `pkg: github.com/jobplane/jobplane/internal/failover
BenchmarkAdoption-2   	       1	      3770 adopt-kill-p50-ms	      4290 adopt-kill-max-ms	      2020 adopt-term-p50-ms	      2140 adopt-term-max-ms	         0 adopt-restarts	      2100 adopt-floor-kill-p50-ms	      2200 adopt-floor-kill-max-ms	       240 adopt-floor-term-p50-ms	       260 adopt-floor-term-max-ms	         0 adopt-floor-restarts	      1000 adopt-jobs	         5 adopt-cycles
`
	bs, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	rows := goBenchRows(bs)
	if len(rows) != 5 {
		t.Fatalf("got %d rows, want 5 (kill and term p50 and max, restarts): %+v", len(rows), rows)
	}
	byMeasure := map[string]Row{}
	for _, r := range rows {
		if r.ID != "8" || !strings.Contains(r.Scenario, "1000 one-task jobs") {
			t.Errorf("row %+v: want row 8 of 1000 jobs", r)
		}
		byMeasure[r.Measure] = r
	}
	if r := byMeasure["kill-p50-ms"]; r.Value.Median != 3770 || r.Floor.Median != 2100 || r.Target != "≤ 2000" {
		t.Errorf("kill-p50-ms row = %+v, want 3770 beside the one-job floor 2100, target ≤ 2000", r)
	}
	if r := byMeasure["restarts"]; r.Value.Median != 0 || r.Floor.N != 0 || r.Target != "0" {
		t.Errorf("restarts row = %+v, want 0 without a floor, target 0", r)
	}
}
