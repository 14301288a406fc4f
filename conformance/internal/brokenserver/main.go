// Command brokenserver is the reference server with one promise of the
// contract broken, for the conformance suite's own tests: every case must
// fail against some broken server. It runs the reference `jobplane
// jobmanager` as a child process behind two proxies: an HA-store proxy
// between the child and the runner's store, and an API proxy in front of
// the child's services. The --break mode says what the proxies break.
//
// A few modes break nothing: they give the server another shape the
// contract allows, which the suite must pass. only-grpc and only-grpcweb
// answer only calls of that protocol (415 to the others); cluster-apart
// serves the cluster services (ResourceManager, JobMaster) only on a
// listener of their own, published as the leader's cluster address;
// job-address-unpublished publishes no address for jobs' elections.
//
// With --child, the child is another implementation's server instead (the
// TypeScript JobManager, say), given only --hastore, --listen and
// --listen-addr-file: the proxies break its promises as they break the
// reference's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

func main() {
	var (
		mode, jobplane, childCmd, hastoreURL, listen, dataDir string
	)
	flag.StringVar(&mode, "break", "", "the promise to break")
	flag.StringVar(&jobplane, "jobplane", "jobplane", "the reference server's binary")
	flag.StringVar(&childCmd, "child", "", "a command (words split on spaces) run as the child instead of the reference server; it is given --hastore, --listen and --listen-addr-file")
	flag.StringVar(&hastoreURL, "hastore", "", "the runner's HA store")
	flag.StringVar(&listen, "listen", "127.0.0.1:0", "the address to serve on")
	flag.StringVar(&dataDir, "data", os.TempDir(), "a directory for the child's files")
	flag.Parse()
	if err := run(mode, jobplane, strings.Fields(childCmd), hastoreURL, listen, dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "brokenserver:", err)
		os.Exit(1)
	}
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func serveOn(ln net.Listener, h http.Handler) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv
}

func run(mode, jobplane string, childCmd []string, hastoreURL, listen, dataDir string) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := h2cClient()
	publicLn, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	public := "http://" + publicLn.Addr().String()
	var clusterLn net.Listener
	if mode == "cluster-apart" {
		if clusterLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}

	// The HA-store proxy the child uses.
	st := newStore(hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: client, BaseURL: hastoreURL, Logger: log}), mode, public)
	if clusterLn != nil {
		st.cluster = "http://" + clusterLn.Addr().String()
	}
	haLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	haMux := http.NewServeMux()
	path, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: st, Logger: log}).Path()
	haMux.Handle(path, h)
	serveOn(haLn, haMux)

	// The child: the reference JobManager.
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	addrFile := filepath.Join(dataDir, "child-addr")
	_ = os.Remove(addrFile)
	args := []string{"jobmanager", "--hastore", "http://" + haLn.Addr().String(),
		"--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--session-ttl", "3s",
		"--heartbeat-interval", "300ms", "--heartbeat-timeout", "1800ms", "--task-lease", "0"}
	// The breaks apply to the reference without a task lease, where each
	// case a break must fail was measured; "no-adoption" is the child as
	// it is then: running attempts stop with their JobMaster and are
	// deployed again.
	if mode == "lease-outlives-wait" {
		// A lease of its own, which it waits out before it deploys anew;
		// the TaskExecutors reach its JobMasters through the API proxy,
		// which grants them a longer one.
		args = append(args, "--task-lease", "3s", "--advertise", public)
	}
	if mode == "unasked-cancel-forgiven" {
		// The TaskExecutors report to its JobMasters through the API
		// proxy, which rewrites their reports.
		args = append(args, "--advertise", public)
	}
	if mode == "hoard-slots" {
		// Jobs keep the idle slots they hold while they wait for more.
		// The case catches that only if the TaskExecutors still hold
		// the jobs' slots when the restarted server's JobMasters come:
		// a heartbeat timeout of 10s outlasts a restart slowed by a
		// loaded machine, where 1.8s did not (the TaskExecutors freed
		// every slot first, and the jobs then finished in turn).
		args = append(args, "--slot-yield", "0", "--session-ttl", "16s", "--heartbeat-timeout", "10s")
	}
	child := exec.Command(jobplane, args...)
	if len(childCmd) > 0 {
		child = exec.Command(childCmd[0], append(slices.Clone(childCmd[1:]), "--hastore", "http://"+haLn.Addr().String(),
			"--listen", "127.0.0.1:0", "--listen-addr-file", addrFile)...)
	}
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill() }()
	var childAddr string
	for deadline := time.Now().Add(30 * time.Second); childAddr == ""; {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			childAddr = strings.TrimSpace(string(b))
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the child did not listen within 30s")
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !strings.Contains(childAddr, "://") {
		childAddr = "http://" + childAddr
	}

	// The API proxy: everything passes to the child, but the calls the
	// mode breaks.
	target, _ := url.Parse(childAddr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = client.Transport
	rp.FlushInterval = -1
	mux := http.NewServeMux()
	mux.Handle("/", rp)
	mountBreaks(mux, mode, childAddr, st, jobplanev1connect.NewDispatcherServiceClient(client, childAddr),
		clusterv1connect.NewJobMasterServiceClient(client, childAddr), clusterv1connect.NewResourceManagerServiceClient(client, childAddr))
	srv := serveOn(publicLn, shape(mode, mux))
	if clusterLn != nil {
		cluster := serveOn(clusterLn, mux)
		defer cluster.Close()
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	select {
	case <-ctx.Done():
		_ = child.Process.Signal(syscall.SIGTERM)
		<-done
	case err := <-done:
		return fmt.Errorf("the child exited: %v", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// shape wraps the API proxy's handler as the modes that break nothing
// say: only-grpc and only-grpcweb refuse calls of any other protocol,
// cluster-apart refuses the cluster services, which its cluster listener
// serves.
func shape(mode string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		grpcWeb := strings.HasPrefix(ct, "application/grpc-web")
		grpc := !grpcWeb && strings.HasPrefix(ct, "application/grpc")
		switch {
		case mode == "only-grpc" && !grpc, mode == "only-grpcweb" && !grpcWeb:
			http.Error(w, "this server speaks "+strings.TrimPrefix(mode, "only-")+" only", http.StatusUnsupportedMediaType)
		case mode == "cluster-apart" && strings.HasPrefix(r.URL.Path, "/jobplane.cluster.v1."):
			http.NotFound(w, r)
		default:
			h.ServeHTTP(w, r)
		}
	})
}
