package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/server/internal/auth"
)

// The built-in policy on a running cluster: a non-owner may neither
// cancel nor read another's job (nor learn whether a job exists), nor
// take its id with a resubmission; the owner and an admin may cancel;
// the owner's resubmission of the same plan is still idempotent.
func TestPolicyOnCluster(t *testing.T) {
	t.Parallel()
	authn, err := auth.New(context.Background(), auth.Config{TokenFile: tokenFile(t)})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := auth.ParsePolicy([]byte("admins: [ops]\nsubmit: ['*']\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, authn, policy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice, bob, ops := c.client(t, sdk.WithToken(aliceToken)), c.client(t, sdk.WithToken(bobToken)), c.client(t, sdk.WithToken(opsToken))

	g := sleepJob(t)
	first, err := alice.Submit(ctx, g, sdk.WithJobID("alices"))
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created {
		t.Fatal("alice's first submission was not created")
	}
	again, err := alice.Submit(ctx, g, sdk.WithJobID("alices"))
	if err != nil || again.Created {
		t.Errorf("alice's resubmission: created %v, err %v; want the existing job", again != nil && again.Created, err)
	}

	_, err = bob.Submit(ctx, g, sdk.WithJobID("alices"))
	var dup *sdk.DuplicateJobError
	if !errors.As(err, &dup) || !dup.OtherPrincipal {
		t.Errorf("bob's submission of alice's job id: %v, want a DuplicateJobError of another principal", err)
	}
	_, err = bob.Cancel(ctx, "alices")
	wantCode(t, "bob cancels alice's job", err, connect.CodePermissionDenied)
	_, err = bob.Get(ctx, "alices")
	wantCode(t, "bob reads alice's job", err, connect.CodePermissionDenied)
	var denied *connect.Error
	errors.As(err, &denied)
	_, err = bob.Get(ctx, "no-such-job")
	wantCode(t, "bob reads a job that does not exist", err, connect.CodePermissionDenied)
	var deniedNone *connect.Error
	if errors.As(err, &deniedNone) && denied != nil &&
		strings.ReplaceAll(deniedNone.Message(), "no-such-job", "alices") != denied.Message() {
		t.Errorf("refusals for a job and for no job differ: %q and %q", denied.Message(), deniedNone.Message())
	}
	for _, err := range bob.List(ctx) {
		wantCode(t, "bob lists jobs", err, connect.CodePermissionDenied)
		break
	}
	if _, err := bob.Cluster(ctx); err != nil {
		t.Errorf("bob, a submitter, reads the cluster overview: %v", err)
	}

	det, err := alice.Get(ctx, "alices")
	if err != nil {
		t.Fatalf("alice reads her job: %v", err)
	}
	if det.GetSummary().GetSubmittedBy() != "alice" {
		t.Errorf("submitted_by %q, want alice", det.GetSummary().GetSubmittedBy())
	}
	if _, err := alice.Cancel(ctx, "alices"); err != nil {
		t.Errorf("alice cancels her job: %v", err)
	}

	if _, err := bob.Submit(ctx, g, sdk.WithJobID("bobs")); err != nil {
		t.Fatal(err)
	}
	_, err = alice.Cancel(ctx, "bobs")
	wantCode(t, "alice cancels bob's job", err, connect.CodePermissionDenied)
	if _, err := ops.Cancel(ctx, "bobs"); err != nil {
		t.Errorf("ops, an admin, cancels bob's job: %v", err)
	}
	n := 0
	for s, err := range ops.List(ctx) {
		if err != nil {
			t.Fatalf("ops lists jobs: %v", err)
		}
		n++
		if want := strings.TrimSuffix(s.GetJobId(), "s"); s.GetSubmittedBy() != want {
			t.Errorf("job %s listed as submitted by %q, want %q", s.GetJobId(), s.GetSubmittedBy(), want)
		}
	}
	if n != 2 {
		t.Errorf("ops lists %d jobs, want 2", n)
	}
}

const carolToken = "carol-token-0123456789"

// Each call's principal is logged, with the procedure, and set on the
// call's server span as enduser.id. (carol is this test's own
// principal: the spans of the package's tests are recorded together.)
func TestPrincipalInLogAndSpan(t *testing.T) {
	t.Parallel()
	authn, err := auth.New(context.Background(), auth.Config{TokenFile: writeFile(t, "tokens", "carol "+carolToken+"\n")})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, authn, auth.DefaultPolicy())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	carol := c.client(t, sdk.WithToken(carolToken))
	sub, err := carol.Submit(ctx, sleepJob(t), sdk.WithJobID("logged"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Cancel(ctx, sub.JobID); err != nil {
		t.Fatal(err)
	}

	var line string
	for l := range strings.SplitSeq(c.log.String(), "\n") {
		if strings.Contains(l, "procedure=/jobplane.v1.DispatcherService/CancelJob") {
			line = l
		}
	}
	if !strings.Contains(line, "principal=carol") || !strings.Contains(line, "auth=token") || !strings.Contains(line, "code=ok") {
		t.Errorf("the CancelJob call's log line %q does not name carol", line)
	}
	// Calls that change jobs are an audit trail, at info level; reads are
	// logged at debug level only.
	for _, l := range strings.Split(c.log.String(), "\n") {
		changes := strings.Contains(l, "DispatcherService/CancelJob") || strings.Contains(l, "DispatcherService/SubmitJob")
		if strings.Contains(l, "msg=call") && changes != strings.Contains(l, "level=INFO") && strings.Contains(l, "code=ok") {
			t.Errorf("log line %q: SubmitJob and CancelJob at INFO, other calls at DEBUG", l)
		}
	}
	if strings.Contains(c.log.String(), carolToken) {
		t.Error("the log holds carol's token")
	}

	found := false
	for _, s := range spans.Ended() {
		if s.SpanKind() != trace.SpanKindServer || s.Name() != "jobplane.v1.DispatcherService/CancelJob" {
			continue
		}
		attrs := attribute.NewSet(s.Attributes()...)
		if v, ok := attrs.Value(auth.SpanAttribute); ok && v.AsString() == "carol" {
			found = true
		}
	}
	if !found {
		t.Errorf("no server span of CancelJob with %s=carol", auth.SpanAttribute)
	}
}

// A job's owner is durable: after a restart on the same store, the new
// leader knows who submitted a running job (from its plan) and an ended
// one (from its result), and the policy holds as before.
func TestOwnerSurvivesRestart(t *testing.T) {
	t.Parallel()
	authn, err := auth.New(context.Background(), auth.Config{TokenFile: tokenFile(t)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	c, stop := newClusterOn(t, dir, authn, auth.DefaultPolicy())
	alice := c.client(t, sdk.WithToken(aliceToken))
	if _, err := alice.Submit(ctx, sleepJob(t), sdk.WithJobID("running")); err != nil {
		t.Fatal(err)
	}
	b := jobgraph.NewBuilder("quick")
	b.Vertex("v", "noop").Parallelism(1)
	quick, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if res, err := alice.Execute(ctx, quick, sdk.WithJobID("ended")); err != nil || res.GetSubmittedBy() != "alice" {
		t.Fatalf("the ended job's result: %v, %v; want one submitted by alice", res, err)
	}
	stop()

	c, _ = newClusterOn(t, dir, authn, auth.DefaultPolicy())
	alice, bob := c.client(t, sdk.WithToken(aliceToken)), c.client(t, sdk.WithToken(bobToken))
	for _, id := range []string{"running", "ended"} {
		det, err := bob.Get(ctx, id) // readers may read every job
		if err != nil {
			t.Fatalf("job %s after the restart: %v", id, err)
		}
		if got := det.GetSummary().GetSubmittedBy(); got != "alice" {
			t.Errorf("job %s after the restart: submitted_by %q, want alice", id, got)
		}
	}
	_, err = bob.Cancel(ctx, "running")
	wantCode(t, "bob cancels alice's recovered job", err, connect.CodePermissionDenied)
	_, err = bob.Submit(ctx, sleepJob(t), sdk.WithJobID("running"))
	var dup *sdk.DuplicateJobError
	if !errors.As(err, &dup) || !dup.OtherPrincipal {
		t.Errorf("bob's submission of the recovered job's id: %v, want a DuplicateJobError of another principal", err)
	}
	if _, err := alice.Cancel(ctx, "running"); err != nil {
		t.Errorf("alice cancels her recovered job: %v", err)
	}
	// The ended job's id is still alice's: her resubmission of its plan is
	// answered with the job, bob's refused.
	if sub, err := alice.Submit(ctx, quick, sdk.WithJobID("ended")); err != nil || sub.Created {
		t.Errorf("alice resubmits her ended job: %+v, %v; want the existing job", sub, err)
	}
	if _, err := bob.Submit(ctx, quick, sdk.WithJobID("ended")); !errors.As(err, &dup) || !dup.OtherPrincipal {
		t.Errorf("bob submits the ended job's id: %v, want a DuplicateJobError of another principal", err)
	}
}
