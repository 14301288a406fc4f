package etcdstore

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// idPattern is the contract's job and session id: 1 to 64 characters
// from [A-Za-z0-9_-].
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// The store's names and keys parse back to what made them, and no key of
// one election or job is read as another's: job ids and election names
// are valid exactly when the contract says, a job's election names that
// job, a fence is valid exactly when its parts are (and its refusal is an
// INVALID_ARGUMENT hastore.ValidationError), and a leader key yields its session
// id and lies under no other election's prefix.
func FuzzKeys(f *testing.F) {
	for _, seed := range []struct {
		election, other, session, job string
		epoch                         uint64
	}{
		{"jobmanager", "job/a", "s1", "a", 1},
		{"job/a", "job/ab", "sess-1", "ab", 7},
		{"job/", "job", "", "", 0},
		{"job/a/b", "jobmanager/", "s/1", "a/b", 1},
		{"job/" + strings.Repeat("x", 65), "JOB/x", "ß", "é", 1 << 63},
	} {
		f.Add(seed.election, seed.other, seed.session, seed.job, seed.epoch)
	}
	s := &Store{prefix: DefaultPrefix}
	f.Fuzz(func(t *testing.T, name, other, session, jobID string, epoch uint64) {
		if got, want := hastore.ValidJobID(jobID), idPattern.MatchString(jobID); got != want {
			t.Fatalf("hastore.ValidJobID(%q) = %v, want %v", jobID, got, want)
		}
		if (hastore.ValidateJobID(jobID) == nil) != hastore.ValidJobID(jobID) {
			t.Fatalf("hastore.ValidateJobID(%q) disagrees with hastore.ValidJobID", jobID)
		}
		if hastore.ValidJobID(jobID) {
			e := election.Job(jobID)
			if id, ok := hastore.JobIDOfElection(e); !ok || id != jobID || !hastore.ValidElection(e) {
				t.Fatalf("the election %q of job %q parses as %q, %v", e, jobID, id, ok)
			}
		}
		id, ok := hastore.JobIDOfElection(name)
		if ok && (!hastore.ValidJobID(id) || election.Job(id) != name) {
			t.Fatalf("hastore.JobIDOfElection(%q) = %q: not the job whose election it is", name, id)
		}
		if want := name == election.JobManager || ok; hastore.ValidElection(name) != want {
			t.Fatalf("hastore.ValidElection(%q) = %v, want %v", name, !want, want)
		}

		fence := hastore.Fence{Election: name, Token: election.Token{SessionID: session, Epoch: epoch}}
		err := hastore.ValidateFence(fence)
		if want := hastore.ValidElection(name) && idPattern.MatchString(session) && epoch > 0; (err == nil) != want {
			t.Fatalf("hastore.ValidateFence(%+v) = %v, want valid: %v", fence, err, want)
		}
		var verr *hastore.ValidationError
		if err != nil && (!errors.Is(err, hastore.ErrInvalidArgument) || !errors.As(err, &verr)) {
			t.Fatalf("hastore.ValidateFence refused with %v, want an INVALID_ARGUMENT hastore.ValidationError", err)
		}
		if err != nil && !strings.Contains(err.Error(), "fence") {
			t.Fatalf("hastore.ValidateFence's refusal %q names no fence field", err)
		}

		if !hastore.ValidElection(name) || !idPattern.MatchString(session) {
			return
		}
		key := s.leaderKey(name, session)
		if got := s.sessionOfKey(name, key); got != session {
			t.Fatalf("the leader key %q of session %q parses as %q", key, session, got)
		}
		if hastore.ValidElection(other) && other != name && strings.HasPrefix(key, s.electionPrefix(other)+"/") {
			t.Fatalf("the leader key %q of %q lies under the election %q", key, name, other)
		}
		if hastore.ValidJobID(jobID) {
			for _, k := range []string{s.planKey(jobID), s.resultKey(jobID), s.cancelKey(jobID)} {
				if strings.HasPrefix(k, s.electionPrefix(name)) {
					t.Fatalf("the job key %q lies under the election %q", k, name)
				}
			}
			if got := strings.TrimPrefix(s.planKey(jobID), s.planPrefix()); got != jobID {
				t.Fatalf("the plan key of %q lists as %q", jobID, got)
			}
		}
	})
}
