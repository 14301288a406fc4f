package taskexecutor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// jmFenced runs an hour-long attempt of job "j" under JobMaster token 1,
// which the store shows as the job's grant, and waits until a heartbeat
// answer vouched for the job.
func jmFenced(ctx context.Context, t *testing.T) (*taskexecutor.Leaders, clusterv1connect.TaskExecutorServiceClient, *syncBuffer) {
	t.Helper()
	leaders := taskexecutor.NewLeaders(grant(1))
	leaders.GrantJob("j", grant(1))
	fake := &jobMaster{timeout: time.Second, offers: offerRegisters, store: leaders}
	_, client, log := deployTo(ctx, t, fake)
	return leaders, client, log
}

// jobMasterCalls are the JobMaster's direct calls to a TaskExecutor for
// job "j" under tok, each answering its error; AdoptAttempts, which
// refuses a job in its answer, is refusalOf.
func jobMasterCalls(ctx context.Context, client clusterv1connect.TaskExecutorServiceClient, tok *jobplanev1.FencingToken) map[string]func() error {
	other := &jobplanev1.ExecutionAttemptId{VertexId: "v"}
	return map[string]func() error{
		"SubmitTask": func() error {
			_, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{JobId: "j", JobMasterToken: tok, AllocationId: "a",
				Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", AttemptNumber: 9}, Invokable: "noop"})
			return err
		},
		"SubmitTasks": func() error {
			_, err := client.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: tok, Tasks: []*clusterv1.TaskDeployment{
				{AllocationId: "a", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", AttemptNumber: 9}, Invokable: "noop"}}})
			return err
		},
		"CancelTask": func() error {
			_, err := client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: tok, Attempt: other})
			return err
		},
		"FreeSlot": func() error {
			_, err := client.FreeSlot(ctx, &clusterv1.FreeSlotRequest{JobId: "j", JobMasterToken: tok, AllocationId: "a"})
			return err
		},
		"FreeSlots": func() error {
			_, err := client.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{JobId: "j", JobMasterToken: tok, AllocationIds: []string{"a"}})
			return err
		},
		"TriggerCheckpoint": func() error {
			_, err := client.TriggerCheckpoint(ctx, &clusterv1.TriggerCheckpointRequest{JobId: "j", JobMasterToken: tok, CheckpointId: 1, Attempts: []*jobplanev1.ExecutionAttemptId{other}})
			return err
		},
		"Heartbeat": func() error {
			_, err := client.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMaster{
				JobMaster: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMasterSender{JobId: "j", Token: tok}}})
			return err
		},
	}
}

// refusalOf is the code, reason and metadata of AdoptAttempts of job "j"
// under tok: of the job's refusal in the answer, or of the call's error.
func refusalOf(ctx context.Context, client clusterv1connect.TaskExecutorServiceClient, tok *jobplanev1.FencingToken) (connect.Code, jobplanev1.ErrorReason, map[string]string) {
	resp, err := client.AdoptAttempts(ctx, &clusterv1.AdoptAttemptsRequest{Jobs: []*clusterv1.JobAdoption{
		{JobId: "j", JobMasterToken: tok, JobMasterAddress: "http://127.0.0.1:1"}}})
	if err != nil {
		reason, md, _ := apierror.Info(err)
		return connect.CodeOf(err), reason, md
	}
	if r := resp.GetRefused(); len(r) > 0 {
		return connect.CodeAborted, r[0].GetReason(), r[0].GetMetadata()
	}
	return 0, 0, nil
}

// servedUnder checks that the JobMaster of tok is served, and sees the
// job's attempt still running under token 1.
func servedUnder(ctx context.Context, t *testing.T, client clusterv1connect.TaskExecutorServiceClient, tok *jobplanev1.FencingToken) {
	t.Helper()
	resp, err := client.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMaster{
		JobMaster: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMasterSender{JobId: "j", Token: tok}}})
	if err != nil {
		t.Fatalf("Heartbeat from the real JobMaster: %v", err)
	}
	if ts := resp.GetTasks(); len(ts) != 1 || ts[0].GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
		t.Fatalf("Heartbeat from the real JobMaster lists %v, want its attempt RUNNING", ts)
	}
}

// A JobMaster token newer than the job's grant that the store shows (an
// epoch never granted), on any of the JobMaster's direct calls, is refused
// naming the grant and changes nothing: the job's attempt keeps running
// and its real JobMaster is served after it. So is a token of the
// current epoch in another session, and one in the session of the
// `jobmanager` grant (which is public, so it proves nothing). Before
// contract 1.2 the TaskExecutor took any newer token: the forged call
// canceled the job's attempt and the real JobMaster was refused STALE.
func TestForgedJobMasterTokenRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, client, log := jmFenced(ctx, t)
	forged := map[string]*jobplanev1.FencingToken{
		"a never-granted epoch":                {SessionId: "forger", Epoch: 1000},
		"the jobmanager grant's session":       {SessionId: "s", Epoch: 1000},
		"another session of the current epoch": {SessionId: "forger", Epoch: 1},
	}
	for what, tok := range forged {
		for name, call := range jobMasterCalls(ctx, client, tok) {
			if name == "AdoptAttempts" {
				code, reason, md := refusalOf(ctx, client, tok)
				if code != connect.CodeAborted || reason != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN ||
					md["current_session_id"] != "s" || md["current_epoch"] != "1" {
					t.Errorf("AdoptAttempts under %s: %v %v %v, want the job refused STALE naming s@1", what, code, reason, md)
				}
				continue
			}
			staleIn(t, name+" under "+what, call(), election.Job("j"), grant(1))
		}
	}
	if stopped(t, log) {
		t.Fatalf("a forged JobMaster token stopped the job's attempt: %+v", log.records(t))
	}
	servedUnder(ctx, t, client, token(1))
}

// A newer JobMaster token that the store cannot be read for is refused
// UNAVAILABLE (STORE_UNAVAILABLE), and changes nothing.
func TestJobMasterTokenUncheckableWithoutTheStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders, client, log := jmFenced(ctx, t)
	leaders.Break()
	for name, call := range jobMasterCalls(ctx, client, token(2)) {
		err := call()
		if name == "AdoptAttempts" {
			code, reason, _ := refusalOf(ctx, client, token(2))
			if code != connect.CodeUnavailable || reason != jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE {
				t.Errorf("AdoptAttempts without the store: %v %v, want UNAVAILABLE (STORE_UNAVAILABLE)", code, reason)
			}
			continue
		}
		if reason, _, _ := apierror.Info(err); connect.CodeOf(err) != connect.CodeUnavailable || reason != jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE {
			t.Errorf("%s without the store: %v, want UNAVAILABLE (STORE_UNAVAILABLE)", name, err)
		}
	}
	leaders.Heal()
	if stopped(t, log) {
		t.Fatalf("an unchecked JobMaster token stopped the job's attempt: %+v", log.records(t))
	}
	servedUnder(ctx, t, client, token(1))
}

// A newer JobMaster token that the store shows as the job's grant is
// taken on a direct call, after which the older one is refused; a call
// under the current token reads nothing.
func TestNewerGrantedJobMasterTokenTaken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders, client, _ := jmFenced(ctx, t)
	reads := leaders.JobReads()
	servedUnder(ctx, t, client, token(1))
	if got := leaders.JobReads(); got != reads {
		t.Errorf("a call under the current token read the store %d times, want none", got-reads)
	}
	leaders.GrantJob("j", grant(2))
	if _, err := client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: token(2), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "other"}}); err != nil {
		t.Fatalf("CancelTask under the granted newer token: %v", err)
	}
	_, err := client.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMaster{
		JobMaster: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMasterSender{JobId: "j", Token: token(1)}}})
	staleIn(t, "Heartbeat from the older JobMaster", err, election.Job("j"), grant(2))
}

// On a store that reads an election once (election.Reader, as every HA
// store is), a newer token is checked with one such read and no
// observation: AdoptAttempts under the newer grant is taken (the job's
// slot handed over), and a token
// newer still that the store does not show is refused naming the grant.
func TestJobMasterTokenReadOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := taskexecutor.NewLeaders(grant(1))
	leaders.GrantJob("j", grant(1))
	_, client, _ := deployTo(ctx, t, &jobMaster{timeout: time.Second, offers: offerRegisters, store: leaders, readOnce: true})
	observed, once := leaders.JobReads(), leaders.OnceReads()
	leaders.GrantJob("j", grant(2))
	resp, err := client.AdoptAttempts(ctx, &clusterv1.AdoptAttemptsRequest{Jobs: []*clusterv1.JobAdoption{
		{JobId: "j", JobMasterToken: token(2), JobMasterAddress: "http://127.0.0.1:1"}}})
	if err != nil || len(resp.GetRefused()) > 0 || len(resp.GetJobs()) != 1 || len(resp.GetJobs()[0].GetAllocationIds()) != 1 {
		t.Fatalf("AdoptAttempts under the newer grant = %v, %v; want the job's slot handed over", resp, err)
	}
	if _, _, md := refusalOf(ctx, client, token(3)); md["election"] != election.Job("j") {
		t.Errorf("AdoptAttempts under a token the store does not show: refusal metadata %v, want the job's election", md)
	}
	if got := leaders.JobReads() - observed; got != 0 {
		t.Errorf("the checks opened %d observations of the job's election, want none", got)
	}
	if got := leaders.OnceReads() - once; got != 2 {
		t.Errorf("the checks read the job's election %d times, want 2 (one per new token)", got)
	}
}

// AdoptAttempts of a job that holds nothing here is answered empty with
// no store read, even with the store down and under a token never
// granted, and takes nothing: the job's real JobMaster, whose token is
// older than the forged one, is not refused for it afterwards. A job
// that holds something here is still checked in the same call.
func TestAdoptAttemptsOfAJobHeldNowhereReadsNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders, client, _ := jmFenced(ctx, t)
	adopt := func(jobs ...*clusterv1.JobAdoption) (*clusterv1.AdoptAttemptsResponse, error) {
		return client.AdoptAttempts(ctx, &clusterv1.AdoptAttemptsRequest{Jobs: jobs})
	}
	entry := func(job string, tok *jobplanev1.FencingToken) *clusterv1.JobAdoption {
		return &clusterv1.JobAdoption{JobId: job, JobMasterToken: tok, JobMasterAddress: "http://127.0.0.1:1"}
	}
	reads := leaders.JobReads()
	leaders.Break()
	resp, err := adopt(entry("k", token(1000)))
	if err != nil || len(resp.GetRefused()) > 0 || len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetJobId() != "k" ||
		len(resp.GetJobs()[0].GetAttempts()) > 0 || len(resp.GetJobs()[0].GetAllocationIds()) > 0 {
		t.Fatalf("AdoptAttempts of a job held nowhere, store down: %v, %v; want job k answered empty", resp, err)
	}
	if got := leaders.JobReads(); got != reads {
		t.Errorf("AdoptAttempts of a job held nowhere read the store %d times, want none", got-reads)
	}
	if _, err := adopt(entry("k", token(1000)), entry("j", token(2))); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("AdoptAttempts naming a held job under a newer token, store down: %v; want UNAVAILABLE (the held job needs a read)", err)
	}
	leaders.Heal()
	leaders.GrantJob("k", grant(2))
	if resp, err := adopt(entry("k", token(2))); err != nil || len(resp.GetRefused()) > 0 {
		t.Errorf("AdoptAttempts of job k under its granted token after a forged newer one: %v, %v; want it answered (the forged token was not taken)", resp.GetRefused(), err)
	}
}

// BenchmarkAdoptAttempts measures AdoptAttempts of 100 jobs that hold
// nothing here: under their current tokens, and under newer tokens that
// the store shows as their grants. Neither reads the store (a job held
// nowhere is answered empty at once), so the figure is the TaskExecutor's
// own cost of answering a leader that took over many jobs.
func BenchmarkAdoptAttempts(b *testing.B) {
	const jobs = 100
	leaders := taskexecutor.NewLeaders(grant(1))
	te, err := taskexecutor.New(taskexecutor.Config{Address: "http://127.0.0.1:1", Slots: 1, Store: leaders,
		HTTPClient: http.DefaultClient, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	_, h := te.Handler()
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := clusterv1connect.NewTaskExecutorServiceClient(srv.Client(), srv.URL)
	ctx := context.Background()
	epoch := uint64(1)
	adoptAll := func() {
		req := &clusterv1.AdoptAttemptsRequest{}
		for i := range jobs {
			req.Jobs = append(req.Jobs, &clusterv1.JobAdoption{JobId: fmt.Sprint("job", i), JobMasterToken: token(epoch), JobMasterAddress: "http://127.0.0.1:1"})
		}
		resp, err := client.AdoptAttempts(ctx, req)
		if err != nil || len(resp.GetRefused()) > 0 {
			b.Fatalf("AdoptAttempts = %v, %v", resp.GetRefused(), err)
		}
	}
	grantAll := func() {
		for i := range jobs {
			leaders.GrantJob(fmt.Sprint("job", i), grant(epoch))
		}
	}
	grantAll()
	adoptAll()
	b.Run("current", func(b *testing.B) {
		for b.Loop() {
			adoptAll()
		}
	})
	b.Run("newer", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			epoch++
			grantAll()
			b.StartTimer()
			adoptAll()
		}
	})
}
