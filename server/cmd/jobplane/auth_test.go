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
	"github.com/jobplane/jobplane/server/localcluster"
)

const aliceToken = "alice-cli-token-0123456789"

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
	goodTokens := write("tokens", "alice "+aliceToken+"\n")
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
			var stdout, stderr localcluster.Buffer
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
			if strings.Contains(stderr.String(), aliceToken) {
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
