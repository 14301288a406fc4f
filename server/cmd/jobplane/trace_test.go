package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// exportedSpan is a span as an OTLP receiver got it, with the service
// that sent it.
type exportedSpan struct {
	service string
	*tracev1.Span
}

func (s exportedSpan) attr(key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// otlpReceiver collects the spans that processes export to it over
// OTLP/HTTP (protobuf), in memory.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []exportedSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, exportedSpan{service, s})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

// waitSpans waits until the receiver holds spans for which done is true,
// and returns them.
func (r *otlpReceiver) waitSpans(t *testing.T, done func([]exportedSpan) bool) []exportedSpan {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		spans := append([]exportedSpan(nil), r.spans...)
		r.mu.Unlock()
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			for _, s := range spans {
				t.Logf("%s %s trace=%x span=%x parent=%x", s.service, s.GetName(), s.GetTraceId(), s.GetSpanId(), s.GetParentSpanId())
			}
			t.Fatal("the expected spans were not exported within 30s")
		}
		time.Sleep(20 * time.Millisecond) // a poll of the receiver's memory, bounded by the deadline
	}
}

// startTracedJobplane starts `jobplane args...` exporting its spans to the
// receiver, flushing them every 50ms; its logs go to the file logPath.
func startTracedJobplane(t *testing.T, r *otlpReceiver, logPath string, args ...string) *process {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(os.Args[0], args...)
	// The test's own OTEL_* variables, if any, are not the child's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, runMainEnv+"=1",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+r.url, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_METRICS_EXPORTER=none")
	p := &process{cmd: cmd, stderr: new(bytes.Buffer), done: make(chan error, 1)}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobplane: %v", err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("jobplane %s stderr:\n%s", args[0], out)
		}
	})
	return p
}

// A submission's spans, from the Dispatcher's SubmitJob in the jobmanager
// process to the task in the taskexecutor process, form one trace: each
// under its parent, in the order of the submission path.
func TestSubmissionTraceAcrossProcesses(t *testing.T) {
	recv := newOTLPReceiver(t)
	dir := t.TempDir()
	jmAddr := filepath.Join(dir, "jm.addr")
	jmLog := filepath.Join(dir, "jm.log")
	jm := startTracedJobplane(t, recv, jmLog, "jobmanager", "--log-format", "json", "--listen", "127.0.0.1:0", "--listen-addr-file", jmAddr, "--data-dir", filepath.Join(dir, "jm"))
	base := "http://" + waitForFile(t, jm, jmAddr)
	teAddr := filepath.Join(dir, "te.addr")
	te := startTracedJobplane(t, recv, filepath.Join(dir, "te.log"), "taskexecutor", "--hastore", base, "--listen", "127.0.0.1:0", "--listen-addr-file", teAddr, "--slots", "1")
	teBase := "http://" + waitForFile(t, te, teAddr)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, base)
	submitWhenLeading(t, client, "traced", noopGraph("traced"))
	waitJobResult(t, client, "traced", jobplanev1.JobStatus_JOB_STATUS_FINISHED)

	const submit = "jobplane.v1.DispatcherService/SubmitJob"
	path := []string{"jobplane.validate", "jobplane.persist", "jobplane.runner.start", "jobplane.jobmaster.create", "jobplane.slots.declare", "jobplane.deploy", "jobplane.task"}
	var byID map[string]exportedSpan
	var named map[string]exportedSpan // the first of each name in the task's trace
	recv.waitSpans(t, func(spans []exportedSpan) bool {
		var task *exportedSpan
		for i, s := range spans {
			if s.GetName() == "jobplane.task" && s.attr("jobplane.job_id") == "traced" {
				task = &spans[i]
			}
		}
		if task == nil {
			return false
		}
		byID, named = map[string]exportedSpan{}, map[string]exportedSpan{}
		for _, s := range spans {
			if string(s.GetTraceId()) != string(task.GetTraceId()) {
				continue
			}
			byID[string(s.GetSpanId())] = s
			if prev, ok := named[s.GetName()]; !ok || s.GetStartTimeUnixNano() < prev.GetStartTimeUnixNano() {
				named[s.GetName()] = s
			}
		}
		for _, name := range append(path, submit) {
			if _, ok := named[name]; !ok {
				return false
			}
		}
		return true
	})

	// Services: the task ran in the taskexecutor process, the rest in the
	// jobmanager's.
	for _, name := range append(path, submit) {
		want := "jobplane-jobmanager"
		if name == "jobplane.task" {
			want = "jobplane-taskexecutor"
		}
		if got := named[name].service; got != want {
			t.Errorf("span %s from service %q, want %q", name, got, want)
		}
	}
	// Parents: the Dispatcher's steps under SubmitJob; the JobMaster's
	// under its creation; the task under a deployment, through the
	// taskexecutor's SubmitTasks handler or straight from an offer's answer.
	parent := func(s exportedSpan) (exportedSpan, bool) {
		p, ok := byID[string(s.GetParentSpanId())]
		return p, ok
	}
	for name, want := range map[string]string{
		"jobplane.validate": submit, "jobplane.persist": submit, "jobplane.runner.start": submit, "jobplane.jobmaster.create": submit,
		"jobplane.slots.declare": "jobplane.jobmaster.create", "jobplane.deploy": "jobplane.jobmaster.create",
	} {
		if p, ok := parent(named[name]); !ok || p.GetName() != want {
			t.Errorf("parent of %s = %q (found %v), want %s", name, p.GetName(), ok, want)
		}
	}
	var chain []string
	for s, ok := named["jobplane.task"], true; ok; s, ok = parent(s) {
		chain = append(chain, s.GetName())
	}
	got := strings.Join(chain, " < ")
	t.Logf("the task's ancestry: %s", got)
	if !strings.Contains(got, "jobplane.task < ") || !strings.Contains(got, "jobplane.deploy < jobplane.jobmaster.create < "+submit) || chain[len(chain)-1] != submit {
		t.Errorf("the task's ancestry is %s; want it through a jobplane.deploy, jobplane.jobmaster.create and up to %s", got, submit)
	}
	if named[submit].GetParentSpanId() != nil {
		t.Errorf("SubmitJob has a parent %x; the client sent no trace", named[submit].GetParentSpanId())
	}
	// Order: each step of the path starts no earlier than the one before.
	for i := 1; i < len(path); i++ {
		a, b := named[path[i-1]], named[path[i]]
		if b.GetStartTimeUnixNano() < a.GetStartTimeUnixNano() {
			t.Errorf("%s started %v before %s", path[i], time.Duration(a.GetStartTimeUnixNano()-b.GetStartTimeUnixNano()), path[i-1])
		}
	}
	if v, p := named["jobplane.validate"], named["jobplane.persist"]; v.GetEndTimeUnixNano() > p.GetStartTimeUnixNano() {
		t.Errorf("validation ended after the persist started")
	}
	if got := named["jobplane.task"].attr("jobplane.state"); got != "FINISHED" {
		t.Errorf("task span state %q, want FINISHED", got)
	}
	// Liveness is never traced: no span of a heartbeat or a lease
	// keep-alive, however long the processes ran.
	recv.mu.Lock()
	for _, s := range recv.spans {
		if strings.HasSuffix(s.GetName(), "Heartbeat") || strings.HasSuffix(s.GetName(), "KeepAlive") {
			t.Errorf("a liveness call was traced: %s from %s", s.GetName(), s.service)
		}
	}
	recv.mu.Unlock()

	// The taskexecutor process serves its metrics on its port too: its
	// calls to the JobMaster among them.
	var offered bool
	for series, n := range scrapeMetrics(t, &http.Client{Transport: tr}, teBase) {
		if strings.HasPrefix(series, "rpc_client_call_duration_seconds_count{") && strings.Contains(series, `rpc_method="jobplane.cluster.v1.JobMasterService/OfferSlots"`) && n >= 1 {
			offered = true
		}
	}
	if !offered {
		t.Error("the taskexecutor's /metrics shows no OfferSlots call")
	}

	// Logs: the Dispatcher's line for the submission carries the job and
	// its trace; the JobMaster's lines the job, its token and the trace.
	traceID := hex.EncodeToString(named[submit].GetTraceId())
	logs, err := os.ReadFile(jmLog)
	if err != nil {
		t.Fatal(err)
	}
	var submitted, jobMaster bool
	for _, line := range bytes.Split(logs, []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil || rec["job"] != "traced" {
			continue
		}
		switch {
		case rec["msg"] == "job submitted":
			submitted = true
			if rec["trace_id"] != traceID || rec["span_id"] != hex.EncodeToString(named[submit].GetSpanId()) {
				t.Errorf("the submission's log line %s; want trace_id %s and SubmitJob's span_id", line, traceID)
			}
		case rec["token"] != nil:
			jobMaster = true
			tok, _ := rec["token"].(map[string]any)
			if epoch, _ := tok["Epoch"].(float64); rec["trace_id"] != traceID || epoch < 1 {
				t.Errorf("a JobMaster's log line %s; want its token with its epoch, and trace_id %s", line, traceID)
			}
		}
	}
	if !submitted || !jobMaster {
		t.Errorf("log lines of the job: submission %v, JobMaster %v; want both:\n%s", submitted, jobMaster, logs)
	}
	if t.Failed() {
		for _, s := range byID {
			t.Log(fmt.Sprintf("%s %s span=%x parent=%x", s.service, s.GetName(), s.GetSpanId(), s.GetParentSpanId()))
		}
	}
}
