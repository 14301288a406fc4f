package auth_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/auth"
	"github.com/jobplane/jobplane/server/internal/principal"
)

// Token files that cannot be used are refused by New, saying where.
func TestTokenFileErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ content, want string }{
		"short token":     {"alice short\n", "line 1: the token of alice is shorter than 16"},
		"one field":       {"# c\nalice\n", "line 2: want NAME TOKEN"},
		"three fields":    {"alice aaaaaaaaaaaaaaaaaaaa extra\n", "line 1: want NAME TOKEN"},
		"duplicate token": {"a aaaaaaaaaaaaaaaaaaaa\nb aaaaaaaaaaaaaaaaaaaa\n", "line 2: the same token as line 1"},
		"empty":           {"# nothing\n\n", "no tokens"},
	} {
		_, err := auth.New(context.Background(), auth.Config{TokenFile: writeFile(t, "tokens", tc.content)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "aaaaaaaaaaaaaaaaaaaa") {
			t.Errorf("%s: the error %q shows a token", name, err)
		}
	}
	if _, err := auth.New(context.Background(), auth.Config{TokenFile: "/nonexistent/tokens"}); err == nil {
		t.Error("a missing token file was taken")
	}
}

// A name may hold several tokens; a token file changed in place takes
// effect without a restart, and a broken rewrite keeps the tokens in
// force.
func TestTokenFileReload(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "tokens", "alice "+aliceToken+"\nalice alice-second-token-00\n")
	authn, err := auth.New(context.Background(), auth.Config{TokenFile: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tok := range []string{aliceToken, "alice-second-token-00"} {
		if p, err := authn.Authenticate(ctx, tok); err != nil || p.Name != "alice" || p.Method != auth.MethodToken {
			t.Errorf("token of alice: %+v, %v", p, err)
		}
	}
	if _, err := authn.Authenticate(ctx, ""); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("no token: %v, want ErrUnauthenticated", err)
	}

	// Rotate: bob's token replaces alice's. A different size marks the
	// change even within the file system's time granularity.
	if err := os.WriteFile(path, []byte("bob "+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob's token to be taken", func() bool {
		p, err := authn.Authenticate(ctx, bobToken)
		return err == nil && p.Name == "bob"
	})
	if _, err := authn.Authenticate(ctx, aliceToken); err == nil {
		t.Error("alice's token is still taken after the file dropped it")
	}

	// A broken file leaves bob's token in force.
	if err := os.WriteFile(path, []byte("broken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2500 * time.Millisecond) // past the reload interval
	for time.Now().Before(deadline) {
		if _, err := authn.Authenticate(ctx, bobToken); err != nil {
			t.Fatalf("bob's token refused after a broken rewrite: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Configurations that cannot work are refused before any file is read.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]auth.Config{
		"JWKS without audience": {JWKSFile: "f", JWKSIssuer: "i"},
		"OIDC without audience": {OIDCIssuer: "https://i"},
		"audience without JWTs": {TokenFile: "f", Audience: "a"},
		"JWKS without issuer":   {JWKSFile: "f", Audience: "a"},
		"issuer without JWKS":   {JWKSIssuer: "i", OIDCIssuer: "https://i", Audience: "a"},
		"negative leeway":       {TokenFile: "f", Leeway: -time.Second},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
	if err := (auth.Config{TokenFile: "f", JWKSFile: "j", JWKSIssuer: "i", OIDCIssuer: "https://o", Audience: "a"}).Validate(); err != nil {
		t.Errorf("every source at once: %v", err)
	}
	if (auth.Config{}).Enabled() {
		t.Error("an empty configuration is enabled")
	}
}

// The built-in policy, call by call.
func TestPolicy(t *testing.T) {
	t.Parallel()
	p, err := auth.ParsePolicy([]byte("admins: [ops]\nsubmit: ['*']\nread: [auditor]\ncancel: [oncall]\n"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		submit   = jobplanev1connect.DispatcherServiceSubmitJobProcedure
		get      = jobplanev1connect.DispatcherServiceGetJobProcedure
		list     = jobplanev1connect.DispatcherServiceListJobsProcedure
		cancel   = jobplanev1connect.DispatcherServiceCancelJobProcedure
		beat     = jobplanev1connect.DispatcherServiceReportClientHeartbeatProcedure
		overview = jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure
		unknown  = "/jobplane.v1.DispatcherService/Future"
	)
	for _, tc := range []struct {
		who, proc, job, owner string
		allow                 bool
	}{
		{"alice", submit, "j", "", true},
		{"alice", get, "j", "alice", true},
		{"alice", cancel, "j", "alice", true},
		{"alice", beat, "j", "alice", true},
		{"bob", cancel, "j", "alice", false},
		{"bob", beat, "j", "alice", false},
		{"bob", get, "j", "alice", false},
		{"bob", get, "j", "", false}, // no such job: refused alike
		{"bob", cancel, "j", "", false},
		{"bob", list, "", "", false},
		{"bob", overview, "", "", true}, // a submitter reads the cluster
		{"auditor", get, "j", "alice", true},
		{"auditor", list, "", "", true},
		{"auditor", cancel, "j", "alice", false},
		{"oncall", cancel, "j", "alice", true},
		{"ops", cancel, "j", "alice", true},
		{"ops", cancel, "j", "", true},
		{"ops", unknown, "", "", true},
		{"alice", unknown, "", "", false},
	} {
		err := p.Authorize(context.Background(), principal.Request{
			Principal: principal.Principal{Name: tc.who, Method: auth.MethodToken}, Procedure: tc.proc, JobID: tc.job, Owner: tc.owner,
		})
		switch {
		case tc.allow && err != nil:
			t.Errorf("%s %s %s (owner %q): %v, want allowed", tc.who, tc.proc, tc.job, tc.owner, err)
		case !tc.allow && !errors.Is(err, principal.ErrDenied):
			t.Errorf("%s %s %s (owner %q): %v, want ErrDenied", tc.who, tc.proc, tc.job, tc.owner, err)
		}
	}

	def := auth.DefaultPolicy()
	req := func(who, proc, owner string) principal.Request {
		return principal.Request{Principal: principal.Principal{Name: who}, Procedure: proc, JobID: "j", Owner: owner}
	}
	if err := def.Authorize(context.Background(), req("bob", get, "alice")); err != nil {
		t.Errorf("default policy: bob reads alice's job: %v", err)
	}
	if err := def.Authorize(context.Background(), req("bob", cancel, "alice")); err == nil {
		t.Error("default policy: bob cancels alice's job")
	}

	for name, bad := range map[string]string{
		"unknown key":  "admin: [ops]\n",
		"not a list":   "submit: everyone\n",
		"empty name":   "read: ['']\n",
		"not YAML map": "- a\n",
	} {
		if _, err := auth.ParsePolicy([]byte(bad)); err == nil {
			t.Errorf("%s: parsed, want an error", name)
		}
	}
	if p, err := auth.ParsePolicy(nil); err != nil || len(p.Submit) != 0 {
		t.Errorf("an empty policy: %+v, %v; want one that grants nothing", p, err)
	}
}
