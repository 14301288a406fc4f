package failover

import (
	"context"
	"fmt"
	"net"
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

	"github.com/jobplane/jobplane/server/localcluster"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// ops runs the multi-machine commands of docs/operations.md and
// docs/security.md on loopback. Each machine the docs name gets an
// address of its own under 127.0.0.0/8: hostN is 127.0.0.N, and the
// private address 10.0.0.X is 127.0.1.X. Each host:port they name gets a
// free port of its own, /var/lib/... becomes a directory of the command's
// host, and the commands a host runs start in that host's directory.
// Client commands run in a directory of their own (the workstation),
// where examples/ is the repository's.
type ops struct {
	t     *testing.T
	root  string // the repository
	tmp   string // the workstation's directory; hosts' directories are tmp/hostN
	path  string // PATH with the jobplane binary first
	ports map[string]string
	mu    sync.Mutex
	procs map[string]*exec.Cmd // background commands by host
}

var (
	hostPort   = regexp.MustCompile(`\b(host\d|10\.0\.0\.\d+):(\d+)\b`)
	hostName   = regexp.MustCompile(`\bhost(\d)\b`)
	privateIP  = regexp.MustCompile(`\b10\.0\.0\.(\d+)\b`)
	hostHeader = regexp.MustCompile(`^#\s*(host\d)\b`)
	listenOn   = regexp.MustCompile(`--(?:listen|etcd-name) (host\d)\b`)
)

func newOps(t *testing.T) *ops {
	jobplane, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	o := &ops{t: t, root: root, tmp: t.TempDir(), path: filepath.Dir(jobplane) + ":" + os.Getenv("PATH"),
		ports: map[string]string{}, procs: map[string]*exec.Cmd{}}
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(o.tmp, "examples")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.stopAll)
	return o
}

// A hostCommand is one command of a block and the host it runs on ("" for
// the workstation).
type hostCommand struct{ host, cmd string }

// block returns the commands of the fenced block marked <!-- marker -->
// in README.md or docs/*.md: continuation lines joined, comments dropped,
// each with its host: the last "# hostN" line above it, or else the host
// of its --listen or --etcd-name.
func (o *ops) block(marker string) []hostCommand {
	o.t.Helper()
	pages, _ := filepath.Glob(filepath.Join(o.root, "docs", "*.md"))
	var found []string
	for _, page := range append([]string{filepath.Join(o.root, "README.md")}, pages...) {
		text, err := os.ReadFile(page)
		if err != nil {
			o.t.Fatal(err)
		}
		rest := string(text)
		for {
			_, after, ok := strings.Cut(rest, "<!-- "+marker+" -->\n")
			if !ok {
				break
			}
			m := regexp.MustCompile("(?s)^```[a-z]*\n(.*?)```").FindStringSubmatch(after)
			if m == nil {
				o.t.Fatalf("no fenced block right after <!-- %s --> in %s", marker, page)
			}
			found = append(found, m[1])
			rest = after
		}
	}
	if len(found) != 1 {
		o.t.Fatalf("%d blocks are marked <!-- %s --> in README.md and docs/, want 1", len(found), marker)
	}
	var cmds []hostCommand
	host := ""
	for _, line := range strings.Split(strings.ReplaceAll(found[0], "\\\n", " "), "\n") {
		if m := hostHeader.FindStringSubmatch(line); m != nil {
			host = m[1]
		}
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		h := host
		if m := listenOn.FindStringSubmatch(line); m != nil && h == "" {
			h = m[1]
		}
		cmds = append(cmds, hostCommand{host: h, cmd: line})
	}
	return cmds
}

// ip is the loopback address that stands for a host or private address.
func ip(addr string) string {
	if m := hostName.FindStringSubmatch(addr); m != nil {
		return "127.0.0." + m[1]
	}
	if m := privateIP.FindStringSubmatch(addr); m != nil {
		return "127.0.1." + m[1]
	}
	return addr
}

// local rewrites a command of host for this machine's loopback.
func (o *ops) local(host, cmd string) string {
	o.t.Helper()
	cmd = hostPort.ReplaceAllStringFunc(cmd, func(hp string) string {
		if p, ok := o.ports[hp]; ok {
			return p
		}
		addr := ip(hostPort.FindStringSubmatch(hp)[1])
		o.ports[hp] = o.freeAddr(addr)
		return o.ports[hp]
	})
	cmd = hostName.ReplaceAllString(cmd, "127.0.0.$1")
	cmd = privateIP.ReplaceAllString(cmd, "127.0.1.$1")
	if strings.Contains(cmd, "/var/lib/") {
		dir := host
		if dir == "" {
			dir = "any"
		}
		cmd = strings.ReplaceAll(cmd, "/var/lib/", filepath.Join(o.tmp, dir)+"/")
	}
	return cmd
}

// freeAddr returns addr:PORT for a port outside the ephemeral range that
// is free on addr.
func (o *ops) freeAddr(addr string) string {
	o.t.Helper()
	for range 100 {
		port, err := freeport.Port()
		if err != nil {
			o.t.Fatal(err)
		}
		hp := net.JoinHostPort(addr, strconv.Itoa(port))
		if l, err := net.Listen("tcp", hp); err == nil {
			l.Close()
			return hp
		}
	}
	o.t.Fatalf("no free port on %s", addr)
	return ""
}

// hostDir returns the host's directory, made if missing.
func (o *ops) hostDir(host string) string {
	o.t.Helper()
	dir := filepath.Join(o.tmp, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		o.t.Fatal(err)
	}
	return dir
}

func (o *ops) command(ctx context.Context, dir, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+o.path, "CI=", "JOBPLANE_SERVER=", "JOBPLANE_TLS_CA=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// script returns the block's commands as one script for the workstation.
func (o *ops) script(marker string) string {
	var script []string
	for _, c := range o.block(marker) {
		script = append(script, o.local(c.host, c.cmd))
	}
	return strings.Join(script, "\n")
}

// run runs the block's commands in one shell on the workstation and
// returns their output.
func (o *ops) run(marker string, timeout time.Duration) string {
	o.t.Helper()
	script := o.script(marker)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := o.command(ctx, o.tmp, script).CombinedOutput()
	if err != nil {
		o.t.Fatalf("%s: %v\n%s\n%s", marker, err, script, out)
	}
	return string(out)
}

// start starts each of the block's commands as a process of its own, in
// its host's directory, kept by that host.
func (o *ops) start(marker string) {
	o.t.Helper()
	for _, c := range o.block(marker) {
		if c.host == "" {
			o.t.Fatalf("%s: no host for %q", marker, c.cmd)
		}
		out := new(localcluster.Buffer)
		cmd := o.command(context.Background(), o.hostDir(c.host), "exec "+o.local(c.host, c.cmd))
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			o.t.Fatal(err)
		}
		o.mu.Lock()
		o.procs[c.host] = cmd
		o.mu.Unlock()
		host := c.host
		o.t.Cleanup(func() {
			if o.t.Failed() {
				o.t.Logf("%s: %s", host, lastLines(out.String(), 30))
			}
		})
	}
}

// kill SIGKILLs the host's process, as a machine that dies.
func (o *ops) kill(host string) {
	o.mu.Lock()
	cmd := o.procs[host]
	delete(o.procs, host)
	o.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

func (o *ops) stopAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for h, cmd := range o.procs {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		delete(o.procs, h)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// eventually runs the block on the workstation until it succeeds and its
// output matches want, for up to timeout.
func (o *ops) eventually(marker string, want *regexp.Regexp, timeout time.Duration) string {
	o.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		script := o.script(marker)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := o.command(ctx, o.tmp, script).CombinedOutput()
		cancel()
		if err == nil && want.Match(out) {
			return string(out)
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("%s never printed %v: %v\n%s", marker, want, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// copyFile copies the workstation's file from to the host's directory,
// as the docs tell the reader to.
func (o *ops) copyFile(from, host string) {
	o.t.Helper()
	b, err := os.ReadFile(filepath.Join(o.tmp, from))
	if err != nil {
		o.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.hostDir(host), filepath.Base(from)), b, 0o600); err != nil {
		o.t.Fatal(err)
	}
}

// docs/operations.md's etcd cluster of jobmanagers, run as written on
// loopback: three jobmanagers form one embedded etcd cluster, a
// TaskExecutor and a client reach the leader through any of them, a dead
// machine's member is removed and a new machine joins, and a backup is
// taken and restored.
func TestDocsOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-machine cluster on loopback")
	}
	o := newOps(t)
	o.start("ops:jobmanagers")
	o.start("ops:taskexecutor")
	out := o.eventually("ops:client", regexp.MustCompile(`FINISHED`), 2*time.Minute)
	// (Member names are the hosts' addresses here, as every hostN is.)
	for _, want := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		if !strings.Contains(out, want) {
			t.Errorf("ops:client output has no %q:\n%s", want, out)
		}
	}

	// host3 dies; its member is removed and host5 joins in its place.
	o.kill("host3")
	o.run("ops:replace", time.Minute)
	o.start("ops:join")
	o.eventually("ops:client", regexp.MustCompile(`(?s)FINISHED.*127\.0\.0\.5`), 2*time.Minute)

	out = o.run("ops:backup", 2*time.Minute)
	if _, err := os.Stat(filepath.Join(o.tmp, "store.db")); err != nil {
		t.Errorf("no store.db after the backup: %v\n%s", err, out)
	}
	for _, dir := range []string{"any/jobplane-restored", "host1/jobplane-restored-cluster"} {
		if _, err := os.Stat(filepath.Join(o.tmp, dir, "member")); err != nil {
			t.Errorf("restore made no member in %s: %v\n%s", dir, err, out)
		}
	}
}

// docs/operations.md's HA store in a process of its own, with two
// jobmanagers and a TaskExecutor on it, run as written on loopback.
func TestDocsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes on loopback")
	}
	o := newOps(t)
	o.start("ops:processes")
	o.eventually("ops:processes-client", regexp.MustCompile(`FINISHED`), 2*time.Minute)
}

// docs/security.md's closed three-machine cluster, run as written on
// loopback: a CA and certificates made with jobplane certs and copied to
// each host, jobmanagers on mutual TLS with the cluster protocol and
// etcd's peers on the private addresses, a TaskExecutor there, and a
// client that holds only the CA.
func TestDocsSecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-machine cluster on loopback")
	}
	o := newOps(t)
	o.run("security:certs", time.Minute)
	for _, host := range []string{"host1", "host2", "host3", "host4"} {
		name := ip(host)
		o.copyFile("ca/ca.pem", host)
		o.copyFile(fmt.Sprintf("certs/%s.pem", name), host)
		o.copyFile(fmt.Sprintf("certs/%s-key.pem", name), host)
	}
	o.start("security:jobmanagers")
	o.start("security:taskexecutor")
	// Until the cluster lists the TaskExecutor, which may register after
	// the jobmanagers answer: a job submitted before waits for its slots,
	// and the first run's listing may show none.
	out := o.eventually("security:client", regexp.MustCompile(`(?s)127\.0\.1\.14.*FINISHED`), 2*time.Minute)
	// The cluster names the public addresses; the TaskExecutor registered
	// on its private one, over mutual TLS.
	for _, want := range []string{"https://127.0.0.", "127.0.1.14"} {
		if !strings.Contains(out, want) {
			t.Errorf("security:client output has no %q:\n%s", want, out)
		}
	}
}
