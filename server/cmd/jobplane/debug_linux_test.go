package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listeningAddrs returns the TCP addresses on which process pid listens,
// from /proc: the sockets among its file descriptors that the kernel
// lists in state LISTEN. A wildcard address is returned as loopback, which
// is where a test reaches it.
func listeningAddrs(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var addrs []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue // no IPv6
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			hexIP, hexPort, _ := strings.Cut(fields[1], ":")
			raw, err1 := hex.DecodeString(hexIP)
			port, err2 := strconv.ParseUint(hexPort, 16, 16)
			if err1 != nil || err2 != nil {
				t.Fatalf("unreadable %s line %q", table, sc.Text())
			}
			// The kernel prints the address as 32-bit words in host (little-
			// endian) order.
			for i := 0; i+4 <= len(raw); i += 4 {
				raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
			}
			ip := net.IP(raw)
			if ip.IsUnspecified() {
				ip = net.IPv4(127, 0, 0, 1)
				if table == "tcp6" {
					ip = net.IPv6loopback
				}
			}
			addrs = append(addrs, net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		}
		f.Close()
	}
	return addrs
}

// profilerAt returns the addresses among addrs at which GET /debug/pprof/
// answers 200.
func profilerAt(t *testing.T, addrs []string) []string {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var found []string
	for _, a := range addrs {
		resp, err := client.Get("http://" + a + "/debug/pprof/")
		if err != nil {
			continue // not HTTP, say etcd's peer port
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			found = append(found, a)
		}
	}
	return found
}

// With --debug-listen, a server serves the profiler on that loopback
// address, on a listener of its own, and stops it gracefully with the
// rest; without it, no socket of the process serves the profiler.
func TestDebugListener(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		debug bool
	}{{"off by default", false}, {"with --debug-listen", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addrFile := filepath.Join(t.TempDir(), "addr")
			args := []string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(), "--task-executors", "1"}
			if tc.debug {
				args = append(args, "--debug-listen", "127.0.0.1:0")
			}
			p := startJobplane(t, args...)
			rpc := waitForFile(t, p, addrFile)
			// Every listener is open once the endpoint serves: the debug one
			// is opened before the run group starts.
			waitServing(t, "http://"+rpc)
			addrs := listeningAddrs(t, p.cmd.Process.Pid)
			if !slices.Contains(addrs, rpc) {
				t.Fatalf("the process's listeners %v lack its RPC endpoint %s: the test sees nothing", addrs, rpc)
			}
			found := profilerAt(t, addrs)
			switch {
			case !tc.debug && len(found) > 0:
				t.Errorf("the profiler is served at %v without --debug-listen", found)
			case tc.debug && len(found) != 1:
				t.Errorf("the profiler is served at %v, want one address (listeners %v)", found, addrs)
			case tc.debug && found[0] == rpc:
				t.Errorf("the profiler is served on the RPC endpoint %s", rpc)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 20*time.Second); code != exitOK {
				t.Errorf("exit code after SIGTERM = %d, want %d", code, exitOK)
			}
		})
	}
}
