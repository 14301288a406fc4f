package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// loopbackAddr returns a loopback host:port that was free a moment ago.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Three `jobplane jobmanager` processes, each embedding an etcd member,
// form one etcd cluster with -etcd-peers: one of them leads, a job
// submitted through one is seen through the others (their own members
// serve its plan), and `jobplane etcd-member list` shows the three
// members.
func TestJobManagersOnEmbeddedEtcdCluster(t *testing.T) {
	names := []string{"jm1", "jm2", "jm3"}
	var peers, clientURLs []string
	peerAddrs := map[string]string{}
	for _, n := range names {
		peerAddrs[n] = loopbackAddr(t)
		peers = append(peers, n+"=http://"+peerAddrs[n])
	}
	type jm struct {
		p         *process
		url       string
		clientURL string // its etcd member's
	}
	jms := make([]*jm, len(names))
	for i, n := range names {
		dir := t.TempDir()
		addrFile := filepath.Join(dir, "addr")
		clientAddr := loopbackAddr(t)
		p := startJobplane(t, "jobmanager", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
			"--data-dir", filepath.Join(dir, "data"),
			"--etcd-name", n, "--etcd-peers", strings.Join(peers, ","), "--etcd-client-listen", clientAddr)
		jms[i] = &jm{p: p, clientURL: "http://" + clientAddr}
		jms[i].url = "http://" + waitForFile(t, p, addrFile)
		clientURLs = append(clientURLs, jms[i].clientURL)
	}
	for _, j := range jms {
		waitServing(t, j.url)
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
		info, err := stores[0].Leader(ctx, hastore.ElectionJobManager)
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
		info, err := s.Leader(ctx, hastore.ElectionJobManager)
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
