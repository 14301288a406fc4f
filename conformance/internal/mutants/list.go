package main

// mutants are the bugs planted, one at a time, in the reference server to
// measure the conformance suite. Each is what a careful implementer of the
// contract in another language might get wrong; see Mutant.
var mutants = []Mutant{
	// ---------------------------------------------------------------
	// idempotency
	// ---------------------------------------------------------------
	{
		Name: "idempotency/planid-ignores-vertex-config",
		Doc:  "Plan identity leaves out each vertex's config map (taken as runtime detail), so a resubmission that changes only a vertex config is answered OK created=false instead of ALREADY_EXISTS, and the digest differs from the contract's canonical one (JobGraph: plan identity, ExecutionPlan.digest).",
		File: "sdk/planid/planid.go",
		Old: `		ids[v.GetId()] = true
		if v.GetName() == v.GetId() {`,
		New: `		ids[v.GetId()] = true
		v.Config = nil // handed to the subtasks verbatim; not the plan's shape
		if v.GetName() == v.GetId() {`,
	},
	{
		Name: "idempotency/planid-unsorted-map-keys",
		Doc:  "The canonical encoding writes map entries in map iteration order rather than by increasing key, so a graph with two or more entries in a config or overrides map gets a random digest and its identical resubmission may be refused ALREADY_EXISTS (JobGraph: canonical encoding, maps in increasing key order).",
		File: "sdk/planid/planid.go",
		Old: `	slices.SortFunc(keys, compareKeys)
	for _, k := range keys {`,
		New: `	for _, k := range keys {`,
	},
	{
		Name: "idempotency/planid-drops-parallelism-overrides",
		Doc:  "Normalization drops every parallelism override (misreading 'before overrides' as 'without them'), so two submissions that differ only in JobConfig.parallelism_overrides count as the same plan and the second gets OK created=false instead of ALREADY_EXISTS (JobGraph: only overrides naming no vertex are removed).",
		File: "sdk/planid/planid.go",
		Old: `	for id := range c.GetParallelismOverrides() {
		if !ids[id] {
			delete(c.ParallelismOverrides, id)
		}
	}`,
		New: `	// Overrides are applied before the plan is persisted: they are not
	// part of what was submitted.
	c.ParallelismOverrides = nil`,
	},
	{
		Name: "idempotency/planid-sorts-edges",
		Doc:  "Normalization sorts the edges, treating them as a set, so a resubmission with the same edges in another order is taken as the same plan although the contract says the order of edges matters (JobGraph: plan identity).",
		File: "sdk/planid/planid.go",
		Old: `	c := n.GetConfig()
	if c == nil {
		return n
	}`,
		New: `	// Edges form a set: their order carries no meaning.
	slices.SortFunc(n.Edges, func(a, b *jobplanev1.JobEdge) int {
		return cmp.Or(cmp.Compare(a.GetSourceVertexId(), b.GetSourceVertexId()), cmp.Compare(a.GetTargetVertexId(), b.GetTargetVertexId()))
	})
	c := n.GetConfig()
	if c == nil {
		return n
	}`,
	},
	{
		Name: "idempotency/planid-subsecond-duration-is-zero",
		Doc:  "Normalization treats a Duration with zero seconds as zero whatever its nanos, so restart delays or heartbeat timeouts below one second are unset and two plans differing only in them count as the same (JobGraph: only a Duration of zero is unset).",
		File: "sdk/planid/planid.go",
		Old:  `	if d.GetSeconds() == 0 && d.GetNanos() == 0 {`,
		New:  `	if d.GetSeconds() == 0 {`,
	},
	{
		Name: "idempotency/planid-keeps-multiplier-two",
		Doc:  "Normalization forgets that an exponential delay's multiplier of 2 means the same as 0, so resubmitting with the default multiplier written out (or left out) is refused ALREADY_EXISTS although it is the same plan (JobGraph: normalization).",
		File: "sdk/planid/planid.go",
		Old: `		if e.GetMultiplier() == 2 {
			e.Multiplier = 0
		}`,
		New: ``,
	},
	{
		Name: "idempotency/digest-after-overrides",
		Doc:  "The Dispatcher takes the plan digest of the graph after parallelism overrides instead of as submitted, so a graph with an override and one with that parallelism written in are taken as the same plan, and ExecutionPlan.digest is not the contract's (SubmitJob: same plan, the graph as submitted, before overrides).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `	digest := planid.Digest(graph)`,
		New:  `	digest := planid.Digest(prepared)`,
	},
	{
		Name: "idempotency/retry-while-initializing-created-true",
		Doc:  "A retry of a submission whose job is still INITIALIZING is answered created=true, as if it had accepted the job, although only the first call did (SubmitJobResponse.created; concurrent identical submissions: exactly one sees created=true).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `			return SubmitOutcome{Created: false, Status: j.status(), RunID: j.runID}, nil`,
		New:  `			return SubmitOutcome{Created: j.status() == jobstatus.Initializing, Status: j.status(), RunID: j.runID}, nil`,
	},
	{
		Name: "idempotency/terminal-resubmit-already-exists",
		Doc:  "As Flink does, a resubmission of a globally terminal job with the same plan is refused ALREADY_EXISTS instead of answered OK with its terminal status and created=false (SubmitJob: same id, same plan, job globally terminal).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `			if string(j.digest) != string(digest) {`,
		New:  `			if string(j.digest) != string(digest) || j.result != nil {`,
	},
	{
		Name: "idempotency/globally-terminated-flag-by-runner",
		Doc:  "ALREADY_EXISTS says globally_terminated only for jobs known from the store's results (no runner here), so a job that ended under the current leader is reported as not terminated (SubmitJob ALREADY_EXISTS metadata: whether that job is globally terminated).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `&ExistsError{JobID: jobID, GloballyTerminated: j.result != nil}`,
		New:  `&ExistsError{JobID: jobID, GloballyTerminated: j.runner == nil}`,
	},
	{
		Name: "idempotency/registered-after-persist",
		Doc:  "A submission is entered in the job table only once its plan is persisted (a job 'exists once durable'), so concurrent identical submissions all persist and start, and more than one sees created=true with more than one runner (SubmitJob: concurrent identical submissions, exactly one created=true, one persist, one runner).",
		File: "server/internal/dispatcher/submit.go",
		Old: `		ld.jobs[jobID] = j
		d.mu.Unlock()
		out, err := d.persistAndStart(ld, j, plan)`,
		New: `		d.mu.Unlock()
		out, err := d.persistAndStart(ld, j, plan)
		if err == nil {
			// A job exists once its plan is durable.
			d.mu.Lock()
			ld.jobs[jobID] = j
			d.mu.Unlock()
		}`,
	},
	{
		Name: "idempotency/readback-ignores-digest",
		Doc:  "After a failed put, the read-back takes any stored plan of the job id as this submission's, so when another submission's plan holds the id the job runs that plan and the call answers created=true instead of ALREADY_EXISTS (SubmitJob: same id, different plan).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `	case err == nil && samePlan(stored, plan):`,
		New:  `	case err == nil:`,
	},
	{
		Name: "idempotency/client-plan-exists-as-success",
		Doc:  "The HA-store client takes EXECUTION_PLAN_EXISTS as 'the plan is stored, as asked', so a submission whose id holds another (earlier, unanswered) plan runs its own graph and answers created=true instead of ALREADY_EXISTS (PutExecutionPlan: a plan is never replaced; SubmitJob: different plan).",
		File: "server/hastore/hastorerpc/client.go",
		Old: `	_, err := c.rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fenceToProto(f), Plan: plan})
	return fromConnect(err)`,
		New: `	_, err := c.rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fenceToProto(f), Plan: plan})
	if err = fromConnect(err); errors.Is(err, hastore.ErrPlanExists) {
		// A plan is never replaced: the job has its plan, as asked.
		return nil
	}
	return err`,
	},

	// ---------------------------------------------------------------
	// persist
	// ---------------------------------------------------------------
	{
		Name: "persist/duplicate-acked-before-persist",
		Doc:  "A submission that arrives while an identical one is being persisted is answered OK created=false at once instead of waiting for that persist's outcome, so a client gets OK for a job whose plan is not durable, and may never be (SubmitJob: no response precedes the persist).",
		File: "server/internal/dispatcher/submit.go",
		Old: `				// An identical submission is being persisted: wait for its
				// outcome, then look again.
				wait := j.persisting
				d.mu.Unlock()
				select {
				case <-wait:
				case <-ctx.Done():
					return SubmitOutcome{}, ctx.Err()
				}
				continue`,
		New: `				// An identical submission is being persisted: the job is
				// accepted already.
				defer d.mu.Unlock()
				if string(j.digest) != string(digest) {
					return SubmitOutcome{}, &ExistsError{JobID: jobID}
				}
				return SubmitOutcome{Created: false, Status: jobstatus.Initializing}, nil`,
	},
	{
		Name: "persist/failed-put-left-registered",
		Doc:  "A submission whose persist failed (UNAVAILABLE, outcome unknown) stays in the job table, so GetJob shows it and a retry is answered OK created=false while nothing is persisted or runs (a submission that failed leaves nothing behind; a job exists once its plan is durable).",
		File: "server/internal/dispatcher/submit.go",
		Old: `	if err != nil {
		d.mu.Lock()
		ld.forgetLocked(j)
		close(j.persisting)`,
		New: `	if err != nil {
		d.mu.Lock()
		if errors.Is(err, hastore.ErrStaleToken) || errors.As(err, new(*ExistsError)) {
			ld.forgetLocked(j)
		}
		close(j.persisting)`,
	},
	{
		Name: "persist/unreadable-outcome-taken-as-persisted",
		Doc:  "When a plan put fails and the plan cannot be read back, the Dispatcher assumes the write went through, starts the job and answers created=true instead of PERSIST_OUTCOME_UNKNOWN (SubmitJob: only after the persist succeeded does the call return OK).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `	return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, putErr)`,
		New: `	// The store took the request; it most likely applied it.
	return plan, nil`,
	},
	{
		Name: "persist/unknown-outcome-never-settled",
		Doc:  "After answering PERSIST_OUTCOME_UNKNOWN the Dispatcher never looks again, so a plan that was in fact persisted is not run until the next leader recovers it (PERSIST_OUTCOME_UNKNOWN: if the plan was persisted, the job runs, once, whether or not the client retries).",
		File: "server/internal/dispatcher/submit.go",
		Old: `		case errors.Is(err, ErrOutcomeUnknown):
			go d.settleLater(ld, plan)
			return SubmitOutcome{}, err`,
		New: `		case errors.Is(err, ErrOutcomeUnknown):
			return SubmitOutcome{}, err`,
	},
	{
		Name: "persist/timed-out-put-taken-as-success",
		Doc:  "A plan put that ends in DEADLINE_EXCEEDED is taken as applied, so the job starts and the client gets created=true although the store never confirmed the plan (SubmitJob: persist before run; PERSIST_OUTCOME_UNKNOWN when the store cannot confirm).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `	granted, err := d.cfg.Jobs.PersistPlan(ctx, f, plan, ld.gate.Free())`,
		New: `	granted, err := d.cfg.Jobs.PersistPlan(ctx, f, plan, ld.gate.Free())
	if errors.Is(err, context.DeadlineExceeded) {
		// The store had the write; only its answer was late.
		err = nil
	}`,
	},
	{
		Name: "persist/unavailable-put-not-read-back",
		Doc:  "A plan put answered UNAVAILABLE is reported PERSIST_FAILED without reading back what the store holds, so a put the store did apply is told 'not persisted' while the job later runs anyway (ERROR_REASON_PERSIST_FAILED: the plan is not persisted, as far as the store shows).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `	if err != nil && !errors.Is(err, hastore.ErrStaleToken) && !errors.Is(err, hastore.ErrInvalidArgument) && !errors.Is(err, hastore.ErrResultExists) {`,
		New:  `	if err != nil && !errors.Is(err, hastore.ErrStaleToken) && !errors.Is(err, hastore.ErrInvalidArgument) && !errors.Is(err, hastore.ErrResultExists) && !errors.Is(err, hastore.ErrUnavailable) {`,
	},
	{
		Name: "persist/cancel-unrecorded-still-cancels",
		Doc:  "When RequestJobCancel fails, CancelJob cancels the job locally and answers OK instead of CANCEL_NOT_RECORDED, so an acknowledged cancellation is lost on a change of leader (CancelJob: durable before it answers; CANCEL_NOT_RECORDED means nothing was done).",
		File: "server/internal/dispatcher/query.go",
		Old: `	if err := d.requestCancel(ld, jobID, record); err != nil {
		if !errors.Is(err, hastore.ErrPlanNotFound)`,
		New: `	if err := d.requestCancel(ld, jobID, record); err != nil {
		if errors.Is(err, ErrCancelNotRecorded) {
			// Best effort: the client asked for it, cancel here anyway.
			return r.Cancel(ctx), nil
		}
		if !errors.Is(err, hastore.ErrPlanNotFound)`,
	},
	{
		Name: "persist/cancel-initializing-not-recorded",
		Doc:  "A job still INITIALIZING (no JobMaster yet) is canceled in memory only, without RequestJobCancel, so if the leader changes before it ends the recovered job runs (CancelJob: recorded in the HA store before it answers and before anything is done).",
		File: "server/internal/dispatcher/query.go",
		Old: `	// The request is made durable before anything is done for it, so that
	// a leader that recovers the job cancels it too.`,
		New: `	if r.JobMaster() == nil {
		// Nothing runs yet: there is nothing to make durable.
		return r.Cancel(ctx), nil
	}
	// The request is made durable before anything is done for it, so that
	// a leader that recovers the job cancels it too.`,
	},
	{
		Name: "persist/cancel-acts-before-record",
		Doc:  "CancelJob starts canceling the job's tasks while it records the request, so tasks are canceled before the request is durable, also when recording then fails with CANCEL_NOT_RECORDED (CancelJob: before it does anything for the request, the Dispatcher records it).",
		File: "server/internal/dispatcher/query.go",
		Old: `	// a leader that recovers the job cancels it too.
	if err := d.requestCancel(ld, jobID, record); err != nil {`,
		New: `	// a leader that recovers the job cancels it too. Both at once.
	go r.Cancel(context.WithoutCancel(ctx))
	if err := d.requestCancel(ld, jobID, record); err != nil {`,
	},
	{
		Name: "persist/terminal-published-before-result",
		Doc:  "The Dispatcher shows a job's globally terminal status (WatchJob, GetJob) before its job result is written, so a client sees FINISHED for a job that a new leader may run again if that write fails (JobStatus: globally terminal means the job has a job result).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `	cleaned := false
	for attempt := 0; ; attempt++ {`,
		New: `	d.mu.Lock()
	ld.recordLocked(j, summaryOfResult(result))
	d.mu.Unlock()
	cleaned := false
	for attempt := 0; ; attempt++ {`,
	},

	// ---------------------------------------------------------------
	// cleanup
	// ---------------------------------------------------------------
	{
		Name: "cleanup/clean-before-plan-delete",
		Doc:  "Cleanup marks the job result clean before it deletes the plan, so a leader change in between leaves a clean result with a plan that no one will ever remove (persist before run: marked clean only after cleanup succeeded).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `		} else if step == 0 {
			err = d.cfg.Store.DeleteExecutionPlan(cctx, f, jobID)
		} else {
			err = d.cfg.Store.MarkJobResultClean(cctx, f, jobID)
		}`,
		New: `		} else if step == 0 {
			err = d.cfg.Store.MarkJobResultClean(cctx, f, jobID)
		} else {
			err = d.cfg.Store.DeleteExecutionPlan(cctx, f, jobID)
		}`,
	},
	{
		Name: "cleanup/steps-clean-before-plan-delete",
		Doc:  "FinishJob in steps, as a store without a fused write takes it, marks the result clean before it deletes the plan, so a leader change in between leaves a clean result with a plan that no one will ever remove (persist before run: marked clean only after cleanup succeeded).",
		File: "server/hastore/fallback.go",
		Old: `	if err := s.DeleteExecutionPlan(ctx, f, jobID); err != nil {
		return &CleanupPendingError{JobID: jobID, Err: err}
	}
	if err := s.MarkJobResultClean(ctx, f, jobID); err != nil {
		return &CleanupPendingError{JobID: jobID, PlanDeleted: true, Err: err}
	}`,
		New: `	if err := s.MarkJobResultClean(ctx, f, jobID); err != nil {
		return &CleanupPendingError{JobID: jobID, Err: err}
	}
	if err := s.DeleteExecutionPlan(ctx, f, jobID); err != nil {
		return &CleanupPendingError{JobID: jobID, PlanDeleted: true, Err: err}
	}`,
	},
	{
		Name: "cleanup/plan-deleted-before-result",
		Doc:  "When a job ends, the Dispatcher first tries to delete its plan and only then writes the dirty result, so the store sees a plan removal before the job has a result (a job's result is written dirty before its plan is removed; DeleteExecutionPlan only once the job has a result entry).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `	f := ld.l.Fence()
	// The store records the result and cleans up after the job, in one`,
		New: `	f := ld.l.Fence()
	// The job is over: its plan goes first, so that no leader runs it again.
	if err := d.cfg.Store.DeleteExecutionPlan(ld.ctx, f, j.id); err != nil {
		d.log.Debug("removing the plan of a terminated job", "job", j.id, "err", err)
	}
	// The store records the result and cleans up after the job, in one`,
	},
	{
		Name: "cleanup/canceled-job-not-cleaned",
		Doc:  "The cleanup after a job ends is skipped for CANCELED jobs (their tasks are gone already), so their plan and cancel request stay and their result stays dirty until the next leader's recovery (dirty result, then cleanup, then mark clean, for every globally terminal job).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old:  `		err := d.cfg.Store.FinishJob(ctx, f, result)`,
		New: `		finish := d.cfg.Store.FinishJob
		if result.GetStatus() == jobstatus.Canceled {
			// Its tasks are gone already: only the result is left to write.
			finish = d.cfg.Store.CreateDirtyJobResult
		}
		err := finish(ctx, f, result)`,
	},
	{
		Name: "cleanup/clean-after-failed-delete",
		Doc:  "When the plan delete fails, cleanup logs it and goes on to mark the result clean, so a clean result coexists with the job's plan (MarkJobResultClean: once its cleanup is done; marked clean only after cleanup succeeded).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `		case err == nil, step == 1 && errors.Is(err, hastore.ErrResultNotFound):
			step++
			continue`,
		New: `		case err == nil, step == 1 && errors.Is(err, hastore.ErrResultNotFound):
			step++
			continue
		case step == 0 && !errors.Is(err, hastore.ErrStaleToken):
			// The plan goes with the next leader's recovery; the result is
			// final either way.
			d.log.Warn("deleting a terminated job's plan failed", "job", jobID, "err", err)
			step++
			continue`,
	},
	{
		Name: "cleanup/result-unavailable-taken-as-written",
		Doc:  "A CreateDirtyJobResult answered UNAVAILABLE is taken as written, so the job is published as globally terminal and its cleanup begun without a durable result, and a later leader runs it again (dirty job result written before the plan is removed; terminal means the job has a result).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old:  `		if err == nil || errors.Is(err, hastore.ErrResultExists) {`,
		New:  `		if err == nil || errors.Is(err, hastore.ErrResultExists) || errors.Is(err, hastore.ErrUnavailable) {`,
	},
	{
		Name: "cleanup/store-cancel-request-outlives-plan",
		Doc:  "The store's plan delete leaves the job's cancel request behind, so once the id is used again (after DeleteJobResultEntry) its new plan reads cancel_requested and a recovering leader cancels it (RequestJobCancel: the record lasts as long as the plan and goes with it).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `		clientv3.OpDelete(s.cancelKey(jobID)),`,
		New:  ``,
	},
	{
		Name: "cleanup/store-deletes-dirty-result",
		Doc:  "The store's DeleteJobResultEntry refuses only entries without a state, so a dirty result is deleted and its job's id can run again before its cleanup finished (DeleteJobResultEntry: FAILED_PRECONDITION JOB_RESULT_DIRTY for a dirty entry).",
		File: "server/hastore/etcdstore/store.go",
		Old: `		case e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN:
			return nil, hastore.ErrResultDirty`,
		New: `		case e.GetState() == hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED:
			return nil, hastore.ErrResultDirty`,
	},
	{
		Name: "cleanup/store-deletes-plan-without-result",
		Doc:  "The store's DeleteExecutionPlan compares the result key's create revision with > -1 instead of > 0, so a plan is removed from a job that has no result entry and the job is left with neither (DeleteExecutionPlan: NOT_FOUND JOB_RESULT_NOT_FOUND without a result entry; a job is never without both).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.resultKey(jobID)), ">", 0)},`,
		New:  `		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.resultKey(jobID)), ">", -1)},`,
	},

	// ---------------------------------------------------------------
	// recovery
	// ---------------------------------------------------------------
	{
		Name: "recovery/serves-before-recovery",
		Doc:  "A new leader's Dispatcher serves calls before recovery finished, so meanwhile recovered jobs are NOT_FOUND and a resubmission of one starts a second runner beside the recovered one (on gaining leadership a Dispatcher first finishes cleanups, then recovers every persisted plan).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `	starts, err := d.recover(ctx, ld)
	d.mu.Lock()
	ld.recovering = nil // starts is whole: no submission adds to it now
	d.mu.Unlock()
	if err != nil {
		over := ctx.Err() != nil // the term ended; the recovery did not fail
		endTerm()
		d.launch(nil, starts) // each suspends at once: the term is over
		if over {
			return nil
		}
		return fmt.Errorf("dispatcher: recovery: %w", err)
	}
	close(ld.ready)`,
		New: `	close(ld.ready)
	starts, err := d.recover(ctx, ld)
	d.mu.Lock()
	ld.recovering = nil // starts is whole: no submission adds to it now
	d.mu.Unlock()
	if err != nil {
		over := ctx.Err() != nil // the term ended; the recovery did not fail
		endTerm()
		d.launch(nil, starts) // each suspends at once: the term is over
		if over {
			return nil
		}
		return fmt.Errorf("dispatcher: recovery: %w", err)
	}`,
	},
	{
		Name: "recovery/submission-during-recovery-not-looked-up",
		Doc:  "A new leader takes a submission while it still reads the plans without looking the id up in the store, so a resubmission of a persisted job recovery has not reached yet is created again (created=true, a second run) instead of answered as the job it is.",
		File: "server/internal/dispatcher/submit.go",
		Old:  "		if ld.recovering != nil && !absent {",
		New:  "		if false && ld.recovering != nil && !absent {",
	},
	{
		Name: "recovery/clean-results-forgotten",
		Doc:  "Recovery loads only dirty job results, so after a change of leader a job that ended cleanly is unknown: GetJob answers NOT_FOUND and resubmitting it fails instead of answering its terminal status (GetJob: jobs are known for as long as their result is kept; SubmitJob: job globally terminal).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old:  `	entries, err := d.cfg.Store.ListJobResultEntries(ctx, hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED, "", 0)`,
		New:  `	entries, err := d.cfg.Store.ListJobResultEntries(ctx, hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY, "", 0)`,
	},
	{
		Name: "recovery/dirty-cleanup-not-finished",
		Doc:  "A new leader records the jobs with a dirty result as terminated but does not finish their cleanup, so their plans stay and their results stay dirty for ever (on gaining leadership a Dispatcher first finishes the cleanup of jobs that have a dirty result).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `			d.log.Info("finishing the cleanup of a terminated job", "job", res.GetJobId())
			d.cleanup(ctx, f, res.GetJobId(), nil)`,
		New: `			// Known as terminated: it never runs again.
			d.log.Info("a terminated job's cleanup is pending", "job", res.GetJobId(), "fence", f)`,
	},
	{
		Name: "recovery/cancel-request-ignored",
		Doc:  "A recovered job whose cancellation was requested is run normally instead of ended CANCELED without deploying anything (CancelJob: an acknowledged cancellation survives a change of leader; RequestJobCancel).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old:  `	start, err := d.prepareLocked(ld, j, plan, true, cancellation != nil, nil)`,
		New:  `	start, err := d.prepareLocked(ld, j, plan, true, false, nil)`,
	},
	{
		Name: "recovery/unreadable-plan-skipped",
		Doc:  "A plan that recovery cannot read (a transient store error) is skipped instead of failing the recovery, so an acknowledged job is never run while this leader leads (recovery: every persisted plan without a result is recovered; no acknowledged submission lost).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `		case r.skip || errors.Is(r.err, hastore.ErrPlanNotFound):
			continue`,
		New: `		case r.skip || r.err != nil:
			d.log.Warn("skipping a plan that cannot be read", "job", id, "err", r.err)
			continue`,
	},
	{
		Name: "recovery/plans-short-page-is-last",
		Doc:  "The store client stops listing plans at the first page shorter than it asked for, although the store may return fewer and gives a next_page_token, so recovery misses the plans after it (ListExecutionPlansResponse.next_page_token: empty on the last page).",
		File: "server/hastore/hastorerpc/client.go",
		Old: `		ids = append(ids, resp.GetJobIds()...)
		after = resp.GetNextPageToken()
		if after == "" || limit > 0 && len(ids) >= limit {`,
		New: `		ids = append(ids, resp.GetJobIds()...)
		after = resp.GetNextPageToken()
		if after == "" || len(resp.GetJobIds()) < size || limit > 0 && len(ids) >= limit {`,
	},
	{
		Name: "recovery/results-first-page-only",
		Doc:  "The store client returns only the first page of job result entries when asked for all, so a leader with many results neither knows the later jobs as terminated nor finishes their dirty cleanups (ListJobResultEntries paging; recovery finishes every dirty cleanup).",
		File: "server/hastore/hastorerpc/client.go",
		Old:  `		if after == "" || limit > 0 && len(entries) >= limit {`,
		New:  `		if after == "" || limit == 0 || len(entries) >= limit {`,
	},
	{
		Name: "recovery/store-list-after-inclusive",
		Doc:  "The store resumes a listing at the page token's id instead of after it, so every page repeats the last id of the one before, and a client paging one at a time never ends (ListExecutionPlansRequest.page_token: the last job id of the previous page).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `		from = pfx + after + "\x00"`,
		New:  `		from = pfx + after`,
	},
	{
		Name: "recovery/store-list-no-next-token",
		Doc:  "The store's ListExecutionPlans sets a next_page_token only when it found more ids than the page holds, which it never does, so every listing ends after its first page and a recovering leader misses plans (ListExecutionPlansResponse.next_page_token).",
		File: "server/hastore/hastorerpc/handler.go",
		Old: `	if len(ids) == size {
		resp.NextPageToken = ids[len(ids)-1]`,
		New: `	if len(ids) > size {
		resp.NextPageToken = ids[len(ids)-1]`,
	},
	{
		Name: "recovery/keepalive-validity-from-receipt",
		Doc:  "The session's validity is counted from when a KeepAlive's answer arrived rather than when it was sent, so a leader whose renewals are answered late acts past the instant its lease may have expired (KeepAlive: holds until the send time of the last acknowledged KeepAlive plus the TTL; FencingToken rule 1).",
		File: "server/hastore/hastorerpc/client.go",
		Old: `	sent := time.Now()
	resp, err := s.c.rpc.KeepAlive(ctx, &hastorev1.KeepAliveRequest{SessionId: s.id})`,
		New: `	resp, err := s.c.rpc.KeepAlive(ctx, &hastorev1.KeepAliveRequest{SessionId: s.id})
	sent := time.Now()`,
	},
	{
		Name: "recovery/jobs-hoard-idle-slots",
		Doc:  "A JobMaster whose region waits for slots keeps the idle slots it holds however long it waits, so after a restart recovered jobs that each hold part of what they need, offered again by their TaskExecutors, wait for one another until the slot timeout (jobs that could run in turn all finish).",
		File: "server/internal/jobmaster/slots.go",
		Old:  `	if jm.yieldArmed || jm.yieldDelay <= 0 {`,
		New:  `	if true {`,
	},
	{
		Name: "recovery/paused-leader-answers",
		Doc:  "A leadership counts as valid while its session has a validity at all, not while that instant is still ahead, so a process that stood still past its lease answers and deploys as leader before its timers fire (FencingToken rule 1: it checks this as it acts; a paused leader never answers as leader).",
		File: "server/hastore/leadership.go",
		Old:  `	return l.validUntil == nil || time.Now().Before(l.validUntil())`,
		New:  `	return l.validUntil == nil || !l.validUntil().IsZero()`,
	},
	{
		Name: "recovery/resync-ignores-missing-leadership",
		Doc:  "On reconnecting WatchSession, the client ends only leaderships the snapshot shows with another token, not those it lacks, so a leadership revoked while the stream was down keeps acting (WatchSession: a leadership the client believed held and not granted in the snapshot has ended).",
		File: "server/hastore/hastorerpc/client.go",
		Old:  `		if !c.token.IsZero() && snapshot[e] != c.token {`,
		New:  `		if !c.token.IsZero() && !snapshot[e].IsZero() && snapshot[e] != c.token {`,
	},

	// ---------------------------------------------------------------
	// fencing
	// ---------------------------------------------------------------
	{
		Name: "fencing/jm-compares-only-epoch",
		Doc:  "The JobMaster compares only the epoch of a caller's token, so a call carrying the current epoch with another (or a forged) session_id is accepted instead of refused (JobMasterService: every call fenced by the job's token; FencingToken).",
		File: "server/internal/jobmaster/router.go",
		Old: `	case token != jm.cfg.Token:
		return nil, apierror.StaleToken(`,
		New: `	case token.Epoch != jm.cfg.Token.Epoch:
		return nil, apierror.StaleToken(`,
	},
	{
		Name: "fencing/jm-compares-only-session",
		Doc:  "The JobMaster compares only the session of a caller's token, so a token of an older grant held by the same session is accepted instead of ABORTED STALE_FENCING_TOKEN (JobMasterService: a request with an older token is refused).",
		File: "server/internal/jobmaster/router.go",
		Old: `	case token != jm.cfg.Token:
		return nil, apierror.StaleToken(`,
		New: `	case token.SessionID != jm.cfg.Token.SessionID:
		return nil, apierror.StaleToken(`,
	},
	{
		Name: "fencing/offer-accepts-older-epoch",
		Doc:  "OfferSlots under an older JobMaster token of the job is handed to the current JobMaster instead of refused, so slots offered to a deposed JobMaster are taken (OfferSlots: ABORTED STALE_FENCING_TOKEN for an older token).",
		File: "server/internal/jobmaster/handler.go",
		Old: `	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	resp := &clusterv1.OfferSlotsResponse{`,
		New: `	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		// The slots were allocated to the job: the current JobMaster takes
		// an offer made under an older token of it.
		r.mu.Lock()
		if cur := r.masters[req.GetJobId()]; cur != nil {
			jm, err = cur, nil
		}
		r.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	resp := &clusterv1.OfferSlotsResponse{`,
	},
	{
		Name: "fencing/finished-update-unfenced",
		Doc:  "UpdateTaskExecutionState reporting FINISHED is taken whatever its token (a finished task counts as finished), so a stale JobMaster's attempt can finish the current one's subtask instead of being refused STALE_FENCING_TOKEN (UpdateTaskExecutionState: fenced by the job's token).",
		File: "server/internal/jobmaster/handler.go",
		Old: `	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	var refused []error
	r.heard(req.GetTaskExecutorId())
	if err := jm.do(ctx, func() {
		refused = jm.update(req.GetTaskExecutorId(), req.GetStatus())`,
		New: `	token := req.GetJobMasterToken()
	if req.GetStatus().GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
		// A task that finished has finished, under whichever JobMaster.
		r.mu.Lock()
		if cur := r.masters[req.GetJobId()]; cur != nil {
			token = protoToken(cur.cfg.Token)
		}
		r.mu.Unlock()
	}
	jm, err := r.route(ctx, req.GetJobId(), token)
	if err != nil {
		return nil, err
	}
	var refused []error
	r.heard(req.GetTaskExecutorId())
	if err := jm.do(ctx, func() {
		refused = jm.update(req.GetTaskExecutorId(), req.GetStatus())`,
	},
	{
		Name: "fencing/batched-updates-fenced-by-first-entry",
		Doc:  "UpdateTaskExecutionStatesOfJobs checks only the first entry's token and takes the other entries unchecked, so a stale token in any later entry is accepted (UpdateTaskExecutionStatesOfJobs: each entry fenced by its own token, refused on its own).",
		File: "server/internal/jobmaster/handler.go",
		Old:  `		jm, err := r.route(ctx, entry.GetJobId(), entry.GetJobMasterToken())`,
		New: `		token := entry.GetJobMasterToken()
		if i > 0 {
			// One TaskExecutor, one report: the call was fenced once.
			r.mu.Lock()
			if cur := r.masters[entry.GetJobId()]; cur != nil {
				token = protoToken(cur.cfg.Token)
			}
			r.mu.Unlock()
		}
		jm, err := r.route(ctx, entry.GetJobId(), token)`,
	},
	{
		Name: "fencing/jm-heartbeat-accepts-missing-token",
		Doc:  "The per-job Heartbeat without a token (or with epoch 0) is taken as addressed to the current JobMaster instead of refused, so a malformed token is accepted (JobMasterService: every call fenced by the job's token; FencingToken: zero epoch is malformed).",
		File: "server/internal/jobmaster/handler.go",
		Old: `func (r *Router) Heartbeat(ctx context.Context, req *clusterv1.JobMasterServiceHeartbeatRequest) (*clusterv1.JobMasterServiceHeartbeatResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())`,
		New: `func (r *Router) Heartbeat(ctx context.Context, req *clusterv1.JobMasterServiceHeartbeatRequest) (*clusterv1.JobMasterServiceHeartbeatResponse, error) {
	token := req.GetJobMasterToken()
	if token.GetEpoch() == 0 {
		// No token: the heartbeat only says the TaskExecutor is alive.
		r.mu.Lock()
		if cur := r.masters[req.GetJobId()]; cur != nil {
			token = protoToken(cur.cfg.Token)
		}
		r.mu.Unlock()
	}
	jm, err := r.route(ctx, req.GetJobId(), token)`,
	},
	{
		Name: "fencing/disconnect-accepts-any-token",
		Doc:  "DisconnectTaskExecutor is taken under any token of the job (the ResourceManager may hold an older one), so a stale caller can drop a TaskExecutor and fail its attempts under the current JobMaster (DisconnectTaskExecutor: ABORTED STALE_FENCING_TOKEN).",
		File: "server/internal/jobmaster/handler.go",
		Old: `func (r *Router) DisconnectTaskExecutor(ctx context.Context, req *clusterv1.DisconnectTaskExecutorRequest) (*clusterv1.DisconnectTaskExecutorResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())`,
		New: `func (r *Router) DisconnectTaskExecutor(ctx context.Context, req *clusterv1.DisconnectTaskExecutorRequest) (*clusterv1.DisconnectTaskExecutorResponse, error) {
	// The ResourceManager may carry the token of an earlier registration:
	// a lost TaskExecutor is lost for the job whatever the token.
	token := req.GetJobMasterToken()
	r.mu.Lock()
	if cur := r.masters[req.GetJobId()]; cur != nil && token.GetEpoch() <= cur.cfg.Token.Epoch {
		token = protoToken(cur.cfg.Token)
	}
	r.mu.Unlock()
	jm, err := r.route(ctx, req.GetJobId(), token)`,
	},
	{
		Name: "fencing/te-heartbeat-older-token-report-taken",
		Doc:  "A TaskExecutor heartbeat that reports attempts under an older JobMaster token is handed to the current JobMaster instead of being answered FOLLOW, so attempt states of a deposed JobMaster are applied to the new one (JobMasterService: older token refused; TaskExecutorService: attempts under an older token are never reported).",
		File: "server/internal/jobmaster/router.go",
		Old: `		case token != jm.cfg.Token:
			// Older, or another grant's of an equal epoch: its report is`,
		New: `		case token != jm.cfg.Token && len(jr.GetAttempts()) == 0 && !jr.GetComplete():
			// Older, or another grant's of an equal epoch: its report is`,
	},
	{
		Name: "fencing/deploy-after-lease-lapse",
		Doc:  "The JobMaster sends SubmitTasks without checking, as it sends, that its leadership still certainly holds, so a JobMaster that stood still past its lease deploys beside its successor (FencingToken rule 1: past that instant it deploys nothing; no subtask runs twice at once).",
		File: "server/internal/jobmaster/deploy.go",
		Old: `			if !jm.valid() {
				return // not certainly the leader any more; the JobMaster suspends the job
			}
`,
		New: ``,
	},
	{
		Name: "fencing/rm-register-accepts-older-jobmaster",
		Doc:  "RegisterJobMaster checks neither the registration nor the store for a JobMaster token not newer than the registered one (only a newer one could be a new grant), so a deposed JobMaster's registration replaces the newer one and slot requests go out under its older token (RegisterJobMaster: ABORTED STALE_FENCING_TOKEN if a newer token of the job has registered).",
		File: "server/internal/resourcemanager/handler.go",
		Old: `	err := rm.checkJobLocked(req.GetJobId(), token)
	registered := err == nil && rm.pool.jobs[req.GetJobId()] != nil && rm.pool.jobs[req.GetJobId()].token == token
	rm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// A token not registered yet (the job's first, or a newer one) must
	// be the job's current grant; the store says, once per registration.
	// The registered token was checked when it registered.
	if !registered {
		if err := rm.checkGrant(ctx, req.GetJobId(), token); err != nil {
			return nil, err
		}
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	// A newer JobMaster may have registered while the store was read.
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	rm.pool.registerJob(req.GetJobId(), token, req.GetJobMasterAddress())`,
		New: `	var err error
	if !rm.leadingLocked() {
		err = apierror.NotLeader(election.JobManager, "")
	}
	// Only a newer token can be a new grant: the store is read for it alone.
	registered := err == nil && rm.pool.jobs[req.GetJobId()] != nil && token.Epoch <= rm.pool.jobs[req.GetJobId()].token.Epoch
	rm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !registered {
		if err := rm.checkGrant(ctx, req.GetJobId(), token); err != nil {
			return nil, err
		}
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.pool.registerJob(req.GetJobId(), token, req.GetJobMasterAddress())`,
	},
	{
		Name: "fencing/rm-register-skips-grant-check",
		Doc:  "RegisterJobMaster takes a JobMaster token newer than the registered one (or a job's first) as the caller's grant without reading the job's election, as contract 1.1 allowed, so a caller that forges a higher epoch takes the job's registration and the real JobMaster's calls are refused STALE_FENCING_TOKEN (RegisterJobMaster: only the current grant of job/<job_id> registers).",
		File: "server/internal/resourcemanager/handler.go",
		Old: `	if !registered {
		if err := rm.checkGrant(ctx, req.GetJobId(), token); err != nil {
			return nil, err
		}
	}`,
		New: `	_ = registered // a newer token is a new JobMaster's registration`,
	},
	{
		Name: "fencing/rm-checks-job-token-first",
		Doc:  "DeclareResourceRequirements judges the JobMaster token before the ResourceManager's, so a declaration wrong in both is answered STALE_FENCING_TOKEN instead of NOT_REGISTERED or NOT_LEADER, and the JobMaster stops as deposed instead of registering again with the current ResourceManager (ResourceManagerService: order of the checks).",
		File: "server/internal/resourcemanager/handler.go",
		Old: `	token := tokenOf(req.GetJobMasterToken())
	if err := rm.checkReceiverLocked(req.GetJobId(), tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	j := rm.pool.jobs[req.GetJobId()]`,
		New: `	token := tokenOf(req.GetJobMasterToken())
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	if err := rm.checkReceiverLocked(req.GetJobId(), tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	j := rm.pool.jobs[req.GetJobId()]`,
	},
	{
		Name: "fencing/rm-declare-ignores-rm-token",
		Doc:  "DeclareResourceRequirements does not check the ResourceManager token the JobMaster sends back, so a declaration meant for an earlier (or another) ResourceManager leadership is acted on instead of refused NOT_REGISTERED (ResourceManagerService: fencing in both directions).",
		File: "server/internal/resourcemanager/handler.go",
		Old: `	token := tokenOf(req.GetJobMasterToken())
	if err := rm.checkReceiverLocked(req.GetJobId(), tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	j := rm.pool.jobs[req.GetJobId()]`,
		New: `	token := tokenOf(req.GetJobMasterToken())
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	j := rm.pool.jobs[req.GetJobId()]`,
	},
	{
		Name: "fencing/rm-accepts-equal-epoch-other-session",
		Doc:  "The ResourceManager refuses a TaskExecutor's token only when its epoch is older, so a token with the current epoch and another (or forged) session_id is accepted (ResourceManagerService: a call with another token is refused with ABORTED STALE_FENCING_TOKEN).",
		File: "server/internal/resourcemanager/handler.go",
		Old: `	case t != rm.token:
		return apierror.StaleToken(election.JobManager, rm.token.SessionID, rm.token.Epoch)`,
		New: `	case t.Epoch < rm.token.Epoch:
		return apierror.StaleToken(election.JobManager, rm.token.SessionID, rm.token.Epoch)`,
	},
	{
		Name: "fencing/store-fence-ignores-epoch",
		Doc:  "The store's fence checks only that the writer's session holds a key in the election, not its create revision, so a write under an older grant of the same session, or any epoch, is accepted (Fence: a write succeeds only if token is the election's current grant).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `		clientv3.Compare(clientv3.CreateRevision(s.leaderKey(f.Election, f.Token.SessionID)), "=", epoch),`,
		New:  `		clientv3.Compare(clientv3.CreateRevision(s.leaderKey(f.Election, f.Token.SessionID)), ">", 0),`,
	},
	{
		Name: "fencing/store-fence-only-no-older-key",
		Doc:  "The store's fence checks only that no key of the election is older than the token's epoch, not that the writer holds the leader key, so a deposed leader's older token, or any session with the current epoch, writes (Fence: checked atomically that token is the current grant; STALE_FENCING_TOKEN otherwise).",
		File: "server/hastore/etcdstore/store.go",
		Old: `	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(s.leaderKey(f.Election, f.Token.SessionID)), "=", epoch),
		clientv3.Compare(clientv3.CreateRevision(s.electionPrefix(f.Election)+"/").WithPrefix(), ">", epoch-1),
	}`,
		New: `	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(s.electionPrefix(f.Election)+"/").WithPrefix(), ">", epoch-1),
	}`,
	},
	{
		Name: "fencing/store-accepts-zero-epoch",
		Doc:  "The store does not refuse a token with epoch 0, and its fence then matches any session without a key in the election (create revision 0), so a malformed token writes plans and results (FencingToken.epoch: zero is malformed; INVALID_ARGUMENT for malformed tokens).",
		File: "server/hastore/validate.go",
		Old: `	if f.Token.Epoch == 0 {
		v.add(field+".token.epoch", "must be positive")
	}`,
		New: ``,
	},
	{
		Name: "fencing/store-job-election-writes-plans",
		Doc:  "The store accepts plan and result writes fenced by a job election (the check is inverted to refuse only unknown names), so a JobMaster's token writes plans and results (HAStoreService: a plan or result write fenced by any election other than jobmanager is INVALID_ARGUMENT).",
		File: "server/hastore/validate.go",
		Old:  `	if f.Election != election.JobManager && ValidElection(f.Election) {`,
		New:  `	if f.Election != election.JobManager && !ValidElection(f.Election) {`,
	},
	{
		Name: "fencing/committer-batch-drops-fence",
		Doc:  "The group committer sends the writes it batches without their comparisons (only a write that goes alone keeps them), so under concurrent writes a stale token's write, a stale resign and a repeated plan put are all applied (Fence: checked atomically with the write; fenced writes).",
		File: "server/hastore/etcdstore/committer.go",
		Old: `	for i, w := range batch {
		ops[i] = w.op
	}`,
		New: `	for i, w := range batch {
		// Each write was checked when it was queued: send its effects.
		_, then, _ := w.op.Txn()
		ops[i] = clientv3.OpTxn(nil, then, nil)
	}`,
	},
	{
		Name: "fencing/store-resign-ignores-epoch",
		Doc:  "The store's Resign deletes the session's leader key whatever its create revision, so resigning with an older token of a session that leads again ends its current leadership (Resign: resigning with a token that no longer leads succeeds and changes nothing).",
		File: "server/hastore/etcdstore/store.go",
		Old: `	epoch := int64(min(f.Token.Epoch, math.MaxInt64))
	_, _, err := s.commit.do(ctx, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)},`,
		New: `	_, _, err := s.commit.do(ctx, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)},`,
	},
	{
		Name: "fencing/store-put-fills-missing-token",
		Doc:  "The store's PutExecutionPlan handler fills a missing fence token with the election's current leader's, so a plan put without a token (or by a non-leader) is accepted instead of INVALID_ARGUMENT (HAStoreService: malformed tokens are INVALID_ARGUMENT; Fence: the writer's token).",
		File: "server/hastore/hastorerpc/handler.go",
		Old: `func (h *Handler) PutExecutionPlan(ctx context.Context, req *hastorev1.PutExecutionPlanRequest) (*hastorev1.PutExecutionPlanResponse, error) {
	f := fenceFromProto(req.GetFence())`,
		New: `func (h *Handler) PutExecutionPlan(ctx context.Context, req *hastorev1.PutExecutionPlanRequest) (*hastorev1.PutExecutionPlanResponse, error) {
	f := fenceFromProto(req.GetFence())
	if f.Token.IsZero() {
		// No token: the put is made as the election's current leader.
		if info, err := h.store.Leader(ctx, f.Election); err == nil {
			f.Token = info.Token
		}
	}`,
	},

	// ---------------------------------------------------------------
	// adoption
	// ---------------------------------------------------------------
	{
		Name: "adoption/deploys-before-lease",
		Doc:  "A JobMaster that takes a job over deploys anew what no TaskExecutor has listed once its stop margin has passed, not once the task lease has, so an attempt at a TaskExecutor it cannot reach still runs when its new attempt starts (HeartbeatFromTaskExecutorResponse.task_lease: a subtask is deployed anew only once the longest lease the previous leader could have granted has ended; no subtask runs twice at once).",
		File: "server/internal/jobmaster/adopt.go",
		Old:  `	wait := jm.cfg.TaskLease + jm.stopMargin()`,
		New:  `	wait := jm.stopMargin()`,
	},
	{
		Name: "adoption/answers-ignored",
		Doc:  "A JobMaster takes nothing from the TaskExecutors' AdoptAttempts answers: the attempts they moved to its token run on unowned, and it deploys every subtask anew once the task lease has passed (AdoptAttempts: the listed attempts become the caller's; only subtasks no TaskExecutor holds are deployed anew).",
		File: "server/internal/jobmaster/adopt.go",
		Old:  `	if jm.status != jobstatus.Running || len(held.GetAllocationIds()) == 0 && len(held.GetAttempts()) == 0 {`,
		New:  `	if true {`,
	},

	// ---------------------------------------------------------------
	// Checkpoints (contract 1.2)
	// ---------------------------------------------------------------
	{
		Name: "checkpoints/ids-not-read-at-takeover",
		Doc:  "A JobMaster that takes a job over does not go on from the store's last checkpoint id: it numbers its checkpoints from 1 again (HAStoreService.AddCheckpoint: ids strictly increase per job, across leaders; a new leader reads last_checkpoint_id and goes on above it).",
		File: "server/internal/jobmaster/checkpoint.go",
		Old:  `				c.lastID = max(c.lastID, last)`,
		New:  `				c.lastID = max(c.lastID, last*0)`,
	},
	{
		Name: "checkpoints/restore-nothing",
		Doc:  "A subtask deployed again starts afresh, without its state from the latest completed checkpoint (TaskDeployment.restored_state: every subtask deployed again gets its own state from the latest completed checkpoint).",
		File: "server/internal/jobmaster/checkpoint.go",
		Old:  `	if c == nil || c.states[ev] == nil {`,
		New:  `	if true {`,
	},
	{
		Name: "checkpoints/completed-before-durable",
		Doc:  "A checkpoint is reported completed (JobDetails.checkpoints.latest) once every subtask acknowledged it, before its store write is durable (CheckpointConfig: a checkpoint counts as completed only once AddCheckpoint succeeded).",
		File: "server/internal/jobmaster/checkpoint.go",
		Old:  `	p.storing = true`,
		New:  `	p.storing = true; c.latest = &jobplanev1.CheckpointInfo{CheckpointId: p.id}`,
	},
	{
		Name: "checkpoints/store-errors-ignored",
		Doc:  "A checkpoint whose store write failed counts as completed, and restarted subtasks start from it (a checkpoint is completed only once its write is durable; a discarded one is never restored from).",
		File: "server/internal/jobmaster/checkpoint.go",
		Old: `			if err != nil {
				jm.checkpointFailed(p, fmt.Sprintf("storing checkpoint %d failed: %v", p.id, err))`,
		New: `			if false {
				jm.checkpointFailed(p, fmt.Sprintf("storing checkpoint %d failed: %v", p.id, err))`,
	},

	// ---------------------------------------------------------------
	// Promises of contract 1.2 (added 2026-12-03, written without
	// looking at the cases that check them)
	// ---------------------------------------------------------------
	{
		Name: "idempotency/store-same-by-proto-equal",
		Doc:  "The store compares a repeated plan or result with the stored one field by field (Go's proto.Equal, as contract 1.1 said), not by canonical encoding, so a result holding -0.0 repeats one holding 0.0 and a NaN value never repeats itself (HAStoreService Equality: canonical encodings byte-equal, floats by their bits).",
		File: "server/hastore/canonical.go",
		Old: `	ea, err := Canonical(a)
	if err != nil {
		return false
	}
	eb, err := Canonical(b)
	return err == nil && bytes.Equal(ea, eb)`,
		New: `	// Field by field: two messages with equal fields are the same.
	_ = bytes.Equal
	return proto.Equal(a, b)`,
	},
	{
		Name: "idempotency/store-keeps-unknown-fields",
		Doc:  "The store's handler decodes requests keeping unknown fields, as proto3 decoders do, and leaves their refusal to the plan's and result's own checks, so a request carrying a field of a newer schema outside a plan or result (a cancel request's record, a fence) is taken instead of refused INVALID_ARGUMENT (HAStoreService: requests holding unknown fields, at any depth, are refused).",
		File: "server/hastore/hastorerpc/handler.go",
		Old: `	return unknownfield.HandlerOptions()
}`,
		New: `	// Unknown fields are kept, as proto3 keeps them; the plan's and the
	// result's own checks refuse those that would be stored.
	return unknownfield.HandlerOptions()[:0]
}`,
	},
	{
		Name: "idempotency/store-duration-signs-unchecked",
		Doc:  "The store checks a Duration only for nanos within ±1e9, not that seconds and nanos have one sign, so 1s-500ms and 0s+500ms (one duration, two encodings) are both stored and a repeated plan written the other way is refused EXECUTION_PLAN_EXISTS (HAStoreService: non-normalized Durations and Timestamps are INVALID_ARGUMENT).",
		File: "server/hastore/canonical.go",
		Old:  `		if err := m.Interface().(*durationpb.Duration).CheckValid(); err != nil {`,
		New: `		if d := m.Interface().(*durationpb.Duration); d.GetNanos() <= -1e9 || d.GetNanos() >= 1e9 {
			err := fmt.Errorf("nanos %d out of range", d.GetNanos())`,
	},
	{
		Name: "idempotency/store-repeat-put-created",
		Doc:  "The store's PutExecutionPlan answers created=true whenever the put succeeds, a repetition of the stored plan included, so a retried submission's put looks like the one that created the job and two puts of one plan both report it (PutExecutionPlanResponse.created: true only for the call that stored the plan).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `	return err == nil && ran != nil, err`,
		New: `	_ = ran
	return err == nil, err // the plan is stored, as asked`,
	},
	{
		Name: "recovery/store-list-batches-at-latest",
		Doc:  "The store reads each batch of a long listing at the latest revision instead of the first batch's, so a page read while jobs are written and removed mixes two moments and can show a state that never existed (ListExecutionPlans, ListJobResultEntries: a page is one snapshot).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `			opts = append(opts, clientv3.WithRev(rev))`,
		New:  `			_ = rev // each batch goes on from the key after the last one read`,
	},
	{
		Name: "persist/store-cancel-record-replaced",
		Doc:  "The store's RequestJobCancel puts the request's record whether or not the job has one, so a second cancellation replaces the first one's request id and reason (RequestJobCancel: the first request's record is kept; a later request changes nothing).",
		File: "server/hastore/etcdstore/store.go",
		Old: `			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(cancelKey), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(cancelKey, string(record))}, nil)}, nil)},`,
		New: `			[]clientv3.Op{clientv3.OpPut(cancelKey, string(record))}, nil)},`,
	},
	{
		Name: "persist/store-result-no-cancel-claim",
		Doc:  "The group committer batches a FINISHED or FAILED result with a concurrent cancel request of the same job (the result does not claim the cancel key), so each transaction's comparison sees the state before the other and both apply: an acknowledged cancellation with a FINISHED result (CreateDirtyJobResult: a FINISHED or FAILED result is refused CANCEL_REQUESTED once a cancel is recorded; never both).",
		File: "server/hastore/etcdstore/store.go",
		Old:  `		claims = []string{s.cancelKey(result.GetJobId())}`,
		New:  `		// (each write's comparison keeps them apart)`,
	},
	{
		Name: "cleanup/store-clean-with-plan",
		Doc:  "The store's MarkJobResultClean and DeleteJobResultEntry check only the entry's state, as contract 1.1 did, not that the job's plan is gone, so a wrong retention or purge removes a result whose plan exists and the next leader runs the job again (MarkJobResultClean, DeleteJobResultEntry: FAILED_PRECONDITION PLAN_NOT_DELETED while the plan exists).",
		File: "server/hastore/etcdstore/store.go",
		Old: `			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(planKey), "=", 0)},
				ops, nil)},`,
		New: `			[]clientv3.Op{clientv3.OpTxn(nil, ops, nil)},`,
	},
	{
		Name: "idempotency/run-id-from-digest",
		Doc:  "A run id is derived from the plan's digest (so that a retry, or another leader, names the same run), so a new run of the id with the same plan gets the old run's id and run_id cannot tell the two apart (SubmitJobResponse.run_id: every new run gets a new id, never one of an earlier run of the id).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `SubmittedBy: owner.Name, RunId: newRunID()}`,
		New:  `SubmittedBy: owner.Name, RunId: fmt.Sprintf("%x", digest[:16])}`,
	},
	{
		Name: "idempotency/result-ignores-run-id",
		Doc:  "GetJobResult does not check the run_id it is given (the result carries its run_id, so the client can tell), so asking for an earlier run's result answers the current run's instead of NOT_FOUND (run_id: a call naming another run than the id's current one is JOB_NOT_FOUND).",
		File: "server/internal/dispatcher/query.go",
		Old: `func (d *Dispatcher) Result(ctx context.Context, jobID, runID string, wait bool) (*jobplanev1.JobResult, error) {
	ld, j, err := d.findRun(ctx, jobID, runID)`,
		New: `func (d *Dispatcher) Result(ctx context.Context, jobID, runID string, wait bool) (*jobplanev1.JobResult, error) {
	ld, j, err := d.find(ctx, jobID) // the result names its run
	_ = runID`,
	},
	{
		Name: "cleanup/purge-forgets-refused",
		Doc:  "PurgeJob forgets the job here whatever the store answered, so a purge refused while the job's cleanup is pending (dirty result, plan not deleted) leaves the result in the store while GetJob answers NOT_FOUND and the id looks free (PurgeJob: FAILED_PRECONDITION CLEANUP_PENDING changes nothing).",
		File: "server/internal/dispatcher/purge.go",
		Old: `	if err == nil {
		ld.forgetLocked(j)
	}
	close(j.purging)`,
		New: `	ld.forgetLocked(j) // the id is being freed
	close(j.purging)`,
	},
	{
		Name: "idempotency/allow-duplicate-same-plan-repeats",
		Doc:  "ID_REUSE_POLICY_ALLOW_DUPLICATE starts a new run only for a different plan; the same plan of a terminal job is taken as a retry and answered created=false with the old run (IdReusePolicy ALLOW_DUPLICATE: a submission naming a globally terminal job's id removes its result and starts a new run).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `			if allowDuplicate && j.result != nil && j.owner == owner.Name {`,
		New:  `			if allowDuplicate && j.result != nil && j.owner == owner.Name && string(j.digest) != string(digest) {`,
	},
	{
		Name: "persist/cancel-record-not-in-result",
		Doc:  "A CANCELED job's JobResult carries no cancellation record: the request id and reason are shown in JobSummary while the job runs, and lost once it ends (JobResult.cancellation: the recorded request's id, reason and time).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old: `		result.Cancellation = j.cancellation
	}
	d.mu.Unlock()`,
		New: `		_ = j.cancellation // shown in the job's summary
	}
	d.mu.Unlock()`,
	},
	{
		Name: "cleanup/retention-ignores-run",
		Doc:  "Retention deletes an expired result by job id without checking that it is still the id's current run, so a listing made before a purge and a reuse of the id deletes the newer run's result (result retention: only the run that expired is removed).",
		File: "server/internal/dispatcher/dispatcher.go",
		Old:  `		if j != nil && (j.result == nil || j.runID != res.GetRunId() || j.purging != nil) {`,
		New:  `		if j != nil && (j.result == nil || j.purging != nil) {`,
	},
	{
		Name: "persist/cancel-answers-jobmaster-status",
		Doc:  "CancelJob answers the status the JobMaster reached, so a job that reached FINISHED just before the cancel is answered FINISHED, although the recorded cancel makes the store refuse that result and the job ends CANCELED (CancelJob: the answer is final; CANCELLING ends CANCELED).",
		File: "server/internal/dispatcher/query.go",
		Old: `		st = jobplanev1.JobStatus_JOB_STATUS_CANCELLING
		if result != nil {`,
		New: `		if result != nil {`,
	},
	{
		Name: "persist/cancel-job-terminal-from-store",
		Doc:  "A CancelJob whose cancel request the store refuses because the job has a result answers JOB_TERMINAL with the store's status at once, before this Dispatcher has the result, so GetJob and GetJobResult may still show the job running after it was answered terminal (CancelJob: JOB_TERMINAL only once the job's status is terminal here).",
		File: "server/internal/dispatcher/query.go",
		Old: `		if !errors.Is(err, hastore.ErrPlanNotFound) && !errors.Is(err, hastore.ErrJobTerminal) {
			return 0, err
		}`,
		New: `		if !errors.Is(err, hastore.ErrPlanNotFound) && !errors.Is(err, hastore.ErrJobTerminal) {
			return 0, err
		}
		if te := (*hastore.JobTerminalError)(nil); errors.As(err, &te) && te.Status != 0 {
			// The store named the result's status: that is the answer.
			return terminalCancel(jobID, &jobplanev1.JobResult{Status: te.Status})
		}`,
	},
	{
		Name: "recovery/timings-heartbeat-interval-advertised",
		Doc:  "GetClusterOverview advertises the TaskExecutors' heartbeat interval as task_executor_heartbeat_timeout (the two flags read alike), so a client or runner that waits the advertised timeout for a silent TaskExecutor to be declared lost waits too little (ServerTimings.task_executor_heartbeat_timeout: the timeout the server applies, from its configuration).",
		File: "server/internal/jobmanager/timings.go",
		Old:  `		HeartbeatTimeout: c.HeartbeatTimeout, TaskLease: c.TaskLease,`,
		New:  `		HeartbeatTimeout: c.HeartbeatInterval, TaskLease: c.TaskLease,`,
	},
	{
		Name: "recovery/resign-not-retried",
		Doc:  "A job leadership's resignation that fails (a store error) is logged and left to the session's end, so the candidacy stays in the store and every later campaign of the job by this session fails: the job is never led again while the process lives (Resign; a job's leadership given back once its runner stops).",
		File: "server/internal/runner/runner.go",
		Old: `		if err == nil || errors.Is(err, hastore.ErrStaleToken) || errors.Is(err, hastore.ErrSessionNotFound) {
			return
		}`,
		New: `		if err != nil {
			r.log.Warn("resigning the job's leadership failed; the session's end releases it", "err", err)
		}
		return`,
	},
	{
		Name: "recovery/called-off-runner-keeps-leadership",
		Doc:  "A runner called off because its process lost jobmanager (the session kept) does not resign the job's leadership and leaves it to lapse with the session, so the new jobmanager leader cannot lead the job while the old process lives (what a process does with its job/<id> leaderships when it loses jobmanager: it resigns them).",
		File: "server/internal/runner/runner.go",
		Old: `	// held, so the next campaign (here or in another process) can win.
	r.resign(ctx, l)`,
		New: `	// held, so the next campaign (here or in another process) can win;
	// a runner called off leaves it to its session's end.
	if ctx.Err() == nil {
		r.resign(ctx, l)
	}`,
	},
	{
		Name: "persist/plan-recheck-shorter-than-advertised",
		Doc:  "After a failed plan put the Dispatcher looks for a late-applied plan for a quarter of its persist timeout (2.5 s) while it advertises twice that timeout, so a plan the store applies 5 s after the answer waits for the next leader instead of running (ServerTimings.plan_recheck: a plan that appears within it runs once, with no retry by the client).",
		File: "server/internal/dispatcher/submit.go",
		Old:  `	until := time.Now().Add(d.planRecheck())`,
		New:  `	until := time.Now().Add(d.cfg.PersistTimeout / 4) // a write lands at once or not at all`,
	},
	// ---------------------------------------------------------------
	// lifecycle
	// ---------------------------------------------------------------
	{
		Name: "lifecycle/watch-behind-ends-quietly",
		Doc:  "A watch that fell so far behind that the changes it missed are no longer kept ends successfully instead of with UNAVAILABLE (STREAM_BEHIND), so its client takes the job for ended while it runs, and never resumes (WatchJob: a stream read too slowly MUST end with STREAM_BEHIND; it ends successfully only after a globally terminal status).",
		File: "server/internal/dispatcher/query.go",
		Old: `			d.mu.Unlock()
			return ErrStreamBehind`,
		New: `			d.mu.Unlock()
			return nil // what it missed is gone: the watch is over`,
	},
	{
		Name: "checkpoints/savepoint-id-per-job",
		Doc:  "A savepoint is named by its job id and checkpoint id alone, so a later run of the job id, which counts checkpoint ids from 1 again, names its savepoint as an earlier run's kept one, and the store refuses it (TriggerSavepoint: a savepoint's id must be new to the store, and so name the run).",
		File: "server/internal/jobmaster/checkpoint.go",
		Old:  `	return fmt.Sprintf("sp-%s-%x-%d", jobID, sum[:8], checkpoint)`,
		New:  `	return fmt.Sprintf("sp-%s-%d", jobID, checkpoint+0*uint64(sum[0]))`,
	},
	{
		Name: "checkpoints/inline-limit-doubled",
		Doc:  "The JobMaster takes a subtask's inline state up to twice ServerLimits.max_inline_state_bytes, so a checkpoint over the advertised limit is stored (the JobMaster MUST discard a checkpoint whose acknowledgement carries a larger state).",
		File: "server/internal/jobmaster/checkpoint.go",
		Old:  `		if n := len(st.GetInline()); n > limit {`,
		New:  `		if n := len(st.GetInline()); n > 2*limit {`,
	},
	{
		Name: "lifecycle/unasked-cancel-not-a-failure",
		Doc:  "An attempt its TaskExecutor reports CANCELED without the JobMaster having asked is taken as any other state change, not as a task failure, so the job waits on a subtask that no longer runs (RestartStrategy: an attempt CANCELED unasked is a task failure, counted by the strategy).",
		File: "server/internal/jobmaster/jobmaster.go",
		Old:  `	case to == jobstatus.ExecCanceled && from != jobstatus.ExecCanceling && !t.cancelOn && !t.canceled:`,
		New:  `	case false && to == jobstatus.ExecCanceled && from != jobstatus.ExecCanceling && !t.cancelOn && !t.canceled:`,
	},
	{
		Name: "adoption/held-cancel-taken-as-asked",
		Doc:  "An attempt AdoptAttempts lists as CANCELED is taken as one the JobMaster asked to stop, not as a task failure, so under NoRestart a subtask its TaskExecutor stopped on its own in the gap is neither counted nor failed (AdoptAttempts: an attempt listed as ended is taken as reported now, unasked: FAILED and CANCELED alike are task failures).",
		File: "server/internal/jobmaster/adopt.go",
		Old:  `			_ = jm.apply(id, st) // it ended while no JobMaster listened: as if reported now`,
		New:  `			jm.tasks[ev].cancelOn = st.GetState() == jobstatus.ExecCanceled; _ = jm.apply(id, st)`,
	},
}
