package etcdstore

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// PutExecutionPlanAndLead implements hastore.Session in one write: one
// fenced transaction puts the plan if no result exists and, in the same
// branch, creates the session's candidacy key if the job's election has
// no key at all. The
// candidacy then leads from that revision on, with no predecessor to wait
// for; the store's watch of leader keys learns of its deletion from
// before its creation, as for any campaign.
func (s *etcdSession) PutExecutionPlanAndLead(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, address string) (*hastore.Leadership, error) {
	store := s.store
	election := election.Job(plan.GetJobId())
	key := store.leaderKey(election, s.ID())
	pfx := store.electionPrefix(election) + "/"
	candidacy := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(pfx).WithPrefix(), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, address, clientv3.WithLease(s.lease))}, nil)
	put, err := store.planPut(f, plan, candidacy)
	if err != nil {
		return nil, err
	}
	if err := hastore.ValidateCampaign(election, address); err != nil {
		return nil, err
	}
	release, err := s.reserve(election)
	if err != nil {
		return nil, err
	}
	reg := store.gone.register(key)
	led := false
	defer func() {
		if !led {
			store.gone.unregister(reg)
			release()
		}
	}()
	// The election's prefix is claimed as a campaign's is: no other
	// candidacy of the election shares the transaction, nor its revision.
	resp, hdr, err := store.commit.do(ctx, clientv3.OpTxn(store.fenceCmps(f), []clientv3.Op{put}, nil), pfx)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The session is gone, and with it the candidacy; the plan was
			// not written either (etcd refused the whole transaction).
			return nil, hastore.ErrSessionNotFound
		}
		// The outcome is unknown: a candidacy key left behind is found by
		// the job's campaign, which takes it over (see enter).
		return nil, unavailable(ctx, err)
	}
	if !resp.GetSucceeded() {
		telemetry.FencingRejected(ctx, "HAStore")
		return nil, hastore.ErrStaleToken
	}
	created, err := planOutcome(resp.GetResponses()[0], plan)
	switch {
	case err != nil:
		return nil, err
	case created == nil:
		// The same plan was stored already (a repeated put): the candidacy
		// was not entered, and the job's runner campaigns as usual.
		return nil, nil
	case !created[1].GetResponseTxn().GetSucceeded():
		// The election has a candidate: the plan is written, and the job's
		// runner campaigns as usual.
		return nil, nil
	}
	led = true
	return s.lead(election, hdr.GetRevision(), reg, release), nil
}
