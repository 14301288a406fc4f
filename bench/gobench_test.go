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

func TestRecoveryRows(t *testing.T) {
	t.Parallel()
	const out = `pkg: github.com/jobplane/jobplane/internal/failover
BenchmarkRecoveryAtScale-2   	       1	         0 recover-failed	         0 recover-floor-failed	        22.51 recover-floor-grant-ack-ms	       146.0 recover-floor-grant-adopted-ms	      1991 recover-floor-kill-ack-ms	      2114 recover-floor-kill-adopted-ms	      1968 recover-floor-kill-grant-ms	         0 recover-floor-not-adopted	        44.15 recover-floor-old-rss-mib	        45.07 recover-floor-peak-rss-mib	         0 recover-floor-restarts	        45.06 recover-floor-rss-mib	        96.11 recover-grant-ack-ms	       899.0 recover-grant-adopted-ms	      2499 recover-kill-ack-ms	      3302 recover-kill-adopted-ms	      2403 recover-kill-grant-ms	         3 recover-not-adopted	        50.02 recover-old-rss-mib	        60.89 recover-peak-rss-mib	         0 recover-restarts	        54.49 recover-rss-mib	        20.00 recover-running	       200.0 recover-waiting
`
	bs, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	rows := goBenchRows(bs)
	if len(rows) != len(recoveryTargets) {
		t.Fatalf("got %d rows, want one per recovery target (%d): %+v", len(rows), len(recoveryTargets), rows)
	}
	got := map[string]Row{}
	for i, r := range rows {
		if r.ID != "11" || !strings.Contains(r.Scenario, "200 jobs waiting + 20 running") {
			t.Errorf("row %+v: want row 11 of 200 waiting and 20 running jobs", r)
		}
		if want := strings.TrimPrefix(recoveryTargets[i].unit, "recover-"); r.Measure != want {
			t.Errorf("row %d measures %q, want %q (the order of recoveryTargets)", i, r.Measure, want)
		}
		got[r.Measure] = r
	}
	for _, tc := range []struct {
		measure       string
		value, floor  float64
		target, there string
	}{
		{"grant-ack-ms", 96.11, 22.51, "≤ 2000", "SubmitJob"},
		{"grant-adopted-ms", 899, 146, "≤ 5000", ""},
		{"kill-ack-ms", 2499, 1991, "", ""},
		{"rss-mib", 54.49, 45.06, "", "peak (VmHWM) 60.9 MiB"},
		{"restarts", 0, 0, "0", "attempt logs"},
		{"not-adopted", 3, 0, "0", ""},
		{"failed", 0, 0, "0", "FAILED"},
	} {
		r := got[tc.measure]
		if r.Value.Median != tc.value || r.Floor.Median != tc.floor || r.Target != tc.target || !strings.Contains(r.Note, tc.there) {
			t.Errorf("row %s = %+v; want %v beside the floor %v, target %q, a note with %q", tc.measure, r, tc.value, tc.floor, tc.target, tc.there)
		}
	}
	if r := got["restarts"]; r.Floor.N != 0 {
		t.Errorf("restarts row = %+v, want no floor", r)
	}
}

func TestCheckpointRows(t *testing.T) {
	t.Parallel()
	const out = `pkg: github.com/jobplane/jobplane/internal/failover
BenchmarkCheckpoints/one-job-2         	       1	         5.000 ckpt-completed	         0.02398 ckpt-cores	         0 ckpt-failed	         0.02200 ckpt-floor-cores	         0.8672 ckpt-floor-rss-growth-mib	        53.22 ckpt-floor-rss-mib	         0 ckpt-floor-writes	         1.000 ckpt-interval-s	         1.000 ckpt-jobs	         1.098 ckpt-rss-growth-mib	        53.50 ckpt-rss-mib	         6.641 ckpt-store-mean-ms	        10.00 ckpt-store-p50-bucket-ms	         7.500 ckpt-store-p50-ms	       100.0 ckpt-subtasks	         0 ckpt-te-store-writes	        15.62 ckpt-took-p50-ms	         5.000 ckpt-window-s	         1.000 ckpt-writes-per-checkpoint
--- BENCH: BenchmarkCheckpoints/one-job-2
BenchmarkCheckpoints/many-jobs-2       	       1	        50.00 ckpt-completed	         0.06198 ckpt-cores	         0 ckpt-failed	         0.05665 ckpt-floor-cores	         0.06641 ckpt-floor-rss-growth-mib	        55.71 ckpt-floor-rss-mib	         0 ckpt-floor-writes	        10.00 ckpt-interval-s	        50.00 ckpt-jobs	         0.7891 ckpt-rss-growth-mib	        56.41 ckpt-rss-mib	        10.03 ckpt-store-mean-ms	        10.00 ckpt-store-p50-bucket-ms	         9.583 ckpt-store-p50-ms	        50.00 ckpt-subtasks	         0 ckpt-te-store-writes	        13.39 ckpt-took-p50-ms	        15.00 ckpt-window-s	         1.000 ckpt-writes-per-checkpoint
BenchmarkCheckpoints/taskexecutor-kill-2         	       1	         2.000 ckpt-kills	       808.2 ckpt-lost-max-ms	       514.3 ckpt-lost-p50-ms	       809.8 ckpt-lost-trigger-max-ms	         0 ckpt-not-latest	         3.1 ckpt-own-max-ms	     11270 ckpt-redeploy-max-ms	     10612 ckpt-redeploy-p50-ms
`
	bs, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	rows := goBenchRows(bs)
	got := map[string]Row{}
	for _, r := range rows {
		got[r.ID+" "+r.Measure] = r
	}
	if len(rows) != len(checkpointTargets) || len(got) != len(rows) {
		t.Fatalf("got %d rows, want one per checkpoint target (%d): %+v", len(rows), len(checkpointTargets), rows)
	}
	for _, tc := range []struct {
		key           string
		value, floor  float64
		target, inSce string
	}{
		{"9a cores", 0.02398, 0.022, "≤ 0.1", "one job of 100 `count` subtasks"},
		{"9a writes-per-checkpoint", 1, 0, "1", "every 1 s"},
		{"9a store-p50-ms", 7.5, 0, "≤ 20", "5 s window"},
		{"9b cores", 0.06198, 0.05665, "≤ 0.2", "50 one-subtask `count` jobs"},
		{"9b rss-growth-mib", 0.7891, 0, "≤ 100", "every 10 s"},
		{"9c lost-max-ms", 808.2, 0, "≤ 1000 + own", "2 runs"},
		{"9c not-latest", 0, 0, "0", "SIGKILLed"},
	} {
		r, ok := got[tc.key]
		if !ok {
			t.Errorf("no row %s", tc.key)
			continue
		}
		if r.Value.Median != tc.value || r.Floor.Median != tc.floor || r.Target != tc.target || !strings.Contains(r.Scenario, tc.inSce) {
			t.Errorf("row %s = %+v; want %v beside the floor %v, target %q, a scenario with %q", tc.key, r, tc.value, tc.floor, tc.target, tc.inSce)
		}
	}
	if r := got["9a store-p50-ms"]; !strings.Contains(r.Note, "≤ 10 ms") || !strings.Contains(r.Note, "mean 6.64 ms") {
		t.Errorf("9a store-p50-ms note = %q; want the bucket's bound and the mean", r.Note)
	}
	if r := got["9a cores"]; !strings.Contains(r.Note, "cost of checkpoints: 0.002") {
		t.Errorf("9a cores note = %q; want the cost with − without", r.Note)
	}
}

func TestDashboardRows(t *testing.T) {
	t.Parallel()
	const out = `BenchmarkDashboardFirstPage 1 436.4 ui-jobs-ms 380.9 ui-cluster-ms 93.7 ui-floor-ms 10000 ui-jobs
BenchmarkDashboardFirstPage 1 405.6 ui-jobs-ms 330.2 ui-cluster-ms 87.5 ui-floor-ms 10000 ui-jobs
BenchmarkDashboardFirstPage 1 441.6 ui-jobs-ms 363.9 ui-cluster-ms 85.5 ui-floor-ms 10000 ui-jobs
`
	bs, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	rows := goBenchRows(bs)
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want the jobs and the cluster page: %+v", len(rows), rows)
	}
	for i, want := range []struct {
		measure      string
		value, floor float64
	}{{"jobs page ms", 436.4, 87.5}, {"cluster page ms", 363.9, 87.5}} {
		r := rows[i]
		if r.ID != "12" || !strings.Contains(r.Scenario, "10000 jobs") || r.Measure != want.measure ||
			r.Value.Median != want.value || r.Floor.Median != want.floor || r.Value.N != 3 || r.Target != "≤ 1000" {
			t.Errorf("row %d = %+v; want row 12 of 10000 jobs, %s median %v beside the floor %v over 3 runs, target ≤ 1000", i, r, want.measure, want.value, want.floor)
		}
	}
}
