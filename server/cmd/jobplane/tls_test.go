package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/internal/testcert"
)

// Every server subcommand takes -tls-cert, -tls-key and -tls-ca, and
// refuses half a pair, a missing or bad file, or a bad authority file
// with exit code 2 and a message naming it, before it listens.
func TestTLSFlagErrors(t *testing.T) {
	cert, other := testcert.New(t), testcert.New(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name      string
		args      []string
		wantInErr string
	}{
		{"cert without key", []string{"--tls-cert", cert.CertFile}, "-tls-cert needs -tls-key"},
		{"key without cert", []string{"--tls-key", cert.KeyFile}, "-tls-key needs -tls-cert"},
		{"missing cert", []string{"--tls-cert", missing, "--tls-key", cert.KeyFile}, "missing.pem"},
		{"garbage key", []string{"--tls-cert", cert.CertFile, "--tls-key", garbage}, "garbage.pem"},
		{"key of another cert", []string{"--tls-cert", cert.CertFile, "--tls-key", other.KeyFile}, "does not match"},
		{"missing ca", []string{"--tls-ca", missing}, "-tls-ca"},
		{"ca without certificates", []string{"--tls-ca", garbage}, "no PEM certificate"},
		{"http advertise with tls", []string{"--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile, "--advertise", "http://127.0.0.1:8080"}, "https://"},
	}
	for _, sub := range []string{"standalone", "jobmanager", "hastore", "taskexecutor"} {
		t.Run(sub, func(t *testing.T) {
			var help bytes.Buffer
			jobplaneMain([]string{sub, "-h"}, &help, &help)
			for _, flag := range []string{"-tls-cert", "-tls-key", "-tls-ca"} {
				if !strings.Contains(help.String(), flag) {
					t.Errorf("%s -h lacks %s", sub, flag)
				}
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					addrFile := filepath.Join(t.TempDir(), "addr")
					args := append([]string{sub, "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir()}, tc.args...)
					if sub == "taskexecutor" {
						args = slicesDelete(args, "--data-dir")
					}
					var stdout, stderr bytes.Buffer
					if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage {
						t.Errorf("exit code = %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
					}
					if !strings.Contains(stderr.String(), tc.wantInErr) {
						t.Errorf("stderr lacks %q:\n%s", tc.wantInErr, stderr.String())
					}
					if _, err := os.Stat(addrFile); err == nil {
						t.Error("the process listened before refusing its flags")
					}
				})
			}
		})
	}
}

// slicesDelete drops a flag and its value from args.
func slicesDelete(args []string, flag string) []string {
	for i, a := range args {
		if a == flag {
			return append(args[:i:i], args[i+2:]...)
		}
	}
	return args
}

// A cluster of processes that all serve TLS, and trust one authority
// with -tls-ca: a hastore, a jobmanager on it, and a TaskExecutor that
// follows the jobmanager. Every call between them goes over https (the
// HA store's, the leader observer's, the ResourceManager's, the
// JobMaster's and the TaskExecutor's), and a job runs.
func TestTLSClusterOfProcesses(t *testing.T) {
	cert := testcert.New(t)
	tls := []string{"--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile, "--tls-ca", cert.CertFile}
	_, storeAddr := startServer(t, "hastore", append([]string{"--data-dir", t.TempDir()}, tls...)...)
	_, jmAddr := startServer(t, "jobmanager", append([]string{"--hastore", "https://" + storeAddr}, tls...)...)
	jmURL := "https://" + jmAddr
	_, teAddr := startServer(t, "taskexecutor", append([]string{"--hastore", jmURL, "--slots", "2"}, tls...)...)

	httpClient := transport.NewClient(cert.ClientConfig())
	t.Cleanup(httpClient.CloseIdleConnections)
	client := jobplanev1connect.NewDispatcherServiceClient(httpClient, jmURL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		resp, err := client.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{})
		if err == nil && len(resp.GetTaskExecutors()) == 1 {
			if got, want := resp.GetTaskExecutors()[0].GetAddress(), "https://"+teAddr; got != want {
				t.Errorf("TaskExecutor address = %q, want %q", got, want)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no TaskExecutor registered over TLS: %v, %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	overview, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || overview.GetLeader().GetAddress() != jmURL {
		t.Errorf("overview = %v, %v; want leader %s", overview, err, jmURL)
	}
	graph := &jobplanev1.JobGraph{Name: "tls", Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: "noop", Parallelism: 2}}}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "tls", JobGraph: graph}); err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	res, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "tls", Wait: true})
	if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, %v; want FINISHED", res, err)
	}

	// The client verbs reach it with --tls-ca, and fail without.
	var stdout, stderr bytes.Buffer
	if code := jobplaneMain([]string{"status", "tls", "--server", jmURL, "--tls-ca", cert.CertFile, "-o", "json", "--retry", "0"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("jobplane status over TLS: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "JOB_STATUS_FINISHED") {
		t.Errorf("jobplane status over TLS printed:\n%s", stdout.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := jobplaneMain([]string{"status", "tls", "--server", jmURL, "--retry", "0"}, &stdout, &stderr); code == exitOK || !strings.Contains(stderr.String(), "certificate") {
		t.Errorf("jobplane status without --tls-ca: exit %d, stderr:\n%s\nwant a certificate error", code, stderr.String())
	}
	if code := jobplaneMain([]string{"status", "tls", "--server", jmURL, "--tls-ca", filepath.Join(t.TempDir(), "none")}, &stdout, &stderr); code != exitUsage {
		t.Errorf("jobplane status with a missing --tls-ca: exit %d, want %d", code, exitUsage)
	}
}
