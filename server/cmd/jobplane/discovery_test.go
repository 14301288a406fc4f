package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// tcpProxy forwards the TCP connections it accepts on a loopback port to
// a target set once known, counting them: a stand-in for whatever puts a
// process under another address than the one it binds (NAT, a container,
// a load balancer).
type tcpProxy struct {
	ln       net.Listener
	target   atomic.Pointer[string]
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's base URL, to advertise.
func (p *tcpProxy) URL() string { return "http://" + p.ln.Addr().String() }

// forwardTo sets the address connections are forwarded to.
func (p *tcpProxy) forwardTo(addr string) { p.target.Store(&addr) }

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		target := p.target.Load()
		if target == nil {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", *target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in) || !p.track(out) {
			in.Close()
			out.Close()
			return
		}
		p.wg.Add(2)
		for _, pair := range [][2]net.Conn{{in, out}, {out, in}} {
			go func() {
				defer p.wg.Done()
				io.Copy(pair[0], pair[1])
				pair[0].Close()
				pair[1].Close()
			}()
		}
	}
}

// listenArgs returns the flags that make a child listen on a free
// loopback port and write the address it bound into a file.
func listenArgs(t *testing.T) (args []string, addrFile string) {
	addrFile = filepath.Join(t.TempDir(), "addr")
	return []string{"--listen", "127.0.0.1:0", "--listen-addr-file", addrFile}, addrFile
}

// startHAStore starts a `jobplane hastore` process and returns its URL.
func startHAStore(t *testing.T) string {
	t.Helper()
	args, addrFile := listenArgs(t)
	p := startJobplane(t, append([]string{"hastore", "--data-dir", t.TempDir()}, args...)...)
	url := "http://" + waitForFile(t, p, addrFile)
	waitServing(t, url)
	return url
}

// startServer starts a jobplane server subcommand on a free loopback port
// and returns the process and the address it bound.
func startServer(t *testing.T, sub string, extra ...string) (*process, string) {
	t.Helper()
	args, addrFile := listenArgs(t)
	p := startJobplane(t, append(append([]string{sub}, args...), extra...)...)
	return p, waitForFile(t, p, addrFile)
}

// dispatcher returns a DispatcherService client of the server at url over
// HTTP/1.1.
func dispatcher(t *testing.T, url string) jobplanev1connect.DispatcherServiceClient {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)
}

// notLeaderAddress returns the leader address that a NOT_LEADER error
// names, and whether err is one.
func notLeaderAddress(err error) (string, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return "", false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if nl, ok := v.(*jobplanev1.NotLeaderDetails); ok {
				return nl.GetLeader().GetAddress(), true
			}
		}
	}
	return "", false
}

// overview polls GetClusterOverview at url until ok accepts the answer or
// the error, bounded by a deadline.
func overview(t *testing.T, url string, within time.Duration, ok func(*jobplanev1.GetClusterOverviewResponse, error) bool) {
	t.Helper()
	client := dispatcher(t, url)
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if ok(resp, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: overview not as awaited after %v: %v, %v", url, within, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runJob submits a one-vertex job of parallelism 2 to the leader at url
// and waits for it to finish.
func runJob(t *testing.T, url, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := dispatcher(t, url)
	graph := &jobplanev1.JobGraph{Name: id, Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: "noop", Parallelism: 2}}}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: graph}); err != nil {
		t.Fatalf("SubmitJob(%s): %v", id, err)
	}
	resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil || resp.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result of %s = %v, %v; want FINISHED", id, resp, err)
	}
}

// A jobmanager and a TaskExecutor reached through proxies, with --advertise
// naming the proxies: the standby's NOT_LEADER and the leader record name
// the advertised URL, and the JobMasters call the TaskExecutor there.
func TestAdvertisedAddressesArePublished(t *testing.T) {
	store := startHAStore(t)
	jmProxy, teProxy := newTCPProxy(t), newTCPProxy(t)

	_, leaderAddr := startServer(t, "jobmanager", "--hastore", store, "--advertise", jmProxy.URL())
	jmProxy.forwardTo(leaderAddr)
	overview(t, "http://"+leaderAddr, 60*time.Second, func(o *jobplanev1.GetClusterOverviewResponse, err error) bool {
		return err == nil && o.GetLeader().GetAddress() == jmProxy.URL()
	})

	_, standbyAddr := startServer(t, "jobmanager", "--hastore", store)
	overview(t, "http://"+standbyAddr, 60*time.Second, func(_ *jobplanev1.GetClusterOverviewResponse, err error) bool {
		addr, ok := notLeaderAddress(err)
		if ok && addr != "" && addr != jmProxy.URL() {
			t.Fatalf("the standby's NOT_LEADER names %q, want the advertised %q", addr, jmProxy.URL())
		}
		return ok && addr == jmProxy.URL()
	})

	// The TaskExecutor finds the leader through the standby, and is known
	// by its advertised URL only.
	_, teAddr := startServer(t, "taskexecutor", "--hastore", "http://"+standbyAddr, "--advertise", teProxy.URL(), "--slots", "2")
	teProxy.forwardTo(teAddr)
	overview(t, jmProxy.URL(), 60*time.Second, func(o *jobplanev1.GetClusterOverviewResponse, err error) bool {
		return err == nil && o.GetTaskExecutorCount() == 1
	})
	runJob(t, jmProxy.URL(), "through-proxies")
	if teProxy.accepted.Load() == 0 {
		t.Error("the job ran without a call through the TaskExecutor's advertised URL")
	}
}

// A TaskExecutor that follows the leader through two jobmanagers keeps
// working when the leader it observes through dies (SIGKILL) or freezes
// (SIGSTOP, so its streams stay open but silent): it registers with the
// new leader, and a job submitted after the fault finishes on it.
func TestTaskExecutorFollowsTheLeaderThroughAnyJobManager(t *testing.T) {
	for name, sig := range map[string]syscall.Signal{"SIGKILL": syscall.SIGKILL, "SIGSTOP": syscall.SIGSTOP} {
		t.Run(name, func(t *testing.T) { testTaskExecutorFollowsTheLeader(t, sig) })
	}
}

func testTaskExecutorFollowsTheLeader(t *testing.T, sig syscall.Signal) {
	store := startHAStore(t)
	timings := []string{"--hastore", store, "--session-ttl", "2s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "1200ms"}
	procs := map[string]*process{}
	var urls []string
	for range 2 {
		p, addr := startServer(t, "jobmanager", timings...)
		procs["http://"+addr] = p
		urls = append(urls, "http://"+addr)
	}
	var leader string
	overview(t, urls[0], 60*time.Second, func(o *jobplanev1.GetClusterOverviewResponse, err error) bool {
		if err == nil {
			leader = urls[0]
		} else if addr, ok := notLeaderAddress(err); ok && addr != "" {
			leader = addr
		}
		return leader != ""
	})
	if procs[leader] == nil {
		t.Fatalf("leader %q is none of %v", leader, urls)
	}
	standby := urls[0]
	if leader == standby {
		standby = urls[1]
	}

	te, _ := startServer(t, "taskexecutor", "--hastore", leader+","+standby, "--slots", "2", "--cancel-grace", "200ms")
	overview(t, leader, 60*time.Second, func(o *jobplanev1.GetClusterOverviewResponse, err error) bool {
		return err == nil && o.GetTaskExecutorCount() == 1
	})
	runJob(t, leader, "before-fault")

	if err := procs[leader].cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if sig == syscall.SIGKILL {
		procs[leader].wait(t, 20*time.Second)
	}
	faulted := time.Now()
	overview(t, standby, 60*time.Second, func(o *jobplanev1.GetClusterOverviewResponse, err error) bool {
		return err == nil && o.GetLeader().GetAddress() == standby && o.GetTaskExecutorCount() == 1
	})
	t.Logf("the TaskExecutor registered with the new leader %v after the signal", time.Since(faulted).Round(time.Millisecond))
	runJob(t, standby, "after-fault")
	select {
	case err := <-te.done:
		te.done <- err
		t.Fatalf("the TaskExecutor exited: %v", err)
	default:
	}
}

// Every server subcommand takes --advertise, checks it, and refuses a
// listen address on every interface without it, naming the flag.
func TestAdvertiseFlag(t *testing.T) {
	for _, sub := range []string{"standalone", "jobmanager", "taskexecutor", "hastore"} {
		t.Run(sub, func(t *testing.T) {
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"--listen", "0.0.0.0:0"}, "set -advertise"},
				{[]string{"--listen", ":0"}, "set -advertise"},
				{[]string{"--advertise", "host1:8080"}, "http:// or https://"},
				{[]string{"--advertise", "http://host1:8080/x"}, "path"},
				{[]string{"--advertise", "http://host1"}, "port"},
			} {
				var stdout, stderr bytes.Buffer
				args := append([]string{sub, "--data-dir", t.TempDir()}, tc.args...)
				if sub == "taskexecutor" {
					args = append([]string{sub}, tc.args...)
				}
				if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("%v: exit code %d, stderr %q; want %d and a message with %q", args, code, stderr.String(), exitUsage, tc.want)
				}
			}
		})
	}
}
