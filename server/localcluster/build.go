package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// The packages of the programs the multi-process mode runs.
const (
	jobplanePkg = "github.com/jobplane/jobplane/server/cmd/jobplane"
	etcdPkg     = "go.etcd.io/etcd/server/v3"
)

// build is the directory of the programs built by this process, which
// Main removes.
var build struct {
	once sync.Once
	dir  string
	err  error
}

// Main runs m and then removes the programs built for it (Binaries,
// BuildProgram). Call it from TestMain: os.Exit(localcluster.Main(m)).
func Main(m M) int {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// BuildProgram builds the Go main package pkg (an import path) with the
// go command found on PATH into a temporary directory that Main removes,
// and returns the program's path.
func BuildProgram(pkg, name string) (string, error) {
	build.once.Do(func() { build.dir, build.err = os.MkdirTemp("", "localcluster-bin-") })
	if build.err != nil {
		return "", build.err
	}
	path := filepath.Join(build.dir, name)
	if out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return path, nil
}

// Build is BuildProgram for a test, which it fails if the build fails.
func Build(t TB, pkg, name string) string {
	t.Helper()
	path, err := BuildProgram(pkg, name)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return path
}

// built is a program built once per process.
type built struct {
	once sync.Once
	path string
	err  error
}

func (b *built) get(pkg, name string) (string, error) {
	b.once.Do(func() { b.path, b.err = BuildProgram(pkg, name) })
	return b.path, b.err
}

var jobplaneBin, etcdBin built

// BinEnv names the environment variable that gives the jobplane binary to
// run instead of building one: make sets it to the bin/jobplane it built,
// so that the tests of every package share one build.
const BinEnv = "JOBPLANE_BIN"

// JobplaneBinary returns the path of the jobplane binary: $JOBPLANE_BIN,
// or one built once per process.
func JobplaneBinary() (string, error) {
	if bin := os.Getenv(BinEnv); bin != "" {
		return bin, nil
	}
	return jobplaneBin.get(jobplanePkg, "jobplane")
}

// Binaries builds the jobplane binary and the etcd server of this
// module's go.mod, once per process (in parallel), and returns their
// paths.
func Binaries() (jobplane, etcd string, err error) {
	var wg sync.WaitGroup
	var jerr, eerr error
	wg.Go(func() { jobplane, jerr = JobplaneBinary() })
	wg.Go(func() { etcd, eerr = etcdBin.get(etcdPkg, "etcd") })
	wg.Wait()
	if jerr != nil {
		return "", "", jerr
	}
	return jobplane, etcd, eerr
}

var defaultTTL struct {
	once sync.Once
	ttl  time.Duration
	err  error
}

// DefaultSessionTTL returns the session TTL of a jobmanager that sets
// none, as `jobplane jobmanager --help` reports it; it builds the binary
// if needed.
func DefaultSessionTTL() (time.Duration, error) {
	defaultTTL.once.Do(func() {
		jobplane, err := JobplaneBinary()
		if err != nil {
			defaultTTL.err = err
			return
		}
		defaultTTL.ttl, defaultTTL.err = helpSessionTTL(jobplane)
	})
	return defaultTTL.ttl, defaultTTL.err
}

var helpTTL = regexp.MustCompile(`(?m)^\s+-session-ttl duration\n.*\(default ([0-9a-zµ.]+)\)`)

// helpSessionTTL reads the default session TTL from the binary's help.
func helpSessionTTL(jobplane string) (time.Duration, error) {
	out, _ := exec.Command(jobplane, "jobmanager", "--help").CombinedOutput()
	m := helpTTL.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("localcluster: no -session-ttl default in `jobplane jobmanager --help`:\n%s", out)
	}
	return time.ParseDuration(string(m[1]))
}

// sessionTTL returns the TTL that the jobmanager flags set, or else the
// binary's default.
func sessionTTL(flags []string) (time.Duration, error) {
	for i, f := range flags {
		if (f == "--session-ttl" || f == "-session-ttl") && i+1 < len(flags) {
			return time.ParseDuration(flags[i+1])
		}
		for _, prefix := range []string{"--session-ttl=", "-session-ttl="} {
			if v, ok := strings.CutPrefix(f, prefix); ok {
				return time.ParseDuration(v)
			}
		}
	}
	return DefaultSessionTTL()
}
