package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/certs"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// loopbackAddr returns a loopback host:port that was free a moment ago.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// jobManager is a `jobplane jobmanager` process with an embedded etcd
// member of a cluster.
type jobManager struct {
	name      string
	p         *process
	url       string
	dataDir   string
	peerAddr  string
	clientURL string // its etcd member's
	args      []string
}

// startJobManager starts a jobmanager named name with its member's peer
// listener on peerAddr, with extra flags (-etcd-peers, -etcd-join), on
// dataDir, and waits until it serves.
func startJobManager(t *testing.T, name, dataDir, peerAddr string, extra ...string) *jobManager {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	clientAddr := loopbackAddr(t)
	j := &jobManager{name: name, dataDir: dataDir, peerAddr: peerAddr, clientURL: "http://" + clientAddr}
	j.args = append([]string{"jobmanager", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--data-dir", dataDir, "--etcd-name", name, "--etcd-client-listen", clientAddr}, extra...)
	j.p = startJobplane(t, j.args...)
	j.url = "http://" + waitForFile(t, j.p, addrFile)
	return j
}

// startJobManagerCluster starts jobmanagers named names whose members
// form one new cluster (-etcd-peers), and waits until each serves.
func startJobManagerCluster(t *testing.T, names ...string) []*jobManager {
	t.Helper()
	var peers []string
	addrs := map[string]string{}
	for _, n := range names {
		addrs[n] = loopbackAddr(t)
		peers = append(peers, n+"=http://"+addrs[n])
	}
	jms := make([]*jobManager, len(names))
	for i, n := range names {
		jms[i] = startJobManager(t, n, filepath.Join(t.TempDir(), "data"), addrs[n], "--etcd-peers", strings.Join(peers, ","))
	}
	for _, j := range jms {
		waitServing(t, j.url)
	}
	return jms
}

// Three `jobplane jobmanager` processes, each embedding an etcd member,
// form one etcd cluster with -etcd-peers: one of them leads, a job
// submitted through one is seen through the others (their own members
// serve its plan), and `jobplane etcd-member list` shows the three
// members.
func TestJobManagersOnEmbeddedEtcdCluster(t *testing.T) {
	names := []string{"jm1", "jm2", "jm3"}
	jms := startJobManagerCluster(t, names...)
	var clientURLs []string
	for _, j := range jms {
		clientURLs = append(clientURLs, j.clientURL)
	}
	peerAddrs := map[string]string{}
	for _, j := range jms {
		peerAddrs[j.name] = j.peerAddr
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	stores := make([]*hastorerpc.Client, len(jms))
	for i, j := range jms {
		stores[i] = hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: &http.Client{Transport: tr}, BaseURL: j.url})
	}
	urls := make([]string, len(jms))
	for i, j := range jms {
		urls[i] = j.url
	}

	// One leads, and every process's member names the same leader.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var leader string
	for deadline := time.Now().Add(60 * time.Second); leader == ""; {
		info, err := stores[0].Leader(ctx, election.JobManager)
		if err == nil && info.Address != "" {
			leader = info.Address
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no jobmanager leads after 60s: %v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Contains(urls, leader) {
		t.Fatalf("leader %q is none of the jobmanagers %v", leader, urls)
	}
	for i, s := range stores {
		info, err := s.Leader(ctx, election.JobManager)
		if err != nil || info.Address != leader {
			t.Errorf("leader through %s = %v, %v; want %s", names[i], info, err, leader)
		}
	}

	// A job submitted through a standby reaches the leader, and is seen
	// through every jobmanager.
	standby := urls[0]
	if standby == leader {
		standby = urls[1]
	}
	c, err := sdk.New([]string{standby}, sdk.WithHTTP1())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &jobplanev1.JobGraph{Name: "across", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	sub, err := c.Submit(ctx, g)
	if err != nil {
		t.Fatalf("Submit through the standby: %v", err)
	}
	for i, u := range urls {
		ci, err := sdk.New([]string{u}, sdk.WithHTTP1())
		if err != nil {
			t.Fatal(err)
		}
		got, err := ci.Get(ctx, sub.JobID)
		ci.Close()
		if err != nil || got.GetSummary().GetName() != "across" {
			t.Errorf("job through %s = %v, %v", names[i], got.GetSummary(), err)
		}
		plan, err := stores[i].GetExecutionPlan(ctx, sub.JobID)
		if err != nil || plan.GetJobGraph().GetName() != "across" {
			t.Errorf("plan through %s's member = %v, %v", names[i], plan, err)
		}
	}

	// The admin command sees the three members.
	var stdout, stderr bytes.Buffer
	if code := jobplaneMain([]string{"etcd-member", "list", "--etcd-endpoints", strings.Join(clientURLs, ",")}, &stdout, &stderr); code != exitOK {
		t.Fatalf("etcd-member list: exit %d: %s", code, stderr.String())
	}
	for _, n := range names {
		if !strings.Contains(stdout.String(), " "+n+" ") || !strings.Contains(stdout.String(), peerAddrs[n]) {
			t.Errorf("etcd-member list lacks %s at %s:\n%s", n, peerAddrs[n], stdout.String())
		}
	}
}

// The operations on a three-jobmanager cluster, with the commands an
// operator runs: a jobmanager restarted with the same flags on its data
// directory rejoins with its data; a dead one is removed with
// `jobplane etcd-member remove` and replaced by a fresh one that joins
// with -etcd-join on an empty data directory.
func TestJobManagerMemberRestartAndReplace(t *testing.T) {
	jms := startJobManagerCluster(t, "jm1", "jm2", "jm3")
	jm1, jm2, jm3 := jms[0], jms[1], jms[2]
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	storeOf := func(j *jobManager) *hastorerpc.Client {
		return hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: &http.Client{Transport: tr}, BaseURL: j.url})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sdk.New([]string{jm1.url, jm2.url, jm3.url}, sdk.WithHTTP1())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &jobplanev1.JobGraph{Name: "kept", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	sub, err := c.Submit(ctx, g)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	hasPlan := func(j *jobManager) {
		t.Helper()
		plan, err := storeOf(j).GetExecutionPlan(ctx, sub.JobID)
		if err != nil || plan.GetJobGraph().GetName() != "kept" {
			t.Errorf("plan through %s = %v, %v", j.name, plan, err)
		}
	}

	// Restart: SIGTERM, then the same command on the same directory.
	if err := jm2.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := jm2.p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("jm2 exit code after SIGTERM = %d", code)
	}
	os.Remove(jm2.args[4]) // the address file
	jm2.p = startJobplane(t, jm2.args...)
	jm2.url = "http://" + waitForFile(t, jm2.p, jm2.args[4])
	waitServing(t, jm2.url)
	hasPlan(jm2)

	// Replacement: jm3 dies with its disk; it is removed, and a fresh
	// jm3 joins through the running members.
	if err := jm3.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	jm3.p.wait(t, 30*time.Second)
	endpoints := jm1.clientURL + "," + jm2.clientURL
	var stdout, stderr bytes.Buffer
	if code := jobplaneMain([]string{"etcd-member", "remove", "jm3", "--etcd-endpoints", endpoints}, &stdout, &stderr); code != exitOK {
		t.Fatalf("etcd-member remove jm3: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "removed member jm3") {
		t.Errorf("etcd-member remove says %q", stdout.String())
	}
	peerAddr := loopbackAddr(t)
	fresh := startJobManager(t, "jm3", filepath.Join(t.TempDir(), "data"), peerAddr,
		"--etcd-peers", "jm3=http://"+peerAddr, "--etcd-join", endpoints)
	waitServing(t, fresh.url)
	hasPlan(fresh)
	stdout.Reset()
	if code := jobplaneMain([]string{"etcd-member", "list", "--etcd-endpoints", endpoints}, &stdout, &stderr); code != exitOK {
		t.Fatalf("etcd-member list: exit %d: %s", code, stderr.String())
	}
	if got := strings.Count(stdout.String(), "started"); got != 3 || !strings.Contains(stdout.String(), peerAddr) {
		t.Errorf("etcd-member list after the replacement, want 3 started members with jm3 at %s:\n%s", peerAddr, stdout.String())
	}
}

// Bad combinations of store flags exit with a usage error that says
// what is wrong, before anything listens or starts.
func TestStoreFlagErrors(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	ext := []string{"--etcd-endpoints", "https://127.0.0.1:2379"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", append([]string{"--etcd-cert", "c.pem"}, ext...), "-etcd-cert needs -etcd-key"},
		{"key without cert", append([]string{"--etcd-key", "k.pem"}, ext...), "-etcd-key needs -etcd-cert"},
		{"TLS without endpoints", []string{"--etcd-cacert", "ca.pem"}, "set -etcd-endpoints"},
		{"user without endpoints", []string{"--etcd-user", "u", "--etcd-password-file", pw}, "set -etcd-endpoints"},
		{"user without password", append([]string{"--etcd-user", "u"}, ext...), "-etcd-user needs -etcd-password-file"},
		{"password without user", append([]string{"--etcd-password-file", pw}, ext...), "-etcd-password-file needs -etcd-user"},
		{"unreadable password file", append([]string{"--etcd-user", "u", "--etcd-password-file", missing}, ext...), missing},
		{"empty password", append([]string{"--etcd-user", "u", "--etcd-password-file", empty}, ext...), "empty password"},
		{"unreadable CA", append([]string{"--etcd-cacert", missing}, ext...), missing},
		{"TLS on plain http", []string{"--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-cacert", missing}, "use https://"},
		{"peers without a name", []string{"--etcd-peers", "a=http://127.0.0.1:2380"}, "-etcd-peers needs -etcd-name"},
		{"name not in peers", []string{"--etcd-name", "b", "--etcd-peers", "a=http://127.0.0.1:2380"}, `no entry for this member's name "b"`},
		{"bad peers", []string{"--etcd-name", "a", "--etcd-peers", "a=127.0.0.1:2380"}, "-etcd-peers"},
		{"join without peers", []string{"--etcd-join", "http://127.0.0.1:2379"}, "-etcd-join needs"},
		{"member flags with endpoints", append([]string{"--etcd-name", "a"}, ext...), "drop them with -etcd-endpoints"},
		{"remote store with etcd flags", append([]string{"--hastore", "http://127.0.0.1:7001"}, ext...), "drop the -etcd-* flags"},
		{"election timeout too short", []string{"--etcd-heartbeat-interval", "100ms", "--etcd-election-timeout", "200ms"}, "5 heartbeat intervals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"jobmanager", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)
			var stdout, stderr bytes.Buffer
			if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestEtcdMemberUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"etcd-member", "-h"}, exitOK},
		{[]string{"etcd-member"}, exitUsage},
		{[]string{"etcd-member", "list"}, exitUsage},
		{[]string{"etcd-member", "frob", "--etcd-endpoints", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"etcd-member", "remove", "--etcd-endpoints", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"etcd-member", "list", "extra", "--etcd-endpoints", "http://127.0.0.1:1"}, exitUsage},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := jobplaneMain(tc.args, &stdout, &stderr); code != tc.want {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tc.want, stderr.String())
			}
		})
	}
}

// Three jobmanagers with TLS and https:// peer URLs: their embedded
// members form one cluster over mutual TLS with the processes' own
// certificates (-tls-cert, -tls-key, -tls-client-ca), and a job submitted
// through one is served.
func TestJobManagersOverPeerTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("jobplane test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, certs.CACertFile)
	names := []string{"jm1", "jm2", "jm3"}
	var peers []string
	addrs := map[string]string{}
	for _, n := range names {
		addrs[n] = loopbackAddr(t)
		peers = append(peers, n+"=https://"+addrs[n])
	}
	var urls, clientURLs []string
	for _, n := range names {
		certPEM, keyPEM, err := ca.Issue(n, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile, err := certs.WriteKeyPair(dir, n, certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		j := startJobManager(t, n, filepath.Join(t.TempDir(), "data"), addrs[n], "--etcd-peers", strings.Join(peers, ","),
			"--tls-cert", certFile, "--tls-key", keyFile, "--tls-ca", caFile, "--tls-client-ca", caFile)
		urls = append(urls, strings.Replace(j.url, "http://", "https://", 1))
		clientURLs = append(clientURLs, j.clientURL)
	}
	tlsCfg, err := endpoint.ClientTLSConfig(caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sdk.New(urls, sdk.WithTLSConfig(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g := &jobplanev1.JobGraph{Name: "peer-tls", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	sub, err := c.Submit(ctx, g)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if got, err := c.Get(ctx, sub.JobID); err != nil || got.GetSummary().GetName() != "peer-tls" {
		t.Fatalf("job = %v, %v", got.GetSummary(), err)
	}
	var stdout, stderr bytes.Buffer
	if code := jobplaneMain([]string{"etcd-member", "list", "--etcd-endpoints", strings.Join(clientURLs, ",")}, &stdout, &stderr); code != exitOK {
		t.Fatalf("etcd-member list: exit %d: %s", code, stderr.String())
	}
	for _, n := range names {
		if !strings.Contains(stdout.String(), " "+n+" ") || !strings.Contains(stdout.String(), "https://"+addrs[n]) {
			t.Errorf("etcd-member list lacks %s at https://%s:\n%s", n, addrs[n], stdout.String())
		}
	}
}
