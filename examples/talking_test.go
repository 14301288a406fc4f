package examples_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
)

// runDoc runs a block of the README or docs/ in bash at the
// repository's root, with the server's address for 127.0.0.1:8080 (and as
// $JOBPLANE_SERVER), and returns what it printed.
func runDoc(t *testing.T, script, url string, env ...string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	script = strings.ReplaceAll(script, "http://127.0.0.1:8080", url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "JOBPLANE_SERVER="+url), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the commands failed: %v\n%s", err, out.String())
	}
	return out.String()
}

// wantAll checks that out holds every string of want.
func wantAll(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the output lacks %q:\n%s", what, w, out)
		}
	}
}

// docs/clients.md's curl and buf curl commands, as written.
func TestDocsBufCurl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands against a server process")
	}
	cluster := localcluster.NewStandalone(t, "--task-executors", "1")
	// The overview counts the TaskExecutor once it has registered, which
	// a loaded machine may delay past the server's first answer.
	cluster.WaitTaskExecutor(t, "noop")
	out := runDoc(t, docBlock(t, "clients:buf-curl"), cluster.URL())
	wantAll(t, "clients:buf-curl", out,
		`"taskExecutorCount":1`,         // curl, Connect JSON
		"jobplane.v1.DispatcherService", // buf curl --list-services
		"grpc.health.v1.Health",
		`"created": true`,                 // SubmitJob over gRPC
		`"status": "JOB_STATUS_FINISHED"`, // GetJobResult over Connect
		`"status": "SERVING"`)             // health
}

// docs/clients.md's gRPC snippet is examples/grpcclient's, and the
// program runs against a server.
func TestDocsGRPC(t *testing.T) {
	shown := docBlock(t, "clients:grpc")
	src, err := os.ReadFile("grpcclient/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if body := strings.ReplaceAll(string(src), "\n\t", "\n"); !strings.Contains(body, shown) {
		t.Fatalf("the gRPC snippet of docs/clients.md is not examples/grpcclient/main.go's:\n%s", shown)
	}
	if testing.Short() {
		t.Skip("runs examples/grpcclient against a server process")
	}
	cluster := localcluster.NewStandalone(t, "--task-executors", "1")
	cluster.WaitTaskExecutor(t, "noop") // it prints the TaskExecutors registered
	out := runDoc(t, "go run ./examples/grpcclient", cluster.URL())
	wantAll(t, "examples/grpcclient", out, "1 TaskExecutors", "grpc-hello JOB_STATUS_FINISHED")
}

// docs/operations.md's OTLP command, as written but for the collector's
// address and the listener: the standalone server sends the submission's
// spans to an OTLP/HTTP collector.
func TestDocsOTLP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server process")
	}
	shown := strings.TrimSpace(docBlock(t, "ops:otlp"))
	m := regexp.MustCompile(`^(OTEL_EXPORTER_OTLP_ENDPOINT)=(\S+) bin/jobplane standalone(.*)$`).FindStringSubmatch(shown)
	if m == nil {
		t.Fatalf("the OTLP command of docs/operations.md changed: %q; update this test", shown)
	}
	// The collector: every span export's body, as received.
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			bodies = append(bodies, body)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv(m[1], collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	cluster, err := localcluster.StartStandalone(context.Background(), strings.Fields(m[3])...)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	cluster.WaitTaskExecutor(t, "noop")
	cluster.Submit(t, "traced", "noop", 1, nil)
	if r := cluster.Result(t, "traced"); !strings.HasSuffix(r.GetStatus().String(), "FINISHED") {
		t.Fatalf("job ended %v", r.GetStatus())
	}
	// The span names travel as plain bytes in the protobuf body.
	want := []string{"jobplane.validate", "jobplane.persist", "jobplane.deploy", "jobplane.task"}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		all := bytes.Join(bodies, nil)
		mu.Unlock()
		var missing []string
		for _, w := range want {
			if !bytes.Contains(all, []byte(w)) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector got no spans %v within a minute of the job's end\n%s", missing, cluster.Log())
		}
	}
}
