// Package storetest is the contract suite of hastore.Store: every backend
// runs it, so every backend keeps the same promises (fenced writes,
// monotonic epochs, one leader at a time, durable data).
//
// It starts no goroutine that outlives a test, and every wait in it is
// bounded by a deadline.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// T is what the suite needs of a test. *testing.T has it, and so does
// the conformance runner, which runs the suite against HA stores over
// the network.
type T interface {
	Helper()
	Cleanup(func())
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// Backend is one running instance of a store backend, made fresh for each
// test of the suite.
type Backend struct {
	// Open returns a new Store on this backend, as another process would
	// open it. The suite closes it. Required.
	Open func(t T) hastore.Store
	// Restart stops the backend's storage and starts it again on the same
	// data; stores opened before may fail afterwards and are reopened. Nil
	// if the backend cannot restart; the restart tests are then skipped.
	Restart func(t T)
	// MaxPlanBytes is the backend's plan size limit.
	MaxPlanBytes int
}

// Case is one test of the suite.
type Case struct {
	// Name names the test, as a Go subtest.
	Name string
	// Doc says what it checks.
	Doc string
	// Run runs it on a fresh backend.
	Run func(t T, b *Backend)
}

// Cases returns the suite's tests, in order.
func Cases() []Case {
	return []Case{
		{Name: "GrantConfirmLeader", Doc: "a campaign is granted and its confirmed address is the election's leader", Run: testGrantConfirmLeader},
		{Name: "ResignGrantsNext", Doc: "Resign ends a leadership and grants the next candidacy", Run: testResignGrantsNext},
		{Name: "SessionCloseRevokes", Doc: "closing a session ends its leaderships", Run: testSessionCloseRevokes},
		{Name: "LeaseExpiryRevokes", Doc: "a session not kept alive ends after its TTL, and its leaderships with it", Run: testLeaseExpiryRevokes},
		{Name: "ValidUntilBoundsTheLease", Doc: "a session holds at least until the send time of its last acknowledged KeepAlive plus the TTL", Run: testValidUntilBoundsTheLease},
		{Name: "StaleWriteFromPausedLeader", Doc: "a leader paused past its TTL is replaced, and every write of its old token is refused", Run: testStaleWriteFromPausedLeader},
		{Name: "StaleTokenRefusedForEveryWrite", Doc: "every fenced write with a token that does not lead is refused as stale and changes nothing", Run: testStaleTokenRefusedForEveryWrite},
		{Name: "TokenOfAnotherElectionRefused", Doc: "a job election's token writes no plan and no result, its own job's or another's; it covers only its own leader entry", Run: testTokenOfAnotherElectionRefused},
		{Name: "EpochsIncrease", Doc: "each grant of an election has a larger epoch than the one before", Run: testEpochsIncrease},
		{Name: "EpochsIncreaseAcrossRestart", Doc: "epochs keep increasing across a restart of the store", Run: testEpochsIncreaseAcrossRestart},
		{Name: "DataSurvivesRestart", Doc: "plans and results survive a restart of the store", Run: testDataSurvivesRestart},
		{Name: "ExecutionPlans", Doc: "plans are created once (the same plan again succeeds, another is refused), listed in order by pages, and deleted only once the job has a result", Run: testExecutionPlans},
		{Name: "CancelRequests", Doc: "a job's cancel request is recorded only while it has a plan (and no result), again without error, and goes with the plan: a new plan under the id, once the result is gone too, has none", Run: testCancelRequests},
		{Name: "CancelRecordFirstKept", Doc: "a cancel request's record (request id, reason, time) is kept as the first request gave it: a later request with another record succeeds and changes nothing; a request without one reads as an empty record; an oversized one is refused and writes nothing; the record goes with the plan", Run: testCancelRecordFirstKept},
		{Name: "CancelBeforeResult", Doc: "once a job's cancellation is requested, a FINISHED or FAILED result is refused (ErrCancelRequested) and nothing is written, by CreateDirtyJobResult and by FinishJob; a CANCELED one is written", Run: testCancelBeforeResult},
		{Name: "ResultBeforeCancel", Doc: "once a job has a result entry, its cancellation is refused (a *JobTerminalError with the result's status) and no request is recorded; the result's repetition still succeeds", Run: testResultBeforeCancel},
		{Name: "JobResults", Doc: "results are created once (the same result again succeeds, another is refused), marked clean, listed by state, and deleted only when clean", Run: testJobResults},
		{Name: "PlanCreatedOnce", Doc: "of concurrent puts of the same plan exactly one reports that it created the plan; a later repeat reports not, and so does the put of another plan, refused", Run: testPlanCreatedOnce},
		{Name: "CancelRacesResult", Doc: "for 16 jobs at once, three times, a cancel request and a FINISHED or FAILED result sent at the same instant: exactly one of the two is taken (the result refused as canceled, or the request as terminal with the result's status), and the store holds only that one", Run: testCancelRacesResult},
		{Name: "ResultCleanAfterThePlan", Doc: "a job's result is marked clean, or deleted, only once its plan is deleted: while the plan exists both are refused and change nothing (ErrPlanNotDeleted for the mark)", Run: testResultCleanAfterThePlan},
		{Name: "FinishJob", Doc: "FinishJob leaves the job's result clean with neither plan nor cancel request, again without error; over another result, or with a stale token, it is refused and writes nothing; over an equal dirty result it either completes the cleanup or is refused and writes nothing", Run: testFinishJob},
		{Name: "PutExecutionPlanAndLead", Doc: "PutExecutionPlanAndLead stores the plan as PutExecutionPlan does, with its errors, and either grants the session the job's leadership at once or leaves the campaign to the caller; a refused put enters no candidacy, and a job whose election has a candidate keeps it", Run: testPutExecutionPlanAndLead},
		{Name: "CandidacyExists", Doc: "a session has one candidacy per election", Run: testCandidacyExists},
		{Name: "CampaignCancelWithdraws", Doc: "a campaign given up before its grant leaves no candidacy", Run: testCampaignCancelWithdraws},
		{Name: "ObserveEveryChangeInOrder", Doc: "ObserveLeader reports every change of leader, in order", Run: testObserveEveryChangeInOrder},
		{Name: "NeverTwoLeaders", Doc: "under contention, grants never overlap and epochs increase", Run: testNeverTwoLeaders},
		{Name: "TaskExecutorMembership", Doc: "the TaskExecutor membership: adds and removes fenced by the jobmanager election (a stale token refused, a job election's token invalid), repeated without error, listed in id order to any client, and kept across a restart", Run: testTaskExecutorMembership},
		{Name: "CheckpointFencing", Doc: "a job's checkpoints and savepoints are written only under its own election's current token (a stale token refused, the jobmanager's or another job's invalid, the fence checked before the id), and savepoints deleted only under the jobmanager's", Run: testCheckpointFencing},
		{Name: "CheckpointIdsIncrease", Doc: "a job's checkpoint and savepoint ids strictly increase: a lower or used id is refused with the job's last id, the same checkpoint again is a retry that changes nothing, and the last id holds under a new leader and across a restart", Run: testCheckpointIDsIncrease},
		{Name: "CheckpointRetention", Doc: "a job keeps its newest retained checkpoints (0 means 1): the older ones go in the write that adds a newer one and are answered as subsumed, the latest is always there, the last id outlives them, and they are listed in id order by pages", Run: testCheckpointRetention},
		{Name: "CheckpointsGoWithTheJob", Doc: "checkpoints are added only while the job has a plan and no result entry, and go with its plan, last id included, by DeleteExecutionPlan and by FinishJob; its savepoints stay", Run: testCheckpointsGoWithTheJob},
		{Name: "Savepoints", Doc: "savepoints are created once (the same again succeeds, another under the id is refused), listed by job and by pages, outlive their job's cleanup and a restart, and are deleted only under the jobmanager's token, idempotently", Run: testSavepoints},
		{Name: "CheckpointBadInput", Doc: "malformed checkpoints and savepoints (id 0, two states of one subtask, a state without vertex, a pointer or savepoint id too long, over the size limit) are refused with a field violation naming the field, and write nothing", Run: testCheckpointBadInput},
		{Name: "BadInput", Doc: "malformed input is refused with a field violation naming the field, and writes nothing", Run: testBadInput},
	}
}

// Run runs the contract suite, calling newBackend for each test.
func Run(t *testing.T, newBackend func(t *testing.T) *Backend) {
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			tc.Run(t, newBackend(t))
		})
	}
}

// wait bounds every wait in the suite.
const wait = 20 * time.Second

func ctxFor(t T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func open(t T, b *Backend) hastore.Store {
	t.Helper()
	s := b.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func session(t T, s hastore.Store, cfg hastore.SessionConfig) hastore.Session {
	t.Helper()
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Second
	}
	sess, err := s.OpenSession(ctxFor(t), cfg)
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sess.Close(ctx)
	})
	return sess
}

func campaign(t T, sess hastore.Session, election, address string) *hastore.Leadership {
	t.Helper()
	l, err := sess.Campaign(ctxFor(t), election, address)
	if err != nil {
		t.Fatalf("Campaign(%s): %v", election, err)
	}
	return l
}

// campaignAsync campaigns in the background; the result arrives on the
// returned channel.
func campaignAsync(ctx context.Context, sess hastore.Session, election, address string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := sess.Campaign(ctx, election, address)
		ch <- campaignResult{l, err}
	}()
	return ch
}

type campaignResult struct {
	l   *hastore.Leadership
	err error
}

func awaitGrant(t T, ch <-chan campaignResult) *hastore.Leadership {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Campaign: %v", r.err)
		}
		return r.l
	case <-time.After(wait):
		t.Fatalf("no grant within %v", wait)
		return nil
	}
}

func awaitEnd(t T, l *hastore.Leadership, want error) {
	t.Helper()
	select {
	case <-l.Done():
		if cause := context.Cause(l.Context()); !errors.Is(cause, want) {
			t.Errorf("leadership ended with %v, want %v", cause, want)
		}
	case <-time.After(wait):
		t.Fatalf("leadership %v not ended within %v", l.Token(), wait)
	}
}

func leader(t T, s hastore.Store, name string) election.Leader {
	t.Helper()
	info, err := s.Leader(ctxFor(t), name)
	if err != nil {
		t.Fatalf("Leader(%s): %v", name, err)
	}
	return info
}

func plan(jobID, name string) *hastorev1.ExecutionPlan {
	return &hastorev1.ExecutionPlan{
		JobId:      jobID,
		JobGraph:   &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		Digest:     []byte(name),
		SubmitTime: timestamppb.New(time.Unix(1700000000, 0)),
	}
}

func result(jobID string, status jobplanev1.JobStatus) *jobplanev1.JobResult {
	return &jobplanev1.JobResult{JobId: jobID, Status: status, Name: "job " + jobID}
}

func wantErr(t T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func testGrantConfirmLeader(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	if info := leader(t, s, election.JobManager); !info.Token.IsZero() {
		t.Fatalf("leader before any campaign = %+v, want none", info)
	}
	sess := session(t, s, hastore.SessionConfig{})
	l := campaign(t, sess, election.JobManager, "")
	if l.Token().SessionID != sess.ID() || l.Token().Epoch == 0 {
		t.Errorf("token = %v, want session %s and a positive epoch", l.Token(), sess.ID())
	}
	if l.Election() != election.JobManager {
		t.Errorf("election = %q", l.Election())
	}
	if info := leader(t, s, election.JobManager); info.Token != l.Token() || info.Address != "" {
		t.Errorf("leader = %+v, want token %v and no address", info, l.Token())
	}
	if err := l.Confirm(ctx, "http://127.0.0.1:1"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if info := leader(t, s, election.JobManager); info.Token != l.Token() || info.Address != "http://127.0.0.1:1" {
		t.Errorf("leader after confirm = %+v", info)
	}
	// A campaign with an address publishes it with the grant.
	job := campaign(t, sess, election.Job("j1"), "http://127.0.0.1:2")
	if info := leader(t, s, election.Job("j1")); info.Token != job.Token() || info.Address != "http://127.0.0.1:2" {
		t.Errorf("job leader = %+v", info)
	}
	// Another store on the same backend sees the same leader.
	if info := leader(t, open(t, b), election.JobManager); info.Token != l.Token() {
		t.Errorf("leader seen by a second store = %+v, want %v", info, l.Token())
	}
	select {
	case <-l.Done():
		t.Error("leadership ended while held")
	default:
	}
}

func testResignGrantsNext(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	a := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "a")
	next := campaignAsync(ctx, session(t, open(t, b), hastore.SessionConfig{}), election.JobManager, "b")
	// While a leads, the second candidate waits.
	if info := leader(t, s, election.JobManager); info.Token != a.Token() {
		t.Fatalf("leader = %+v, want a", info)
	}
	select {
	case r := <-next:
		t.Fatalf("second candidate granted while the first leads: %+v", r)
	default:
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	awaitEnd(t, a, hastore.ErrResigned)
	bl := awaitGrant(t, next)
	if bl.Token().Epoch <= a.Token().Epoch {
		t.Errorf("epoch after resign = %d, want > %d", bl.Token().Epoch, a.Token().Epoch)
	}
	if info := leader(t, s, election.JobManager); info.Token != bl.Token() || info.Address != "b" {
		t.Errorf("leader = %+v, want b", info)
	}
	// Resigning again with the old token changes nothing.
	if err := s.Resign(ctx, a.Fence()); err != nil {
		t.Errorf("second Resign: %v", err)
	}
	if info := leader(t, s, election.JobManager); info.Token != bl.Token() {
		t.Errorf("leader after stale resign = %+v, want b", info)
	}
}

func testSessionCloseRevokes(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sa := session(t, s, hastore.SessionConfig{})
	a := campaign(t, sa, election.JobManager, "a")
	ja := campaign(t, sa, election.Job("j"), "a")
	next := campaignAsync(ctx, session(t, open(t, b), hastore.SessionConfig{}), election.JobManager, "b")
	if err := sa.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	awaitEnd(t, a, hastore.ErrSessionEnded)
	awaitEnd(t, ja, hastore.ErrSessionEnded)
	select {
	case <-sa.Done():
	case <-time.After(wait):
		t.Fatal("session not done after Close")
	}
	bl := awaitGrant(t, next)
	if bl.Token().Epoch <= a.Token().Epoch {
		t.Errorf("epoch = %d, want > %d", bl.Token().Epoch, a.Token().Epoch)
	}
	if _, err := sa.Campaign(ctx, election.JobManager, ""); !errors.Is(err, hastore.ErrSessionNotFound) {
		t.Errorf("Campaign on a closed session: err = %v, want ErrSessionNotFound", err)
	}
	if info := leader(t, s, election.Job("j")); !info.Token.IsZero() {
		t.Errorf("job election still led after its session closed: %+v", info)
	}
}

func testLeaseExpiryRevokes(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{TTL: time.Second, ManualKeepAlive: true})
	if ttl, err := sess.KeepAlive(ctx); err != nil || ttl != time.Second {
		t.Fatalf("KeepAlive = %v, %v; want 1s", ttl, err)
	}
	l := campaign(t, sess, election.JobManager, "")
	// No more renewals: the session expires after its TTL.
	awaitEnd(t, l, hastore.ErrSessionEnded)
	select {
	case <-sess.Done():
	case <-time.After(wait):
		t.Fatal("session not done after expiry")
	}
	if _, err := sess.KeepAlive(ctx); !errors.Is(err, hastore.ErrSessionNotFound) {
		t.Errorf("KeepAlive after expiry: err = %v, want ErrSessionNotFound", err)
	}
	// A remote client gives its session up a little before the store
	// expires it; the store follows within the TTL.
	awaitNoLeader(t, s, election.JobManager)
}

// awaitNoLeader polls until the election has no leader, within wait.
func awaitNoLeader(t T, s hastore.Store, election string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		info := leader(t, s, election)
		if info.Token.IsZero() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader %+v still there after %v", info, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testStaleWriteFromPausedLeader(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	paused := session(t, s, hastore.SessionConfig{TTL: time.Second, ManualKeepAlive: true})
	old := campaign(t, paused, election.JobManager, "old")
	if err := s.PutExecutionPlan(ctx, old.Fence(), plan("j", "old-1")); err != nil {
		t.Fatalf("write while leading: %v", err)
	}
	// The old leader stops renewing, as a paused process would; a new
	// leader takes over once the lease has expired.
	other := open(t, b)
	fresh := awaitGrant(t, campaignAsync(ctx, session(t, other, hastore.SessionConfig{}), election.JobManager, "new"))
	if err := other.PutExecutionPlan(ctx, fresh.Fence(), plan("n", "new")); err != nil {
		t.Fatalf("write by the new leader: %v", err)
	}
	// The old leader wakes up and writes with its token: every write is
	// refused, whether or not it has noticed the loss yet. (The plan is of
	// a job without one, so that only the fence can refuse it.)
	wantErr(t, "PutExecutionPlan by the paused leader", s.PutExecutionPlan(ctx, old.Fence(), plan("k", "old-2")), hastore.ErrStaleToken)
	wantErr(t, "DeleteExecutionPlan by the paused leader", s.DeleteExecutionPlan(ctx, old.Fence(), "j"), hastore.ErrStaleToken)
	wantErr(t, "CreateDirtyJobResult by the paused leader", s.CreateDirtyJobResult(ctx, old.Fence(), result("j", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrStaleToken)
	wantErr(t, "ConfirmLeadership by the paused leader", s.ConfirmLeadership(ctx, old.Fence(), "old"), hastore.ErrStaleToken)
	if _, err := other.GetExecutionPlan(ctx, "k"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan written by the paused leader: err = %v", err)
	}
	if got, err := other.GetExecutionPlan(ctx, "j"); err != nil || got.GetJobGraph().GetName() != "old-1" {
		t.Errorf("plan j = %v, %v; want the one written while leading", got, err)
	}
	if _, err := other.GetJobResultEntry(ctx, "j"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("result written by the paused leader: err = %v", err)
	}
	if info := leader(t, other, election.JobManager); info.Address != "new" {
		t.Errorf("leader address = %q, want the new leader's", info.Address)
	}
	awaitEnd(t, old, hastore.ErrSessionEnded)
}

func testStaleTokenRefusedForEveryWrite(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	l := campaign(t, sess, election.JobManager, "")
	if err := s.PutExecutionPlan(ctx, l.Fence(), plan("kept", "kept")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDirtyJobResult(ctx, l.Fence(), result("r", jobplanev1.JobStatus_JOB_STATUS_FAILED)); err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	stale := l.Fence()
	// The session leads again: every token but this grant's is refused,
	// whatever write it comes with.
	l2 := campaign(t, sess, election.JobManager, "")
	current := l2.Fence()
	withToken := func(sessionID string, epoch uint64) hastore.Fence {
		return hastore.Fence{Election: election.JobManager, Token: election.Token{SessionID: sessionID, Epoch: epoch}}
	}
	kinds := []struct {
		name string
		f    hastore.Fence
		want error
	}{
		{"the resigned token (an older epoch of the same session)", stale, hastore.ErrStaleToken},
		{"a newer epoch", withToken(current.Token.SessionID, current.Token.Epoch+1), hastore.ErrStaleToken},
		{"another session with the current epoch", withToken("0abc", current.Token.Epoch), hastore.ErrStaleToken},
		{"another session with an older epoch", withToken("0abc", stale.Token.Epoch), hastore.ErrStaleToken},
		{"a token with epoch zero", withToken(current.Token.SessionID, 0), hastore.ErrInvalidArgument},
		{"a token without a session", withToken("", current.Token.Epoch), hastore.ErrInvalidArgument},
	}
	writes := []struct {
		name string
		do   func(f hastore.Fence) error
	}{
		{"PutExecutionPlan", func(f hastore.Fence) error { return s.PutExecutionPlan(ctx, f, plan("new", "x")) }},
		{"DeleteExecutionPlan", func(f hastore.Fence) error { return s.DeleteExecutionPlan(ctx, f, "kept") }},
		{"RequestCancel", func(f hastore.Fence) error { return s.RequestCancel(ctx, f, "kept", nil) }},
		{"CreateDirtyJobResult", func(f hastore.Fence) error {
			return s.CreateDirtyJobResult(ctx, f, result("new", jobplanev1.JobStatus_JOB_STATUS_FINISHED))
		}},
		{"MarkJobResultClean", func(f hastore.Fence) error { return s.MarkJobResultClean(ctx, f, "r") }},
		{"MarkJobResultClean of an absent result", func(f hastore.Fence) error { return s.MarkJobResultClean(ctx, f, "absent") }},
		{"DeleteJobResultEntry", func(f hastore.Fence) error { return s.DeleteJobResultEntry(ctx, f, "r") }},
		{"ConfirmLeadership", func(f hastore.Fence) error { return s.ConfirmLeadership(ctx, f, "x") }},
		{"FinishJob", func(f hastore.Fence) error {
			return s.FinishJob(ctx, f, result("new", jobplanev1.JobStatus_JOB_STATUS_FINISHED))
		}},
		{"PutExecutionPlanAndLead", func(f hastore.Fence) error {
			l, err := sess.PutExecutionPlanAndLead(ctx, f, plan("new", "x"), "")
			if l != nil {
				t.Errorf("PutExecutionPlanAndLead with a refused fence granted %v", l.Token())
			}
			return err
		}},
	}
	for _, w := range writes {
		for _, k := range kinds {
			wantErr(t, w.name+" with "+k.name, w.do(k.f), k.want)
		}
	}
	// Resigning with the older grant's token gives up nothing: the
	// session's current leadership stands.
	if err := s.Resign(ctx, stale); err != nil {
		t.Errorf("Resign with an older token of the session: %v; want it to succeed and change nothing", err)
	}
	if info := leader(t, s, election.JobManager); info.Token != current.Token {
		t.Errorf("leader after a Resign with an older token = %+v; want the current grant %s still leading", info, current.Token)
	}

	if _, err := s.GetExecutionPlan(ctx, "new"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("stale put wrote a plan: err = %v", err)
	}
	if _, err := s.GetJobResultEntry(ctx, "new"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("stale result write wrote a result: err = %v", err)
	}
	if info := leader(t, s, election.Job("new")); !info.Token.IsZero() {
		t.Errorf("stale plan put entered a candidacy: leader of the job = %+v", info)
	}
	if _, err := s.GetExecutionPlan(ctx, "kept"); err != nil {
		t.Errorf("stale delete removed a plan: %v", err)
	}
	if got, err := s.CancelRequested(ctx, "kept"); err != nil || got {
		t.Errorf("CancelRequested after a stale request = %v, %v; want false", got, err)
	}
	if e, err := s.GetJobResultEntry(ctx, "r"); err != nil || e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY {
		t.Errorf("result after stale writes = %v, %v; want dirty", e, err)
	}
}

func testTokenOfAnotherElectionRefused(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	job := campaign(t, sess, election.Job("j"), "")
	f := job.Fence()
	f.Election = election.JobManager
	wantErr(t, "write with a job token under jobmanager", s.PutExecutionPlan(ctx, f, plan("j", "x")), hastore.ErrStaleToken)
	// A job election's token covers only its own leader entry: no plan and
	// no result, of its own job or another's, although it leads.
	own := job.Fence()
	for _, w := range []struct {
		name string
		err  error
	}{
		{"PutExecutionPlan of its own job", s.PutExecutionPlan(ctx, own, plan("j", "x"))},
		{"PutExecutionPlan of another job", s.PutExecutionPlan(ctx, own, plan("other", "x"))},
		{"DeleteExecutionPlan", s.DeleteExecutionPlan(ctx, own, "j")},
		{"RequestCancel", s.RequestCancel(ctx, own, "j", nil)},
		{"CreateDirtyJobResult", s.CreateDirtyJobResult(ctx, own, result("j", jobplanev1.JobStatus_JOB_STATUS_FINISHED))},
		{"MarkJobResultClean", s.MarkJobResultClean(ctx, own, "j")},
		{"DeleteJobResultEntry", s.DeleteJobResultEntry(ctx, own, "j")},
	} {
		var verr *hastore.ValidationError
		if !errors.As(w.err, &verr) || len(verr.Violations) != 1 || verr.Violations[0].Field != "fence.election" {
			t.Errorf("%s fenced by %s: err = %v, want an invalid argument on fence.election", w.name, own.Election, w.err)
		}
	}
	for _, id := range []string{"j", "other"} {
		if _, err := s.GetExecutionPlan(ctx, id); !errors.Is(err, hastore.ErrPlanNotFound) {
			t.Errorf("plan %s written with a job token: err = %v", id, err)
		}
	}
	if _, err := s.GetJobResultEntry(ctx, "j"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("result written with a job token: err = %v", err)
	}
	if err := s.ConfirmLeadership(ctx, own, "http://127.0.0.1:3"); err != nil {
		t.Errorf("ConfirmLeadership with the job token of its own election: %v", err)
	}
}

func testEpochsIncrease(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sessions := []hastore.Session{session(t, s, hastore.SessionConfig{}), session(t, open(t, b), hastore.SessionConfig{})}
	var last uint64
	for i := range 10 {
		l := campaign(t, sessions[i%2], election.JobManager, "")
		if l.Token().Epoch <= last {
			t.Fatalf("grant %d: epoch %d, want > %d", i, l.Token().Epoch, last)
		}
		last = l.Token().Epoch
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testEpochsIncreaseAcrossRestart(t T, b *Backend) {
	if b.Restart == nil {
		t.Skip("backend cannot restart")
	}
	s := b.Open(t)
	l := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "")
	before := l.Token().Epoch
	must(t, l.Resign(ctxFor(t)))
	s.Close()
	b.Restart(t)
	s = open(t, b)
	ctx := ctxFor(t)
	// The old leader's lease may survive the restart until its TTL; the new
	// grant comes after it either way.
	next := awaitGrant(t, campaignAsync(ctx, session(t, s, hastore.SessionConfig{}), election.JobManager, ""))
	if next.Token().Epoch <= before {
		t.Errorf("epoch after restart = %d, want > %d", next.Token().Epoch, before)
	}
}

func testDataSurvivesRestart(t T, b *Backend) {
	if b.Restart == nil {
		t.Skip("backend cannot restart")
	}
	s := b.Open(t)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	l := campaign(t, sess, election.JobManager, "")
	p := plan("p1", "survivor")
	must(t, s.PutExecutionPlan(ctx, l.Fence(), p))
	must(t, s.CreateDirtyJobResult(ctx, l.Fence(), result("dirty", jobplanev1.JobStatus_JOB_STATUS_FAILED)))
	must(t, s.CreateDirtyJobResult(ctx, l.Fence(), result("clean", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	must(t, s.MarkJobResultClean(ctx, l.Fence(), "clean"))
	must(t, l.Resign(ctx))
	s.Close()
	b.Restart(t)
	s = open(t, b)
	got, err := s.GetExecutionPlan(ctx, "p1")
	if err != nil || !proto.Equal(got, p) {
		t.Errorf("plan after restart = %v, %v; want %v", got, err, p)
	}
	for id, want := range map[string]hastorev1.JobResultState{"dirty": hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY, "clean": hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN} {
		e, err := s.GetJobResultEntry(ctx, id)
		if err != nil || e.GetState() != want || e.GetResult().GetJobId() != id {
			t.Errorf("result %s after restart = %v, %v; want %v", id, e, err, want)
		}
	}
}

func must(t T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testExecutionPlans(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	l := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "")
	if _, err := s.GetExecutionPlan(ctx, "nope"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("Get of an absent plan: err = %v", err)
	}
	ids := []string{"a", "b", "c", "d", "e"}
	for _, id := range ids {
		must(t, s.PutExecutionPlan(ctx, l.Fence(), plan(id, "first")))
	}
	// A plan is never replaced; the same plan again is a repetition.
	wantErr(t, "PutExecutionPlan of another plan", s.PutExecutionPlan(ctx, l.Fence(), plan("c", "second")), hastore.ErrPlanExists)
	must(t, s.PutExecutionPlan(ctx, l.Fence(), plan("c", "first")))
	if got, err := s.GetExecutionPlan(ctx, "c"); err != nil || got.GetJobGraph().GetName() != "first" {
		t.Errorf("Get after a refused replace = %v, %v", got, err)
	}
	all, err := s.ListExecutionPlans(ctx, "", 0)
	if err != nil || fmt.Sprint(all) != fmt.Sprint(ids) {
		t.Errorf("List = %v, %v; want %v", all, err, ids)
	}
	var paged []string
	after := ""
	for range len(ids) + 1 {
		page, err := s.ListExecutionPlans(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1]
	}
	if fmt.Sprint(paged) != fmt.Sprint(ids) {
		t.Errorf("paged List = %v, want %v", paged, ids)
	}
	// A plan goes only once its job has a result entry.
	wantErr(t, "DeleteExecutionPlan without a result", s.DeleteExecutionPlan(ctx, l.Fence(), "b"), hastore.ErrResultNotFound)
	if _, err := s.GetExecutionPlan(ctx, "b"); err != nil {
		t.Errorf("Get after a refused delete: err = %v", err)
	}
	wantErr(t, "DeleteExecutionPlan of an absent plan without a result", s.DeleteExecutionPlan(ctx, l.Fence(), "nope"), hastore.ErrResultNotFound)
	must(t, s.CreateDirtyJobResult(ctx, l.Fence(), result("b", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	must(t, s.DeleteExecutionPlan(ctx, l.Fence(), "b"))
	must(t, s.DeleteExecutionPlan(ctx, l.Fence(), "b")) // idempotent
	if _, err := s.GetExecutionPlan(ctx, "b"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("Get after delete: err = %v", err)
	}
	if got, _ := s.ListExecutionPlans(ctx, "", 0); len(got) != len(ids)-1 {
		t.Errorf("List after delete = %v", got)
	}
}

func testCancelRecordFirstKept(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	record := func(id string) *jobplanev1.Cancellation {
		t.Helper()
		c, err := s.Cancellation(ctx, id)
		if err != nil {
			t.Fatalf("Cancellation(%s): %v", id, err)
		}
		return c
	}
	must(t, s.PutExecutionPlan(ctx, f, plan("r", "r")))
	must(t, s.PutExecutionPlan(ctx, f, plan("bare", "bare")))
	if c := record("r"); c != nil {
		t.Errorf("Cancellation before a request = %v; want nil", c)
	}
	tooLong := &jobplanev1.Cancellation{RequestId: strings.Repeat("x", hastore.MaxCancelRequestIDLength+1)}
	wantErr(t, "RequestCancel with an oversized request id", s.RequestCancel(ctx, f, "r", tooLong), hastore.ErrInvalidArgument)
	if c := record("r"); c != nil {
		t.Errorf("Cancellation after a refused request = %v; want nil", c)
	}
	first := &jobplanev1.Cancellation{RequestId: "req-1", Reason: "first", RequestedTime: timestamppb.New(time.Unix(1700000000, 0))}
	must(t, s.RequestCancel(ctx, f, "r", first))
	must(t, s.RequestCancel(ctx, f, "r", &jobplanev1.Cancellation{RequestId: "req-2", Reason: "second"}))
	must(t, s.RequestCancel(ctx, f, "r", nil))
	if c := record("r"); !proto.Equal(c, first) {
		t.Errorf("Cancellation after three requests = %v; want the first's, %v", c, first)
	}
	must(t, s.RequestCancel(ctx, f, "bare", nil))
	if c := record("bare"); c == nil || !proto.Equal(c, &jobplanev1.Cancellation{}) {
		t.Errorf("Cancellation of a request without a record = %v; want an empty one", c)
	}
	must(t, s.CreateDirtyJobResult(ctx, f, result("r", jobplanev1.JobStatus_JOB_STATUS_CANCELED)))
	must(t, s.DeleteExecutionPlan(ctx, f, "r"))
	if c := record("r"); c != nil {
		t.Errorf("Cancellation after the plan was deleted = %v; want nil", c)
	}
}

func testCancelRequests(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	requested := func(id string, want bool) {
		t.Helper()
		if got, err := s.CancelRequested(ctx, id); err != nil || got != want {
			t.Errorf("CancelRequested(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	wantErr(t, "RequestCancel of a job without a plan", s.RequestCancel(ctx, f, "c", nil), hastore.ErrPlanNotFound)
	requested("c", false)
	must(t, s.PutExecutionPlan(ctx, f, plan("c", "c")))
	must(t, s.PutExecutionPlan(ctx, f, plan("other", "other")))
	requested("c", false)
	must(t, s.RequestCancel(ctx, f, "c", nil))
	must(t, s.RequestCancel(ctx, f, "c", nil)) // idempotent
	requested("c", true)
	requested("other", false)
	// The request goes with the plan.
	must(t, s.CreateDirtyJobResult(ctx, f, result("c", jobplanev1.JobStatus_JOB_STATUS_CANCELED)))
	must(t, s.DeleteExecutionPlan(ctx, f, "c"))
	requested("c", false)
	wantErr(t, "RequestCancel after the plan was deleted, with the result kept", s.RequestCancel(ctx, f, "c", nil), hastore.ErrJobTerminal)
	requested("c", false)
	// Nothing of it is left for the id's next use, once its result is
	// gone too.
	must(t, s.MarkJobResultClean(ctx, f, "c"))
	must(t, s.DeleteJobResultEntry(ctx, f, "c"))
	must(t, s.PutExecutionPlan(ctx, f, plan("c", "again")))
	requested("c", false)
}

func testCancelBeforeResult(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	noResult := func(id string) {
		t.Helper()
		if e, err := s.GetJobResultEntry(ctx, id); !errors.Is(err, hastore.ErrResultNotFound) {
			t.Errorf("GetJobResultEntry(%s) after a refused result = %v, %v; want ErrResultNotFound", id, e, err)
		}
		if _, err := s.GetExecutionPlan(ctx, id); err != nil {
			t.Errorf("GetExecutionPlan(%s) after a refused result: %v; want the plan kept", id, err)
		}
		if got, err := s.CancelRequested(ctx, id); err != nil || !got {
			t.Errorf("CancelRequested(%s) after a refused result = %v, %v; want true", id, got, err)
		}
	}
	for _, id := range []string{"fin", "fail", "done"} {
		must(t, s.PutExecutionPlan(ctx, f, plan(id, id)))
		must(t, s.RequestCancel(ctx, f, id, nil))
	}
	wantErr(t, "CreateDirtyJobResult FINISHED after a cancel request", s.CreateDirtyJobResult(ctx, f, result("fin", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrCancelRequested)
	noResult("fin")
	wantErr(t, "CreateDirtyJobResult FAILED after a cancel request", s.CreateDirtyJobResult(ctx, f, result("fail", jobplanev1.JobStatus_JOB_STATUS_FAILED)), hastore.ErrCancelRequested)
	noResult("fail")
	// The job ends CANCELED instead; then the refused result is another.
	must(t, s.CreateDirtyJobResult(ctx, f, result("fin", jobplanev1.JobStatus_JOB_STATUS_CANCELED)))
	must(t, s.CreateDirtyJobResult(ctx, f, result("fin", jobplanev1.JobStatus_JOB_STATUS_CANCELED))) // a repetition
	wantErr(t, "CreateDirtyJobResult FINISHED over the CANCELED one", s.CreateDirtyJobResult(ctx, f, result("fin", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrResultExists)
	if e, err := s.GetJobResultEntry(ctx, "fin"); err != nil || e.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("entry of the canceled job = %v, %v; want CANCELED", e, err)
	}
	// Other jobs are not concerned.
	must(t, s.PutExecutionPlan(ctx, f, plan("free", "free")))
	must(t, s.CreateDirtyJobResult(ctx, f, result("free", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	wantErr(t, "FinishJob FINISHED after a cancel request", s.FinishJob(ctx, f, result("done", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrCancelRequested)
	noResult("done")
	must(t, s.FinishJob(ctx, f, result("done", jobplanev1.JobStatus_JOB_STATUS_CANCELED)))
	if _, err := s.GetExecutionPlan(ctx, "done"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("GetExecutionPlan after FinishJob CANCELED: %v; want ErrPlanNotFound", err)
	}
}

func testResultBeforeCancel(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	for _, tc := range []struct {
		id     string
		status jobplanev1.JobStatus
	}{
		{"fin", jobplanev1.JobStatus_JOB_STATUS_FINISHED},
		{"fail", jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{"canc", jobplanev1.JobStatus_JOB_STATUS_CANCELED},
	} {
		must(t, s.PutExecutionPlan(ctx, f, plan(tc.id, tc.id)))
		must(t, s.CreateDirtyJobResult(ctx, f, result(tc.id, tc.status)))
		err := s.RequestCancel(ctx, f, tc.id, nil)
		var terminal *hastore.JobTerminalError
		if !errors.As(err, &terminal) || !errors.Is(err, hastore.ErrJobTerminal) || terminal.Status != tc.status {
			t.Errorf("RequestCancel of a job with a %v result: err = %v; want a *JobTerminalError with that status", tc.status, err)
		}
		if got, err := s.CancelRequested(ctx, tc.id); err != nil || got {
			t.Errorf("CancelRequested(%s) after a refused request = %v, %v; want false", tc.id, got, err)
		}
		must(t, s.CreateDirtyJobResult(ctx, f, result(tc.id, tc.status))) // the result's repetition
	}
	// The result is what is said, also once the plan is deleted; once the
	// result is deleted too, the plan's absence.
	must(t, s.DeleteExecutionPlan(ctx, f, "fin"))
	var terminal *hastore.JobTerminalError
	if err := s.RequestCancel(ctx, f, "fin", nil); !errors.As(err, &terminal) || terminal.Status != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("RequestCancel of a job whose plan is deleted: err = %v; want a *JobTerminalError with FINISHED", err)
	}
	must(t, s.MarkJobResultClean(ctx, f, "fin"))
	must(t, s.DeleteJobResultEntry(ctx, f, "fin"))
	wantErr(t, "RequestCancel of a job without plan or result", s.RequestCancel(ctx, f, "fin", nil), hastore.ErrPlanNotFound)
}

func testJobResults(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	wantErr(t, "MarkJobResultClean without an entry", s.MarkJobResultClean(ctx, f, "a"), hastore.ErrResultNotFound)
	if _, err := s.GetJobResultEntry(ctx, "a"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("Get of an absent result: err = %v", err)
	}
	must(t, s.CreateDirtyJobResult(ctx, f, result("a", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	wantErr(t, "CreateDirtyJobResult of another result", s.CreateDirtyJobResult(ctx, f, result("a", jobplanev1.JobStatus_JOB_STATUS_FAILED)), hastore.ErrResultExists)
	must(t, s.CreateDirtyJobResult(ctx, f, result("a", jobplanev1.JobStatus_JOB_STATUS_FINISHED))) // a repetition
	wantErr(t, "DeleteJobResultEntry of a dirty entry", s.DeleteJobResultEntry(ctx, f, "a"), hastore.ErrResultDirty)
	must(t, s.MarkJobResultClean(ctx, f, "a"))
	must(t, s.MarkJobResultClean(ctx, f, "a")) // idempotent
	wantErr(t, "PutExecutionPlan of a job with a result", s.PutExecutionPlan(ctx, f, plan("a", "again")), hastore.ErrResultExists)
	if _, err := s.GetExecutionPlan(ctx, "a"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan of a finished job was stored: err = %v", err)
	}
	wantErr(t, "CreateDirtyJobResult over a clean entry", s.CreateDirtyJobResult(ctx, f, result("a", jobplanev1.JobStatus_JOB_STATUS_FAILED)), hastore.ErrResultExists)
	must(t, s.CreateDirtyJobResult(ctx, f, result("a", jobplanev1.JobStatus_JOB_STATUS_FINISHED))) // a late repetition leaves it clean
	e, err := s.GetJobResultEntry(ctx, "a")
	if err != nil || e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN || e.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("entry = %v, %v; want clean FINISHED", e, err)
	}
	must(t, s.CreateDirtyJobResult(ctx, f, result("b", jobplanev1.JobStatus_JOB_STATUS_CANCELED)))
	must(t, s.CreateDirtyJobResult(ctx, f, result("c", jobplanev1.JobStatus_JOB_STATUS_FAILED)))
	ids := func(entries []*hastorev1.JobResultEntry) (out []string) {
		for _, e := range entries {
			out = append(out, e.GetResult().GetJobId())
		}
		return out
	}
	for _, tc := range []struct {
		state hastorev1.JobResultState
		after string
		limit int
		want  string
	}{
		{hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED, "", 0, "[a b c]"},
		{hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY, "", 0, "[b c]"},
		{hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN, "", 0, "[a]"},
		{hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED, "a", 1, "[b]"},
		{hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY, "b", 5, "[c]"},
	} {
		got, err := s.ListJobResultEntries(ctx, tc.state, tc.after, tc.limit)
		if err != nil || fmt.Sprint(ids(got)) != tc.want {
			t.Errorf("List(%v, %q, %d) = %v, %v; want %s", tc.state, tc.after, tc.limit, ids(got), err, tc.want)
		}
	}
	must(t, s.DeleteJobResultEntry(ctx, f, "a"))
	must(t, s.DeleteJobResultEntry(ctx, f, "a")) // idempotent
	if _, err := s.GetJobResultEntry(ctx, "a"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("Get after delete: err = %v", err)
	}
}

func testCandidacyExists(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	l := campaign(t, sess, election.JobManager, "")
	if _, err := sess.Campaign(ctx, election.JobManager, ""); !errors.Is(err, hastore.ErrCandidacyExists) {
		t.Errorf("second campaign on one session: err = %v, want ErrCandidacyExists", err)
	}
	// Other elections on the same session are fine.
	campaign(t, sess, election.Job("j"), "")
	// Once the leadership ends, the session may campaign again.
	must(t, l.Resign(ctx))
	again := campaign(t, sess, election.JobManager, "")
	if again.Token().Epoch <= l.Token().Epoch {
		t.Errorf("epoch = %d, want > %d", again.Token().Epoch, l.Token().Epoch)
	}
}

func testCampaignCancelWithdraws(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	a := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "")
	cctx, cancel := context.WithCancel(ctx)
	waiting := campaignAsync(cctx, session(t, open(t, b), hastore.SessionConfig{}), election.JobManager, "")
	cancel()
	select {
	case r := <-waiting:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("canceled campaign: err = %v, want context.Canceled", r.err)
		}
	case <-time.After(wait):
		t.Fatal("canceled campaign did not return")
	}
	must(t, a.Resign(ctx))
	if info := leader(t, s, election.JobManager); !info.Token.IsZero() {
		t.Errorf("withdrawn candidate became leader: %+v", info)
	}
}

func testObserveEveryChangeInOrder(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	name := election.Job("observed")
	events := make(chan election.Leader, 16)
	octx, stop := context.WithCancel(ctx)
	observed := make(chan error, 1)
	go func() {
		observed <- s.ObserveLeader(octx, name, func(info election.Leader) error {
			events <- info
			return nil
		})
	}()
	defer func() {
		stop()
		if err := <-observed; !errors.Is(err, context.Canceled) {
			t.Errorf("ObserveLeader returned %v, want context.Canceled", err)
		}
	}()
	next := func(what string) election.Leader {
		t.Helper()
		select {
		case info := <-events:
			return info
		case <-time.After(wait):
			t.Fatalf("no event for %s within %v", what, wait)
			return election.Leader{}
		}
	}
	if info := next("the initial state"); !info.Token.IsZero() {
		t.Fatalf("initial = %+v, want no leader", info)
	}
	sa := session(t, open(t, b), hastore.SessionConfig{})
	a := campaign(t, sa, name, "")
	if info := next("a's grant"); info.Token != a.Token() || info.Address != "" || info.Election != name {
		t.Fatalf("event = %+v, want a without address", info)
	}
	must(t, a.Confirm(ctx, "a-addr"))
	if info := next("a's address"); info.Token != a.Token() || info.Address != "a-addr" {
		t.Fatalf("event = %+v, want a at a-addr", info)
	}
	sb := session(t, open(t, b), hastore.SessionConfig{})
	bwait := campaignAsync(ctx, sb, name, "b-addr")
	// A waiting candidate changes nothing an observer sees; resigning a
	// hands over to it.
	must(t, a.Resign(ctx))
	bl := awaitGrant(t, bwait)
	info := next("b's grant")
	if info.Token.IsZero() {
		// b's candidacy had not reached the store when a resigned: the
		// election was leaderless in between.
		info = next("b's grant")
	}
	if info.Token != bl.Token() || info.Address != "b-addr" {
		t.Fatalf("event = %+v, want b at b-addr", info)
	}
	must(t, sb.Close(ctx))
	if info := next("b's end"); !info.Token.IsZero() {
		t.Fatalf("event = %+v, want no leader", info)
	}
	select {
	case info := <-events:
		t.Errorf("unexpected extra event %+v", info)
	default:
	}
}

func testNeverTwoLeaders(t T, b *Backend) {
	const (
		campaigners = 6
		rounds      = 5
	)
	ctx := ctxFor(t)
	name := election.Job("contended")
	var (
		holder  atomic.Value // the token of the leader that believes it leads
		mu      sync.Mutex
		epochs  []uint64
		wg      sync.WaitGroup
		failure = make(chan error, campaigners)
	)
	holder.Store(election.Token{})
	for i := range campaigners {
		s := open(t, b)
		sess := session(t, s, hastore.SessionConfig{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				l, err := sess.Campaign(ctx, name, fmt.Sprint(i))
				if err != nil {
					failure <- fmt.Errorf("campaigner %d round %d: %w", i, r, err)
					return
				}
				if !holder.CompareAndSwap(election.Token{}, l.Token()) {
					failure <- fmt.Errorf("campaigner %d granted %v while %v leads", i, l.Token(), holder.Load())
					return
				}
				// The leader's fenced write succeeds while it leads.
				if err := s.ConfirmLeadership(ctx, l.Fence(), fmt.Sprintf("%d-%d", i, r)); err != nil {
					failure <- fmt.Errorf("campaigner %d write: %w", i, err)
					return
				}
				mu.Lock()
				epochs = append(epochs, l.Token().Epoch)
				mu.Unlock()
				holder.Store(election.Token{})
				if err := l.Resign(ctx); err != nil {
					failure <- fmt.Errorf("campaigner %d resign: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(failure)
	for err := range failure {
		t.Error(err)
	}
	if len(epochs) != campaigners*rounds {
		t.Fatalf("%d grants, want %d", len(epochs), campaigners*rounds)
	}
	for i := 1; i < len(epochs); i++ {
		if epochs[i] <= epochs[i-1] {
			t.Errorf("grant %d has epoch %d after %d: grants overlapped or went back", i, epochs[i], epochs[i-1])
		}
	}
}

func testBadInput(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	good := campaign(t, sess, election.JobManager, "").Fence()
	badElection := good
	badElection.Election = "workers"
	noEpoch := good
	noEpoch.Token.Epoch = 0
	noSession := good
	noSession.Token.SessionID = ""
	big := plan("big", "big")
	big.JobGraph.Vertices[0].Config = map[string]string{"blob": string(make([]byte, b.MaxPlanBytes))}

	for _, tc := range []struct {
		name  string
		field string
		call  func() error
	}{
		{"empty election", "election", func() error { _, err := sess.Campaign(ctx, "", ""); return err }},
		{"unknown election", "election", func() error { _, err := sess.Campaign(ctx, "workers", ""); return err }},
		{"job election without id", "election", func() error { _, err := sess.Campaign(ctx, "job/", ""); return err }},
		{"job election with bad id", "election", func() error { _, err := sess.Campaign(ctx, "job/a b", ""); return err }},
		{"nested election", "election", func() error { _, err := sess.Campaign(ctx, "jobmanager/x", ""); return err }},
		{"leader of unknown election", "election", func() error { _, err := s.Leader(ctx, "nope"); return err }},
		{"zero ttl", "ttl", func() error { _, err := s.OpenSession(ctx, hastore.SessionConfig{}); return err }},
		{"fence with unknown election", "fence.election", func() error { return s.PutExecutionPlan(ctx, badElection, plan("x", "x")) }},
		{"fence without epoch", "fence.token.epoch", func() error { return s.PutExecutionPlan(ctx, noEpoch, plan("x", "x")) }},
		{"fence without session", "fence.token.session_id", func() error { return s.DeleteExecutionPlan(ctx, noSession, "x") }},
		{"plan without job id", "plan.job_id", func() error { return s.PutExecutionPlan(ctx, good, plan("", "x")) }},
		{"plan with bad job id", "plan.job_id", func() error { return s.PutExecutionPlan(ctx, good, plan("a/b", "x")) }},
		{"plan without graph", "plan.job_graph", func() error { return s.PutExecutionPlan(ctx, good, &hastorev1.ExecutionPlan{JobId: "x"}) }},
		{"nil plan", "plan", func() error { return s.PutExecutionPlan(ctx, good, nil) }},
		{"plan over the size limit", "plan", func() error { return s.PutExecutionPlan(ctx, good, big) }},
		{"get with empty id", "job_id", func() error { _, err := s.GetExecutionPlan(ctx, ""); return err }},
		{"delete with empty id", "job_id", func() error { return s.DeleteExecutionPlan(ctx, good, "") }},
		{"result without status", "result.status", func() error {
			return s.CreateDirtyJobResult(ctx, good, result("x", jobplanev1.JobStatus_JOB_STATUS_RUNNING))
		}},
		{"result without job id", "result.job_id", func() error {
			return s.CreateDirtyJobResult(ctx, good, result("", jobplanev1.JobStatus_JOB_STATUS_FINISHED))
		}},
		{"mark clean with empty id", "job_id", func() error { return s.MarkJobResultClean(ctx, good, "") }},
		{"finish without status", "result.status", func() error {
			return s.FinishJob(ctx, good, result("x", jobplanev1.JobStatus_JOB_STATUS_RUNNING))
		}},
		{"plan and lead without graph", "plan.job_graph", func() error {
			_, err := sess.PutExecutionPlanAndLead(ctx, good, &hastorev1.ExecutionPlan{JobId: "x"}, "")
			return err
		}},
		{"confirm without address", "address", func() error { return s.ConfirmLeadership(ctx, good, "") }},
		{"resign with malformed token", "fence.token.epoch", func() error { return s.Resign(ctx, noEpoch) }},
		{"negative page size", "page_size", func() error { _, err := s.ListExecutionPlans(ctx, "", -1); return err }},
	} {
		err := tc.call()
		var verr *hastore.ValidationError
		switch {
		case !errors.Is(err, hastore.ErrInvalidArgument) || !errors.As(err, &verr):
			t.Errorf("%s: err = %v, want a ValidationError", tc.name, err)
		case !hasField(verr, tc.field):
			t.Errorf("%s: violations %+v lack field %q", tc.name, verr.Violations, tc.field)
		}
	}
	// Nothing was written.
	if ids, err := s.ListExecutionPlans(ctx, "", 0); err != nil || len(ids) != 0 {
		t.Errorf("plans after bad input = %v, %v; want none", ids, err)
	}
	if entries, err := s.ListJobResultEntries(ctx, hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED, "", 0); err != nil || len(entries) != 0 {
		t.Errorf("results after bad input = %v, %v; want none", entries, err)
	}
	if info := leader(t, s, election.JobManager); info.Token != good.Token || info.Address != "" {
		t.Errorf("leader after bad input = %+v", info)
	}
}

func hasField(e *hastore.ValidationError, field string) bool {
	for _, v := range e.Violations {
		if v.Field == field {
			return true
		}
	}
	return false
}

// ValidUntil never promises more than the lease gives: it lies within a
// TTL of when the session was opened, moves forward with renewals, and
// is zero (and every leadership invalid) once the session ended.
func testValidUntilBoundsTheLease(t T, b *Backend) {
	s := open(t, b)
	const ttl = 2 * time.Second
	before := time.Now()
	sess := session(t, s, hastore.SessionConfig{TTL: ttl})
	after := time.Now()
	first := sess.ValidUntil()
	if !first.After(after) || first.After(after.Add(sess.TTL())) || first.Before(before.Add(sess.TTL()/2)) {
		t.Fatalf("ValidUntil right after opening = now%+v, want within (now, now+TTL]", time.Until(first))
	}
	l := campaign(t, sess, election.JobManager, "http://127.0.0.1:1")
	if !l.Valid() {
		t.Fatal("a fresh leadership is not valid")
	}
	// Renewals move it forward (several come in each TTL).
	deadline := time.Now().Add(wait)
	for !sess.ValidUntil().After(first) {
		if time.Now().After(deadline) {
			t.Fatalf("ValidUntil never moved past %v", first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := sess.Close(ctxFor(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if v := sess.ValidUntil(); !v.IsZero() {
		t.Errorf("ValidUntil after Close = %v, want zero", v)
	}
	if l.Valid() {
		t.Error("a leadership of a closed session is valid")
	}
}
