package taskexecutor

import (
	"context"
	"sync"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// A JobMaster token reaches the TaskExecutor in two ways. RequestSlot(s)
// carries it under the ResourceManager's token, which rmFence admitted
// only as the grant of `jobmanager`, and the ResourceManager registers a
// JobMaster's token only once the HA store shows it as the job's grant:
// such a token is taken as it comes. A JobMaster's own calls (SubmitTask,
// CancelTask, FreeSlot, AdoptAttempts, TriggerCheckpoint, Heartbeat) carry
// it unchecked by anyone: a token there that is not the job's current one
// here is taken only once the store shows it as the grant of
// `job/<job_id>` (checkJobLocked), so that a caller cannot make up a newer
// token that cancels the job's attempts and locks its JobMaster out.
//
// The token's session alone proves nothing: the session of the current
// grant of `jobmanager` is public (GetLeader, ObserveLeader, and every
// StaleTokenDetails naming it), so a caller can forge a token in it with any
// epoch. The store is read for every new token.

// checkJobLocked admits a call from a JobMaster of jobID under token t,
// before the call changes anything. The job's current token, or an older
// one (which adoptLocked refuses), passes at once. Another token of the
// current epoch was never granted: it is refused STALE_FENCING_TOKEN. A
// newer token, or the first this TaskExecutor sees for the job, passes
// only if the HA store shows it as the current grant of `job/<job_id>`
// (readJobGrant); it is refused STALE_FENCING_TOKEN naming the grant
// otherwise, and STORE_UNAVAILABLE if the store did not answer. te.mu must
// be held; it is released while the store is read, and held again when
// checkJobLocked returns.
func (te *TaskExecutor) checkJobLocked(ctx context.Context, jobID string, t election.Token) error {
	var current election.Token
	if j := te.jobs[jobID]; j != nil {
		current = j.token
	}
	switch {
	case t == current || t.Epoch < current.Epoch: // the steady state, or refused by adoptLocked
		return nil
	case t.Epoch == current.Epoch:
		return staleJob(jobID, current)
	}
	te.mu.Unlock()
	defer te.mu.Lock()
	return te.readJobGrant(ctx, jobID, t)
}

// readJobGrant reads the current grant of `job/<jobID>` (a linearizable
// read since contract 1.2), waiting at
// most grantWait for it, and answers nil if it is t. te.mu must not be
// held.
func (te *TaskExecutor) readJobGrant(ctx context.Context, jobID string, t election.Token) error {
	rctx, cancel := context.WithTimeout(ctx, grantWait)
	defer cancel()
	// One read where the store is an election.Reader (a new leader's
	// AdoptAttempts has tokens read by the thousand, and a watch opened
	// and closed for each would cost the store a third more), else the
	// first answer of ObserveLeader.
	l, err := election.ReadLeader(rctx, te.cfg.Store, election.Job(jobID))
	switch {
	case err == nil && l.Token == t:
		return nil
	case err == nil:
		return staleJob(jobID, l.Token)
	case ctx.Err() != nil:
		return apierror.Complete(ctx.Err())
	}
	te.log.Debug("reading a job's grant failed", "job", jobID, "err", err)
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE,
		"the HA store could not be read to check the JobMaster's token; nothing was done, retry",
		map[string]string{"election": election.Job(jobID)})
}

// olderLocked reports whether t is older than the job's current token
// here, which its calls are refused for with no read; te.mu must be held.
func (te *TaskExecutor) olderLocked(jobID string, t election.Token) bool {
	j := te.jobs[jobID]
	return j != nil && t.Epoch < j.token.Epoch
}

// jobToken is a job's JobMaster token in a call for many jobs.
type jobToken struct {
	jobID string
	token election.Token
}

// checkJobsLocked is checkJobLocked for many jobs at once, reading the
// store for all those that need it in parallel; it answers one error (or
// nil) per job. te.mu must be held; it is released while the store is
// read.
func (te *TaskExecutor) checkJobsLocked(ctx context.Context, jobs []jobToken) []error {
	errs := make([]error, len(jobs))
	var read []int
	for i, e := range jobs {
		var current election.Token
		if j := te.jobs[e.jobID]; j != nil {
			current = j.token
		}
		switch {
		case e.token == current || e.token.Epoch < current.Epoch:
		case e.token.Epoch == current.Epoch:
			errs[i] = staleJob(e.jobID, current)
		default:
			read = append(read, i)
		}
	}
	if len(read) == 0 {
		return errs
	}
	te.mu.Unlock()
	defer te.mu.Lock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, grantReads)
	for _, i := range read {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = te.readJobGrant(ctx, jobs[i].jobID, jobs[i].token)
		}()
	}
	wg.Wait()
	return errs
}

// grantReads bounds the store reads of one call for many jobs in flight
// at once: a new leader's AdoptAttempts names every job it took over that
// runs here, and thousands of reads at once would queue at the store
// behind the leader's own recovery.
const grantReads = 32
