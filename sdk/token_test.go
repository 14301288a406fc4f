package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/internal/servertest"
)

// startAuthenticating starts a standalone server that authenticates its
// clients with the token file of tokens, until the test ends.
func startAuthenticating(t *testing.T, tokens string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	return servertest.SpawnT(t, dir, "standalone", "--data-dir", filepath.Join(dir, "data"), "--task-executors", "0", "--auth-token-file", file).URL
}

// WithToken and WithTokenFile send the token on every call; a token file
// rewritten in place is sent from the next call on; without a token the
// server refuses the call.
func TestToken(t *testing.T) {
	t.Parallel()
	const first, second = "first-token-0123456789", "second-token-0123456789"
	url := startAuthenticating(t, "ann "+first+"\nann "+second+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	retry := sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: 20 * time.Second})

	call := func(opts ...sdk.Option) error {
		c, err := sdk.New([]string{url}, append(opts, retry)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Cluster(ctx)
		return err
	}
	if err := call(sdk.WithToken(first)); err != nil {
		t.Errorf("WithToken: %v", err)
	}
	if err := call(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("no token: %v, want UNAUTHENTICATED", err)
	}
	if err := call(sdk.WithToken("wrong-token-0123456789")); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a wrong token: %v, want UNAUTHENTICATED", err)
	}

	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.New([]string{url}, sdk.WithTokenFile(file), retry)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Cluster(ctx); err != nil {
		t.Errorf("WithTokenFile: %v", err)
	}
	// A wrong token, then the second: each is sent from the next call on
	// (sizes differ, so the change shows whatever the clock's grain).
	if err := os.WriteFile(file, []byte("wrong-token-01234567890123"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cluster(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("after the file turned wrong: %v, want UNAUTHENTICATED", err)
	}
	if err := os.WriteFile(file, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cluster(ctx); err != nil {
		t.Errorf("after the file was renewed: %v", err)
	}
	// Streams carry the token too: a watch of no job is NOT_FOUND, not
	// UNAUTHENTICATED.
	for _, err := range c.Watch(ctx, "no-such-job") {
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("Watch with the token file: %v, want NOT_FOUND", err)
		}
		break
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cluster(ctx); err == nil {
		t.Error("a call went out without its token file")
	}
}

// A client that authenticates with a token (read from a file with
// WithTokenFile, for tokens renewed in place). A server that does not
// authenticate ignores it.
func ExampleWithToken() {
	client, err := sdk.New([]string{serverURL}, sdk.WithToken("a token of the cluster"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Cluster(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("authenticated")
	// Output: authenticated
}
