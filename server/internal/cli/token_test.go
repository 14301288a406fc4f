package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	c := &authCluster{&cliCluster{url: "http://" + waitForFile(t, p, addrFile), bin: jobplaneBinary(t)}}
	waitForTaskExecutors(t, func() cliResult { return c.run(t, nil, "--token", cliOpsToken, "cluster", "-o", "json") })
	return c
}

// run runs a client verb with env added to the environment (and the
// token variables of the test's own environment removed).
func (c *authCluster) run(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := c.command(args...)
	var clean []string
	for _, kv := range os.Environ() {
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
