package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// runToEnd runs `jobplane args...` as a child process to its end,
// bounded by a deadline, and returns its exit code and output.
func runToEnd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("jobplane %q did not end within 2m; stderr:\n%s", args, errOut.String())
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("jobplane %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// mustRunToEnd runs `jobplane args...` and fails the test unless it
// succeeds; it returns the standard output.
func mustRunToEnd(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runToEnd(t, args...)
	if code != exitOK {
		t.Fatalf("jobplane %q: exit code %d, want 0; stderr:\n%s", args, code, stderr)
	}
	return stdout
}

// sigtermAndWait stops a server with SIGTERM and waits for a clean exit.
func sigtermAndWait(t *testing.T, p *process, tr interface{ CloseIdleConnections() }) {
	t.Helper()
	tr.CloseIdleConnections()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
}

// napGraph is a job that runs for an hour. It restarts a failed attempt:
// a standalone stopping with SIGTERM stops its TaskExecutors beside its
// JobManager, and an attempt they cancel before the JobMaster suspended
// the job would fail a job without restarts.
func napGraph(name string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name: name,
		Vertices: []*jobplanev1.JobVertex{{
			Id: "nap", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "1h"},
		}},
		Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
			FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Unlimited: true, Delay: durationpb.New(100 * time.Millisecond)},
		}}},
	}
}

func noopGraph(name string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
}

func failGraph(name, message string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{
		Id: "v", Invokable: "fail", Parallelism: 1, Config: map[string]string{"message": message},
	}}}
}

func submitGraph(t *testing.T, client jobplanev1connect.DispatcherServiceClient, id string, g *jobplanev1.JobGraph) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g}); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}

// waitJobResult waits for the job's result and fails the test unless its
// status is want.
func waitJobResult(t *testing.T, client jobplanev1connect.DispatcherServiceClient, id string, want jobplanev1.JobStatus) *jobplanev1.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil || resp.GetResult().GetStatus() != want {
		t.Fatalf("result of %s = %v, %v; want %v", id, resp.GetResult(), err, want)
	}
	return resp.GetResult()
}

// waitJobRunning waits until the job is RUNNING with its one task RUNNING.
func waitJobRunning(t *testing.T, client jobplanev1connect.DispatcherServiceClient, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id})
		cancel()
		sum := resp.GetJob().GetSummary()
		if err == nil && sum.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING {
			for _, c := range sum.GetTaskCounts() {
				if c.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING && c.GetCount() == 1 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not running after 1m: %v, %v", id, sum, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertNoSuchJob fails the test unless the cluster knows nothing of the job.
func assertNoSuchJob(t *testing.T, client jobplanev1connect.DispatcherServiceClient, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := client.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob %s = %v, %v; want not_found", id, resp, err)
	}
	if resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJobResult %s = %v, %v; want not_found", id, resp, err)
	}
}

var backupLine = regexp.MustCompile(`^wrote (.+) from (.+): (\d+) bytes, revision (\d+), (\d+) keys, sha256 ([0-9a-f]{64})\n$`)

// A stopped standalone's store, backed up from its data directory and
// restored into a new one, starts a standalone with the jobs of the
// backup: the finished ones with their results, the running ones running
// again; the jobs submitted after the backup are not there. Corrupted
// snapshots and non-empty directories are refused.
func TestBackupAndRestoreStandalone(t *testing.T) {
	if testing.Short() {
		t.Skip("several server processes")
	}
	dir := t.TempDir()
	p, client, tr := startStandalone(t, dir)
	submitGraph(t, client, "done", noopGraph("done"))
	submitGraph(t, client, "failed", failGraph("failed", "broken on purpose"))
	submitGraph(t, client, "nap1", napGraph("nap1"))
	submitGraph(t, client, "nap2", napGraph("nap2"))
	doneResult := waitJobResult(t, client, "done", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	waitJobResult(t, client, "failed", jobplanev1.JobStatus_JOB_STATUS_FAILED)
	waitJobRunning(t, client, "nap1")
	waitJobRunning(t, client, "nap2")

	// While the server runs, the data directory is its own.
	code, _, stderr := runToEnd(t, "backup", "--data-dir", dir, "--out", filepath.Join(t.TempDir(), "refused.db"))
	if code != exitError || !strings.Contains(stderr, "is in use by another process") || !strings.Contains(stderr, "stop it first") {
		t.Errorf("backup of a running server's data directory: exit code %d, stderr:\n%s\nwant 1 and a refusal saying to stop the server", code, stderr)
	}
	sigtermAndWait(t, p, tr)

	snap := filepath.Join(t.TempDir(), "store.db")
	out := mustRunToEnd(t, "backup", "--data-dir", dir, "--out", snap)
	m := backupLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("backup output %q does not match %v", out, backupLine)
	}
	st, err := os.Stat(snap)
	if err != nil || strconv.FormatInt(st.Size(), 10) != m[3] {
		t.Errorf("snapshot file: %v, %v; backup said %s bytes", st, err, m[3])
	}
	if _, err := os.Stat(snap + ".part"); !os.IsNotExist(err) {
		t.Errorf("%s.part left behind: %v", snap, err)
	}

	// The original goes on without the backup seeing it.
	p, client, tr = startStandalone(t, dir)
	submitGraph(t, client, "after", noopGraph("after"))
	submitGraph(t, client, "after-nap", napGraph("after-nap"))
	waitJobResult(t, client, "after", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	sigtermAndWait(t, p, tr)

	// Damaged snapshots are refused before anything is written.
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0xff
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"flipped byte", flipped, "is corrupted: the sha256 of its contents does not match the checksum at its end"},
		{"truncated", data[:len(data)-100], "is not an etcd snapshot"},
		{"empty", nil, "is not an etcd snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(damaged, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "restored")
			code, _, stderr := runToEnd(t, "restore", "--from", damaged, "--data-dir", target)
			if code != exitError || !strings.Contains(stderr, tc.want) {
				t.Errorf("restore of a %s snapshot: exit code %d, stderr:\n%s\nwant 1 and %q", tc.name, code, stderr, tc.want)
			}
			if _, err := os.Stat(target); !os.IsNotExist(err) {
				t.Errorf("refused restore left %s behind: %v", target, err)
			}
		})
	}

	// Only into a new, empty directory.
	code, _, stderr = runToEnd(t, "restore", "--from", snap, "--data-dir", dir)
	if code != exitError || !strings.Contains(stderr, "is not empty") {
		t.Errorf("restore into the live data directory: exit code %d, stderr:\n%s\nwant 1 and a refusal", code, stderr)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	if err := os.Mkdir(restored, 0o700); err != nil {
		t.Fatal(err)
	}
	out = mustRunToEnd(t, "restore", "--from", snap, "--data-dir", restored)
	if !strings.Contains(out, "into "+restored+" as member jobplane") || !strings.Contains(out, m[6]) {
		t.Errorf("restore output %q lacks the directory, member and sha256 %s", out, m[6])
	}
	code, _, stderr = runToEnd(t, "restore", "--from", snap, "--data-dir", restored)
	if code != exitError || !strings.Contains(stderr, "is not empty") {
		t.Errorf("second restore into %s: exit code %d, stderr:\n%s\nwant 1 and a refusal", restored, code, stderr)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(restored), ".restored.restore-*")); len(leftovers) > 0 {
		t.Errorf("staging directories left behind: %v", leftovers)
	}

	// A second copy, for a jobmanager.
	restoredJM := filepath.Join(t.TempDir(), "restored-jm")
	mustRunToEnd(t, "restore", "--from", snap, "--data-dir", restoredJM)

	// The restored store serves the default standalone.
	p, client, tr = startStandalone(t, restored)
	if got := waitJobResult(t, client, "done", jobplanev1.JobStatus_JOB_STATUS_FINISHED); !got.GetEndTime().AsTime().Equal(doneResult.GetEndTime().AsTime()) {
		t.Errorf("restored result of done ended %v, want %v", got.GetEndTime().AsTime(), doneResult.GetEndTime().AsTime())
	}
	if got := waitJobResult(t, client, "failed", jobplanev1.JobStatus_JOB_STATUS_FAILED); !strings.Contains(got.GetFailure().GetMessage(), "broken on purpose") {
		t.Errorf("restored result of failed: failure %v, want the task's message", got.GetFailure())
	}
	waitJobRunning(t, client, "nap1")
	waitJobRunning(t, client, "nap2")
	assertNoSuchJob(t, client, "after")
	assertNoSuchJob(t, client, "after-nap")
	// Fenced writes go on: a new job runs to its end.
	submitGraph(t, client, "new", noopGraph("new"))
	waitJobResult(t, client, "new", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	sigtermAndWait(t, p, tr)

	// And the default jobmanager (without TaskExecutors: its jobs wait
	// for slots).
	addrFile := filepath.Join(t.TempDir(), "addr")
	p = startJobplane(t, "jobmanager", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", restoredJM)
	tr = &http.Transport{}
	defer tr.CloseIdleConnections()
	client = jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, "http://"+waitForFile(t, p, addrFile))
	for deadline := time.Now().Add(time.Minute); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobmanager on the restored store not leading after 1m: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitJobResult(t, client, "done", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	for _, id := range []string{"nap1", "nap2"} {
		for deadline := time.Now().Add(time.Minute); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := client.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id})
			cancel()
			if err == nil && resp.GetJob().GetSummary().GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobmanager on the restored store: job %s = %v, %v; want RUNNING (recovered, waiting for slots)", id, resp.GetJob().GetSummary(), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	assertNoSuchJob(t, client, "after")
	sigtermAndWait(t, p, tr)
}

// startBackupMember starts an embedded member on a new directory, with a
// client URL that other processes reach.
func startBackupMember(t *testing.T) *etcdmember.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := etcdmember.Start(ctx, etcdmember.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartMember: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func putTestKeys(t *testing.T, c *clientv3.Client, keys ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range keys {
		if _, err := c.Put(ctx, k, "value of "+k); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
}

// assertTestKeys fails the test unless c has each of present, with the value
// putTestKeys gave it, and none of absent.
func assertTestKeys(t *testing.T, c *clientv3.Client, present, absent []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range present {
		resp, err := c.Get(ctx, k)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "value of "+k {
			t.Errorf("get %s = %v, %v; want its value", k, resp, err)
		}
	}
	for _, k := range absent {
		resp, err := c.Get(ctx, k)
		if err != nil || len(resp.Kvs) != 0 {
			t.Errorf("get %s = %v, %v; want nothing", k, resp, err)
		}
	}
}

// A running member is backed up through its client URL (beside an
// endpoint that does not answer); the snapshot restores into a member
// that has what was written before the backup, not what came after, at a
// revision past every one of the old store.
func TestBackupFromEtcdEndpoints(t *testing.T) {
	m := startBackupMember(t)
	c, err := m.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putTestKeys(t, c, "before/1", "before/2", "before/3")

	dead := unusedLoopbackURL(t)
	snap := filepath.Join(t.TempDir(), "store.db")
	out := mustRunToEnd(t, "backup", "--etcd-endpoints", dead+","+m.Endpoint(), "--out", snap)
	got := backupLine.FindStringSubmatch(out)
	if got == nil || got[2] != "etcd member "+m.Endpoint() {
		t.Fatalf("backup output %q: want a snapshot of %s", out, m.Endpoint())
	}
	putTestKeys(t, c, "after/1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	oldRev, err := c.Get(ctx, "after/1")
	if err != nil {
		t.Fatal(err)
	}

	// Parents are made as needed.
	restored := filepath.Join(t.TempDir(), "new", "restored")
	mustRunToEnd(t, "restore", "--from", snap, "--data-dir", restored)
	r, err := etcdmember.Start(ctx, etcdmember.Config{Dir: restored})
	if err != nil {
		t.Fatalf("StartMember on the restored directory: %v", err)
	}
	defer r.Close()
	rc, err := r.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	assertTestKeys(t, rc, []string{"before/1", "before/2", "before/3"}, []string{"after/1"})
	put, err := rc.Put(ctx, "restored/1", "x")
	if err != nil {
		t.Fatalf("put into the restored member: %v", err)
	}
	if put.Header.Revision <= oldRev.Header.Revision+defaultRevisionBump/2 {
		t.Errorf("revision after restore = %d, want past the old store's %d by the bump", put.Header.Revision, oldRev.Header.Revision)
	}

	code, _, stderr := runToEnd(t, "backup", "--etcd-endpoints", dead, "--out", filepath.Join(t.TempDir(), "none.db"), "--timeout", "20s")
	// Refused at its status (once it knows it lost its leader) or at the
	// quorum read (before).
	if code != exitError || !strings.Contains(stderr, "no etcd endpoint answers") && !strings.Contains(stderr, "has the member a quorum?") {
		t.Errorf("backup of a dead endpoint: exit code %d, stderr:\n%s\nwant 1 and a refusal", code, stderr)
	}
}

// unusedLoopbackURL returns a loopback client URL on which nothing listens.
func unusedLoopbackURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// One snapshot restored on three machines, each with its own name and the
// same peer list, makes one new three-member cluster with the data.
func TestRestoreThreeMemberCluster(t *testing.T) {
	m := startBackupMember(t)
	c, err := m.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putTestKeys(t, c, "job/1", "job/2")
	snap := filepath.Join(t.TempDir(), "store.db")
	mustRunToEnd(t, "backup", "--etcd-endpoints", m.Endpoint(), "--out", snap)

	names := []string{"a", "b", "c"}
	peerURLs := map[string]string{}
	var peers []string
	for _, n := range names {
		peerURLs[n] = unusedLoopbackURL(t)
		peers = append(peers, n+"="+peerURLs[n])
	}
	dirs := map[string]string{}
	for _, n := range names {
		dirs[n] = filepath.Join(t.TempDir(), n)
		out := mustRunToEnd(t, "restore", "--from", snap, "--data-dir", dirs[n], "--etcd-name", n, "--etcd-peers", strings.Join(peers, ","))
		if !strings.Contains(out, "as member "+n) {
			t.Errorf("restore output %q lacks the member", out)
		}
	}
	code, _, stderr := runToEnd(t, "restore", "--from", snap, "--data-dir", filepath.Join(t.TempDir(), "x"), "--etcd-name", "x", "--etcd-peers", strings.Join(peers, ","))
	if code != exitUsage || !strings.Contains(stderr, `--etcd-name "x" is not one of --etcd-peers`) {
		t.Errorf("restore of a member not in the peers: exit code %d, stderr:\n%s", code, stderr)
	}

	// Start the three members as jobmanagers would: name, peer URL and
	// cluster as restored.
	clientURLs := map[string]string{}
	for _, n := range names {
		clientURLs[n] = unusedLoopbackURL(t)
	}
	started := make(chan *embed.Etcd, len(names))
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() {
			cfg := embed.NewConfig()
			cfg.Name, cfg.Dir = n, dirs[n]
			cfg.Logger, cfg.ZapLoggerBuilder = "zap", embed.NewZapLoggerBuilder(zap.NewNop())
			cfg.TickMs, cfg.ElectionMs = 50, 1000
			peer, _ := url.Parse(peerURLs[n])
			client, _ := url.Parse(clientURLs[n])
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
			cfg.InitialCluster = strings.Join(peers, ",")
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs <- fmt.Errorf("start %s: %w", n, err)
				return
			}
			started <- e
		}()
	}
	var members []*embed.Etcd
	closers := map[string]func(){}
	for range names {
		select {
		case e := <-started:
			members = append(members, e)
			closers[e.Config().Name] = sync.OnceFunc(e.Close)
			t.Cleanup(closers[e.Config().Name])
		case err := <-errs:
			t.Fatal(err)
		}
	}
	for _, e := range members {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(time.Minute):
			t.Fatalf("member %s not ready after 1m", e.Config().Name)
		}
	}
	var endpoints []string
	for _, e := range members {
		endpoints = append(endpoints, "http://"+e.Clients[0].Addr().String())
	}
	rc, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := rc.MemberList(ctx)
	if err != nil || len(list.Members) != 3 {
		t.Fatalf("member list = %v, %v; want 3 members", list, err)
	}
	for _, e := range members {
		one, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + e.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		assertTestKeys(t, one, []string{"job/1", "job/2"}, nil)
		one.Close()
	}
	// The restored cluster, backed up through all its endpoints.
	out := mustRunToEnd(t, "backup", "--etcd-endpoints", strings.Join(endpoints, ","), "--out", filepath.Join(t.TempDir(), "again.db"))
	if !backupLine.MatchString(out) {
		t.Errorf("backup of the restored cluster: %q", out)
	}

	// A member without a quorum is not backed up, neither running nor
	// from its directory.
	closers["b"]()
	closers["c"]()
	code, _, stderr = runToEnd(t, "backup", "--etcd-endpoints", "http://"+members[0].Clients[0].Addr().String(), "--out", filepath.Join(t.TempDir(), "a.db"), "--timeout", "5s")
	// Refused at its status (once it knows it lost its leader) or at the
	// quorum read (before).
	if code != exitError || !strings.Contains(stderr, "no etcd endpoint answers") && !strings.Contains(stderr, "has the member a quorum?") {
		t.Errorf("backup of a member without quorum: exit code %d, stderr:\n%s\nwant 1 and a refusal", code, stderr)
	}
	closers["a"]()
	code, _, stderr = runToEnd(t, "backup", "--data-dir", dirs["c"], "--out", filepath.Join(t.TempDir(), "c.db"), "--timeout", "5s")
	if code != exitError || !strings.Contains(stderr, "is a member of a cluster of 3 members (a, b, c)") {
		t.Errorf("backup of one member's directory: exit code %d, stderr:\n%s\nwant 1 and a refusal", code, stderr)
	}
}

// Bad usage of backup and restore exits 2 before touching anything; their
// help says what they refuse.
func TestBackupRestoreUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want int
		says string
	}{
		{"backup help", []string{"backup", "-h"}, exitOK, "stop it, or use"},
		{"restore help", []string{"restore", "-h"}, exitOK, "Refused (and nothing written)"},
		{"backup without out", []string{"backup", "--data-dir", dir}, exitUsage, "--out is required"},
		{"backup without source", []string{"backup", "--out", filepath.Join(dir, "x")}, exitUsage, "exactly one of --data-dir and --etcd-endpoints"},
		{"backup with both sources", []string{"backup", "--out", filepath.Join(dir, "x"), "--data-dir", dir, "--etcd-endpoints", "http://127.0.0.1:1"}, exitUsage, "exactly one of"},
		{"backup stray argument", []string{"backup", "--out", filepath.Join(dir, "x"), "--data-dir", dir, "extra"}, exitUsage, "unexpected arguments"},
		{"restore without from", []string{"restore", "--data-dir", filepath.Join(dir, "r")}, exitUsage, "--from is required"},
		{"restore without data dir", []string{"restore", "--from", filepath.Join(dir, "s")}, exitUsage, "--data-dir is required"},
		{"restore bad peers", []string{"restore", "--from", filepath.Join(dir, "s"), "--data-dir", filepath.Join(dir, "r"), "--etcd-peers", "a=:::"}, exitUsage, "--etcd-peers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := jobplaneMain(tc.args, &stdout, &stderr); got != tc.want || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("exit code = %d, want %d; stderr lacks %q?\n%s", got, tc.want, tc.says, stderr.String())
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("bad usage wrote into %s: %v", dir, entries)
	}
}

// backup --data-dir refuses a directory without a member instead of
// backing up a new, empty one.
func TestBackupRefusesEmptyDataDir(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runToEnd(t, "backup", "--data-dir", dir, "--out", filepath.Join(t.TempDir(), "x.db"))
	if code != exitError || !strings.Contains(stderr, "holds no etcd member data") {
		t.Errorf("exit code %d, stderr:\n%s\nwant 1 and a refusal", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("backup wrote into %s: %v", dir, entries)
	}
}
