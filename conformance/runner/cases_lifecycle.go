package runner

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

var lifecycleCases = []Case{
	{Name: "lifecycle/list-task-executors", Requires: []string{FeatureResourceManager},
		Doc: "ListTaskExecutors lists each of the runner's TaskExecutors with its invokables (gate and counter among them) and slots, and, while a job runs on two slots, those slots as allocated to the job; with two or more, a page of one ends with the token the contract gives (base64url of the first one's id)", Run: listTaskExecutors},
	{Name: "lifecycle/attached-job", Requires: []string{FeatureResourceManager},
		Doc: "a job with client_heartbeat_timeout 2s runs on while ReportClientHeartbeat comes every 300ms (each answer names a timeout), and is CANCELED within 30s once the heartbeats stop", Run: attachedJob},
	{Name: "lifecycle/task-output", Requires: []string{FeatureResourceManager},
		Doc: "GetTaskOutput of an ended job's subtask returns what its task logged on the runner's TaskExecutor (the built-in count's \"counting from 0 to 3\"), marked ended, with next_offset past it", Run: taskOutput},
	{Name: "lifecycle/list-jobs-pages", Doc: "ListJobs a page of 2 at a time, with jobs submitted between pages: every job submitted before the first page is listed exactly once, newest submission first, no page over its size, and the jobs submitted meanwhile are not listed after the token's place; each page token is the contract's (base64url of 0x01, the page's last submit time in Unix nanoseconds, its job id)", Run: listJobsPages},
	{Name: "lifecycle/unknown-fields-refused", Doc: "a SubmitJob carrying a field number the schema does not have, deep in the graph's config, is INVALID_ARGUMENT with a field violation naming it (job_graph.config.99), and nothing is created: no plan is put and the job is unknown", Run: unknownFieldsRefused},
	{Name: "lifecycle/terminal-survives-restart", Requires: []string{FeatureResourceManager, featureRunnerStarts},
		Doc: "a FINISHED, a FAILED and a CANCELED job, cleaned up, then SIGKILL and restart: each is still known with its status, an identical resubmission is created=false and runs nothing, another plan is ALREADY_EXISTS", Run: terminalSurvivesRestart},
	{Name: "lifecycle/errors-carry-errorinfo", Doc: "every refusal a client meets (invalid graph or id, taken id, unknown job, no result yet) carries an ErrorInfo with domain jobplane, its reason and code, and BadRequest field violations where invalid", Run: errorsCarryErrorInfo},
	{Name: "lifecycle/cancel-running", Requires: []string{FeatureResourceManager},
		Doc: "canceling a RUNNING job cancels its tasks and ends it CANCELED", Run: func(t *T) {
			id := t.job("j")
			t.mustSubmit(id, gatedGraph(2, "never"))
			t.waitRunning(id, 2)
			resp := t.cancel(id)
			if s := resp.GetStatus(); s != jobplanev1.JobStatus_JOB_STATUS_CANCELLING && s != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.Errorf("CancelJob answered %v; expected CANCELLING or CANCELED", s)
			}
			if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.Errorf("job ended %v; expected CANCELED", r.GetStatus())
			}
			if !t.wait(t.waits.cancel, func() bool { return len(t.running(id)) == 0 }) {
				t.Errorf("attempts %v still running %v after the job ended; expected every task canceled (within twice the advertised ServerTimings.task_cancel)", t.running(id), t.waits.cancel)
			}
		}},
	{Name: "lifecycle/cancel-terminal", Requires: []string{FeatureResourceManager},
		Doc: "canceling a FINISHED job is FAILED_PRECONDITION (JOB_TERMINAL)", Run: func(t *T) {
			id := t.job("j")
			t.mustSubmit(id, noopGraph(1))
			if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Fatalf("job ended %v; expected FINISHED", r.GetStatus())
			}
			_, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || reason(err) != "JOB_TERMINAL" {
				t.Errorf("CancelJob answered %v; expected FAILED_PRECONDITION (JOB_TERMINAL)", err)
			}
		}},
	{Name: "lifecycle/cancel-unknown", Doc: "canceling an unknown job is NOT_FOUND (JOB_NOT_FOUND)", Run: func(t *T) {
		_, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: t.job("ghost")})
		if connect.CodeOf(err) != connect.CodeNotFound || reason(err) != "JOB_NOT_FOUND" {
			t.Errorf("CancelJob answered %v; expected NOT_FOUND (JOB_NOT_FOUND)", err)
		}
	}},
	{Name: "lifecycle/cancel-before-run", Doc: "a job canceled before any task ran ends CANCELED without deploying anything", Run: func(t *T) {
		id := t.job("j")
		// Hold the job's campaign so that no JobMaster exists yet.
		hold := make(chan struct{})
		t.env.store.arm(fault{op: "campaign", key: id, hold: hold})
		t.mustSubmit(id, noopGraph(2))
		t.cancel(id)
		close(hold)
		if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
			t.Errorf("job ended %v; expected CANCELED", r.GetStatus())
		}
		// Let a campaign that was under way be granted, then check.
		if len(t.events(id, "campaign")) > 0 {
			t.wait(30*time.Second, func() bool { return len(t.events(id, "granted")) > 0 })
		}
		t.barrier()
		if evs := t.events(id, "SubmitTask"); len(evs) > 0 {
			t.Errorf("%v; expected nothing deployed for a job canceled before it ran", evs[0])
		}
	}},
	{Name: "lifecycle/watch-ends-at-terminal", Requires: []string{FeatureResourceManager},
		Doc: "WatchJob streams the job's statuses and ends after the terminal one", Run: func(t *T) {
			id := t.job("j")
			t.mustSubmit(id, gatedGraph(1, id))
			ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
			defer cancel()
			stream, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id})
			if err != nil {
				t.Fatalf("WatchJob: %v", err)
			}
			defer stream.Close()
			t.waitRunning(id, 1)
			var last jobplanev1.JobStatus
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				for stream.Receive() {
					last = stream.Msg().GetJob().GetStatus()
				}
			}()
			t.env.open(id)
			r := t.result(id)
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatalf("the stream did not end within 10s of the job's result (%v); expected WatchJob to end after the terminal status", r.GetStatus())
			}
			if err := stream.Err(); err != nil {
				t.Errorf("the stream ended with %v; expected a clean end", err)
			}
			if last != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("the last status streamed was %v; expected FINISHED", last)
			}
		}},
	{Name: "lifecycle/watch-resumes", Requires: []string{FeatureResourceManager},
		Doc: "a WatchJob broken after its first message and resumed with that message's resume_token streams exactly the statuses a watch that never broke saw after it", Run: watchResumes},
	{Name: "lifecycle/result-of-unknown-job", Doc: "GetJobResult of an unknown job is NOT_FOUND (JOB_NOT_FOUND)", Run: func(t *T) {
		_, err := t.dispatcher().GetJobResult(t.ctx, &jobplanev1.GetJobResultRequest{JobId: t.job("ghost")})
		if connect.CodeOf(err) != connect.CodeNotFound || reason(err) != "JOB_NOT_FOUND" {
			t.Errorf("GetJobResult answered %v; expected NOT_FOUND (JOB_NOT_FOUND)", err)
		}
	}},
	{Name: "lifecycle/bad-graphs", Doc: "invalid JobGraphs are INVALID_ARGUMENT with one BadRequest field violation each, at the path JobGraph gives: job_graph.vertices for none, job_graph.edges for a cycle, job_graph.edges[0].target_vertex_id for an unknown vertex, job_graph.vertices[0].parallelism for 0, job_graph.vertices[1].id for a duplicate id, job_graph.config.parallelism_overrides[\"v\"] (the key quoted) for an override of 0", Run: badGraphs},
}

// badGraphs submits graphs with one fault each and checks the one field
// violation's path: a client points at the field by it, so its form is
// the contract's, map keys quoted.
func badGraphs(t *T) {
	cycle := gatedGraph(1, "x")
	cycle.Edges = append(cycle.Edges, &jobplanev1.JobEdge{SourceVertexId: "sink", TargetVertexId: "src",
		Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE, ResultType: jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED})
	unknown := gatedGraph(1, "x")
	unknown.Edges[0].TargetVertexId = "nowhere"
	zero := noopGraph(1)
	zero.Vertices[0].Parallelism = 0
	duplicate := noopGraph(1)
	duplicate.Vertices = append(duplicate.Vertices, proto.CloneOf(duplicate.Vertices[0]))
	override := noopGraph(1)
	override.Config = &jobplanev1.JobConfig{ParallelismOverrides: map[string]int32{"v": 0}}
	for _, c := range []struct {
		fault string
		g     *jobplanev1.JobGraph
		path  string
	}{
		{"no vertices", &jobplanev1.JobGraph{Name: "empty"}, "job_graph.vertices"},
		{"a cycle", cycle, "job_graph.edges"},
		{"an edge to an unknown vertex", unknown, "job_graph.edges[0].target_vertex_id"},
		{"parallelism 0", zero, "job_graph.vertices[0].parallelism"},
		{"a duplicate vertex id", duplicate, "job_graph.vertices[1].id"},
		{"an override of 0", override, `job_graph.config.parallelism_overrides["v"]`},
	} {
		_, err := t.submit(t.job("bad"), c.g)
		br, _ := errorDetail[*errdetails.BadRequest](err)
		var paths []string
		for _, v := range br.GetFieldViolations() {
			paths = append(paths, v.GetField())
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !slices.Equal(paths, []string{c.path}) {
			t.Errorf("a graph with %s answered %v with field violations at %q; expected INVALID_ARGUMENT with one violation at %q", c.fault, connect.CodeOf(err), paths, c.path)
		}
	}
}

// errorsCarryErrorInfo provokes the refusals a client meets most and
// checks that each carries the ErrorInfo error.proto promises: domain
// `jobplane`, the reason for the case, with the code the contract pairs
// with it, and the typed detail where one is promised.
func errorsCarryErrorInfo(t *T) {
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(1, id))
	d := t.dispatcher()
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	check := func(call string, err error, code connect.Code, want string, detail func(error) bool) {
		info, ok := errorDetail[*errdetails.ErrorInfo](err)
		switch {
		case err == nil:
			t.Errorf("%s answered OK; expected %v (%s)", call, code, want)
		case !ok:
			t.Errorf("%s answered %v without an ErrorInfo; expected every error of a jobplane server to carry one (%s)", call, err, want)
		case info.GetDomain() != "jobplane" || info.GetReason() != want || connect.CodeOf(err) != code:
			t.Errorf("%s answered %v with ErrorInfo %s/%s; expected %v with domain jobplane, reason %s", call, connect.CodeOf(err), info.GetDomain(), info.GetReason(), code, want)
		case detail != nil && !detail(err):
			t.Errorf("%s answered %v without the typed detail the contract promises with %s", call, err, want)
		}
	}
	_, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: t.job("bad"), JobGraph: &jobplanev1.JobGraph{}})
	check("SubmitJob of an empty graph", err, connect.CodeInvalidArgument, "INVALID_ARGUMENT", func(err error) bool {
		br, ok := errorDetail[*errdetails.BadRequest](err)
		return ok && len(br.GetFieldViolations()) > 0
	})
	_, err = d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: noopGraph(3)})
	check("SubmitJob of another plan under a taken id", err, connect.CodeAlreadyExists, "JOB_ALREADY_EXISTS", nil)
	_, err = d.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: t.job("ghost")})
	check("GetJob of an unknown job", err, connect.CodeNotFound, "JOB_NOT_FOUND", nil)
	_, err = d.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id})
	check("GetJobResult of a running job", err, connect.CodeFailedPrecondition, "JOB_NOT_TERMINAL", nil)
	_, err = d.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "not a job id!"})
	check("GetJob with a malformed id", err, connect.CodeInvalidArgument, "INVALID_ARGUMENT", func(err error) bool {
		br, ok := errorDetail[*errdetails.BadRequest](err)
		return ok && len(br.GetFieldViolations()) > 0
	})
	t.cancel(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("job ended %v; expected CANCELED", r.GetStatus())
	}
	_, err = d.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: t.job("ghost")})
	check("GetJobResult of an unknown job", err, connect.CodeNotFound, "JOB_NOT_FOUND", nil)
}

// watchStatuses reads a WatchJob stream until it ends or n status
// messages came, and returns them.
func (t *T) watchStatuses(ctx context.Context, id, resume string, n int) ([]*jobplanev1.WatchJobResponse, error) {
	stream, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id, ResumeToken: resume})
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var got []*jobplanev1.WatchJobResponse
	for len(got) < n && stream.Receive() {
		if stream.Msg().GetJob() != nil {
			got = append(got, stream.Msg())
		}
	}
	return got, stream.Err()
}

func watchResumes(t *T) {
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(1, id))
	t.waitRunning(id, 1)
	ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
	defer cancel()
	// A watch that never breaks, to compare with.
	whole := make(chan []*jobplanev1.WatchJobResponse, 1)
	started := make(chan struct{})
	go func() {
		stream, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id})
		var got []*jobplanev1.WatchJobResponse
		if err == nil {
			defer stream.Close()
			for stream.Receive() {
				if stream.Msg().GetJob() != nil {
					if len(got) == 0 {
						close(started)
					}
					got = append(got, stream.Msg())
				}
			}
		}
		whole <- got
	}()
	first, err := t.watchStatuses(ctx, id, "", 1)
	if err != nil || len(first) != 1 || first[0].GetResumeToken() == "" {
		t.Fatalf("WatchJob's first message: %v, %v; expected a status with a resume_token", first, err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatalf("the unbroken watch got no first message")
	}
	if first[0].GetJob().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("WatchJob's first message is %v; expected the job RUNNING", first[0].GetJob().GetStatus())
	}
	t.cancel(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("job ended %v; expected CANCELED", r.GetStatus())
	}
	resumed, err := t.watchStatuses(ctx, id, first[0].GetResumeToken(), 100)
	if err != nil {
		t.Fatalf("WatchJob resumed: %v", err)
	}
	var all []*jobplanev1.WatchJobResponse
	select {
	case all = <-whole:
	case <-ctx.Done():
		t.Fatalf("the unbroken watch did not end after CANCELED")
	}
	statuses := func(ms []*jobplanev1.WatchJobResponse) []jobplanev1.JobStatus {
		var out []jobplanev1.JobStatus
		for _, m := range ms {
			out = append(out, m.GetJob().GetStatus())
		}
		return out
	}
	// Both watches started while the job ran; the unbroken one's
	// statuses after RUNNING are what the resumed one must show.
	var after []jobplanev1.JobStatus
	for i, st := range statuses(all) {
		if st == jobplanev1.JobStatus_JOB_STATUS_RUNNING {
			after = statuses(all)[i+1:]
		}
	}
	if fmt.Sprint(statuses(resumed)) != fmt.Sprint(after) {
		t.Errorf("the resumed watch streamed %v; expected %v, what a watch that never broke saw after RUNNING", statuses(resumed), after)
	}
	for _, m := range resumed {
		if m.GetCoalesced() {
			t.Errorf("resumed message %v is marked coalesced; expected the stream to continue exactly, under the same leader", m.GetJob().GetStatus())
		}
	}
}

// terminalSurvivesRestart runs a job to each terminal state and its
// cleanup, SIGKILLs and restarts the server, and checks that each job is
// still known as it ended: an identical resubmission is created=false
// with that status and runs nothing, another plan under its id is
// ALREADY_EXISTS.
func terminalSurvivesRestart(t *T) {
	jobs := []struct {
		id    string
		graph *jobplanev1.JobGraph
		want  jobplanev1.JobStatus
	}{
		{t.job("finished"), chainGraph(1), jobplanev1.JobStatus_JOB_STATUS_FINISHED},
		{t.job("failed"), failGraph(), jobplanev1.JobStatus_JOB_STATUS_FAILED},
		{t.job("canceled"), gatedGraph(1, "never"), jobplanev1.JobStatus_JOB_STATUS_CANCELED},
	}
	t.setup(func() {
		for _, j := range jobs {
			t.mustSubmit(j.id, j.graph)
			if j.want == jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.waitRunning(j.id, 1)
				t.cancel(j.id)
			}
			t.endsCleanly(j.id, j.want, "before the restart")
		}
	})
	deployed := map[string]int{}
	for _, j := range jobs {
		deployed[j.id] = len(t.events(j.id, "SubmitTask"))
	}
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	for _, j := range jobs {
		resp := t.mustSubmit(j.id, j.graph)
		if resp.GetCreated() || resp.GetStatus() != j.want {
			t.Errorf("after a restart, resubmitting the %v job %s answered created=%v %v; expected created=false %v", j.want, j.id, resp.GetCreated(), resp.GetStatus(), j.want)
		}
		_, err := t.submit(j.id, noopGraph(3))
		if connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "JOB_ALREADY_EXISTS" {
			t.Errorf("after a restart, another plan under the %v job's id %s answered %v; expected ALREADY_EXISTS (JOB_ALREADY_EXISTS)", j.want, j.id, err)
		}
		if st := t.status(j.id); st != j.want {
			t.Errorf("after a restart, GetJob of the %v job %s answered %v; expected %v", j.want, j.id, st, j.want)
		}
	}
	t.barrier()
	for _, j := range jobs {
		if n := len(t.events(j.id, "SubmitTask")); n != deployed[j.id] {
			t.Errorf("the %v job %s was deployed %d times more after the restart; expected it never to run again", j.want, j.id, n-deployed[j.id])
		}
		if evs := t.events(j.id, "put-plan"); len(evs) > 1 {
			t.Errorf("%v after the restart; expected no new plan for a job that ended", evs[len(evs)-1])
		}
	}
}

// unknownFieldsRefused submits a job whose config carries field 99,
// which JobConfig does not have: a server that decodes leniently and
// drops it would run a job other than the one the client meant.
func unknownFieldsRefused(t *T) {
	id := t.job("j")
	g := noopGraph(1)
	g.Config = &jobplanev1.JobConfig{}
	g.Config.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	_, err := t.submit(id, g)
	br, _ := errorDetail[*errdetails.BadRequest](err)
	named := false
	for _, v := range br.GetFieldViolations() {
		named = named || v.GetField() == "job_graph.config.99"
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !named {
		t.Errorf("a SubmitJob with the unknown field job_graph.config.99 answered %v (violations %v); expected INVALID_ARGUMENT with a field violation naming job_graph.config.99 (DispatcherService: unknown fields are refused)", err, br.GetFieldViolations())
	}
	if n := len(t.events(id, "put-plan")); n != 0 {
		t.Errorf("%d plan puts for the refused job; expected none", n)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	if _, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob of the refused job answered %v; expected NOT_FOUND (JOB_NOT_FOUND): nothing is created", err)
	}
}

// listJobsPages lists six jobs two at a time, submitting another job
// before each page but the first: a token names a place in the list, so
// the later jobs, newer than that place, are not listed, and no job is
// listed twice.
func listJobsPages(t *T) {
	var before []string
	for i := range 6 {
		id := t.job(fmt.Sprintf("j%d", i))
		t.mustSubmit(id, noopGraph(1))
		before = append(before, id)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
	defer cancel()
	seen := map[string]int{}
	var listed []*jobplanev1.JobSummary
	token := ""
	for page := 0; ; page++ {
		if page >= 20 {
			t.Fatalf("ListJobs gave more than 20 pages of at most 2 for %d jobs; expected the listing to end (an empty next_page_token)", len(before)+page)
		}
		if page > 0 {
			t.mustSubmit(t.job(fmt.Sprintf("later%d", page)), noopGraph(1))
		}
		resp, err := t.dispatcher().ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatalf("ListJobs page %d: %v", page, err)
		}
		if n := len(resp.GetJobs()); n > 2 {
			t.Errorf("ListJobs page %d held %d jobs; expected at most its page_size, 2", page, n)
		}
		for _, j := range resp.GetJobs() {
			seen[j.GetJobId()]++
			listed = append(listed, j)
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if jobs := resp.GetJobs(); len(jobs) > 0 {
			if want := listJobsToken(jobs[len(jobs)-1]); token != want {
				t.Errorf("ListJobs page %d's next_page_token is %q; expected %q, the form every implementation writes (DispatcherService, page tokens), so that it stays good at a leader of another implementation", page, token, want)
			}
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("job %s listed %d times; expected a page after a token never to repeat a job listed before it", id, n)
		}
	}
	for _, id := range before {
		if seen[id] == 0 {
			t.Errorf("job %s, submitted before the first page, was not listed; expected every known job once", id)
		}
	}
	for i := 1; i < len(listed); i++ {
		if listed[i].GetSubmitTime().AsTime().After(listed[i-1].GetSubmitTime().AsTime()) {
			t.Errorf("job %s (submitted %v) listed after %s (submitted %v); expected newest submission first", listed[i].GetJobId(), listed[i].GetSubmitTime().AsTime(), listed[i-1].GetJobId(), listed[i-1].GetSubmitTime().AsTime())
		}
	}
}

// listJobsToken is the ListJobs page token the contract gives for the
// place after job j.
func listJobsToken(j *jobplanev1.JobSummary) string {
	raw := binary.BigEndian.AppendUint64([]byte{1}, uint64(j.GetSubmitTime().AsTime().UnixNano()))
	return base64.RawURLEncoding.EncodeToString(append(raw, j.GetJobId()...))
}

// taskOutput runs the built-in count, which logs "counting from 0 to 3"
// on the runner's TaskExecutor, and reads the output through the
// server's GetTaskOutput, which must find the TaskExecutor the attempt
// ran on and read it there.
func taskOutput(t *T) {
	id := t.job("j")
	t.mustSubmit(id, &jobplanev1.JobGraph{Name: "output", Vertices: []*jobplanev1.JobVertex{
		{Id: "c", Invokable: "count", Parallelism: 1, Config: map[string]string{"to": "3", "every": "10ms"}},
	}})
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v; expected FINISHED", r.GetStatus())
	}
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	resp, err := t.dispatcher().GetTaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: id, VertexId: "c", SubtaskIndex: 0})
	if err != nil {
		t.Fatalf("GetTaskOutput of the ended job's subtask: %v; expected its output, read on the TaskExecutor it ran on", err)
	}
	if !strings.Contains(string(resp.GetData()), "counting from 0 to 3") {
		t.Errorf("GetTaskOutput returned %q; expected the task's output, with \"counting from 0 to 3\"", resp.GetData())
	}
	if !resp.GetEnded() || resp.GetNextOffset() < int64(len(resp.GetData())) {
		t.Errorf("GetTaskOutput answered ended=%v next_offset=%d for %d bytes of an ended attempt; expected ended and next_offset past the data", resp.GetEnded(), resp.GetNextOffset(), len(resp.GetData()))
	}
}

// listTaskExecutors checks the cluster view a client gets: every
// TaskExecutor of the runner, what it offers, and whose its slots are.
func listTaskExecutors(t *T) {
	id := t.job("j")
	t.mustSubmit(id, &jobplanev1.JobGraph{Name: "gated", Vertices: []*jobplanev1.JobVertex{
		{Id: "g", Invokable: "gate", Parallelism: 2, Config: map[string]string{"gate": "never"}},
	}})
	t.waitRunning(id, 2)
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	var tes []*jobplanev1.TaskExecutorInfo
	for token := ""; ; {
		resp, err := t.dispatcher().ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{PageToken: token})
		if err != nil {
			t.Fatalf("ListTaskExecutors: %v", err)
		}
		tes = append(tes, resp.GetTaskExecutors()...)
		if token = resp.GetNextPageToken(); token == "" || len(tes) > 1000 {
			break
		}
	}
	if len(tes) != len(t.env.tes) {
		t.Errorf("ListTaskExecutors listed %d TaskExecutors; expected the runner's %d", len(tes), len(t.env.tes))
	}
	if len(tes) > 1 {
		resp, err := t.dispatcher().ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{PageSize: 1})
		want := base64.RawURLEncoding.EncodeToString([]byte(tes[0].GetTaskExecutorId()))
		if err != nil || resp.GetNextPageToken() != want {
			t.Errorf("ListTaskExecutors(page_size 1) answered next_page_token %q (%v); expected %q, the first TaskExecutor's id in the form every implementation writes (DispatcherService, page tokens)", resp.GetNextPageToken(), err, want)
		}
	}
	allocated := 0
	for _, te := range tes {
		if !slices.Contains(te.GetInvokables(), "gate") || !slices.Contains(te.GetInvokables(), "counter") {
			t.Errorf("TaskExecutor %s lists invokables %v; expected gate and counter among them", te.GetTaskExecutorId(), te.GetInvokables())
		}
		if te.GetSlotCount() < 1 {
			t.Errorf("TaskExecutor %s lists %d slots; expected its slots", te.GetTaskExecutorId(), te.GetSlotCount())
		}
		for _, s := range te.GetAllocatedSlots() {
			if s.GetJobId() == id {
				allocated++
			}
		}
	}
	if allocated != 2 {
		t.Errorf("%d slots listed as allocated to the running job of two subtasks; expected 2", allocated)
	}
	t.cancel(id)
}

// attachedJob keeps an attached job alive with heartbeats, then stops
// them: the server cancels the job.
func attachedJob(t *T) {
	id := t.job("j")
	g := gatedGraph(1, "never")
	g.Config = &jobplanev1.JobConfig{ClientHeartbeatTimeout: durationpb.New(2 * time.Second)}
	t.mustSubmit(id, g)
	t.waitRunning(id, 1)
	ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
	defer cancel()
	for range 10 { // 3s, half again the timeout
		resp, err := t.dispatcher().ReportClientHeartbeat(ctx, &jobplanev1.ReportClientHeartbeatRequest{JobId: id})
		if err != nil {
			t.Fatalf("ReportClientHeartbeat: %v", err)
		}
		if resp.GetTimeout().AsDuration() <= 0 {
			t.Errorf("ReportClientHeartbeat of an attached job answered timeout %v; expected the time left for the next heartbeat", resp.GetTimeout().AsDuration())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if s := t.status(id); s != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("the attached job was %v while its heartbeats came every 300ms; expected RUNNING", s)
	}
	if !t.wait(30*time.Second, func() bool { return t.status(id) == jobplanev1.JobStatus_JOB_STATUS_CANCELED }) {
		t.Errorf("the attached job was %v 30s after its last heartbeat, with a client_heartbeat_timeout of 2s; expected CANCELED", t.status(id))
	}
}
