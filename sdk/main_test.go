package sdk_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/internal/servertest"
)

// serverURL is the URL of a standalone server that the Examples use.
var serverURL string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the Examples' server, runs the tests, and stops it: the SDK
// is tested against real server processes, as its users run them.
func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sdk-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	p, err := startStandaloneIn(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p.Stop()
	serverURL = p.URL
	return servertest.Main(m)
}

// startStandaloneIn starts a standalone server with data under dir and
// waits until it serves jobs.
func startStandaloneIn(dir string) (*servertest.Process, error) {
	data, err := os.MkdirTemp(dir, "data")
	if err != nil {
		return nil, err
	}
	// The default TTL and heartbeats: nothing here kills this server, so
	// nothing gains by timeouts that a loaded machine could outlast.
	p, err := servertest.Spawn(dir, "standalone", "--data-dir", data, "--task-executors", "2", "--slots", "4", "--allow-exec")
	if err != nil {
		return nil, err
	}
	if err := waitReady(p.URL, 2); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w\n%s", err, p.Log())
	}
	return p, nil
}

// waitReady waits until the cluster at url leads with tes TaskExecutors.
func waitReady(url string, tes int) error {
	c, err := sdk.New([]string{url}, sdk.WithCallTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		o, err := c.Cluster(ctx)
		if err == nil && o.GetTaskExecutorCount() >= int32(tes) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cluster at %s not ready: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startStandalone starts a standalone server for one test.
func startStandalone(t *testing.T) string {
	t.Helper()
	p, err := startStandaloneIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("jobplane standalone log:\n%s", p.Log())
		}
	})
	return p.URL
}

// newClient makes a Client for a test.
func newClient(t *testing.T, urls []string, opts ...sdk.Option) *sdk.Client {
	t.Helper()
	c, err := sdk.New(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testContext is a context bounded for one test.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sleepGraph is a job of one vertex whose subtasks sleep for d.
func sleepGraph(name string, parallelism int, d time.Duration) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{
		Id: "sleep", Invokable: "sleep", Parallelism: int32(parallelism), Config: map[string]string{"duration": d.String()},
	}}}
}

// proxy forwards TCP connections to a target and can cut them all, to
// stand for a network that drops connections.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	// dropFirstAnswer: the next connection's first answer bytes are not
	// forwarded; both sides are closed instead (an answer lost after the
	// server acted).
	dropFirstAnswer bool
	dropped         int
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "http://")}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		drop := p.dropFirstAnswer
		p.dropFirstAnswer = false
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() {
			if drop {
				buf := make([]byte, 1)
				if _, err := io.ReadFull(out, buf); err == nil {
					p.mu.Lock()
					p.dropped++
					p.mu.Unlock()
				}
				in.Close()
				out.Close()
				return
			}
			_, _ = io.Copy(in, out)
			in.Close()
		}()
	}
}

// cut closes every connection open through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
