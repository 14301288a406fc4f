package taskexecutor

import (
	"context"

	"github.com/jobplane/jobplane/sdk/election"
)

// noLeader is an election.Observer that never sees a leader: a
// TaskExecutor on it serves calls but registers nowhere.
type noLeader struct{}

func (noLeader) ObserveLeader(ctx context.Context, _ string, _ func(election.Leader) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// NoLeader is noLeader for the package's external tests.
type NoLeader = noLeader
