package main

import (
	"bytes"
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
		for _, flag := range []string{"-max-streams-per-client", "-submit-rate", "-submit-burst", "-max-jobs", "-max-cluster-subtasks", "-admission-window", "-max-subtasks-per-job", "-max-request-bytes"} {
			if !strings.Contains(stderr.String(), flag) {
				t.Errorf("%s -h lacks %s", sub, flag)
			}
		}
	}
	for _, bad := range [][]string{
		{"--max-streams-per-client", "-1"}, {"--submit-rate", "-1"}, {"--submit-burst", "0"}, {"--max-jobs", "-1"}, {"--max-cluster-subtasks", "-1"}, {"--admission-window", "-1"},
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
