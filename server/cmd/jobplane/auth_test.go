package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/server/internal/endpoint"
)

const (
	cliAliceToken = "alice-cli-token-0123456789"
	cliBobToken   = "bob-cli-token-0123456789"
	cliOpsToken   = "ops-cli-token-0123456789"
)

// authCluster is a `jobplane standalone` process that authenticates its
// clients with a token file and the policy file of policy.
type authCluster struct {
	*cliCluster
}

func startAuthCluster(t *testing.T, policy string) *authCluster {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("alice "+cliAliceToken+"\nbob "+cliBobToken+"\nops "+cliOpsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "addr")
	p := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(),
		"--auth-token-file", tokens, "--auth-policy", policyFile)
	c := &authCluster{&cliCluster{url: "http://" + waitForFile(t, p, addrFile)}}
	waitForTaskExecutors(t, func() cliResult { return c.run(t, nil, "--token", cliOpsToken, "cluster", "-o", "json") })
	return c
}

// run runs a client verb with env added to the environment (and the
// token variables of the test's own environment removed).
func (c *authCluster) run(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := c.command(args...)
	var clean []string
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "JOBPLANE_TOKEN") {
			clean = append(clean, kv)
		}
	}
	cmd.Env = append(clean, env...)
	return runCommand(t, cmd)
}

const sleepJobFile = `name: sleeper
vertices:
  - id: v
    invokable: sleep
    parallelism: 1
    config: {duration: 1h}
`

// The CLI against `jobplane standalone` with authentication: without a
// token, or a wrong one, it exits 7 saying how to give one; with --token,
// $JOBPLANE_TOKEN, --token-file or $JOBPLANE_TOKEN_FILE it is let in as
// the token's principal; the policy's refusal exits 8.
func TestCLIAuthentication(t *testing.T) {
	t.Parallel()
	c := startAuthCluster(t, "admins: [ops]\nsubmit: ['*']\n")
	job := writeJob(t, "sleeper.yaml", sleepJobFile)
	bobFile := filepath.Join(t.TempDir(), "bob-token")
	if err := os.WriteFile(bobFile, []byte(cliBobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opsFile := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(opsFile, []byte(cliOpsToken), 0o600); err != nil {
		t.Fatal(err)
	}
	authHelp := []string{"not authenticated", "--token-file", "$JOBPLANE_TOKEN"}

	expect(t, "list without a token", c.run(t, nil, "list"), exitUnauthenticated, nil, authHelp)
	expect(t, "list with a wrong --token", c.run(t, nil, "--token", "wrong-token-0123456789", "list"), exitUnauthenticated, nil, authHelp)
	expect(t, "a wrong $JOBPLANE_TOKEN", c.run(t, []string{"JOBPLANE_TOKEN=wrong-token-0123456789"}, "status", "j1"), exitUnauthenticated, nil, authHelp)

	expect(t, "submit with --token", c.run(t, nil, "--token", cliAliceToken, "submit", "-d", "--id", "j1", job), exitOK, []string{"j1"}, nil)
	expect(t, "status with $JOBPLANE_TOKEN", c.run(t, []string{"JOBPLANE_TOKEN=" + cliAliceToken}, "status", "j1"), exitOK,
		[]string{"Submitted by:", "alice"}, nil)
	expect(t, "bob cancels with $JOBPLANE_TOKEN_FILE", c.run(t, []string{"JOBPLANE_TOKEN_FILE=" + bobFile}, "cancel", "j1"), exitPermissionDenied,
		nil, []string{"permission denied", "bob may not cancel job j1"})
	expect(t, "bob resubmits j1", c.run(t, nil, "--token-file", bobFile, "submit", "-d", "--id", "j1", job), exitError,
		nil, []string{"another principal"})
	expect(t, "--token beats $JOBPLANE_TOKEN", c.run(t, []string{"JOBPLANE_TOKEN=" + cliBobToken}, "--token", cliAliceToken, "status", "j1"), exitOK, []string{"alice"}, nil)
	expect(t, "ops cancels with --token-file", c.run(t, nil, "--token-file", opsFile, "cancel", "j1"), exitOK, nil, nil)
	expect(t, "--token and --token-file", c.run(t, nil, "--token", cliAliceToken, "--token-file", opsFile, "list"), exitUsage, nil, []string{"give one"})
	expect(t, "a missing --token-file", c.run(t, nil, "--token-file", filepath.Join(t.TempDir(), "none"), "list"), exitUsage, nil, []string{"--token-file"})

	help := c.run(t, []string{"JOBPLANE_TOKEN=" + cliAliceToken}, "list", "--help")
	if strings.Contains(help.stdout+help.stderr, cliAliceToken) {
		t.Error("--help shows $JOBPLANE_TOKEN's token")
	}
}

// Bad authentication flags and files end a server with exit code 2
// before it listens, saying what is wrong.
func TestAuthFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodTokens := write("tokens", "alice "+cliAliceToken+"\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing token file", []string{"--auth-token-file", filepath.Join(dir, "none")}, "token file"},
		{"short token", []string{"--auth-token-file", write("short", "alice short\n")}, "shorter than 16"},
		{"policy without authentication", []string{"--auth-policy", write("p1.yaml", "admins: [a]\n")}, "-auth-policy needs authentication"},
		{"bad policy", []string{"--auth-token-file", goodTokens, "--auth-policy", write("p2.yaml", "admin: [a]\n")}, "-auth-policy"},
		{"JWKS file without issuer", []string{"--auth-jwks-file", write("jwks.json", `{"keys":[]}`), "--auth-audience", "a"}, "issuer"},
		{"JWKS file without keys", []string{"--auth-jwks-file", write("jwks2.json", `{"keys":[]}`), "--auth-jwks-issuer", "i", "--auth-audience", "a"}, "no keys"},
		{"OIDC without audience", []string{"--auth-oidc-issuer", "http://127.0.0.1:1"}, "audience"},
		{"unreachable OIDC issuer", []string{"--auth-oidc-issuer", "http://127.0.0.1:1", "--auth-audience", "a"}, "discovering the OpenID Connect issuer"},
	} {
		for _, sub := range []string{"standalone", "jobmanager"} {
			var stdout, stderr syncBuffer
			args := append([]string{sub, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data")}, tc.args...)
			exited := make(chan int, 1)
			go func() { exited <- jobplaneMain(args, &stdout, &stderr) }()
			var code int
			select {
			case code = <-exited:
			case <-time.After(30 * time.Second):
				// It went on to serve: the flags were taken.
				t.Fatalf("%s %s: still running after 30s, want exit code %d", sub, tc.name, exitUsage)
			}
			if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("%s %s: exit code %d, stderr %q; want %d saying %q", sub, tc.name, code, stderr.String(), exitUsage, tc.want)
			}
			if strings.Contains(stderr.String(), cliAliceToken) {
				t.Errorf("%s %s: stderr shows a token", sub, tc.name)
			}
		}
	}
}

// A server that authenticates clients but serves the cluster's services
// to any caller on a port others reach says so at start; with client
// certificates, a cluster port of its own, or on loopback it does not.
func TestWarnOpenCluster(t *testing.T) {
	on := []connect.HandlerOption{connect.WithInterceptors()}
	for _, tc := range []struct {
		name    string
		auth    []connect.HandlerOption
		listen  listenFlags
		warning bool
	}{
		{name: "open", auth: on, listen: listenFlags{cfg: endpoint.Config{Listen: "10.0.0.1:8443"}}, warning: true},
		{name: "every interface", auth: on, listen: listenFlags{cfg: endpoint.Config{Listen: ":8443"}}, warning: true},
		{name: "client certificates", auth: on, listen: listenFlags{cfg: endpoint.Config{Listen: "10.0.0.1:8443", ClientCAFile: "ca.pem"}}},
		{name: "cluster port", auth: on, listen: listenFlags{cfg: endpoint.Config{Listen: "10.0.0.1:8443"}, security: securityFlags{clusterListen: "10.0.1.1:9443"}}},
		{name: "loopback", auth: on, listen: listenFlags{cfg: endpoint.Config{Listen: "127.0.0.1:8080"}}},
		{name: "no authentication", listen: listenFlags{cfg: endpoint.Config{Listen: "10.0.0.1:8443"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			a := authFlags{options: tc.auth}
			a.warnOpenCluster(tc.listen, slog.New(slog.NewTextHandler(&buf, nil)))
			if got := strings.Contains(buf.String(), "take any caller"); got != tc.warning {
				t.Errorf("warned %v, want %v: %q", got, tc.warning, buf.String())
			}
		})
	}
}
