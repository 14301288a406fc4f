package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// planLeadEnv is a store with a Dispatcher leadership to fence plan puts
// and a session to lead jobs on.
type planLeadEnv struct {
	store *etcdstore.Store
	f     hastore.Fence
	sess  hastore.Session
}

func newPlanLeadEnv(t *testing.T, prefix string) (*planLeadEnv, context.Context) {
	t.Helper()
	return newPlanLeadEnvOn(t, startEmbedded(t, etcdmember.Config{}), prefix)
}

// newPlanLeadEnvOn is newPlanLeadEnv on the member e.
func newPlanLeadEnvOn(t *testing.T, e *embedded, prefix string) (*planLeadEnv, context.Context) {
	t.Helper()
	s := e.store(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, "http://jm")
	if err != nil {
		t.Fatal(err)
	}
	return &planLeadEnv{store: s, f: l.Fence(), sess: sess}, ctx
}

// A fresh job's plan and candidacy go in one write: the candidacy leads at
// once, with the write's revision as its epoch, and publishes its address.
func TestPlanAndLeadGrantsAFreshJob(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/pl/")
	l, err := env.sess.PutExecutionPlanAndLead(ctx, env.f, testPlan("fresh"), "http://jm")
	if err != nil || l == nil {
		t.Fatalf("PutExecutionPlanAndLead = %v, %v; want a leadership", l, err)
	}
	if !l.Valid() || l.Context().Err() != nil {
		t.Errorf("a fresh grant is not valid")
	}
	info, err := env.store.Leader(ctx, election.Job("fresh"))
	if err != nil || info.Token != l.Token() || info.Address != "http://jm" {
		t.Errorf("leader of the job = %+v, %v; want %v at http://jm", info, err, l.Token())
	}
	if _, err := env.store.GetExecutionPlan(ctx, "fresh"); err != nil {
		t.Errorf("plan not stored: %v", err)
	}
	// The job leadership fences like any other, and ends on Resign.
	if err := env.store.ConfirmLeadership(ctx, l.Fence(), "http://jm2"); err != nil {
		t.Errorf("write fenced by the granted leadership: %v", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := env.sess.Campaign(ctx, election.Job("fresh"), "http://jm"); err != nil || again.Token().Epoch <= l.Token().Epoch {
		t.Errorf("campaign after resigning = %v, %v; want a newer grant", again, err)
	}
}

// Neither plan nor candidacy is written when the plan put is refused: for
// a stale Dispatcher token, and for a job that has a result.
func TestPlanAndLeadAllOrNothing(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/pl/")
	stale := env.f
	stale.Token.Epoch--
	if l, err := env.sess.PutExecutionPlanAndLead(ctx, stale, testPlan("stale"), "http://jm"); !errors.Is(err, hastore.ErrStaleToken) || l != nil {
		t.Errorf("with a stale token = %v, %v; want ErrStaleToken", l, err)
	}
	if _, err := env.store.GetExecutionPlan(ctx, "stale"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan of a stale put: %v; want none", err)
	}
	if info, err := env.store.Leader(ctx, election.Job("stale")); err != nil || !info.Token.IsZero() {
		t.Errorf("leader after a stale put = %+v, %v; want none", info, err)
	}

	res := &jobplanev1.JobResult{JobId: "done", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
	if err := env.store.CreateDirtyJobResult(ctx, env.f, res); err != nil {
		t.Fatal(err)
	}
	if l, err := env.sess.PutExecutionPlanAndLead(ctx, env.f, testPlan("done"), "http://jm"); !errors.Is(err, hastore.ErrResultExists) || l != nil {
		t.Errorf("for a job with a result = %v, %v; want ErrResultExists", l, err)
	}
	if info, err := env.store.Leader(ctx, election.Job("done")); err != nil || !info.Token.IsZero() {
		t.Errorf("leader of a job with a result = %+v, %v; want none", info, err)
	}
	// The refused calls left the session free to campaign.
	if _, err := env.sess.Campaign(ctx, election.Job("stale"), "http://jm"); err != nil {
		t.Errorf("campaign after a refused call: %v", err)
	}
}

// A job whose election has a candidate gets its plan written and no
// candidacy: the caller campaigns as usual, behind the older candidate.
func TestPlanAndLeadLeavesAContestedElection(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/pl/")
	other, err := env.store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	older, err := other.Campaign(ctx, election.Job("held"), "http://old")
	if err != nil {
		t.Fatal(err)
	}
	l, err := env.sess.PutExecutionPlanAndLead(ctx, env.f, testPlan("held"), "http://jm")
	if err != nil || l != nil {
		t.Fatalf("with an older candidate = %v, %v; want the plan alone (nil, nil)", l, err)
	}
	if _, err := env.store.GetExecutionPlan(ctx, "held"); err != nil {
		t.Errorf("plan not stored: %v", err)
	}
	if info, err := env.store.Leader(ctx, election.Job("held")); err != nil || info.Token != older.Token() {
		t.Errorf("leader = %+v, %v; want the older candidate %v", info, err, older.Token())
	}
	granted := make(chan *hastore.Leadership, 1)
	go func() {
		l, err := env.sess.Campaign(ctx, election.Job("held"), "http://jm")
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	if err := older.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-granted; l == nil || l.Token().Epoch <= older.Token().Epoch {
		t.Errorf("campaign behind the older candidate = %v; want a newer grant", l)
	}
}

// A session has one candidacy per election.
func TestPlanAndLeadCandidacyExists(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/pl/")
	if _, err := env.sess.Campaign(ctx, election.Job("twice"), "http://jm"); err != nil {
		t.Fatal(err)
	}
	if l, err := env.sess.PutExecutionPlanAndLead(ctx, env.f, testPlan("twice"), "http://jm"); !errors.Is(err, hastore.ErrCandidacyExists) || l != nil {
		t.Errorf("with a candidacy in the election = %v, %v; want ErrCandidacyExists", l, err)
	}
}
