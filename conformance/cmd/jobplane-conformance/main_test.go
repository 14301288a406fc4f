package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/conformance/runner"
	"github.com/jobplane/jobplane/server/localcluster"
)

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},                             // neither a server command nor a store address
		{"--no-such-flag"},             // unknown flag
		{"--server-command", "x", "y"}, // stray argument
		{"--server-command", "x", "--config", "/no/such/file"},
		{"--server-command", "x", "--run", "no-such-group"},
		{"--server-command", "x", "--known-failing", "fencing/no-such-case"},
		{"--server-command", "x", "--report-json", "/no/such/dir/report.json"},
		{"--server-command", "x", "--protocol", "http3"},
		{"--server-command", "x", "--tls-ca", "/no/such/ca.pem"},
		{"--server-command", "x", "--taskexecutor-command", "y"}, // two modes
	} {
		var out, errs bytes.Buffer
		if code := run(args, &out, &errs); code != exitUsage {
			t.Errorf("run(%q) = %d, want %d (usage); stderr: %s", args, code, exitUsage, errs.String())
		}
	}
	var out bytes.Buffer
	if code := run([]string{"--list"}, &out, &out); code != exitOK || !strings.Contains(out.String(), "fencing/stale-offer-refused") || !strings.Contains(out.String(), "taskexecutor/registers") {
		t.Errorf("--list = %d, %q", code, out.String())
	}
}

// A known-failing case that passes fails the run, and the reports hold
// every case.
func TestKnownFailingThatPassesFailsTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the reference server")
	}
	dir := t.TempDir()
	bin := buildJobplane(t)
	list := filepath.Join(dir, "known-failing")
	if err := os.WriteFile(list, []byte("# passes on the reference server\nlifecycle/cancel-unknown\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonReport, junit := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.xml")
	var out, errs bytes.Buffer
	code := run([]string{
		"--server-command", bin + " jobmanager --hastore {hastore} --listen {listen}",
		"--run", "lifecycle/cancel-unknown,lifecycle/result-of-unknown-job", "--known-failing", "@" + list,
		"--report-json", jsonReport, "--report-junit", junit,
	}, &out, &errs)
	all := len(runner.Cases())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if code != exitFailed || lines[len(lines)-1] != fmt.Sprintf("1 passed, 1 failed, %d skipped", all-2) ||
		!strings.Contains(out.String(), "FAILED: lifecycle/cancel-unknown: listed as known failing, but passed") {
		t.Errorf("exit %d, output:\n%s\n%s", code, out.String(), errs.String())
	}
	var report struct {
		Passed, Failed, Skipped int
		Cases                   []struct{ Name, Outcome string }
	}
	b, err := os.ReadFile(jsonReport)
	if err != nil || json.Unmarshal(b, &report) != nil || report.Passed != 1 || report.Failed != 1 || len(report.Cases) != all {
		t.Errorf("JSON report: %v, %+v", err, report)
	}
	var suite struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	b, err = os.ReadFile(junit)
	if err != nil || xml.Unmarshal(b, &suite) != nil || suite.Tests != all || suite.Failures != 1 {
		t.Errorf("JUnit report: %v, %+v", err, suite)
	}
}

// Against a server that authenticates its clients, the runner passes with
// the token (from --token-file or $JOBPLANE_TOKEN), and its cases fail
// without one.
func TestAgainstAnAuthenticatingServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the reference server")
	}
	dir := t.TempDir()
	bin := buildJobplane(t)
	const token = "conformance-runner-token-0123456789"
	tokens, tokenFile, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "token"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(tokens, []byte("conformance "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Cases ask about jobs that do not exist, which only an admin may.
	if err := os.WriteFile(policy, []byte("admins: [conformance]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--server-command", bin + " jobmanager --hastore {hastore} --listen {listen} --auth-token-file " + tokens + " --auth-policy " + policy,
		"--run", "idempotency/resubmit-after-canceled,lifecycle/cancel-unknown",
	}
	for _, tc := range []struct {
		name  string
		extra []string
		env   string
		want  int
	}{
		{name: "token file", extra: []string{"--token-file", tokenFile}, want: exitOK},
		{name: "environment", env: token, want: exitOK},
		{name: "no token", want: exitFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("JOBPLANE_TOKEN", tc.env)
			var out, errs bytes.Buffer
			if code := run(append(args, tc.extra...), &out, &errs); code != tc.want {
				t.Errorf("exit %d, want %d; output:\n%s\n%s", code, tc.want, out.String(), errs.String())
			}
		})
	}
}

// buildJobplane returns the reference server's binary ($JOBPLANE_BIN, or
// one localcluster builds).
func buildJobplane(t *testing.T) string {
	t.Helper()
	bin, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// A server that exits by itself (here: as one whose port was taken would)
// fails the case at once, and the failure shows the server's last output.
func TestServerThatExitsIsReported(t *testing.T) {
	var out, errs bytes.Buffer
	code := run([]string{
		"--server-command", `sh -c "echo 'listen tcp {listen}: bind: address already in use' >&2; exit 3"`,
		"--run", "lifecycle/cancel-unknown",
	}, &out, &errs)
	// "no server instance running": the wait for a leader ended when the
	// server did, not after its 30s.
	if code != exitFailed || !strings.Contains(out.String(), "no server instance running; server instance 0 exited by itself (exit status 3)") ||
		!strings.Contains(out.String(), "bind: address already in use") {
		t.Errorf("exit %d, output:\n%s\n%s", code, out.String(), errs.String())
	}
}

// With --tls-ca the runner talks TLS to a server that serves it (the
// reference with --tls-cert and --tls-key, its certificate from
// `jobplane certs`), over each protocol; without it, it cannot reach
// that server.
func TestOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the reference server")
	}
	dir := t.TempDir()
	bin := buildJobplane(t)
	for _, args := range [][]string{
		{"certs", "ca", "--out", dir},
		{"certs", "issue", "--ca-dir", dir, "--name", "server", "--hosts", "127.0.0.1,localhost", "--out", dir},
	} {
		if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("jobplane %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	ca := filepath.Join(dir, "ca.pem")
	command := fmt.Sprintf("%s jobmanager --hastore {hastore} --listen {listen} --tls-cert %s --tls-key %s --tls-ca %s",
		bin, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), ca)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"connect", []string{"--tls-ca", ca}, exitOK},
		{"grpc", []string{"--tls-ca", ca, "--protocol", "grpc"}, exitOK},
		{"no CA", nil, exitFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			args := append([]string{"--server-command", command, "--run", "fencing/stale-offer-refused,idempotency/retry-in-another-encoding"}, tc.args...)
			if code := run(args, &out, &errs); code != tc.want {
				t.Errorf("exit %d, want %d; output:\n%s\n%s", code, tc.want, out.String(), errs.String())
			}
		})
	}
}
