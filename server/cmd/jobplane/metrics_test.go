package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// scrapeMetrics reads GET /metrics at base into a map from series (the
// name and its labels as printed, such as `jobplane_slots{state="free"}`)
// to value.
func scrapeMetrics(t *testing.T, client *http.Client, base string) map[string]float64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %q: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		series[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return series
}

// submitWhenLeading submits g as id, retrying while the server has no
// leader yet.
func submitWhenLeading(t *testing.T, client jobplanev1connect.DispatcherServiceClient, id string, g *jobplanev1.JobGraph) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g})
		if err == nil {
			return
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// After jobs ran on a `jobplane standalone` process, its /metrics shows
// them: submissions and their latency, the jobs by terminal status, the
// restart of the failing job, the slots as configured, the HA store's
// write latency and the RPCs.
func TestStandaloneServesMetricsAfterJobsRan(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(),
		"--task-executors", "2", "--slots", "3")
	base := "http://" + waitForFile(t, p, addrFile)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	httpClient := &http.Client{Transport: tr}
	client := jobplanev1connect.NewDispatcherServiceClient(httpClient, base)

	submitWhenLeading(t, client, "ok", noopGraph("ok"))
	waitJobResult(t, client, "ok", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	failing := failGraph("failing", "boom")
	failing.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 1, Delay: durationpb.New(time.Millisecond)},
	}}}
	submitWhenLeading(t, client, "failing", failing)
	waitJobResult(t, client, "failing", jobplanev1.JobStatus_JOB_STATUS_FAILED)
	// A repeated submission is no new job.
	submitWhenLeading(t, client, "ok", noopGraph("ok"))
	// The jobs needed one TaskExecutor; the gauges count both once the
	// second one has registered too.
	waitTaskExecutors(t, client, 2)

	m := scrapeMetrics(t, httpClient, base)
	for _, c := range []struct {
		series   string
		min, max float64
	}{
		{"jobplane_jobs_submitted_total", 2, 2},
		{`jobplane_jobs_ended_total{status="FINISHED"}`, 1, 1},
		{`jobplane_jobs_ended_total{status="FAILED"}`, 1, 1},
		{"jobplane_submission_duration_seconds_count", 2, 2},
		{"jobplane_submission_duration_seconds_sum", 1e-6, 30},
		{"jobplane_job_restarts_total", 1, 1},
		{`jobplane_jobs{status="FINISHED"}`, 1, 1},
		{`jobplane_jobs{status="FAILED"}`, 1, 1},
		{`jobplane_jobs{status="RUNNING"}`, 0, 0},
		{"jobplane_jobs_waiting", 0, 0},
		{"jobplane_jobs_queued", 0, 0},
		{`jobplane_job_duration_seconds_count{status="FINISHED"}`, 1, 1},
		// Once, unless a loaded machine cost the process its lease.
		{`jobplane_leader_changes_total{change="gained"}`, 1, 3},
		{"jobplane_taskexecutors", 2, 2},
		{`jobplane_slots{state="total"}`, 6, 6},
		{`jobplane_slots{state="free"}`, 0, 6},
		{"jobplane_hastore_write_duration_seconds_count", 3, 1e9},
		{`rpc_server_call_duration_seconds_count{rpc_method="jobplane.v1.DispatcherService/SubmitJob",rpc_response_status_code="OK",rpc_system_name="connectrpc"}`, 3, 3},
	} {
		got, ok := m[c.series]
		if !ok || got < c.min || got > c.max {
			t.Errorf("%s = %v (present %v), want in [%v, %v]", c.series, got, ok, c.min, c.max)
		}
	}
	// Each TaskExecutor's slots, summing to the cluster's.
	perTotal := 0.0
	for s, v := range m {
		if strings.HasPrefix(s, `jobplane_taskexecutor_slots{state="total",task_executor=`) {
			perTotal += v
		}
	}
	if perTotal != m[`jobplane_slots{state="total"}`] {
		t.Errorf("jobplane_taskexecutor_slots total over the TaskExecutors = %v; want the cluster's %v", perTotal, m[`jobplane_slots{state="total"}`])
	}
	// Calls are measured by procedure, not by peer: no series per
	// TaskExecutor address.
	for s := range m {
		if strings.Contains(s, "server_port=") || strings.Contains(s, "server_address=") {
			t.Errorf("a series names its peer: %s", s)
			break
		}
	}
	if t.Failed() {
		for s, v := range m {
			if strings.HasPrefix(s, "jobplane_") || strings.HasPrefix(s, "rpc_server_call_duration_seconds_count") {
				t.Logf("%s %v", s, v)
			}
		}
	}
}
