package runner

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// surfaceCases check public surface that the other cases do not reach:
// the limits a server advertises (ServerLimits), GetJob's full view and
// its page tokens, and EAGER scheduling.
var surfaceCases = []Case{
	{Name: "lifecycle/request-too-large",
		Doc: "a SubmitJob whose body is over the advertised ServerLimits.max_request_bytes is RESOURCE_EXHAUSTED with the reason REQUEST_TOO_LARGE and the metadata limit_bytes the advertised limit, and nothing is created: no plan is put",
		Run: requestTooLarge},
	{Name: "lifecycle/graph-limits",
		Doc: "a JobGraph one over the advertised ServerLimits.max_vertices, one over max_subtasks (the sum of parallelisms) and one over max_graph_bytes (encoded) are each INVALID_ARGUMENT with a field violation for job_graph.vertices (the first two) or job_graph (the bytes), and no plan is put for any",
		Run: graphLimits},
	{Name: "lifecycle/list-page-size-lowered",
		Doc: "ListJobs with a page_size over the advertised ServerLimits.max_list_page_size is not refused but lowered: the page holds at most max_list_page_size jobs, and the case's jobs among them",
		Run: listPageSizeLowered},
	{Name: "lifecycle/full-view-pages", Requires: []string{FeatureResourceManager},
		Doc: "GetJob with JOB_VIEW_FULL and page_size 2, for a running job of two vertices (3 and 2 subtasks): every subtask listed once, in vertex then index order, no page over its size, each page's vertices only those with subtasks in it and each with its parallelism and task counts that add up to it, the plan on the first page only, an empty next_page_token on the last; the first page's token is the contract's (base64url of \"<job_id>/2\"), and one made so by hand for place 4 lists b/1 alone, for place 5 nothing; a page token of another job, or not issued at all, is INVALID_ARGUMENT",
		Run: fullViewPages},
	{Name: "recovery/full-view-token-survives-failover", Requires: []string{FeatureResourceManager, FeatureFailover, featureRunnerStarts}, Instances: 2,
		Doc: "a JOB_VIEW_FULL page token issued by the leader, SIGKILLed, is good at the standby that takes over: its page continues where the token left off",
		Run: fullViewTokenSurvivesFailover},
	{Name: "lifecycle/eager-deploys-at-once", Requires: []string{FeatureResourceManager},
		Doc: "with SCHEDULING_MODE_EAGER, the consumer of a blocking edge is deployed (SubmitTask on a runner's TaskExecutor) while its producer still runs, where pipelined regions would wait for the producer to finish; the job then ends FINISHED",
		Run: eagerDeploysAtOnce},
	{Name: "lifecycle/watch-resume-window", Requires: []string{FeatureResourceManager},
		Doc: "a WatchJob resumed with a token that more status changes than the advertised ServerTimings.watch_resume_window followed (a job that fails and restarts without end) skips nothing silently: its first message is the current summary marked coalesced, or else exactly the change that followed the token",
		Run: watchResumeWindow},
	{Name: "lifecycle/slow-watch-behind", Requires: []string{FeatureResourceManager},
		Doc: "a WatchJob left unread (a 1 KiB HTTP/2 stream window) while its job restarts far more often than the advertised ServerTimings.watch_resume_window either ends with UNAVAILABLE (STREAM_BEHIND), after which its last token resumes the watch, or sends on in order (restarts may come coalesced); it never ends successfully while the job runs, nor with another error",
		Run: slowWatchBehind},
}

// track notes a job the case submitted without mustSubmit, to cancel
// after the case on a shared store.
func (t *T) track(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.submitted = append(t.submitted, id)
}

// noteOnce prints a line about the run once, if the run prints notes.
func (t *T) noteOnce(s string) {
	if t.note != nil {
		t.note(s)
	}
}

// advertisedLimits returns the limits the server advertised in
// GetClusterOverview, or ends the case.
func (t *T) advertisedLimits() *jobplanev1.ServerLimits {
	if t.limits == nil {
		t.Fatalf("GetClusterOverview.limits is unset; expected the limits the server enforces (ServerLimits)")
	}
	return t.limits
}

// requestTooLarge sends a SubmitJob one KiB over the advertised request
// limit: the bulk is a vertex config value, which no other rule bounds.
func requestTooLarge(t *T) {
	limit := t.advertisedLimits().GetMaxRequestBytes()
	if limit <= 0 || limit > 64<<20 {
		t.Fatalf("ServerLimits.max_request_bytes is %d; expected a positive limit the runner can send one over (at most 64 MiB)", limit)
	}
	id := t.job("big")
	g := noopGraph(1)
	g.Vertices[0].Config = map[string]string{"bulk": strings.Repeat("x", int(limit)+1024)}
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	_, err := t.dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g})
	info, _ := errorDetail[*errdetails.ErrorInfo](err)
	switch {
	case err == nil:
		t.track(id)
		t.Errorf("a SubmitJob of %d bytes, over max_request_bytes %d, was accepted; expected RESOURCE_EXHAUSTED (REQUEST_TOO_LARGE)", limit+1024, limit)
	case connect.CodeOf(err) != connect.CodeResourceExhausted || info.GetReason() != "REQUEST_TOO_LARGE":
		t.Errorf("a SubmitJob over max_request_bytes (%d) answered %v (ErrorInfo %v); expected RESOURCE_EXHAUSTED with an ErrorInfo of reason REQUEST_TOO_LARGE", limit, err, info)
	case info.GetMetadata()["limit_bytes"] != strconv.FormatInt(limit, 10):
		t.Errorf("REQUEST_TOO_LARGE's metadata limit_bytes is %q; expected the advertised max_request_bytes, %d", info.GetMetadata()["limit_bytes"], limit)
	}
	if n := len(t.events(id, "put-plan")); n != 0 {
		t.Errorf("%d plan puts for the job of the refused request; expected none", n)
	}
}

// graphLimits submits graphs just over each graph limit the server
// advertises.
func graphLimits(t *T) {
	l := t.advertisedLimits()
	type over struct {
		what, field string
		graph       *jobplanev1.JobGraph
	}
	var tries []over
	if n := int(l.GetMaxVertices()); n > 0 && n < 1_000_000 {
		g := &jobplanev1.JobGraph{Name: "vertices"}
		for i := range n + 1 {
			g.Vertices = append(g.Vertices, &jobplanev1.JobVertex{Id: "v" + strconv.Itoa(i), Invokable: "noop", Parallelism: 1})
		}
		tries = append(tries, over{fmt.Sprintf("max_vertices (%d)", n), "job_graph.vertices", g})
	} else {
		t.Errorf("ServerLimits.max_vertices is %d; expected a positive limit", n)
	}
	if n := int(l.GetMaxSubtasks()); n > 0 && n < 100_000_000 {
		// Spread over vertices of at most 1,000 subtasks each, below any
		// vertex's max_parallelism.
		g := &jobplanev1.JobGraph{Name: "subtasks"}
		for left, i := n+1, 0; left > 0; i++ {
			p := min(left, 1000)
			g.Vertices = append(g.Vertices, &jobplanev1.JobVertex{Id: "v" + strconv.Itoa(i), Invokable: "noop", Parallelism: int32(p)})
			left -= p
		}
		if len(g.Vertices) <= int(l.GetMaxVertices()) {
			tries = append(tries, over{fmt.Sprintf("max_subtasks (%d)", n), "job_graph.vertices", g})
		} else {
			t.noteOnce(fmt.Sprintf("NOTE: %s: max_subtasks %d needs more vertices than max_vertices allows; not checked", "lifecycle/graph-limits", n))
		}
	} else {
		t.Errorf("ServerLimits.max_subtasks is %d; expected a positive limit", n)
	}
	if n := l.GetMaxGraphBytes(); n > 0 && n+4096 < l.GetMaxRequestBytes() {
		g := noopGraph(1)
		g.Vertices[0].Config = map[string]string{"bulk": ""}
		// Grow the padding by what is missing until the graph is over
		// the limit, by a few bytes: the lengths' varints grow with it.
		for pad := 0; int64(proto.Size(g)) <= n; {
			pad += int(n) + 1 - proto.Size(g)
			g.Vertices[0].Config["bulk"] = strings.Repeat("x", pad)
		}
		tries = append(tries, over{fmt.Sprintf("max_graph_bytes (%d)", n), "job_graph", g})
	} else {
		t.Errorf("ServerLimits.max_graph_bytes is %d with max_request_bytes %d; expected a positive limit below the request limit", n, l.GetMaxRequestBytes())
	}
	for i, o := range tries {
		id := t.job("over" + strconv.Itoa(i))
		ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
		_, err := t.dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: o.graph})
		cancel()
		br, _ := errorDetail[*errdetails.BadRequest](err)
		var fields []string
		named := false
		for _, v := range br.GetFieldViolations() {
			fields = append(fields, v.GetField())
			named = named || v.GetField() == o.field
		}
		switch {
		case err == nil:
			t.track(id)
			t.Errorf("a JobGraph over %s was accepted; expected INVALID_ARGUMENT for %s", o.what, o.field)
		case connect.CodeOf(err) != connect.CodeInvalidArgument || !named:
			t.Errorf("a JobGraph over %s answered %v (field violations %v); expected INVALID_ARGUMENT with a field violation for %s (ServerLimits)", o.what, err, fields, o.field)
		}
		if n := len(t.events(id, "put-plan")); n != 0 {
			t.Errorf("%d plan puts for the JobGraph over %s; expected none", n, o.what)
		}
	}
}

// listPageSizeLowered asks ListJobs for one more job than the server
// lists at most.
func listPageSizeLowered(t *T) {
	n := t.advertisedLimits().GetMaxListPageSize()
	if n <= 0 || n == 1<<31-1 {
		t.Fatalf("ServerLimits.max_list_page_size is %d; expected a positive limit", n)
	}
	var ids []string
	for i := range 3 {
		id := t.job("j" + strconv.Itoa(i))
		t.mustSubmit(id, noopGraph(1))
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	resp, err := t.dispatcher().ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: n + 1})
	if err != nil {
		t.Fatalf("ListJobs with page_size %d, over max_list_page_size %d, answered %v; expected the page size lowered to the limit, not refused", n+1, n, err)
	}
	if got := len(resp.GetJobs()); got > int(n) {
		t.Errorf("ListJobs with page_size %d listed %d jobs; expected at most max_list_page_size, %d", n+1, got, n)
	}
	listed := map[string]bool{}
	for _, j := range resp.GetJobs() {
		listed[j.GetJobId()] = true
	}
	for _, id := range ids {
		if !listed[id] && int(n) >= len(ids) {
			t.Errorf("ListJobs with page_size %d did not list job %s, submitted before it; expected the newest %d jobs on the first page", n+1, id, n)
		}
	}
}

// fullViewGraph is two vertices of gate subtasks, 3 and 2, that run
// until the case opens gate.
func fullViewGraph(gate string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "full-view", Vertices: []*jobplanev1.JobVertex{
		{Id: "a", Invokable: "gate", Parallelism: 3, Config: map[string]string{"gate": gate}},
		{Id: "b", Invokable: "gate", Parallelism: 2, Config: map[string]string{"gate": gate}},
	}}
}

// fullViewOrder is the order in which the full view lists the subtasks
// of fullViewGraph.
var fullViewOrder = []string{"a/0", "a/1", "a/2", "b/0", "b/1"}

// fullPage asks for one page of the job's full view, and checks what
// every page of it must hold; it returns the page's subtasks
// (vertex/index) and next page token.
func (t *T) fullPage(id string, size int32, token string, first bool) (subtasks []string, next string, err error) {
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	resp, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id, View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: size, PageToken: token})
	if err != nil {
		return nil, "", err
	}
	want := map[string]int32{"a": 3, "b": 2}
	for _, v := range resp.GetJob().GetVertices() {
		if len(v.GetSubtasks()) == 0 {
			t.Errorf("a full-view page (token %q) lists vertex %s without subtasks; expected only the vertices that have subtasks in the page", token, v.GetVertexId())
		}
		if v.GetParallelism() != want[v.GetVertexId()] {
			t.Errorf("the full view shows vertex %s with parallelism %d; expected %d", v.GetVertexId(), v.GetParallelism(), want[v.GetVertexId()])
		}
		sum := int32(0)
		for _, c := range v.GetTaskCounts() {
			sum += c.GetCount()
		}
		if sum != v.GetParallelism() {
			t.Errorf("the full view shows vertex %s with task counts %v, %d subtasks in all; expected counts of all its %d subtasks", v.GetVertexId(), v.GetTaskCounts(), sum, v.GetParallelism())
		}
		for _, s := range v.GetSubtasks() {
			subtasks = append(subtasks, fmt.Sprintf("%s/%d", v.GetVertexId(), s.GetSubtaskIndex()))
		}
	}
	if len(subtasks) > int(size) {
		t.Errorf("a full-view page of page_size %d (token %q) lists %d subtasks %v; expected at most %d", size, token, len(subtasks), subtasks, size)
	}
	if has := resp.GetJob().GetJobGraph() != nil; has != first {
		t.Errorf("a full-view page (token %q) has the plan %v; expected it on the first page only", token, has)
	}
	return subtasks, resp.GetNextPageToken(), nil
}

// waitFullView waits until the job's full view lists subtasks (a job
// still INITIALIZING lists none).
func (t *T) waitFullView(id string) {
	t.setup(func() {
		if !t.wait(t.waits.failover, func() bool {
			ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
			defer cancel()
			resp, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id, View: jobplanev1.JobView_JOB_VIEW_FULL})
			return err == nil && len(resp.GetJob().GetVertices()) == 2
		}) {
			t.Fatalf("job %s: its full view listed no vertices within %v; expected its subtasks once it runs", id, t.waits.failover)
		}
	})
}

func fullViewPages(t *T) {
	id := t.job("j")
	t.mustSubmit(id, fullViewGraph(id))
	defer t.env.open(id)
	t.waitRunning(id, len(fullViewOrder))
	t.waitFullView(id)
	var listed []string
	token, first := "", ""
	for page := 0; ; page++ {
		if page > len(fullViewOrder) {
			t.Fatalf("the full view gave more than %d pages of 2 for %d subtasks; expected the listing to end (an empty next_page_token)", page, len(fullViewOrder))
		}
		subtasks, next, err := t.fullPage(id, 2, token, page == 0)
		if err != nil {
			t.Fatalf("GetJob(JOB_VIEW_FULL, page_size 2, page_token %q) page %d: %v; expected the page", token, page, err)
		}
		listed = append(listed, subtasks...)
		if page == 0 {
			first = next
		}
		if token = next; token == "" {
			break
		}
	}
	if !slices.Equal(listed, fullViewOrder) {
		t.Errorf("the full view's pages listed the subtasks %v; expected %v, each once, in vertex then index order", listed, fullViewOrder)
	}
	if first == "" {
		t.Fatalf("the first full-view page of 2 of %d subtasks had no next_page_token", len(fullViewOrder))
	}
	if want := subtaskPageToken(id, 2); first != want {
		t.Errorf("the first full-view page's next_page_token is %q; expected %q, the form every implementation writes (DispatcherService, page tokens), so that it stays good at a leader of another implementation", first, want)
	}
	for _, place := range []struct {
		n    int
		want []string
	}{{4, fullViewOrder[4:]}, {5, nil}} {
		subtasks, _, err := t.fullPage(id, 2, subtaskPageToken(id, place.n), false)
		if err != nil || !slices.Equal(subtasks, place.want) {
			t.Errorf("GetJob(JOB_VIEW_FULL) with a page token made by hand for place %d (%v) listed %v; expected %v", place.n, err, subtasks, place.want)
		}
	}

	// A token names a place in this job's subtasks only.
	other := t.job("other")
	t.mustSubmit(other, fullViewGraph(other))
	defer t.env.open(other)
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	for _, tok := range []struct{ what, token string }{{"of job " + id, first}, {"never issued", "not-a-page-token"}} {
		_, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: other, View: jobplanev1.JobView_JOB_VIEW_FULL, PageSize: 2, PageToken: tok.token})
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("GetJob(%s, JOB_VIEW_FULL) with a page token %s answered %v; expected INVALID_ARGUMENT (a page token this server did not issue for the job)", other, tok.what, err)
		}
	}
}

// subtaskPageToken is the GetJob page token the contract gives for the
// job's n-th subtask.
func subtaskPageToken(id string, n int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id + "/" + strconv.Itoa(n)))
}

// fullViewTokenSurvivesFailover takes the first page of a running job's
// full view from the leader, kills it, and asks the standby, once it runs
// the job, for the next page with that token.
func fullViewTokenSurvivesFailover(t *T) {
	id, old, leader := t.runningBesideStandby(func(_ int32, gate string) *jobplanev1.JobGraph { return fullViewGraph(gate) })
	defer t.env.open(id)
	t.waitFullView(id)
	subtasks, token, err := t.fullPage(id, 2, "", true)
	if err != nil || token == "" || !slices.Equal(subtasks, fullViewOrder[:2]) {
		t.Fatalf("setup: the leader's first full-view page of 2 listed %v with next_page_token %q (%v); expected %v and a token", subtasks, token, err, fullViewOrder[:2])
	}
	t.killLeader(leader)
	t.setup(func() { t.regrant(id, old.Token) })
	t.waitFullView(id)
	if l := t.leaderOf(election.JobManager); l.Token.SessionID == old.Token.SessionID {
		t.Fatalf("setup: the jobmanager leader is still of the killed session")
	}
	subtasks, _, err = t.fullPage(id, 2, token, false)
	if err != nil {
		t.Fatalf("the new leader answered GetJob(JOB_VIEW_FULL) with the killed leader's page token %v; expected the next page: a token names a place in the job's subtasks and stays good across a change of leader", err)
	}
	if !slices.Equal(subtasks, fullViewOrder[2:4]) {
		t.Errorf("the new leader's page after the killed leader's token lists %v; expected %v, where the token left off", subtasks, fullViewOrder[2:4])
	}
}

// eagerDeploysAtOnce runs a gate feeding a noop over a blocking edge,
// scheduled EAGER: the noop is deployed while the gate still runs.
func eagerDeploysAtOnce(t *T) {
	id := t.job("j")
	g := &jobplanev1.JobGraph{Name: "eager",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "producer", Invokable: "gate", Parallelism: 1, Config: map[string]string{"gate": id}},
			{Id: "consumer", Invokable: "noop", Parallelism: 1},
		},
		Edges: []*jobplanev1.JobEdge{{SourceVertexId: "producer", TargetVertexId: "consumer",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING}},
		Config: &jobplanev1.JobConfig{SchedulingMode: jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER},
	}
	t.mustSubmit(id, g)
	defer t.env.open(id)
	deployed := func(vertex string) bool {
		return slices.ContainsFunc(t.events(id, "SubmitTask"), func(e Event) bool { return strings.HasPrefix(e.Attempt, vertex+"/") })
	}
	t.waitRunning(id, 1)
	if !t.wait(t.waits.failover, func() bool { return deployed("consumer") }) {
		t.Errorf("with SCHEDULING_MODE_EAGER, the consumer of a blocking edge was not deployed within %v while its producer ran (producer deployed: %v); expected every subtask deployed at once, whatever the edges", t.waits.failover, deployed("producer"))
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("the EAGER job ended %v; expected FINISHED", r.GetStatus())
	}
}

// watchResumeWindow runs a job that fails and restarts without end,
// watches it until more changes than the resume window came after the
// first message, and resumes from that first message's token.
func watchResumeWindow(t *T) {
	window := t.watchResumeWindow()
	id := t.job("j")
	t.mustSubmit(id, crashLoopGraph())
	defer t.cancel(id)
	ctx, cancel := context.WithTimeout(t.ctx, t.waits.failover)
	defer cancel()
	var seen []*jobplanev1.WatchJobResponse
	t.setup(func() {
		stream, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id})
		if err != nil {
			t.Fatalf("WatchJob(%s): %v", id, err)
		}
		defer stream.Close()
		for len(seen) < window+3 && stream.Receive() {
			if stream.Msg().GetJob() != nil {
				seen = append(seen, stream.Msg())
			}
		}
		if len(seen) < window+3 {
			t.Fatalf("WatchJob of a job that restarts without end sent %d status messages within %v (%v); expected more than the resume window, %d", len(seen), t.waits.failover, stream.Err(), window)
		}
	})
	old, next, last := seen[0], seen[1].GetJob(), seen[len(seen)-1].GetJob()
	stream, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id, ResumeToken: old.GetResumeToken()})
	if err != nil {
		t.Fatalf("WatchJob resumed with a token %d changes old: %v; expected the stream", len(seen)-1, err)
	}
	defer stream.Close()
	var first *jobplanev1.WatchJobResponse
	for first == nil && stream.Receive() {
		if stream.Msg().GetJob() != nil {
			first = stream.Msg()
		}
	}
	got := first.GetJob()
	switch {
	case first == nil:
		t.Errorf("WatchJob resumed with a token %d changes old ended without a status (%v); expected the current summary, marked coalesced", len(seen)-1, stream.Err())
	case first.GetCoalesced():
		if got.GetRestartCount() < last.GetRestartCount() {
			t.Errorf("WatchJob resumed with an old token starts with a coalesced summary of restart_count %d; expected the current summary, at least the %d already watched", got.GetRestartCount(), last.GetRestartCount())
		}
	case got.GetStatus() != next.GetStatus() || got.GetRestartCount() != next.GetRestartCount():
		t.Errorf("WatchJob resumed with a token that %d changes followed, more than the resume window of %d, starts with %v (restart_count %d), not marked coalesced; the change right after the token was %v (restart_count %d): changes were skipped silently (WatchJob: a token older than the window starts over with the current summary, marked coalesced)",
			len(seen)-1, window, got.GetStatus(), got.GetRestartCount(), next.GetStatus(), next.GetRestartCount())
	}
}

// watchResumeWindow returns the advertised ServerTimings.watch_resume_window
// (the reference's default for a 1.1 server), or skips a case that needs
// more changes than that.
func (t *T) watchResumeWindow() int {
	window := int(defaultTimings.GetWatchResumeWindow())
	if t.timings != nil {
		window = int(t.timings.GetWatchResumeWindow())
	}
	if window > 1000 {
		t.Skip(fmt.Sprintf("the advertised watch_resume_window, %d, is more changes than the case makes in its time", window))
	}
	return window
}

// crashLoopGraph is a job whose one task fails at once and restarts
// without end.
func crashLoopGraph() *jobplanev1.JobGraph {
	return withRestart(&jobplanev1.JobGraph{Name: "crash-loop",
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "fail", Parallelism: 1, Config: map[string]string{"message": "crash loop"}}}},
		fixedDelay(&jobplanev1.RestartStrategy_FixedDelay{Unlimited: true}))
}

// slowWatchBehind watches a crash-looping job through a client that
// leaves the stream unread: its HTTP/2 window (1 KiB) fills after a few
// messages, and the server's sends block. Once the job restarted four
// resume windows and 200 more times (more than any transport buffer of
// such messages holds), the case reads on until the stream ends or its
// messages reach that restart count.
func slowWatchBehind(t *T) {
	window := t.watchResumeWindow()
	id := t.job("j")
	t.mustSubmit(id, crashLoopGraph())
	defer t.cancel(id)
	ctx, cancel := context.WithTimeout(t.ctx, 2*t.waits.failover)
	defer cancel()
	slow, err := t.env.slowDispatcher(ctx)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	stream, err := slow.WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("WatchJob(%s): %v", id, err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetJob() == nil {
		t.Fatalf("WatchJob(%s) sent no summary first (%v); expected the job's current summary", id, stream.Err())
	}
	last := stream.Msg()
	target := last.GetJob().GetRestartCount() + int32(4*window+200)
	restarts := func() int32 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		resp, err := t.dispatcher().GetJob(rctx, &jobplanev1.GetJobRequest{JobId: id})
		if err != nil {
			return -1
		}
		return resp.GetJob().GetSummary().GetRestartCount()
	}
	if !t.wait(t.waits.failover, func() bool { return restarts() >= target }) {
		t.Fatalf("the crash-looping job restarted %d times within %v; the case needs %d (four resume windows of %d and 200) while its watch is unread", restarts(), t.waits.failover, target, window)
	}
	for stream.Receive() {
		msg := stream.Msg()
		s, prev := msg.GetJob(), last.GetJob()
		switch {
		case s == nil:
			continue // a heartbeat
		case s.GetRestartCount() < prev.GetRestartCount():
			t.Fatalf("WatchJob, read slowly, sent restart_count %d after %d; expected the changes in order", s.GetRestartCount(), prev.GetRestartCount())
		case s.GetRestartCount() == prev.GetRestartCount() && s.GetStatus() == prev.GetStatus():
			t.Fatalf("WatchJob, read slowly, sent %v (restart_count %d) twice; expected every change once", s.GetStatus(), s.GetRestartCount())
		}
		last = msg
		if s.GetRestartCount() >= target {
			t.noteOnce("lifecycle/slow-watch-behind: the server did not fall behind the unread watch (it sent every change, or coalesced restarts)")
			return
		}
	}
	err = stream.Err()
	if err == nil {
		t.Fatalf("WatchJob, read slowly, ended successfully while its job ran (last message %v, restart_count %d); expected UNAVAILABLE (STREAM_BEHIND) when the changes it had not sent were no longer kept: a stream ends successfully only after a globally terminal status",
			last.GetJob().GetStatus(), last.GetJob().GetRestartCount())
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || reason(err) != "STREAM_BEHIND" {
		t.Fatalf("WatchJob, read slowly, ended with %v (reason %q); expected UNAVAILABLE with the reason STREAM_BEHIND", err, reason(err))
	}
	resumed, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id, ResumeToken: last.GetResumeToken()})
	if err != nil {
		t.Fatalf("WatchJob resumed after STREAM_BEHIND: %v", err)
	}
	defer resumed.Close()
	for resumed.Receive() {
		if s := resumed.Msg().GetJob(); s != nil {
			if s.GetRestartCount() < last.GetJob().GetRestartCount() {
				t.Errorf("WatchJob resumed after STREAM_BEHIND with the last message's token starts at restart_count %d; expected the change after that message's %d, or the current summary", s.GetRestartCount(), last.GetJob().GetRestartCount())
			}
			return
		}
	}
	t.Errorf("WatchJob resumed after STREAM_BEHIND with the last message's token sent no status (%v); expected the change after that message, or the current summary marked coalesced", resumed.Err())
}
