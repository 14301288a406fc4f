package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every server subcommand takes --debug-listen, and refuses an address
// that is not on loopback before it opens anything.
func TestDebugListenIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"standalone", "jobmanager", "taskexecutor", "hastore"} {
		t.Run(sub+"/help", func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := jobplaneMain([]string{sub, "-h"}, &stdout, &stderr); code != exitOK {
				t.Fatalf("%s -h: exit code %d", sub, code)
			}
			if !strings.Contains(stderr.String(), "-debug-listen") {
				t.Errorf("%s -h lacks -debug-listen:\n%s", sub, stderr.String())
			}
		})
		for _, addr := range []string{"0.0.0.0:6060", ":6060", "[::]:6060", "10.1.2.3:6060", "example.com:6060", "6060"} {
			t.Run(sub+"/"+addr, func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				args := []string{sub, "--debug-listen", addr, "--data-dir", t.TempDir()}
				if sub == "taskexecutor" {
					args = args[:3]
				}
				if code := jobplaneMain(args, &stdout, &stderr); code != exitUsage {
					t.Errorf("exit code = %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
				}
				if !strings.Contains(stderr.String(), "-debug-listen") {
					t.Errorf("stderr does not name the flag:\n%s", stderr.String())
				}
			})
		}
	}
}

// Loopback addresses, by name or number, are accepted; the empty default
// opens nothing.
func TestDebugListenAcceptsLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:0", "127.1.2.3:0", "[::1]:0", "localhost:0"} {
		if err := (&debugFlags{listen: addr}).validate(); err != nil {
			t.Errorf("validate(%q) = %v, want nil", addr, err)
		}
	}
	srv, err := (&debugFlags{}).open(nil, 0)
	if srv != nil || err != nil {
		t.Errorf("open with no address = %v, %v; want nothing", srv, err)
	}
}
