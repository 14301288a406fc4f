package runner

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/planid"
	"github.com/jobplane/jobplane/server/hastore"
)

var idempotencyCases = []Case{
	{Name: "idempotency/resubmit-while-running", Requires: []string{FeatureResourceManager},
		Doc: "an identical resubmission of a RUNNING job returns it (created=false) and starts nothing new", Run: func(t *T) {
			id := t.job("j")
			t.mustSubmit(id, gatedGraph(2, id))
			t.waitRunning(id, 2)
			resp := t.mustSubmit(id, gatedGraph(2, id))
			if resp.GetCreated() || resp.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
				t.Errorf("resubmit answered created=%v %v; expected created=false RUNNING", resp.GetCreated(), resp.GetStatus())
			}
			t.env.open(id)
			t.finishedOnce(id, 4)
		}},
	{Name: "idempotency/resubmit-while-initializing", Requires: []string{FeatureResourceManager},
		Doc: "an identical resubmission while the job's JobMaster is not yet granted returns the job (created=false)", Run: func(t *T) {
			id := t.job("j")
			// Hold the job's campaign: the job stays INITIALIZING.
			hold := make(chan struct{})
			t.env.store.arm(fault{op: "campaign", key: id, hold: hold})
			t.mustSubmit(id, noopGraph(2))
			resp := t.mustSubmit(id, noopGraph(2))
			close(hold)
			if resp.GetCreated() || resp.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_INITIALIZING {
				t.Errorf("resubmit answered created=%v %v; expected created=false INITIALIZING", resp.GetCreated(), resp.GetStatus())
			}
			t.finishedOnce(id, 2)
		}},
	{Name: "idempotency/resubmit-after-finished", Requires: []string{FeatureResourceManager},
		Doc: "resubmitting a FINISHED job returns FINISHED and never runs it again", Run: func(t *T) {
			for _, sh := range shapes {
				t.resubmitTerminal(sh.graph, jobplanev1.JobStatus_JOB_STATUS_FINISHED, nil)
			}
		}},
	{Name: "idempotency/resubmit-after-failed", Requires: []string{FeatureResourceManager},
		Doc: "resubmitting a FAILED job returns FAILED and never runs it again", Run: func(t *T) {
			t.resubmitTerminal(failGraph(), jobplanev1.JobStatus_JOB_STATUS_FAILED, nil)
		}},
	{Name: "idempotency/resubmit-after-canceled", Requires: []string{FeatureResourceManager},
		Doc: "resubmitting a CANCELED job returns CANCELED and never runs it again", Run: func(t *T) {
			t.resubmitTerminal(gatedGraph(1, "never"), jobplanev1.JobStatus_JOB_STATUS_CANCELED, func(id string) {
				t.waitRunning(id, 1)
				t.cancel(id)
			})
		}},
	{Name: "idempotency/different-plan", Doc: "the same job id with a different plan is ALREADY_EXISTS (JOB_ALREADY_EXISTS) and writes nothing", Run: func(t *T) {
		id := t.job("j")
		t.mustSubmit(id, noopGraph(1))
		_, err := t.submit(id, noopGraph(2))
		if connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "JOB_ALREADY_EXISTS" {
			t.Errorf("different plan answered %v; expected ALREADY_EXISTS with reason JOB_ALREADY_EXISTS", err)
		}
		if n := len(ok(t.events(id, "put-plan"))); n != 1 {
			t.Errorf("%d plan puts for the job; expected 1", n)
		}
	}},
	{Name: "idempotency/plan-identity", Requires: []string{FeatureResourceManager},
		Doc: "while the job runs and after it ended, a plan that differs in any part (a config entry, the order of edges or vertices, an override, a restart setting, a sub-second duration, a name) is ALREADY_EXISTS, and one written otherwise with the same meaning is created=false", Run: planIdentity},
	{Name: "idempotency/different-plan-after-lost-ack", Requires: []string{FeatureResourceManager},
		Doc: "a plan put applied with its answer lost (and its read-back failing, so the server cannot tell), then another plan under the same id: ALREADY_EXISTS, and the job runs the first plan, once", Run: func(t *T) {
			id := t.job("j")
			t.env.store.arm(fault{op: "put-plan", key: id, after: hastore.ErrUnavailable})
			t.env.store.arm(fault{op: "get-plan", key: id, before: hastore.ErrUnavailable})
			_, _ = t.submit(id, chainGraph(1))
			_, err := t.submit(id, noopGraph(2))
			if connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "JOB_ALREADY_EXISTS" {
				t.Errorf("another plan under the id of a durable plan (its put's answer lost) answered %v; expected ALREADY_EXISTS (JOB_ALREADY_EXISTS): a plan is never replaced", err)
			}
			t.submitRetrying(id, chainGraph(1))
			t.finishedOnce(id, 3)
		}},
	{Name: "idempotency/retry-in-another-encoding", Requires: []string{FeatureResourceManager},
		Doc: "the same plan resubmitted in JSON, map entries reordered and default or equivalent values written out, is created=false with one plan put", Run: retryInAnotherEncoding},
	{Name: "idempotency/concurrent-identical", Requires: []string{FeatureResourceManager},
		Doc: "16 concurrent identical submissions: one created, one plan put, one job campaign, each subtask deployed once", Run: func(t *T) {
			id := t.job("j")
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				created int
				errs    []error
			)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := t.submit(id, gatedGraph(2, id))
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					} else if resp.GetCreated() {
						created++
					}
				}()
			}
			wg.Wait()
			if created != 1 || len(errs) > 0 {
				t.Errorf("%d answers created=true, errors %v; expected exactly 1 created and no error", created, errs)
			}
			t.env.open(id)
			t.finishedOnce(id, 4)
			if n := len(ok(t.events(id, "put-plan"))); n != 1 {
				t.Errorf("%d plan puts; expected 1", n)
			}
			if n := len(t.events(id, "campaign")); n != 1 {
				t.Errorf("%d campaigns for job/%s; expected 1", n, id)
			}
		}},
	{Name: "idempotency/retry-after-lost-ack", Requires: []string{FeatureResourceManager},
		Doc: "a plan put whose answer is lost, then a client retry: the job runs exactly once, for graphs of every shape", Run: func(t *T) {
			for _, sh := range shapes {
				id := t.job(sh.name)
				t.env.store.arm(fault{op: "put-plan", key: id, after: hastore.ErrUnavailable})
				var err error
				for i := range 5 {
					if _, err = t.submit(id, sh.graph); err == nil {
						break
					}
					if i == 0 && reason(err) == "PERSIST_FAILED" {
						t.Errorf("%s graph: SubmitJob whose plan put the store applied (its answer lost) answered %v; expected success or PERSIST_OUTCOME_UNKNOWN: the plan is durable, which a read-back shows", sh.name, err)
					}
				}
				if err != nil {
					t.Fatalf("%s graph: submit with retries: %v; expected it accepted", sh.name, err)
				}
				t.finishedOnce(id, sh.subtasks)
			}
		}},
	{Name: "idempotency/resubmit-after-failed-persist", Requires: []string{FeatureResourceManager},
		Doc: "a submission whose plan put failed is an error; the resubmission runs the job once, for graphs of every shape", Run: func(t *T) {
			for _, sh := range shapes {
				id := t.job(sh.name)
				t.env.store.arm(fault{op: "put-plan", key: id, before: hastore.ErrUnavailable})
				if _, err := t.submit(id, sh.graph); err == nil {
					t.Errorf("%s graph: submit with a failed plan put succeeded; expected an error", sh.name)
				}
				t.mustSubmit(id, sh.graph)
				t.finishedOnce(id, sh.subtasks)
			}
		}},
}

// finishedOnce waits for the job to finish and checks that each of its
// subtasks (n in all) was deployed once, all with attempt 0.
func (t *T) finishedOnce(id string, n int) {
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job %s ended %v (%s); expected FINISHED", id, r.GetStatus(), r.GetFailure().GetMessage())
	}
	t.deployedOnce(id, n)
	if c := len(t.events(id, "campaign")); c != 1 {
		t.Errorf("%d campaigns for job/%s; expected 1 (one JobMaster, as nothing revoked it)", c, id)
	}
}

// deployedOnce checks that n distinct attempts of the job were deployed,
// each once.
func (t *T) deployedOnce(id string, n int) {
	seen := map[string]int{}
	for _, e := range t.events(id, "SubmitTask") {
		seen[e.Attempt]++
	}
	for a, k := range seen {
		if k > 1 {
			t.Errorf("attempt %s deployed %d times; expected once", a, k)
		}
	}
	if len(seen) != n {
		t.Errorf("%d attempts deployed (%v); expected %d, each subtask once", len(seen), keys(seen), n)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// cancel cancels a job.
func (t *T) cancel(id string) *jobplanev1.CancelJobResponse {
	resp, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("CancelJob(%s): %v; expected the job canceled", id, err)
	}
	return resp
}

// resubmitTerminal runs g to want (after, if set, acts on the running
// job), resubmits it, and checks that nothing runs again.
func (t *T) resubmitTerminal(g *jobplanev1.JobGraph, want jobplanev1.JobStatus, after func(id string)) {
	id := t.job(g.GetName())
	t.mustSubmit(id, g)
	if after != nil {
		after(id)
	}
	if r := t.result(id); r.GetStatus() != want {
		t.Fatalf("job ended %v; expected %v", r.GetStatus(), want)
	}
	deployed := len(t.events(id, "SubmitTask"))
	resp := t.mustSubmit(id, g)
	if resp.GetCreated() || resp.GetStatus() != want {
		t.Errorf("resubmit answered created=%v %v; expected created=false %v", resp.GetCreated(), resp.GetStatus(), want)
	}
	t.barrier()
	if n := len(t.events(id, "SubmitTask")); n != deployed {
		t.Errorf("%d deployments after the resubmission; expected none", n-deployed)
	}
	if n := len(t.events(id, "campaign")); n != 1 {
		t.Errorf("%d campaigns for the job; expected 1", n)
	}
}

// identityGraph is a gated graph with what plan identity normalizes: map
// entries, and a config whose values all mean "unset" in the JSON form of
// retryInJSON.
func identityGraph(gate string) *jobplanev1.JobGraph {
	g := gatedGraph(1, gate)
	g.Vertices[1].Config["b"] = "2"
	g.Vertices[1].Config["a"] = "1"
	return g
}

// identityJSON is identityGraph(gate) submitted as id, hand-written in
// JSON: fields and map entries in another order, defaults written out,
// and each value that the contract gives the meaning of unset.
func identityJSON(id, gate string) string {
	return fmt.Sprintf(`{"jobGraph": {
		"config": {"schedulingMode": "SCHEDULING_MODE_PIPELINED_REGION", "restartStrategy": {"none": {}},
			"clientHeartbeatTimeout": "0s", "parallelismOverrides": {"no-such-vertex": 3}},
		"edges": [{"resultType": "RESULT_PARTITION_TYPE_PIPELINED", "distribution": "DISTRIBUTION_PATTERN_ALL_TO_ALL",
			"targetVertexId": "sink", "sourceVertexId": "src"}],
		"vertices": [
			{"maxParallelism": 0, "parallelism": 1, "invokable": "noop", "name": "src", "id": "src"},
			{"config": {"b": "2", "gate": %q, "a": "1"}, "parallelism": 1, "invokable": "gate", "name": "", "id": "sink"}],
		"name": "gated"}, "jobId": %q}`, gate, id)
}

func retryInAnotherEncoding(t *T) {
	id := t.job("j")
	t.mustSubmit(id, identityGraph(id))
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	info, err := t.env.leader(ctx, election.JobManager)
	if err != nil {
		t.Fatalf("the Dispatcher's address: %v", err)
	}
	// The hand-written JSON goes out as it is, in the JSON form of the
	// protocol the runner speaks (Connect's application/json, gRPC's
	// application/grpc+json, gRPC-Web's application/grpc-web+json).
	submit := connect.NewClient[jobplanev1.SubmitJobRequest, jobplanev1.SubmitJobResponse](t.env.http, info.Address+jobplanev1connect.DispatcherServiceSubmitJobProcedure,
		append(t.env.cfg.wire.options(), connect.WithCodec(rawJSON(identityJSON(id, id))))...)
	resp, err := submit.CallUnary(ctx, connect.NewRequest(&jobplanev1.SubmitJobRequest{}))
	switch {
	case err != nil:
		t.Errorf("the same plan in JSON (map entries reordered, defaults and equivalent values written out) answered %v; expected OK, created=false", err)
	case resp.Msg.GetCreated():
		t.Errorf("the same plan in JSON answered created=true; expected created=false: the plan is the same whatever its encoding (see JobGraph)")
	}
	if n := len(ok(t.events(id, "put-plan"))); n != 1 {
		t.Errorf("%d plan puts for the job; expected 1", n)
	}
	t.env.open(id)
	t.finishedOnce(id, 2)
}

func planDigestCanonical(t *T) {
	id := t.job("j")
	g := identityGraph(id)
	want := planid.Digest(g)
	t.mustSubmit(id, g)
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	plan, err := t.env.etcd.GetExecutionPlan(ctx, id)
	if err != nil {
		t.Fatalf("the job's plan after the ack: %v; expected it stored", err)
	}
	if !bytes.Equal(plan.GetDigest(), want) {
		t.Errorf("the stored plan's digest is %x; expected %x, the SHA-256 of the normalized graph's canonical encoding (see JobGraph)", plan.GetDigest(), want)
	}
	t.env.open(id)
	t.finishedOnce(id, 2)
	entry, err := t.env.etcd.GetJobResultEntry(ctx, id)
	if err != nil || !bytes.Equal(entry.GetResult().GetPlanDigest(), want) {
		t.Errorf("the stored result's plan digest is %x (%v); expected %x", entry.GetResult().GetPlanDigest(), err, want)
	}
}

// rawJSON is a codec named "json" that sends the hand-written JSON body
// it holds, whatever message it is given, and reads answers as protobuf
// JSON.
type rawJSON string

func (c rawJSON) Name() string { return "json" }

func (c rawJSON) Marshal(any) ([]byte, error) { return []byte(c), nil }

func (c rawJSON) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("rawJSON: %T is no protobuf message", m)
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, msg)
}
