package jobmanager_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/localcluster"
)

func TestWatchJobOverHTTP1(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "watched", twoVertices("sleep", map[string]string{"duration": "100ms"}))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, c.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var seen []jobplanev1.JobStatus
	for stream.Receive() {
		if job := stream.Msg().GetJob(); job != nil {
			seen = append(seen, job.GetStatus())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(seen) == 0 || seen[len(seen)-1] != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("statuses = %v, want to end with FINISHED", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] == seen[i-1] {
			t.Errorf("status %v repeated in %v", seen[i], seen)
		}
	}
	if resp := stream.ResponseHeader(); resp == nil {
		t.Error("no response header")
	}
}

func TestDispatcherErrors(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Dispatcher().GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "ghost"}); connect.CodeOf(err) != connect.CodeNotFound || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND) {
		t.Errorf("GetJobResult of an unknown job: %v", err)
	}
	if _, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "bad id"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("GetJob with a malformed id: %v", err)
	}
	submit(t, c, "busy", twoVertices("sleep", map[string]string{"duration": "1h"}))
	if _, err := c.Dispatcher().GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "busy"}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_TERMINAL) {
		t.Errorf("GetJobResult of a running job: %v, want JOB_NOT_TERMINAL", err)
	}
	// "busy" keeps the slots of its running sinks; "quick" fits beside it.
	submit(t, c, "quick", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 2}}})
	result(t, c, "quick")
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "quick"}); connect.CodeOf(err) != connect.CodeFailedPrecondition || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL) {
		t.Errorf("cancel of a FINISHED job: %v, want FAILED_PRECONDITION JOB_TERMINAL", err)
	}
	// An invokable no TaskExecutor offers is refused at submission
	// (invokables_test.go has the details).
	if _, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "unknown", JobGraph: &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "no-such-thing", Parallelism: 1}}}}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED) {
		t.Errorf("unknown invokable: %v, want INVOKABLE_NOT_OFFERED", err)
	}
	// Listing pages through every job, newest first.
	var ids []string
	token := ""
	for {
		page, err := c.Dispatcher().ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.GetJobs() {
			ids = append(ids, j.GetJobId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "quick,busy" {
		t.Errorf("listed %v, want quick,busy", ids)
	}
	running, err := c.Dispatcher().ListJobs(ctx, &jobplanev1.ListJobsRequest{Statuses: []jobplanev1.JobStatus{jobplanev1.JobStatus_JOB_STATUS_RUNNING}})
	if err != nil || len(running.GetJobs()) != 1 || running.GetJobs()[0].GetJobId() != "busy" {
		t.Errorf("running jobs = %v, %v", running, err)
	}
	if _, err := c.Dispatcher().ListJobs(ctx, &jobplanev1.ListJobsRequest{PageToken: "bogus!"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListJobs with a foreign token: %v", err)
	}
}

func TestAttachedJobWithoutHeartbeatsIsCanceled(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	g := twoVertices("sleep", map[string]string{"duration": "1h"})
	g.Config = &jobplanev1.JobConfig{ClientHeartbeatTimeout: durationpb.New(300 * time.Millisecond)}
	submit(t, c, "attached", g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Heart-beating keeps it alive...
	for range 5 {
		resp, err := c.Dispatcher().ReportClientHeartbeat(ctx, &jobplanev1.ReportClientHeartbeatRequest{JobId: "attached"})
		if timeout := resp.GetTimeout().AsDuration(); err != nil || timeout <= 0 || timeout > 300*time.Millisecond {
			t.Fatalf("ReportClientHeartbeat = %v, %v", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "attached"})
	if err != nil || st.GetJob().GetSummary().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("while heart-beating: %v, %v", st, err)
	}
	// ...and silence cancels it.
	if res := result(t, c, "attached"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("result = %v, want CANCELED", res)
	}
}

func TestCancelBeforeAnyTaskRuns(t *testing.T) {
	// No TaskExecutor: the job can never deploy a task.
	c := newCluster(t, localcluster.Config{TaskExecutors: -1})
	submit(t, c, "early", twoVertices("noop", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "early"}); err != nil {
		t.Fatal(err)
	}
	if res := result(t, c, "early"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("result = %v, want CANCELED", res)
	}
}

func TestResultRetention(t *testing.T) {
	c := newCluster(t, localcluster.Config{ResultRetention: 300 * time.Millisecond})
	submit(t, c, "brief", twoVertices("noop", nil))
	if res := result(t, c, "brief"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := c.Store().GetJobResultEntry(ctx, "brief")
		if err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("result still stored after its retention")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The Dispatcher forgets the job right after the store deleted it.
	for {
		_, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "brief"})
		if connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("GetJob after retention: %v, want NOT_FOUND", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its id may be used again.
	if resp := submit(t, c, "brief", twoVertices("noop", nil)); !resp.GetCreated() {
		t.Errorf("resubmit after retention = %v, want created", resp)
	}
}

// watchAll reads a WatchJob stream to its end: the status messages, with
// their tokens and coalesced flags, and the stream's error.
func watchAll(ctx context.Context, c *localcluster.Cluster, id, resume string, upTo int) ([]*jobplanev1.WatchJobResponse, error) {
	stream, err := c.Dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id, ResumeToken: resume})
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var got []*jobplanev1.WatchJobResponse
	for len(got) < upTo && stream.Receive() {
		if stream.Msg().GetJob() != nil {
			got = append(got, stream.Msg())
		}
	}
	return got, stream.Err()
}

// A watch resumed with the token of a message continues right after it,
// under the same leader; other tokens start over, coalesced.
func TestWatchJobResumes(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "resumed", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "1h"}}}})
	waitJob(t, c, "resumed", func(d *jobplanev1.JobDetails) bool {
		return d.GetSummary().GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := watchAll(ctx, c, "resumed", "", 1)
	if err != nil || len(first) != 1 || first[0].GetResumeToken() == "" || first[0].GetCoalesced() {
		t.Fatalf("first watch = %v, %v; want one RUNNING message with a token", first, err)
	}
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "resumed"}); err != nil {
		t.Fatal(err)
	}
	if res := result(t, c, "resumed"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("result = %v", res)
	}
	// Resumed: the changes after the first message, none repeated, none
	// skipped, ending with CANCELED.
	rest, err := watchAll(ctx, c, "resumed", first[0].GetResumeToken(), 100)
	var statuses []jobplanev1.JobStatus
	for _, m := range rest {
		statuses = append(statuses, m.GetJob().GetStatus())
		if m.GetCoalesced() {
			t.Errorf("resumed message %v marked coalesced", m)
		}
	}
	want := []jobplanev1.JobStatus{jobplanev1.JobStatus_JOB_STATUS_CANCELLING, jobplanev1.JobStatus_JOB_STATUS_CANCELED}
	if err != nil || fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("resumed watch = %v, %v; want %v", statuses, err, want)
	}
	// After the terminal message there is nothing more.
	if after, err := watchAll(ctx, c, "resumed", rest[len(rest)-1].GetResumeToken(), 100); err != nil || len(after) != 0 {
		t.Errorf("watch resumed after CANCELED = %v, %v; want the stream to end at once", after, err)
	}
	// A token of another leadership: the current status, coalesced.
	other, err := watchAll(ctx, c, "resumed", "s.1.0.resumed", 100)
	if err != nil || len(other) != 1 || !other[0].GetCoalesced() || other[0].GetJob().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("watch with another leader's token = %v, %v; want CANCELED, coalesced", other, err)
	}
	// Another job's token is refused.
	if _, err := watchAll(ctx, c, "resumed", "s.1.0.other", 100); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("watch with another job's token: err = %v, want INVALID_ARGUMENT", err)
	}
}

// A JobMaster's calls to the ResourceManager carry the ResourceManager's
// token, as its registration answered it: a missing one is invalid, a
// newer one finds a deposed receiver, any other one an earlier leadership
// that this one's registrations are not from. That check comes before the
// JobMaster token's: a call wrong in both answers for the
// ResourceManager's token.
func TestResourceManagerFencedBothWays(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rm := clusterv1connect.NewResourceManagerServiceClient(c.HTTPClient(), c.URL())
	// The JobMaster registers under a grant of the job's election: the
	// test's own, on a session of its own.
	grant := func() *jobplanev1.FencingToken {
		t.Helper()
		sess, err := c.Store().OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close(context.Background()) })
		l, err := sess.Campaign(ctx, election.Job("fenced"), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Resign(context.Background()) })
		return &jobplanev1.FencingToken{SessionId: l.Token().SessionID, Epoch: l.Token().Epoch}
	}
	jmToken := grant()
	reg, err := rm.RegisterJobMaster(ctx, &clusterv1.RegisterJobMasterRequest{JobId: "fenced", JobMasterAddress: c.URL(), JobMasterToken: jmToken})
	if err != nil {
		t.Fatal(err)
	}
	current := reg.GetResourceManagerToken()
	if current.GetEpoch() == 0 {
		t.Fatalf("RegisterJobMaster answered no ResourceManager token: %v", reg)
	}
	declare := func(rmToken *jobplanev1.FencingToken) error {
		_, err := rm.DeclareResourceRequirements(ctx, &clusterv1.DeclareResourceRequirementsRequest{JobId: "fenced", JobMasterToken: jmToken, ResourceManagerToken: rmToken})
		return err
	}
	for _, tc := range []struct {
		name   string
		token  *jobplanev1.FencingToken
		code   connect.Code
		reason jobplanev1.ErrorReason
	}{
		{"no token", nil, connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{"a newer token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() + 1}, connect.CodeUnavailable, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER},
		{"an older token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() - 1}, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED},
		{"another session's token", &jobplanev1.FencingToken{SessionId: "other", Epoch: current.GetEpoch()}, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED},
	} {
		if err := declare(tc.token); connect.CodeOf(err) != tc.code || !apierror.Is(err, tc.reason) {
			t.Errorf("DeclareResourceRequirements with %s: err = %v, want %v (%v)", tc.name, err, tc.code, tc.reason)
		}
		_, err := rm.DisconnectJobMaster(ctx, &clusterv1.DisconnectJobMasterRequest{JobId: "fenced", JobMasterToken: jmToken, ResourceManagerToken: tc.token})
		if connect.CodeOf(err) != tc.code || !apierror.Is(err, tc.reason) {
			t.Errorf("DisconnectJobMaster with %s: err = %v, want %v (%v)", tc.name, err, tc.code, tc.reason)
		}
	}
	if err := declare(current); err != nil {
		t.Errorf("DeclareResourceRequirements with the current token: %v", err)
	}

	// A second JobMaster of the job registers under its own grant, once
	// the first's ended: the first one's token is stale.
	if err := c.Store().Resign(ctx, hastore.Fence{Election: election.Job("fenced"), Token: election.Token{SessionID: jmToken.GetSessionId(), Epoch: jmToken.GetEpoch()}}); err != nil {
		t.Fatal(err)
	}
	newer := grant()
	if _, err := rm.RegisterJobMaster(ctx, &clusterv1.RegisterJobMasterRequest{JobId: "fenced", JobMasterAddress: c.URL(), JobMasterToken: newer}); err != nil {
		t.Fatal(err)
	}
	if err := declare(current); connect.CodeOf(err) != connect.CodeAborted || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("DeclareResourceRequirements with the first JobMaster's token: err = %v, want ABORTED (STALE_FENCING_TOKEN)", err)
	}
	for _, tc := range []struct {
		name   string
		token  *jobplanev1.FencingToken
		code   connect.Code
		reason jobplanev1.ErrorReason
	}{
		{"a newer ResourceManager token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() + 1}, connect.CodeUnavailable, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER},
		{"an older ResourceManager token", &jobplanev1.FencingToken{SessionId: current.GetSessionId(), Epoch: current.GetEpoch() - 1}, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED},
	} {
		if err := declare(tc.token); connect.CodeOf(err) != tc.code || !apierror.Is(err, tc.reason) {
			t.Errorf("DeclareResourceRequirements with the stale JobMaster token and %s: err = %v, want %v (%v), the ResourceManager's token checked first", tc.name, err, tc.code, tc.reason)
		}
		_, err := rm.DisconnectJobMaster(ctx, &clusterv1.DisconnectJobMasterRequest{JobId: "fenced", JobMasterToken: jmToken, ResourceManagerToken: tc.token})
		if connect.CodeOf(err) != tc.code || !apierror.Is(err, tc.reason) {
			t.Errorf("DisconnectJobMaster with the stale JobMaster token and %s: err = %v, want %v (%v), the ResourceManager's token checked first", tc.name, err, tc.code, tc.reason)
		}
	}
	if _, err := rm.DisconnectJobMaster(ctx, &clusterv1.DisconnectJobMasterRequest{JobId: "fenced", JobMasterToken: newer, ResourceManagerToken: current}); err != nil {
		t.Errorf("DisconnectJobMaster with the current tokens: %v", err)
	}
}

// GetClusterOverview tells a client the limits it must keep within.
func TestOverviewReportsLimits(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ov, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l := ov.GetLimits()
	if l.GetMaxRequestBytes() <= 0 || l.GetMaxResponseBytes() <= 0 || l.GetMaxGraphBytes() <= 0 || l.GetMaxVertices() <= 0 ||
		l.GetMaxSubtasks() <= 0 || l.GetMaxListPageSize() != 1000 || l.GetMaxSubtaskPageSize() != 10_000 {
		t.Errorf("limits = %v; want every one set", l)
	}
	// A larger page is lowered to the limit the overview names.
	list, err := c.Dispatcher().ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: l.GetMaxListPageSize() + 1})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Errorf("ListJobs over the page limit = %v, %v", list, err)
	}
}

// ListTaskExecutors shows the TaskExecutors with their slots, a page at a
// time, and the slots a running job holds.
func TestListTaskExecutors(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "held", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "1h"}}}})
	waitJob(t, c, "held", func(d *jobplanev1.JobDetails) bool {
		return d.GetSummary().GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all []*jobplanev1.TaskExecutorInfo
	token := ""
	for page := 0; ; page++ {
		resp, err := c.Dispatcher().ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetTaskExecutors()) > 1 || page > 10 {
			t.Fatalf("page %d = %v; want at most one TaskExecutor per page", page, resp)
		}
		all = append(all, resp.GetTaskExecutors()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	ov, err := c.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || len(all) != int(ov.GetTaskExecutorCount()) || len(all) == 0 {
		t.Fatalf("listed %d TaskExecutors; the overview counts %d (%v)", len(all), ov.GetTaskExecutorCount(), err)
	}
	held, slots, free := 0, int32(0), int32(0)
	for i, te := range all {
		if i > 0 && te.GetTaskExecutorId() <= all[i-1].GetTaskExecutorId() {
			t.Errorf("TaskExecutors out of id order: %s after %s", te.GetTaskExecutorId(), all[i-1].GetTaskExecutorId())
		}
		if te.GetAddress() == "" || len(te.GetInvokables()) == 0 || te.GetSilence() == nil {
			t.Errorf("TaskExecutor %v lacks its address, invokables or silence", te)
		}
		slots, free = slots+te.GetSlotCount(), free+te.GetFreeSlotCount()
		for _, s := range te.GetAllocatedSlots() {
			if s.GetJobId() == "held" {
				held++
			}
		}
	}
	if held != 1 || slots != ov.GetSlotCount() || free != ov.GetFreeSlotCount() {
		t.Errorf("slots: %d held by the job, %d in all, %d free; want 1, and the overview's %d and %d", held, slots, free, ov.GetSlotCount(), ov.GetFreeSlotCount())
	}
	if _, err := c.Dispatcher().ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{PageToken: "%%"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a malformed page token: err = %v, want INVALID_ARGUMENT", err)
	}
}

// A job that restarts for ever keeps only its last status changes for
// watches: a resume from a dropped one starts over, coalesced.
func TestWatchHistoryIsBounded(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "fail", Parallelism: 1}}}
	g.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Unlimited: true}, // at once
	}}}
	submit(t, c, "flapping", g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := watchAll(ctx, c, "flapping", "", 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("first watch = %v, %v", first, err)
	}
	waitJob(t, c, "flapping", func(d *jobplanev1.JobDetails) bool { return d.GetSummary().GetRestartCount() > 100 })
	resumed, err := watchAll(ctx, c, "flapping", first[0].GetResumeToken(), 1)
	if err != nil || len(resumed) != 1 || !resumed[0].GetCoalesced() {
		t.Errorf("watch resumed from a change long dropped = %v, %v; want one message, coalesced", resumed, err)
	}
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "flapping"}); err != nil {
		t.Fatal(err)
	}
}
