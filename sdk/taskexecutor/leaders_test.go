package taskexecutor

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/jobplane/jobplane/sdk/election"
)

// leaders is an in-memory HA store as a TaskExecutor sees it: the
// `jobmanager` election and the jobs' elections (`job/<job_id>`), whose
// grants a test makes. Its leaders publish no address, so a TaskExecutor
// on it observes them and registers nowhere. The SDK module links no
// store backend (sdk/deps_test.go), so this stands in for the etcd store
// that the conformance suite and the server's tests run the TaskExecutor
// on.
type leaders struct {
	mu      sync.Mutex
	current election.Token
	// jobs are the grants of the jobs' elections, by election name.
	jobs   map[string]election.Token
	broken bool
	// reads counts the observations of jobs' elections opened, and
	// once the reads of one answer (Reading).
	reads, once int
	// changed is closed, and replaced, at every grant or break.
	changed chan struct{}
}

// newLeaders returns a store whose `jobmanager` is granted to first, or
// has no leader if first is zero; no job's election has a leader.
func newLeaders(first election.Token) *leaders {
	return &leaders{current: first, jobs: make(map[string]election.Token), changed: make(chan struct{})}
}

// Grant makes t the grant of `jobmanager`, as a Campaign that won would.
func (l *leaders) Grant(t election.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = t
	close(l.changed)
	l.changed = make(chan struct{})
}

// GrantJob makes t the grant of `job/<jobID>`, as the JobMaster's
// Campaign that won would.
func (l *leaders) GrantJob(jobID string, t election.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[election.Job(jobID)] = t
	close(l.changed)
	l.changed = make(chan struct{})
}

// JobReads returns how many observations of jobs' elections were opened.
func (l *leaders) JobReads() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

// Break fails every observation, running or new, until Heal, as a store
// without a quorum fails its watches.
func (l *leaders) Break() { l.setBroken(true) }

// Heal ends Break.
func (l *leaders) Heal() { l.setBroken(false) }

func (l *leaders) setBroken(b bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broken = b
	close(l.changed)
	l.changed = make(chan struct{})
}

var errBroken = errors.New("leaders: the store cannot be observed")

// ObserveLeader implements election.Observer for `jobmanager` and the
// jobs' elections.
func (l *leaders) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	_, isJob := strings.CutPrefix(name, election.JobPrefix)
	if name != election.JobManager && !isJob {
		<-ctx.Done()
		return ctx.Err()
	}
	if isJob {
		l.mu.Lock()
		l.reads++
		l.mu.Unlock()
	}
	var last election.Token
	first := true
	for {
		l.mu.Lock()
		current, broken, changed := l.current, l.broken, l.changed
		if isJob {
			current = l.jobs[name]
		}
		l.mu.Unlock()
		if broken {
			return errBroken
		}
		if first || current != last {
			if err := fn(election.Leader{Election: name, Token: current}); err != nil {
				return err
			}
			first, last = false, current
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Reading returns the store as one that also reads an election once
// (election.Reader), as every HA store does.
func (l *leaders) Reading() election.Observer { return readingLeaders{l} }

// OnceReads returns how many elections were read once (Reading).
func (l *leaders) OnceReads() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.once
}

// readingLeaders is leaders with election.Reader.
type readingLeaders struct{ *leaders }

// Leader implements election.Reader.
func (r readingLeaders) Leader(ctx context.Context, name string) (election.Leader, error) {
	l := r.leaders
	l.mu.Lock()
	defer l.mu.Unlock()
	l.once++
	if l.broken {
		return election.Leader{}, errBroken
	}
	if name == election.JobManager {
		return election.Leader{Election: name, Token: l.current}, nil
	}
	return election.Leader{Election: name, Token: l.jobs[name]}, nil
}

// Leaders is leaders for the package's external tests.
type Leaders = leaders

// NewLeaders is newLeaders for the package's external tests.
var NewLeaders = newLeaders
