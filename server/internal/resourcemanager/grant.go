package resourcemanager

import (
	"context"
	"errors"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
)

// Elections reads elections' current grants: the HA store
// (hastore.Store.Leader) in a server.
type Elections interface {
	// Leader returns the election's current leader; its Token is zero
	// when there is none. It fails when the store cannot be read.
	Leader(ctx context.Context, election string) (election.Leader, error)
}

// checkGrant admits the JobMaster token t for jobID only if it is the
// current grant of the job's election, read from the store: one read per
// registration of a token the ResourceManager has not registered. A
// token that is not the grant is stale, whether an earlier grant's or one
// never granted (a forged epoch above the current grant's): its holder
// does not lead the job. A store that cannot be read admits nothing.
//
// A JobMaster of this process shows its leadership instead
// (hastore.WithLeadership): a leadership of this token that is still
// valid (its session certainly holds at the store) is the grant, as the
// store would say, with no read. Its key can have been deleted only by
// something other than a campaign (a resignation ends the leadership
// first), and then the leadership ends as soon as the store's watch shows
// it; the JobMaster acts on the same belief for everything else it does.
func (rm *ResourceManager) checkGrant(ctx context.Context, jobID string, t election.Token) error {
	name := election.Job(jobID)
	if l := hastore.LeadershipFrom(ctx); l != nil && l.Fence() == (hastore.Fence{Election: name, Token: t}) && l.Valid() {
		return nil
	}
	info, err := rm.cfg.Elections.Leader(ctx, name)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierror.Complete(err)
	case err != nil:
		rm.log.Debug("reading a job's election to register its JobMaster", "job", jobID, "err", err)
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE,
			"the HA store could not be read to check the JobMaster's token; nothing was registered, retry", map[string]string{"job_id": jobID})
	case info.Token != t:
		if !info.Token.IsZero() && t.Epoch > info.Token.Epoch {
			rm.log.Warn("refused a JobMaster token never granted", "job", jobID, "token", t, "current", info.Token)
		}
		return apierror.StaleToken(name, info.Token.SessionID, info.Token.Epoch)
	}
	return nil
}
