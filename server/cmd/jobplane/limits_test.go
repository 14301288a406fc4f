package main

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/server/internal/clientlimit"
)

// The limit flags are on the JobManager's commands, with their
// defaults, and bad values are usage errors.
func TestLimitFlags(t *testing.T) {
	for _, sub := range []string{"standalone", "jobmanager"} {
		var stdout, stderr bytes.Buffer
		if code := jobplaneMain([]string{sub, "-h"}, &stdout, &stderr); code != exitOK {
			t.Fatalf("%s -h: exit code %d", sub, code)
		}
		for _, flag := range []string{"-max-streams-per-client", "-submit-rate", "-submit-burst", "-max-jobs", "-max-cluster-subtasks", "-max-subtasks-per-job", "-max-request-bytes"} {
			if !strings.Contains(stderr.String(), flag) {
				t.Errorf("%s -h lacks %s", sub, flag)
			}
		}
	}
	for _, bad := range [][]string{
		{"--max-streams-per-client", "-1"}, {"--submit-rate", "-1"}, {"--submit-burst", "0"}, {"--max-jobs", "-1"}, {"--max-cluster-subtasks", "-1"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"standalone", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, bad...)
		if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), bad[0][1:]) {
			t.Errorf("standalone %v: exit code %d, stderr %q; want %d naming the flag", bad, code, stderr.String(), exitUsage)
		}
	}
	if clientlimit.DefaultSubmitBurst < 1 || clientlimit.DefaultSubmitRate <= 0 || clientlimit.DefaultMaxStreams < 1 {
		t.Error("a per-client limit is off by default")
	}
}

// The CLI waits out a refusal for the submission rate, saying so, and
// says that a job refused at a limit was not submitted.
func TestCLISubmitAtLimits(t *testing.T) {
	// One submission at once, then one every 5s: the second comes before
	// the bucket refills, and waits for it.
	c := startCLICluster(t, "--submit-rate", "0.2", "--submit-burst", "1", "--max-jobs", "1")
	job := filepath.Join("..", "..", "..", "examples", "forever.yaml")
	if r := c.run(t, "submit", "-d", "--id", "first", job); r.code != exitOK {
		t.Fatalf("first submission: %+v", r)
	}
	r := c.run(t, "submit", "-d", "--id", "second", job)
	if r.code != exitError {
		t.Errorf("second submission: exit code %d, want %d (refused at the job limit)", r.code, exitError)
	}
	for _, want := range []string{
		"the cluster limits this client's submission rate; it asks to retry in",
		"the cluster's live jobs are at its limit of 1",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("second submission: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "may or may not have been persisted") {
		t.Errorf("a refusal at a limit is said to be of unknown outcome:\n%s", r.stderr)
	}
	// The refusals are counted, by reason.
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	m := scrapeMetrics(t, hc, c.url)
	if m[`jobplane_limit_refusals_total{reason="SUBMIT_RATE_EXCEEDED"}`] < 1 || m[`jobplane_limit_refusals_total{reason="TOO_MANY_JOBS"}`] != 1 {
		t.Errorf("limit refusals counted: rate %v, jobs %v; want at least 1 and 1",
			m[`jobplane_limit_refusals_total{reason="SUBMIT_RATE_EXCEEDED"}`], m[`jobplane_limit_refusals_total{reason="TOO_MANY_JOBS"}`])
	}
	if r := c.run(t, "cancel", "first"); r.code != exitOK {
		t.Fatalf("cancel: %+v", r)
	}
	if r := c.run(t, "wait", "first"); r.code != exitJobCanceled {
		t.Fatalf("wait: %+v", r)
	}
	// Room again: the submission waits for the rate, if it must, and is
	// accepted.
	if r := c.run(t, "submit", "-d", "--id", "second", job); r.code != exitOK || strings.TrimSpace(r.stdout) != "second" {
		t.Fatalf("second submission after the first ended: %+v", r)
	}
}
