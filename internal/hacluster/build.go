package hacluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/standalonetest"
)

// TimingFlags are passed to every jobmanager before the caller's own
// flags. Empty: the jobmanagers run on the binary's default timings, which
// is what the failover tests and figures are about.
var TimingFlags []string

// The packages of the two binaries.
const (
	jobplanePkg = "github.com/jobplane/jobplane/server/cmd/jobplane"
	etcdPkg     = "go.etcd.io/etcd/server/v3"
)

var binaries struct {
	once           sync.Once
	jobplane, etcd string
	ttl            time.Duration
	err            error
}

// Binaries builds `jobplane` and the etcd server, once per test binary (in
// parallel), and returns their paths. They live in standalonetest's build
// directory: call standalonetest.Main from TestMain to remove them.
func Binaries() (jobplane, etcd string, err error) {
	binaries.once.Do(func() {
		var wg sync.WaitGroup
		var jerr, eerr error
		wg.Go(func() { binaries.jobplane, jerr = standalonetest.BuildProgram(jobplanePkg, "jobplane") })
		wg.Go(func() { binaries.etcd, eerr = standalonetest.BuildProgram(etcdPkg, "etcd") })
		wg.Wait()
		if binaries.err = firstErr(jerr, eerr); binaries.err != nil {
			return
		}
		binaries.ttl, binaries.err = sessionTTL(binaries.jobplane, TimingFlags)
	})
	return binaries.jobplane, binaries.etcd, binaries.err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// SessionTTL returns the session TTL of the jobmanagers the harness
// starts: TimingFlags' --session-ttl, or else the binary's default (as its
// --help reports it). It builds the binaries if needed; it is zero if that
// failed.
func SessionTTL() time.Duration {
	if _, _, err := Binaries(); err != nil {
		return 0
	}
	return binaries.ttl
}

var defaultTTL = regexp.MustCompile(`(?m)^\s+-session-ttl duration\n.*\(default ([0-9a-zµ.]+)\)`)

// sessionTTL finds the TTL that flags set, or the binary's default.
func sessionTTL(jobplane string, flags []string) (time.Duration, error) {
	for i, f := range flags {
		if (f == "--session-ttl" || f == "-session-ttl") && i+1 < len(flags) {
			return time.ParseDuration(flags[i+1])
		}
	}
	out, _ := exec.Command(jobplane, "jobmanager", "--help").CombinedOutput()
	m := defaultTTL.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no -session-ttl default in `jobplane jobmanager --help`:\n%s", out)
	}
	return time.ParseDuration(string(m[1]))
}

// tempDir makes a directory for one cluster.
func tempDir() (string, error) {
	dir, err := os.MkdirTemp("", "hacluster-")
	if err != nil {
		return "", err
	}
	return filepath.Clean(dir), nil
}
