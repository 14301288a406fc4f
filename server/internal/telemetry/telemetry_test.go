package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// scrape returns the text that t's /metrics serves.
func scrape(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func setup(t *testing.T) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

func TestMetricsServedInPrometheusNames(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
	tel := setup(t)
	if tel.Tracing() {
		t.Fatal("Tracing() = true without an OTLP endpoint")
	}
	ctx := context.Background()
	telemetry.JobSubmitted(ctx, 3*time.Millisecond)
	telemetry.JobSubmitted(ctx, 4*time.Millisecond)
	telemetry.JobEnded(ctx, "FINISHED", 3*time.Second)
	telemetry.LeaderChanged(ctx, true)
	telemetry.FencingRejected(ctx, "TaskExecutorService")
	telemetry.JobRestarted(ctx)
	telemetry.StoreWrite(ctx, time.Millisecond)
	stop := telemetry.ObserveCluster(func() telemetry.Cluster {
		return telemetry.Cluster{TaskExecutors: 2, Slots: 8, FreeSlots: 5, Jobs: map[jobplanev1.JobStatus]int{jobplanev1.JobStatus_JOB_STATUS_RUNNING: 7}, JobsWaiting: 3, JobsQueued: 4,
			ExecutorSlots: map[string][2]int{"te-a": {4, 1}}}
	})
	defer stop()

	got := scrape(t, tel)
	for _, want := range []string{
		"jobplane_jobs_submitted_total 2",
		`jobplane_jobs_ended_total{status="FINISHED"} 1`,
		"jobplane_submission_duration_seconds_count 2",
		`jobplane_submission_duration_seconds_bucket{le="0.005"} 2`,
		`jobplane_leader_changes_total{change="gained"} 1`,
		`jobplane_fencing_rejections_total{service="TaskExecutorService"} 1`,
		"jobplane_job_restarts_total 1",
		"jobplane_hastore_write_duration_seconds_count 1",
		"jobplane_taskexecutors 2",
		`jobplane_slots{state="total"} 8`,
		`jobplane_slots{state="free"} 5`,
		`jobplane_jobs{status="RUNNING"} 7`,
		"jobplane_jobs_waiting 3",
		"jobplane_jobs_queued 4",
		`jobplane_taskexecutor_slots{state="free",task_executor="te-a"} 1`,
		`jobplane_taskexecutor_slots{state="total",task_executor="te-a"} 4`,
		`jobplane_jobs{status="FAILED"} 0`,
		`jobplane_job_duration_seconds_bucket{status="FINISHED",le="5"} 1`,
		`jobplane_job_duration_seconds_bucket{status="FINISHED",le="1"} 0`,
		"go_goroutines ",
		"go_cpu_classes_gc_total_cpu_seconds_total ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %q; got:\n%s", want, got)
		}
	}

	stop()
	if got := scrape(t, tel); strings.Contains(got, "jobplane_taskexecutors 2") {
		t.Errorf("the cluster gauges still report a stopped source:\n%s", got)
	}
}

func TestShutdownMakesRecordingANoOp(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	telemetry.JobSubmitted(context.Background(), time.Millisecond) // must not panic
	tel2 := setup(t)
	if got := scrape(t, tel2); strings.Contains(got, "jobplane_jobs_submitted_total 1") {
		t.Errorf("a submission recorded after Shutdown reached the next setup:\n%s", got)
	}
}

func TestSetupRefusesAnUnknownProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if tel, err := telemetry.Setup(context.Background(), telemetry.Config{}); err == nil {
		_ = tel.Shutdown(context.Background())
		t.Fatal("Setup accepted OTEL_EXPORTER_OTLP_PROTOCOL=http/json")
	}
}

func TestSetupExportsTracesWhenAnEndpointIsSet(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tel := setup(t)
	if !tel.Tracing() {
		t.Fatal("Tracing() = false with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set")
	}
}

// Every counter is listed from the start, at 0 under each attribute
// value it can take, before anything happened.
func TestCountersPresentFromTheStart(t *testing.T) {
	got := scrape(t, setup(t))
	for _, want := range []string{
		"jobplane_jobs_submitted_total 0",
		"jobplane_job_restarts_total 0",
		`jobplane_jobs_ended_total{status="FAILED"} 0`,
		`jobplane_leader_changes_total{change="lost"} 0`,
		`jobplane_fencing_rejections_total{service="HAStore"} 0`,
		`jobplane_fencing_rejections_total{service="ResourceManagerService"} 0`,
		`jobplane_limit_refusals_total{reason="TOO_MANY_JOBS"} 0`,
		`jobplane_limit_refusals_total{reason="SUBMIT_RATE_EXCEEDED"} 0`,
		`jobplane_checkpoints_total{kind="savepoint",outcome="failed"} 0`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %q before any event; got:\n%s", want, got)
		}
	}
}
