package runner

import (
	"context"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// runCases check run ids, the id reuse policy, PurgeJob and the record of
// a cancel request (contract 1.2).
var runCases = []Case{
	{Name: "lifecycle/run-ids", Requires: []string{FeatureResourceManager},
		Doc: "two runs of one job id (the first FINISHED and purged) have different non-empty run ids, each in its SubmitJob answer and result; a resubmission answers the run's id; GetJobResult and CancelJob naming the old run are NOT_FOUND (JOB_NOT_FOUND) and the new run is not canceled", Run: runIDs},
	{Name: "lifecycle/purge", Requires: []string{FeatureResourceManager},
		Doc: "PurgeJob of a live job is FAILED_PRECONDITION (JOB_NOT_TERMINAL); of an ended, cleaned-up job it succeeds, after which GetJob and a repeated PurgeJob are NOT_FOUND (JOB_NOT_FOUND), and a resubmission of the id is created and runs again; of an ended job whose cleanup is pending (its plan delete failing) it is FAILED_PRECONDITION (JOB_RESULT_DIRTY) and the job stays known, until the cleanup is done", Run: purgeJob},
	{Name: "lifecycle/id-reuse-policy", Requires: []string{FeatureResourceManager},
		Doc: "after a job FINISHED and was cleaned up, a resubmission without id_reuse answers its result (created=false, nothing deployed); one with JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE is created with a new run id, runs again and ends with a result of the new run", Run: idReusePolicy},
	{Name: "lifecycle/resubmit-races-purge", Requires: []string{FeatureResourceManager},
		Doc: "resubmissions of an ended job's plan, sent one after another while its PurgeJob is in flight: each succeeds, answering either the old run (created=false, FINISHED, its run id) or one new run (at most one created=true, all with the new run's id), and a new run ends with its own result", Run: resubmitRacesPurge},
	{Name: "lifecycle/cancel-reason", Requires: []string{FeatureResourceManager},
		Doc: "CancelJob with request_id r1 and a reason, then with request_id r2 and another: both succeed, and the job's summary and its CANCELED result show the first request's id, reason and time", Run: cancelReason},
}

// submitWith submits req, retrying while no Dispatcher leads.
func (t *T) submitWith(req *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error) {
	t.mu.Lock()
	t.submitted = append(t.submitted, req.GetJobId())
	t.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
		resp, err := t.dispatcher().SubmitJob(ctx, req)
		cancel()
		if !isNotLeader(err) || time.Now().After(deadline) {
			return resp, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// purge calls PurgeJob, retrying while the job's cleanup is not done.
func (t *T) purge(id, run string) error {
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := t.dispatcher().PurgeJob(t.ctx, &jobplanev1.PurgeJobRequest{JobId: id, RunId: run})
		if reason(err) != "JOB_RESULT_DIRTY" || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func notFound(err error) bool {
	return connect.CodeOf(err) == connect.CodeNotFound && reason(err) == "JOB_NOT_FOUND"
}

func runIDs(t *T) {
	id := t.job("j")
	first := t.mustSubmit(id, noopGraph(1))
	if first.GetRunId() == "" {
		t.Fatalf("SubmitJob answered no run_id; expected the new run's id")
	}
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the first run")
	if r := t.result(id); r.GetRunId() != first.GetRunId() {
		t.Errorf("the first run's result has run_id %q; expected %q, as SubmitJob answered", r.GetRunId(), first.GetRunId())
	}
	if again := t.mustSubmit(id, noopGraph(1)); again.GetCreated() || again.GetRunId() != first.GetRunId() {
		t.Errorf("a resubmission of the ended job answered created=%v run_id %q; expected created=false and its run id %q", again.GetCreated(), again.GetRunId(), first.GetRunId())
	}
	if err := t.purge(id, first.GetRunId()); err != nil {
		t.Fatalf("PurgeJob of the first run: %v", err)
	}
	second := t.mustSubmit(id, gatedGraph(1, "never"))
	if !second.GetCreated() || second.GetRunId() == "" || second.GetRunId() == first.GetRunId() {
		t.Fatalf("the second run's SubmitJob answered created=%v run_id %q; expected created=true with a run id other than the first's %q", second.GetCreated(), second.GetRunId(), first.GetRunId())
	}
	t.waitRunning(id, 1)
	if _, err := t.dispatcher().GetJobResult(t.ctx, &jobplanev1.GetJobResultRequest{JobId: id, RunId: first.GetRunId()}); !notFound(err) {
		t.Errorf("GetJobResult naming the first run answered %v; expected NOT_FOUND (JOB_NOT_FOUND): the id's job is another run", err)
	}
	if _, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id, RunId: first.GetRunId()}); !notFound(err) {
		t.Errorf("CancelJob naming the first run answered %v; expected NOT_FOUND (JOB_NOT_FOUND), nothing canceled", err)
	}
	if st := t.status(id); st != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("after a CancelJob naming the first run, the second run is %v; expected it RUNNING, not canceled", st)
	}
	if _, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id, RunId: second.GetRunId()}); err != nil {
		t.Fatalf("CancelJob naming the second run: %v", err)
	}
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED || r.GetRunId() != second.GetRunId() {
		t.Errorf("the second run ended %v with run_id %q; expected CANCELED with %q", r.GetStatus(), r.GetRunId(), second.GetRunId())
	}
}

func purgeJob(t *T) {
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(1, "never"))
	t.waitRunning(id, 1)
	_, err := t.dispatcher().PurgeJob(t.ctx, &jobplanev1.PurgeJobRequest{JobId: id})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || reason(err) != "JOB_NOT_TERMINAL" {
		t.Errorf("PurgeJob of a running job answered %v; expected FAILED_PRECONDITION (JOB_NOT_TERMINAL)", err)
	}
	t.cancel(id)
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_CANCELED, "the first run")
	deployed := len(t.events(id, "SubmitTask"))
	if err := t.purge(id, ""); err != nil {
		t.Fatalf("PurgeJob of the ended job: %v; expected it purged", err)
	}
	if _, err := t.dispatcher().GetJob(t.ctx, &jobplanev1.GetJobRequest{JobId: id}); !notFound(err) {
		t.Errorf("GetJob after PurgeJob answered %v; expected NOT_FOUND (JOB_NOT_FOUND)", err)
	}
	if _, err := t.dispatcher().PurgeJob(t.ctx, &jobplanev1.PurgeJobRequest{JobId: id}); !notFound(err) {
		t.Errorf("PurgeJob repeated answered %v; expected NOT_FOUND (JOB_NOT_FOUND)", err)
	}
	resp := t.mustSubmit(id, noopGraph(1))
	if !resp.GetCreated() {
		t.Errorf("the resubmission after PurgeJob answered created=false %v; expected a new run", resp.GetStatus())
	}
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the second run")
	if n := len(t.events(id, "SubmitTask")); n <= deployed {
		t.Errorf("the resubmission after PurgeJob deployed nothing; expected the job to run again")
	}

	// A job whose cleanup is pending (its plan delete fails): PurgeJob is
	// refused and changes nothing; once the cleanup is done it purges.
	pending := t.job("pending")
	t.env.store.arm(fault{op: "delete-plan", key: pending, times: -1, before: hastore.ErrUnavailable})
	t.mustSubmit(pending, noopGraph(1))
	if r := t.result(pending); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job %s ended %v; expected FINISHED", pending, r.GetStatus())
	}
	_, err = t.dispatcher().PurgeJob(t.ctx, &jobplanev1.PurgeJobRequest{JobId: pending})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || reason(err) != "JOB_RESULT_DIRTY" {
		t.Errorf("PurgeJob of a job whose plan is not deleted yet answered %v; expected FAILED_PRECONDITION (JOB_RESULT_DIRTY)", err)
	}
	if st := t.status(pending); st != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("GetJob after the refused PurgeJob shows %v; expected the job still known, FINISHED (a refused purge changes nothing)", st)
	}
	t.env.store.disarm("delete-plan", pending)
	t.endsCleanly(pending, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the job whose cleanup was pending")
	if err := t.purge(pending, ""); err != nil {
		t.Errorf("PurgeJob once the cleanup was done: %v; expected it purged", err)
	}
}

func idReusePolicy(t *T) {
	id := t.job("j")
	first := t.mustSubmit(id, noopGraph(1))
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the first run")
	t.barrier()
	deployed := len(t.events(id, "SubmitTask"))
	again := t.mustSubmit(id, noopGraph(1))
	if again.GetCreated() || again.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("a resubmission without id_reuse answered created=%v %v; expected created=false FINISHED, the kept result", again.GetCreated(), again.GetStatus())
	}
	t.barrier()
	if n := len(t.events(id, "SubmitTask")); n != deployed {
		t.Errorf("a resubmission without id_reuse deployed %d tasks; expected none", n-deployed)
	}
	second := t.submitDuplicate(id, noopGraph(1))
	if !second.GetCreated() || second.GetRunId() == "" || second.GetRunId() == first.GetRunId() {
		t.Fatalf("the ALLOW_DUPLICATE submission answered created=%v run_id %q; expected created=true with a new run id (the first's: %q)", second.GetCreated(), second.GetRunId(), first.GetRunId())
	}
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the second run")
	if r := t.result(id); r.GetRunId() != second.GetRunId() {
		t.Errorf("the result after the ALLOW_DUPLICATE submission has run_id %q; expected the new run's %q", r.GetRunId(), second.GetRunId())
	}
	if n := len(t.events(id, "SubmitTask")); n <= deployed {
		t.Errorf("the ALLOW_DUPLICATE submission deployed nothing; expected the job to run again")
	}
}

func cancelReason(t *T) {
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(1, "never"))
	t.waitRunning(id, 1)
	for _, req := range []*jobplanev1.CancelJobRequest{
		{JobId: id, RequestId: "r1", Reason: "superseded by the nightly run"},
		{JobId: id, RequestId: "r2", Reason: "another reason"},
		{JobId: id, RequestId: "r1", Reason: "superseded by the nightly run"},
	} {
		if _, err := t.dispatcher().CancelJob(t.ctx, req); err != nil {
			t.Fatalf("CancelJob (request %s): %v", req.GetRequestId(), err)
		}
	}
	check := func(what string, c *jobplanev1.Cancellation) {
		if c.GetRequestId() != "r1" || c.GetReason() != "superseded by the nightly run" || c.GetRequestedTime() == nil {
			t.Errorf("%s: cancellation %v; expected the first request's: request_id r1, its reason and a requested_time", what, c)
		}
	}
	if resp, err := t.dispatcher().GetJob(t.ctx, &jobplanev1.GetJobRequest{JobId: id}); err != nil {
		t.Errorf("GetJob: %v", err)
	} else {
		check("GetJob's summary", resp.GetJob().GetSummary().GetCancellation())
	}
	r := t.result(id)
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("the job ended %v; expected CANCELED", r.GetStatus())
	}
	check("the result", r.GetCancellation())
}

func resubmitRacesPurge(t *T) {
	id := t.job("j")
	first := t.mustSubmit(id, noopGraph(1))
	t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the first run")
	purged := make(chan error, 1)
	go func() { purged <- t.purge(id, first.GetRunId()) }()
	var answers []*jobplanev1.SubmitJobResponse
	var purgeErr error
	// Resubmissions while the purge is in flight, and one after its
	// answer.
	for inFlight := true; ; {
		select {
		case purgeErr = <-purged:
			inFlight = false
		default:
		}
		resp, err := t.submitWith(&jobplanev1.SubmitJobRequest{JobId: id, JobGraph: noopGraph(1)})
		if err != nil {
			t.Fatalf("a resubmission racing the purge answered %v; expected it answered (the old run's result, or a new run)", err)
		}
		answers = append(answers, resp)
		if !inFlight {
			break
		}
		if len(answers) > 200 {
			t.Fatalf("PurgeJob did not answer while 200 resubmissions were answered")
		}
	}
	if purgeErr != nil {
		t.Fatalf("PurgeJob: %v", purgeErr)
	}
	created, newRun := 0, ""
	for _, a := range answers {
		switch {
		case a.GetRunId() == first.GetRunId():
			if a.GetCreated() || a.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("a resubmission answered the old run %q with created=%v %v; expected created=false FINISHED", a.GetRunId(), a.GetCreated(), a.GetStatus())
			}
		case newRun == "" || a.GetRunId() == newRun:
			newRun = a.GetRunId()
			if a.GetCreated() {
				created++
			}
		default:
			t.Errorf("resubmissions answered the new runs %q and %q; expected one new run", newRun, a.GetRunId())
		}
	}
	if created > 1 {
		t.Errorf("%d resubmissions answered created=true; expected at most one", created)
	}
	if newRun == "" {
		return
	}
	if created != 1 {
		t.Errorf("resubmissions answered the new run %q, none with created=true; expected the one that created it to say so", newRun)
	}
	if r := t.result(id); r.GetRunId() != newRun || r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("the new run ended %v with run_id %q; expected FINISHED with %q", r.GetStatus(), r.GetRunId(), newRun)
	}
}

// submitDuplicate submits g as a new run of the job id, with
// JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE, asking again for up to 20s while
// the last run's result is not yet clean (JOB_RESULT_DIRTY).
func (t *T) submitDuplicate(id string, g *jobplanev1.JobGraph) *jobplanev1.SubmitJobResponse {
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := t.submitWith(&jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g, IdReuse: jobplanev1.JobIdReusePolicy_JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE})
		if reason(err) == "JOB_RESULT_DIRTY" && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("the ALLOW_DUPLICATE submission of %s: %v; expected a new run", id, err)
		}
		return resp
	}
}
