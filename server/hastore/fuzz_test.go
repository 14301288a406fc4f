package hastore

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/sdk/election"
)

// idPattern is the contract's job and session id: 1 to 64 characters
// from [A-Za-z0-9_-].
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// The store's names and keys parse back to what made them, and no key of
// one election or job is read as another's: job ids and election names
// are valid exactly when the contract says, a job's election names that
// job, a fence is valid exactly when its parts are (and its refusal is an
// INVALID_ARGUMENT ValidationError), and a leader key yields its session
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
	s := &Etcd{prefix: DefaultPrefix}
	f.Fuzz(func(t *testing.T, name, other, session, jobID string, epoch uint64) {
		if got, want := ValidJobID(jobID), idPattern.MatchString(jobID); got != want {
			t.Fatalf("ValidJobID(%q) = %v, want %v", jobID, got, want)
		}
		if (ValidateJobID(jobID) == nil) != ValidJobID(jobID) {
			t.Fatalf("ValidateJobID(%q) disagrees with ValidJobID", jobID)
		}
		if ValidJobID(jobID) {
			e := election.Job(jobID)
			if id, ok := JobIDOfElection(e); !ok || id != jobID || !ValidElection(e) {
				t.Fatalf("the election %q of job %q parses as %q, %v", e, jobID, id, ok)
			}
		}
		id, ok := JobIDOfElection(name)
		if ok && (!ValidJobID(id) || election.Job(id) != name) {
			t.Fatalf("JobIDOfElection(%q) = %q: not the job whose election it is", name, id)
		}
		if want := name == election.JobManager || ok; ValidElection(name) != want {
			t.Fatalf("ValidElection(%q) = %v, want %v", name, !want, want)
		}

		fence := Fence{Election: name, Token: election.Token{SessionID: session, Epoch: epoch}}
		err := ValidateFence(fence)
		if want := ValidElection(name) && idPattern.MatchString(session) && epoch > 0; (err == nil) != want {
			t.Fatalf("ValidateFence(%+v) = %v, want valid: %v", fence, err, want)
		}
		var verr *ValidationError
		if err != nil && (!errors.Is(err, ErrInvalidArgument) || !errors.As(err, &verr)) {
			t.Fatalf("ValidateFence refused with %v, want an INVALID_ARGUMENT ValidationError", err)
		}
		if err != nil && !strings.Contains(err.Error(), "fence") {
			t.Fatalf("ValidateFence's refusal %q names no fence field", err)
		}

		if !ValidElection(name) || !idPattern.MatchString(session) {
			return
		}
		key := s.leaderKey(name, session)
		if got := s.sessionOfKey(name, key); got != session {
			t.Fatalf("the leader key %q of session %q parses as %q", key, session, got)
		}
		if ValidElection(other) && other != name && strings.HasPrefix(key, s.electionPrefix(other)+"/") {
			t.Fatalf("the leader key %q of %q lies under the election %q", key, name, other)
		}
		if ValidJobID(jobID) {
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

// ParsePeers never panics, and what it accepts it gives back as it was
// written (names and URLs, in order), valid again.
func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"", "a=http://127.0.0.1:2380", "a=http://h1:2380,b=http://h2:2380", "a=http://h:2380,a=http://h:2381", "=", "a=", "a=ftp://x:1", " a = http://h:1 , b=http://[::1]:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := ParsePeers(s)
		if err != nil {
			return
		}
		var parts []string
		for _, p := range peers {
			if p.Name == "" || p.URL == "" || strings.ContainsAny(p.Name, ",") {
				t.Fatalf("ParsePeers(%q) accepted the peer %+v", s, p)
			}
			parts = append(parts, p.Name+"="+p.URL)
		}
		again, err := ParsePeers(strings.Join(parts, ","))
		if err != nil || len(again) != len(peers) {
			t.Fatalf("ParsePeers of its own result %q: %v, %v", parts, again, err)
		}
		for i := range peers {
			if again[i] != peers[i] {
				t.Fatalf("peer %d: %+v, then %+v", i, peers[i], again[i])
			}
		}
	})
}
