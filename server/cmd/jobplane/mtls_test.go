package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/testcert"
	"github.com/jobplane/jobplane/server/localcluster"
)

// loggedProcess is a jobplane child whose log the test reads as it runs.
type loggedProcess struct {
	log  *localcluster.Buffer
	done chan struct{}
	addr string // the bound address
}

// startLogged starts `jobplane sub` on a free loopback port with extra
// flags, waits for its address, and kills it when the test ends.
func startLogged(t *testing.T, sub string, extra ...string) *loggedProcess {
	t.Helper()
	args, addrFile := listenArgs(t)
	cmd := exec.Command(os.Args[0], append(append([]string{sub}, args...), extra...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	p := &loggedProcess{log: new(localcluster.Buffer), done: make(chan struct{})}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s stderr:\n%s", sub, p.log)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			p.addr = strings.TrimSpace(string(b))
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before listening:\n%s", sub, p.log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen within 20s", sub)
		}
	}
}

func (p *loggedProcess) url() string { return "https://" + p.addr }

// running reports whether the process still runs.
func (p *loggedProcess) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitLog waits until the process's log holds every one of want.
func (p *loggedProcess) waitLog(t *testing.T, within time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		log, all := p.log.String(), true
		for _, w := range want {
			all = all && strings.Contains(log, w)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q after %v:\n%s", want, within, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testPKI runs `jobplane certs` to make CAs and certificates in a
// temporary directory.
type testPKI struct{ dir string }

func newTestPKI(t *testing.T, cas ...string) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	for _, ca := range cas {
		p.run(t, "certs", "ca", "--out", filepath.Join(p.dir, ca), "--name", ca)
	}
	return p
}

func (p *testPKI) run(t *testing.T, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := jobplaneMain(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("jobplane %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
}

// caFile is the certificate of the CA named ca.
func (p *testPKI) caFile(ca string) string { return filepath.Join(p.dir, ca, "ca.pem") }

// issue makes (or replaces) the certificate name, signed by ca, for
// loopback, and returns the TLS flags of a process that serves it,
// trusts trust and asks clients for a certificate trust signed.
func (p *testPKI) issue(t *testing.T, ca, name, trust string) []string {
	t.Helper()
	out := filepath.Join(p.dir, "issued")
	p.run(t, "certs", "issue", "--ca-dir", filepath.Join(p.dir, ca), "--name", name, "--hosts", "127.0.0.1,localhost", "--out", out)
	return []string{"--tls-cert", filepath.Join(out, name+".pem"), "--tls-key", filepath.Join(out, name+"-key.pem"),
		"--tls-ca", trust, "--tls-client-ca", trust}
}

// publicClient is a TLS client that trusts caFile and has no client
// certificate, as a public API client has.
func publicClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	files, err := endpoint.NewClientTLS(endpoint.ClientFiles{CAFile: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := files.NewClient()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// waitTaskExecutors waits until the cluster at url lists n TaskExecutors.
func waitTaskExecutors(t *testing.T, client jobplanev1connect.DispatcherServiceClient, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{})
		cancel()
		if err == nil && len(resp.GetTaskExecutors()) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("TaskExecutors = %v, %v; want %d", resp, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runJobOn submits a job of parallelism 2 running invokable with config
// and waits for it to finish.
func runJobOn(t *testing.T, client jobplanev1connect.DispatcherServiceClient, id, invokable string, config map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	graph := &jobplanev1.JobGraph{Name: id, Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: invokable, Parallelism: 2, Config: config}}}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: graph}); err != nil {
		t.Fatalf("SubmitJob(%s): %v", id, err)
	}
	resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil || resp.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result of %s = %v, %v; want FINISHED", id, resp, err)
	}
}

// A cluster of processes with mutual TLS, certificates from `jobplane
// certs`: a hastore, a jobmanager on it and a TaskExecutor run a job; a
// public client without a certificate reaches the Dispatcher but not the
// cluster's services; a TaskExecutor with a certificate of another CA
// cannot register, and a jobmanager with one cannot campaign on the
// hastore, and the servers' logs say why.
func TestMTLSClusterOfProcesses(t *testing.T) {
	pki := newTestPKI(t, "cluster", "rogue")
	ca := pki.caFile("cluster")
	pki.issue(t, "rogue", "rogue-deployer", ca)
	store := startLogged(t, "hastore", append([]string{"--data-dir", t.TempDir()}, pki.issue(t, "cluster", "store", ca)...)...)
	jm := startLogged(t, "jobmanager", append([]string{"--hastore", store.url()}, pki.issue(t, "cluster", "jm", ca)...)...)
	te := startLogged(t, "taskexecutor", append([]string{"--hastore", jm.url(), "--slots", "2"}, pki.issue(t, "cluster", "te", ca)...)...)

	client := jobplanev1connect.NewDispatcherServiceClient(publicClient(t, ca), jm.url())
	waitTaskExecutors(t, client, 1)
	runJobOn(t, client, "mtls", "noop", nil)

	// The cluster's services answer no caller without a certificate.
	rm := clusterv1connect.NewResourceManagerServiceClient(publicClient(t, ca), jm.url())
	_, err := rm.RegisterTaskExecutor(context.Background(), &clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest{TaskExecutorId: "intruder", Address: "https://127.0.0.1:1"})
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("RegisterTaskExecutor without a client certificate: %v, want UNAUTHENTICATED", err)
	}
	// Health stays open, for load balancers.
	if _, err := grpchealth.NewClient(publicClient(t, ca), jm.url()).Check(context.Background(), &grpchealth.CheckRequest{}); err != nil {
		t.Errorf("health without a client certificate: %v", err)
	}

	// Nothing is deployed to a TaskExecutor but by a caller with a
	// certificate of the cluster's CA.
	submit := func(c *http.Client) error {
		_, err := clusterv1connect.NewTaskExecutorServiceClient(c, te.url()).SubmitTask(context.Background(), &clusterv1.SubmitTaskRequest{})
		return err
	}
	if err := submit(publicClient(t, ca)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("SubmitTask without a client certificate: %v, want UNAUTHENTICATED", err)
	}
	rogueFiles, err := endpoint.NewClientTLS(endpoint.ClientFiles{CAFile: ca, CertFile: filepath.Join(pki.dir, "issued", "rogue-deployer.pem"), KeyFile: filepath.Join(pki.dir, "issued", "rogue-deployer-key.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rogueClient := rogueFiles.NewClient()
	defer rogueClient.CloseIdleConnections()
	if err := submit(rogueClient); err == nil || connect.CodeOf(err) == connect.CodeInvalidArgument {
		t.Errorf("SubmitTask with a foreign CA's certificate: %v, want the handshake refused", err)
	}

	// A TaskExecutor whose certificate another CA signed (it trusts the
	// cluster's CA for the servers) is refused at the handshake.
	rogueTE := pki.issue(t, "rogue", "rogue-te", ca)
	rogueTEp := startLogged(t, "taskexecutor", append([]string{"--hastore", jm.url(), "--slots", "2"}, rogueTE...)...)
	// It follows the leader through the jobmanager's HAStoreService, and
	// is refused there.
	jm.waitLog(t, 30*time.Second, "TLS handshake error", "certificate signed by unknown authority")
	waitTaskExecutors(t, client, 1)

	// A jobmanager with such a certificate cannot campaign on the hastore.
	rogueJM := startLogged(t, "jobmanager", append([]string{"--hastore", store.url()}, pki.issue(t, "rogue", "rogue-jm", ca)...)...)
	store.waitLog(t, 30*time.Second, "TLS handshake error", "certificate signed by unknown authority")
	resp, err := client.GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || resp.GetLeader().GetAddress() != jm.url() {
		t.Errorf("overview = %v, %v; want the first jobmanager %s leading", resp, err, jm.url())
	}
	// Each says why in its own log.
	rogueJM.waitLog(t, 30*time.Second, "opening an HA-store session failed", "unknown certificate authority")
	rogueTEp.waitLog(t, 30*time.Second, "unknown certificate authority")
}

// A non-loopback -listen without TLS is refused with exit code 2 and a
// message naming -insecure, before the process listens; loopback, TLS
// or -insecure make it acceptable.
func TestCleartextOffLoopbackRefused(t *testing.T) {
	for _, sub := range []string{"standalone", "jobmanager", "hastore", "taskexecutor"} {
		t.Run(sub, func(t *testing.T) {
			for _, listen := range []string{"0.0.0.0:0", "[::]:0", ":0", "10.1.2.3:0", "host1:8080"} {
				addrFile := filepath.Join(t.TempDir(), "addr")
				args := []string{sub, "--listen", listen, "--advertise", "http://host1:8080", "--listen-addr-file", addrFile}
				if sub != "taskexecutor" {
					args = append(args, "--data-dir", t.TempDir())
				}
				var stdout, stderr bytes.Buffer
				if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage {
					t.Errorf("--listen %s: exit %d, want %d; stderr:\n%s", listen, code, exitUsage, stderr.String())
				}
				if msg := stderr.String(); !strings.Contains(msg, "-insecure") || !strings.Contains(msg, "not a loopback address") || !strings.Contains(msg, "-tls-cert") {
					t.Errorf("--listen %s: stderr does not name -insecure and -tls-cert:\n%s", listen, msg)
				}
				if _, err := os.Stat(addrFile); err == nil {
					t.Errorf("--listen %s: the process listened before refusing", listen)
				}
				// With -insecure the address passes; a bad -debug-listen
				// (checked alongside) stops the process before it binds
				// every interface, which a test must not.
				stderr.Reset()
				args = append(args, "--insecure", "--debug-listen", "10.1.2.3:6060")
				if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage || strings.Contains(stderr.String(), "-insecure") || !strings.Contains(stderr.String(), "-debug-listen") {
					t.Errorf("--listen %s --insecure: exit %d, stderr:\n%s\nwant only the -debug-listen refusal", listen, code, stderr.String())
				}
			}
		})
	}
	// A real process on a loopback address other than 127.0.0.1 (as
	// the README's operations commands run on one machine) starts in the
	// clear.
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "hastore", "--listen", "127.0.0.3:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir())
	waitServing(t, "http://"+waitForFile(t, p, addrFile))
}

// The refusal's rule: loopback addresses pass; others need TLS or
// -insecure.
func TestCheckCleartext(t *testing.T) {
	for _, tc := range []struct {
		listen        string
		tls, insecure bool
		wantRefused   bool
	}{
		{"127.0.0.1:8080", false, false, false},
		{"127.0.0.5:8080", false, false, false},
		{"[::1]:8080", false, false, false},
		{"localhost:8080", false, false, false},
		{"LOCALHOST:8080", false, false, false},
		{"0.0.0.0:8080", false, false, true},
		{"[::]:8080", false, false, true},
		{":8080", false, false, true},
		{"192.168.1.10:8080", false, false, true},
		{"host1:8080", false, false, true},
		{"0.0.0.0:8080", true, false, false},
		{"host1:8080", true, false, false},
		{"0.0.0.0:8080", false, true, false},
		{"192.168.1.10:8080", false, true, false},
	} {
		s := securityFlags{insecure: tc.insecure}
		err := s.checkCleartext("listen", tc.listen, tc.tls)
		if (err != nil) != tc.wantRefused {
			t.Errorf("%s (tls %v, insecure %v): err = %v, want refused %v", tc.listen, tc.tls, tc.insecure, err, tc.wantRefused)
		}
	}
}

// Certificates and CAs rotate under a running cluster: the CA file
// becomes a bundle of the old and new CAs, the certificates are issued
// again by the new CA in place, and then the old CA is dropped. New
// connections use the new files at once; a running job finishes; the
// processes keep running.
func TestCertificateRotationWhileRunning(t *testing.T) {
	pki := newTestPKI(t, "old", "new")
	trust := filepath.Join(t.TempDir(), "trust.pem")
	writeCAs := func(cas ...string) {
		t.Helper()
		var bundle []byte
		for _, ca := range cas {
			b, err := os.ReadFile(pki.caFile(ca))
			if err != nil {
				t.Fatal(err)
			}
			bundle = append(bundle, b...)
		}
		tmp := trust + ".tmp"
		if err := os.WriteFile(tmp, bundle, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, trust); err != nil {
			t.Fatal(err)
		}
	}
	writeCAs("old")
	jm := startLogged(t, "jobmanager", append([]string{"--data-dir", t.TempDir()}, pki.issue(t, "old", "jm", trust)...)...)
	te := startLogged(t, "taskexecutor", append([]string{"--hastore", jm.url(), "--slots", "2"}, pki.issue(t, "old", "te", trust)...)...)
	client := jobplanev1connect.NewDispatcherServiceClient(publicClient(t, trust), jm.url())
	waitTaskExecutors(t, client, 1)

	// A job that runs across the rotation.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	graph := &jobplanev1.JobGraph{Name: "long", Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: "sleep", Parallelism: 2, Config: map[string]string{"duration": "2s"}}}}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "long", JobGraph: graph}); err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	health := func(caFile string) error {
		_, err := grpchealth.NewClient(publicClient(t, caFile), jm.url()).Check(ctx, &grpchealth.CheckRequest{})
		return err
	}
	if err := health(pki.caFile("new")); err == nil {
		t.Fatal("a client trusting only the new CA verified the jobmanager before the rotation")
	}

	writeCAs("old", "new")
	pki.issue(t, "new", "jm", trust)
	pki.issue(t, "new", "te", trust)
	if err := health(pki.caFile("new")); err != nil {
		t.Errorf("after rotation, a client trusting only the new CA: %v", err)
	}
	if err := health(pki.caFile("old")); err == nil {
		t.Error("after rotation, a client trusting only the old CA still verified the jobmanager")
	}
	// A TaskExecutor with a certificate of the new CA registers: the
	// jobmanager reloaded the CAs it accepts clients of.
	startLogged(t, "taskexecutor", append([]string{"--hastore", jm.url(), "--slots", "2"}, pki.issue(t, "new", "te2", trust)...)...)
	waitTaskExecutors(t, client, 2)

	resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "long", Wait: true})
	if err != nil || resp.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("the job across the rotation: %v, %v; want FINISHED", resp, err)
	}
	runJobOn(t, client, "after", "noop", nil)

	// The old CA dropped: a TaskExecutor still holding one of its
	// certificates is refused.
	writeCAs("new")
	stale := startLogged(t, "taskexecutor", append([]string{"--hastore", jm.url(), "--slots", "2"}, pki.issue(t, "old", "stale", trust)...)...)
	jm.waitLog(t, 30*time.Second, "certificate signed by unknown authority")
	stale.waitLog(t, 30*time.Second, "unknown certificate authority")
	for _, p := range []*loggedProcess{jm, te} {
		if !p.running() {
			t.Errorf("a process stopped during the rotation:\n%s", p.log)
		}
	}
	jm.waitLog(t, time.Second, "TLS certificate reloaded", "TLS certificate authorities reloaded")
}

// readAddr waits for the address a child writes into name.
func readAddr(t *testing.T, name string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(name); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address in %s after 20s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two jobmanagers with a cluster listener each, on one hastore, and a
// TaskExecutor that follows the leader through the standby's cluster
// port: the public ports serve the Dispatcher, health and /metrics and
// not the cluster's services; the cluster ports serve the cluster's
// services and not the Dispatcher; the TaskExecutor registers at the
// leader's cluster URL from the leader record; a job runs; the standby's
// NOT_LEADER and the overview name the leader's public URL.
func TestTwoSurfaces(t *testing.T) {
	store := startHAStore(t)
	startJM := func() (public, cluster string) {
		file := filepath.Join(t.TempDir(), "cluster-addr")
		p := startLogged(t, "jobmanager", "--hastore", store, "--cluster-listen", "127.0.0.1:0", "--cluster-listen-addr-file", file)
		return "http://" + p.addr, "http://" + readAddr(t, file)
	}
	pub1, clu1 := startJM()
	overview(t, pub1, 30*time.Second, func(r *jobplanev1.GetClusterOverviewResponse, err error) bool { return err == nil })
	pub2, clu2 := startJM()
	startLogged(t, "taskexecutor", "--hastore", clu2, "--slots", "2")

	client := dispatcher(t, pub1)
	waitTaskExecutors(t, client, 1)
	runJobOn(t, client, "surfaces", "noop", nil)

	resp, err := client.GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || resp.GetLeader().GetAddress() != pub1 {
		t.Errorf("overview = %v, %v; want leader %s", resp, err, pub1)
	}
	if _, err := dispatcher(t, pub2).GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{}); true {
		if addr, ok := notLeaderAddress(err); !ok || addr != pub1 {
			t.Errorf("standby's answer: %v (leader %q); want NOT_LEADER naming %s", err, addr, pub1)
		}
	}
	resps, err := clusterTE(t, clu2).Leader()
	if err != nil || resps.GetAddress() != pub1 || resps.GetClusterAddress() != clu1 {
		t.Errorf("leader record = %v, %v; want address %s, cluster address %s", resps, err, pub1, clu1)
	}

	// Which port serves what.
	for _, tc := range []struct {
		name       string
		url        string
		call       func(url string) error
		wantServed bool
	}{
		{"Dispatcher on public", pub1, callDispatcher(t), true},
		{"Dispatcher on cluster", clu1, callDispatcher(t), false},
		{"ResourceManager on public", pub1, callResourceManager(t), false},
		{"ResourceManager on cluster", clu1, callResourceManager(t), true},
		{"HAStore on public", pub1, callHAStore(t), false},
		{"HAStore on cluster", clu1, callHAStore(t), true},
	} {
		err := tc.call(tc.url)
		served := connect.CodeOf(err) != connect.CodeUnimplemented
		if served != tc.wantServed {
			t.Errorf("%s: %v; want served %v", tc.name, err, tc.wantServed)
		}
	}
	for _, tc := range []struct {
		url  string
		want int
	}{{pub1, http.StatusOK}, {clu1, http.StatusNotFound}} {
		resp, err := http.Get(tc.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s/metrics: %d, want %d", tc.url, resp.StatusCode, tc.want)
		}
	}
	for _, url := range []string{pub1, clu1} {
		waitServing(t, url) // health on both
	}
}

// callDispatcher, callResourceManager and callHAStore make a call of
// each service at a URL; a port that does not serve it answers
// UNIMPLEMENTED.
func callDispatcher(t *testing.T) func(string) error {
	return func(url string) error {
		_, err := dispatcher(t, url).GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{})
		return err
	}
}

func callResourceManager(t *testing.T) func(string) error {
	return func(url string) error {
		_, err := clusterv1connect.NewResourceManagerServiceClient(http.DefaultClient, url).RegisterTaskExecutor(context.Background(), &clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest{})
		return err
	}
}

func callHAStore(t *testing.T) func(string) error {
	return func(url string) error {
		_, err := clusterTE(t, url).Leader()
		return err
	}
}

// leaderView reads the jobmanager election's leader record through the
// HAStoreService at a URL, as a TaskExecutor follows it.
type leaderView struct {
	t   *testing.T
	url string
}

func clusterTE(t *testing.T, url string) leaderView { return leaderView{t, url} }

// Leader returns the first leader event with a token.
func (v leaderView) Leader() (*jobplanev1.LeaderInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := hastorev1connect.NewHAStoreServiceClient(http.DefaultClient, v.url).ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: "jobmanager"})
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	for stream.Receive() {
		if l := stream.Msg().GetLeader(); l.GetToken() != nil {
			return l, nil
		}
	}
	return nil, stream.Err()
}

// A standalone with a cluster listener: its own TaskExecutors follow the
// leader record to the cluster URL and run a job; the public port serves
// the Dispatcher and not the ResourceManager, the cluster port the
// reverse.
func TestStandaloneTwoSurfaces(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cluster-addr")
	p := startLogged(t, "standalone", "--data-dir", t.TempDir(), "--task-executors", "1", "--slots", "2",
		"--cluster-listen", "127.0.0.1:0", "--cluster-listen-addr-file", file)
	public, cluster := "http://"+p.addr, "http://"+readAddr(t, file)
	client := dispatcher(t, public)
	waitTaskExecutors(t, client, 1)
	runJobOn(t, client, "standalone-surfaces", "noop", nil)
	if err := callDispatcher(t)(cluster); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("Dispatcher on the cluster port: %v, want UNIMPLEMENTED", err)
	}
	if err := callResourceManager(t)(public); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("ResourceManager on the public port: %v, want UNIMPLEMENTED", err)
	}
	if l, err := clusterTE(t, cluster).Leader(); err != nil || l.GetAddress() != public || l.GetClusterAddress() != cluster {
		t.Errorf("leader record = %v, %v; want %s and cluster %s", l, err, public, cluster)
	}
}

// The embedded member's ports follow the same rule: a plain-HTTP peer URL
// or peer listener, or a client listener, off loopback is refused without
// -insecure; https:// peers need the process's certificate and CA.
func TestEmbeddedMemberOffLoopbackRefused(t *testing.T) {
	tc := testcert.New(t)
	for _, c := range []struct {
		name string
		args []string
		want string // in stderr; "" for no refusal of the store flags
	}{
		{name: "http peer", args: []string{"--etcd-name", "a", "--etcd-peers", "a=http://10.1.2.3:2380"}, want: "not on loopback"},
		{name: "http peer listener", args: []string{"--etcd-name", "a", "--etcd-peers", "a=http://127.0.0.1:2380", "--etcd-peer-listen", "0.0.0.0:2380"}, want: "not on loopback"},
		{name: "client listener", args: []string{"--etcd-client-listen", "10.1.2.3:2379"}, want: "-etcd-client-listen"},
		{name: "https peer without TLS", args: []string{"--etcd-name", "a", "--etcd-peers", "a=https://127.0.0.1:2380"}, want: "needs -tls-cert"},
		{name: "https peer with TLS", args: []string{"--etcd-name", "a", "--etcd-peers", "a=https://10.1.2.3:2380", "--tls-cert", tc.CertFile, "--tls-key", tc.KeyFile, "--tls-ca", tc.CertFile}},
		{name: "http peer, insecure", args: []string{"--etcd-name", "a", "--etcd-peers", "a=http://10.1.2.3:2380", "--insecure"}},
		{name: "client listener, insecure", args: []string{"--etcd-client-listen", "10.1.2.3:2379", "--insecure"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A bad -debug-listen, checked alongside, stops a process
			// whose store flags pass before it opens anything.
			args := append([]string{"jobmanager", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--debug-listen", "10.1.2.3:6060"}, c.args...)
			var stdout, stderr bytes.Buffer
			if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			if c.want == "" {
				if !strings.Contains(stderr.String(), "-debug-listen") || strings.Contains(stderr.String(), "etcd") {
					t.Errorf("want only the -debug-listen refusal; stderr:\n%s", stderr.String())
				}
				return
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr does not say %q:\n%s", c.want, stderr.String())
			}
		})
	}
}
