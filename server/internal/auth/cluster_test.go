package auth_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/internal/standalonetest"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/auth"
	"github.com/jobplane/jobplane/server/internal/principal"
	"github.com/jobplane/jobplane/server/standalone"
)

// spans records the spans of every test of the package: the telemetry
// interceptor traces with the global tracer provider, set once here.
var spans = tracetest.NewSpanRecorder()

func TestMain(m *testing.M) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otel.SetTracerProvider(tp)
	code := m.Run()
	_ = tp.Shutdown(context.Background())
	os.Exit(code)
}

// cluster is a standalone cluster whose public API authenticates with
// authn and authorizes with authz.
type cluster struct {
	url string
	log *standalonetest.Buffer
}

// newCluster runs a standalone cluster (embedded etcd, one TaskExecutor,
// real HTTP on loopback) until the test ends; authn nil runs it without
// authentication.
func newCluster(t *testing.T, authn *auth.Authenticator, authz principal.Authorizer) *cluster {
	t.Helper()
	c, _ := newClusterOn(t, t.TempDir(), authn, authz)
	return c
}

// newClusterOn is newCluster on the data directory dir; stop stops it
// (and is called when the test ends, if not before).
func newClusterOn(t *testing.T, dir string, authn *auth.Authenticator, authz principal.Authorizer) (_ *cluster, stop func()) {
	t.Helper()
	lb := new(standalonetest.Buffer)
	log := slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := standalone.Config{
		Store:         etcdstore.OpenConfig{DataDir: dir},
		TaskExecutors: 1, Slots: 4,
		Logger: log,
	}
	if authn != nil {
		cfg.DispatcherOptions = auth.NewInterceptor(authn, authz, log).HandlerOptions()
	}
	c, err := standalone.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("cluster: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &cluster{url: c.URL(), log: lb}, stop
}

// client returns an SDK client of the cluster with opts, that gives up
// on an unavailable cluster after 10s.
func (c *cluster) client(t *testing.T, opts ...sdk.Option) *sdk.Client {
	t.Helper()
	opts = append([]sdk.Option{sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: 10 * time.Second})}, opts...)
	cl, err := sdk.New([]string{c.url}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// sleepJob is a job that runs until canceled.
func sleepJob(t *testing.T) *jobplanev1.JobGraph {
	t.Helper()
	b := jobgraph.NewBuilder("sleeper")
	b.Vertex("v", "sleep").Parallelism(1).Config("duration", "1h")
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// calls makes one unary call (GetClusterOverview) and one server stream (WatchJob of a job
// that does not exist) and returns their errors.
func calls(ctx context.Context, cl *sdk.Client) (unary, stream error) {
	_, unary = cl.Cluster(ctx)
	for _, err := range cl.Watch(ctx, "no-such-job") {
		stream = err
		break
	}
	return unary, stream
}

// wantCode fails unless err has code want.
func wantCode(t *testing.T, what string, err error, want connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); err == nil || got != want {
		t.Errorf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
	opsToken   = "ops-token-0123456789abc"
)

func tokenFile(t *testing.T) string {
	return writeFile(t, "tokens", "# name token\nalice "+aliceToken+"\nbob\t"+bobToken+"\n\nops "+opsToken+"\n")
}

// A client without a token, or with a wrong one, is refused with
// UNAUTHENTICATED and the same message, on unary calls and streams; one
// with a right token is let in, as its name. The tokens never reach the
// log.
func TestStaticTokens(t *testing.T) {
	t.Parallel()
	authn, err := auth.New(context.Background(), auth.Config{TokenFile: tokenFile(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, authn, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var messages []string
	for _, tc := range []struct {
		name string
		opts []sdk.Option
	}{
		{"no token", nil},
		{"wrong token", []sdk.Option{sdk.WithToken("alice-token-0123456780")}},
		{"a token's prefix", []sdk.Option{sdk.WithToken(aliceToken[:len(aliceToken)-1])}},
		{"a JWT-shaped token", []sdk.Option{sdk.WithToken("a.b.c")}},
	} {
		unary, stream := calls(ctx, c.client(t, tc.opts...))
		wantCode(t, tc.name+", unary", unary, connect.CodeUnauthenticated)
		wantCode(t, tc.name+", stream", stream, connect.CodeUnauthenticated)
		var cerr *connect.Error
		if errors.As(unary, &cerr) {
			messages = append(messages, cerr.Message())
		}
	}
	for _, m := range messages[1:] {
		if m != messages[0] {
			t.Errorf("UNAUTHENTICATED messages differ: %q and %q; they must not tell what was wrong", messages[0], m)
		}
	}

	alice := c.client(t, sdk.WithToken(aliceToken))
	unary, stream := calls(ctx, alice)
	if unary != nil {
		t.Errorf("alice's GetClusterOverview: %v", unary)
	}
	wantCode(t, "alice's WatchJob of no job", stream, connect.CodeNotFound)
	sub, err := alice.Submit(ctx, sleepJob(t))
	if err != nil {
		t.Fatal(err)
	}
	det, err := alice.Get(ctx, sub.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got := det.GetSummary().GetSubmittedBy(); got != "alice" {
		t.Errorf("submitted_by %q, want alice", got)
	}
	if _, err := alice.Cancel(ctx, sub.JobID); err != nil {
		t.Errorf("alice cancels her job: %v", err)
	}
	logs := c.log.String()
	for _, tok := range []string{aliceToken, bobToken, opsToken, "alice-token-0123456780"} {
		if strings.Contains(logs, tok) {
			t.Errorf("the log holds the token %q", tok)
		}
	}
	if !strings.Contains(logs, `reason="no bearer token"`) || !strings.Contains(logs, `reason="an unknown token"`) {
		t.Errorf("the log does not say why calls were refused:\n%s", logs)
	}
}

// Without authentication, calls need no token and jobs have no owner.
func TestAuthOff(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client(t)
	sub, err := cl.Submit(ctx, sleepJob(t))
	if err != nil {
		t.Fatal(err)
	}
	det, err := cl.Get(ctx, sub.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got := det.GetSummary().GetSubmittedBy(); got != "" {
		t.Errorf("submitted_by %q without authentication, want none", got)
	}
	if _, err := cl.Cancel(ctx, sub.JobID); err != nil {
		t.Error(err)
	}
}
