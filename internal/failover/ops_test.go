package failover

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
)

// ops runs the README's Operations commands on loopback: hostN stands for
// 127.0.0.N, each host:port the README names gets a free port of its own,
// and /var/lib/... becomes a directory of the command's host.
type ops struct {
	t     *testing.T
	root  string // the repository: commands run there, as the README says
	tmp   string
	path  string // PATH with the jobplane binary first
	ports map[string]string
	mu    sync.Mutex
	procs map[string]*exec.Cmd // background commands by host
}

var (
	hostPort = regexp.MustCompile(`host(\d):(\d+)`)
	hostName = regexp.MustCompile(`\bhost(\d)\b`)
	listenOn = regexp.MustCompile(`--(?:listen|etcd-name) host(\d)`)
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
	t.Cleanup(o.stopAll)
	return o
}

// block returns the commands of the README's fenced block after the
// marker <!-- ops:name -->, continuation lines joined, comments dropped.
func (o *ops) block(name string) []string {
	o.t.Helper()
	readme, err := os.ReadFile(filepath.Join(o.root, "README.md"))
	if err != nil {
		o.t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- ops:"+name+" -->\n")
	if !ok {
		o.t.Fatalf("README has no ops:%s marker", name)
	}
	m := regexp.MustCompile("(?s)^```[a-z]*\n(.*?)```").FindStringSubmatch(after)
	if m == nil {
		o.t.Fatalf("no fenced block after ops:%s", name)
	}
	var cmds []string
	for _, line := range strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// local rewrites a README command for this machine's loopback.
func (o *ops) local(cmd string) string {
	o.t.Helper()
	host := ""
	if m := listenOn.FindStringSubmatch(cmd); m != nil {
		host = "host" + m[1]
	}
	cmd = hostPort.ReplaceAllStringFunc(cmd, func(hp string) string {
		if p, ok := o.ports[hp]; ok {
			return p
		}
		m := hostPort.FindStringSubmatch(hp)
		l, err := net.Listen("tcp", "127.0.0."+m[1]+":0")
		if err != nil {
			o.t.Fatalf("a port on 127.0.0.%s: %v", m[1], err)
		}
		defer l.Close()
		o.ports[hp] = l.Addr().String()
		return o.ports[hp]
	})
	cmd = hostName.ReplaceAllString(cmd, "127.0.0.$1")
	if strings.Contains(cmd, "/var/lib/") {
		if host == "" {
			host = "any"
		}
		cmd = strings.ReplaceAll(cmd, "/var/lib/", filepath.Join(o.tmp, host)+"/")
	}
	return cmd
}

func (o *ops) command(ctx context.Context, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(), "PATH="+o.path, "CI=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// run runs the block's commands in one shell and returns their output.
func (o *ops) run(name string, timeout time.Duration) string {
	o.t.Helper()
	var script []string
	for _, c := range o.block(name) {
		script = append(script, o.local(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := o.command(ctx, strings.Join(script, "\n"))
	cmd.Dir = o.tmp // files the commands write (a backup) go here
	if strings.Contains(strings.Join(script, "\n"), "examples/") {
		cmd.Dir = o.root
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		o.t.Fatalf("README ops:%s: %v\n%s\n%s", name, err, strings.Join(script, "\n"), out)
	}
	return string(out)
}

// start starts each of the block's commands as a process of its own, kept
// by the host it runs on.
func (o *ops) start(name string) {
	o.t.Helper()
	for _, c := range o.block(name) {
		m := listenOn.FindStringSubmatch(c)
		if m == nil {
			o.t.Fatalf("README ops:%s: no host in %q", name, c)
		}
		var out bytes.Buffer
		cmd := o.command(context.Background(), "exec "+o.local(c))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			o.t.Fatal(err)
		}
		o.mu.Lock()
		o.procs["host"+m[1]] = cmd
		o.mu.Unlock()
		o.t.Cleanup(func() {
			if o.t.Failed() {
				o.t.Logf("host%s: %s", m[1], lastLines(out.String(), 30))
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

// eventually runs the block until its output matches want, for up to
// timeout.
func (o *ops) eventually(name string, want *regexp.Regexp, timeout time.Duration) string {
	o.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var script []string
		for _, c := range o.block(name) {
			script = append(script, o.local(c))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := o.command(ctx, strings.Join(script, "\n"))
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil && want.Match(out) {
			return string(out)
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("README ops:%s never printed %v: %v\n%s", name, want, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The README's Operations section, run as written on loopback: three
// jobmanagers form one embedded etcd cluster, a TaskExecutor and a client
// reach the leader through any of them, a dead machine's member is
// removed and a new machine joins, and a backup is taken and restored.
func TestReadmeOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-machine cluster on loopback")
	}
	o := newOps(t)
	o.start("jobmanagers")
	o.start("taskexecutor")
	out := o.run("client", 2*time.Minute)
	// (Member names are the hosts' addresses here, as every hostN is.)
	for _, want := range []string{"FINISHED", "127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		if !strings.Contains(out, want) {
			t.Errorf("README ops:client output has no %q:\n%s", want, out)
		}
	}

	// host3 dies; its member is removed and host5 joins in its place.
	o.kill("host3")
	o.run("replace", time.Minute)
	o.start("join")
	o.eventually("client", regexp.MustCompile(`(?s)FINISHED.*127\.0\.0\.5`), 2*time.Minute)

	out = o.run("backup", 2*time.Minute)
	if _, err := os.Stat(filepath.Join(o.tmp, "store.db")); err != nil {
		t.Errorf("no store.db after the backup: %v\n%s", err, out)
	}
	for _, dir := range []string{"any/jobplane-restored", "host1/jobplane-restored-cluster"} {
		if _, err := os.Stat(filepath.Join(o.tmp, dir, "member")); err != nil {
			t.Errorf("restore made no member in %s: %v\n%s", dir, err, out)
		}
	}
}
