package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// probeTimeout bounds one call to a jobmanager that may be stopped.
const probeTimeout = time.Second

// Probe asks the jobmanager for the cluster overview (within one second):
// leader reports that it answered as the leader; a standby answers
// UNAVAILABLE with reason NOT_LEADER, and then leader is false, leaderAddr
// is the leader it names (if any) and err is nil. Any other failure is
// err.
func (jm *JobManagerProcess) Probe(ctx context.Context) (leader bool, leaderAddr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = jm.dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err == nil {
		return true, "", nil
	}
	if ok, addr := NotLeader(err); ok {
		return false, addr, nil
	}
	return false, "", fmt.Errorf("%s: %w", jm.Name, err)
}

// NotLeader reports whether err is UNAVAILABLE with reason NOT_LEADER, and
// the leader address it names, if any.
func NotLeader(err error) (ok bool, leaderAddr string) {
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnavailable {
		return false, ""
	}
	for _, d := range cerr.Details() {
		msg, derr := d.Value()
		if derr != nil {
			continue
		}
		if ei, isInfo := msg.(*errdetails.ErrorInfo); isInfo && ei.GetReason() == "NOT_LEADER" {
			return true, ei.GetMetadata()["leader_address"]
		}
	}
	return false, ""
}

// Leader probes every running jobmanager (not exited, not stopped) at once
// and returns the one that answers as the leader. It fails with ErrNoLeader
// or ErrTwoLeaders.
func (c *ProcessCluster) Leader(ctx context.Context) (*JobManagerProcess, error) {
	return c.leaderAmong(ctx, nil)
}

// leaderAmong is Leader among the running jobmanagers except those in not.
func (c *ProcessCluster) leaderAmong(ctx context.Context, not []*JobManagerProcess) (*JobManagerProcess, error) {
	var (
		mu      sync.Mutex
		leaders []*JobManagerProcess
		errs    []error
		wg      sync.WaitGroup
	)
	for _, jm := range c.jms {
		if !jm.Running() || slices.Contains(not, jm) {
			continue
		}
		wg.Go(func() {
			leads, _, err := jm.Probe(ctx)
			mu.Lock()
			defer mu.Unlock()
			if leads {
				leaders = append(leaders, jm)
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	switch len(leaders) {
	case 0:
		return nil, fmt.Errorf("%w (%v)", ErrNoLeader, errors.Join(errs...))
	case 1:
		return leaders[0], nil
	}
	var names []string
	for _, jm := range leaders {
		names = append(names, jm.Name)
	}
	return nil, fmt.Errorf("%w: %s", ErrTwoLeaders, strings.Join(names, ", "))
}

// WaitLeader waits until exactly one of the running jobmanagers other than
// those in not (which it does not ask) leads, and returns it. It polls
// every 5 ms (a probe of a stopped process waits up to a second) until ctx
// ends, through answers of no leader or of two.
func (c *ProcessCluster) WaitLeader(ctx context.Context, not ...*JobManagerProcess) (*JobManagerProcess, error) {
	var leader *JobManagerProcess
	err := waitFor(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		jm, err := c.leaderAmong(ctx, not)
		leader = jm
		return err
	})
	return leader, err
}
