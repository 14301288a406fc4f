package hastore

import (
	"context"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
)

// A leadership whose context still looks alive is not valid once its
// session's lease may have expired: after a pause of the process, the
// instant passed before any timer could end the context.
func TestLeadershipValidFollowsTheLease(t *testing.T) {
	until := time.Now().Add(time.Hour)
	l, end := NewLeadership(context.Background(), Fence{Election: election.JobManager, Token: election.Token{SessionID: "s", Epoch: 1}}, nil,
		func() time.Time { return until })
	if !l.Valid() {
		t.Fatal("Valid = false before the lease's end")
	}
	until = time.Now().Add(-time.Millisecond)
	if l.Valid() {
		t.Error("Valid = true past the lease's end, with the context alive")
	}
	if l.Context().Err() != nil {
		t.Fatal("the test needs the context alive")
	}
	until = time.Now().Add(time.Hour)
	end(ErrResigned)
	if l.Valid() {
		t.Error("Valid = true after the leadership ended")
	}
}
