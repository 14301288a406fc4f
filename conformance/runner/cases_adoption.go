package runner

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// FeatureAdoption: a JobMaster that takes a job over adopts the attempts
// the TaskExecutors still run (TaskExecutorService.AdoptAttempts under a
// task lease) instead of deploying them again.
const FeatureAdoption = "supports_adoption"

var adoptionRequires = []string{FeatureResourceManager, FeatureFailover, featureRunnerStarts, FeatureAdoption}

var adoptionCases = []Case{
	{Name: "adoption/leader-killed", Requires: adoptionRequires, Instances: 2,
		Doc: "SIGKILL of the leader while a job's two subtasks run: the standby adopts both running attempts instead of deploying them again (one deployment and one start per subtask), and the job finishes", Run: func(t *T) {
			t.adoptAcross(t.killLeader)
		}},
	{Name: "adoption/graceful-handoff", Requires: adoptionRequires, Instances: 2,
		Doc: "SIGTERM of the leader while a job's two subtasks run: the standby adopts both running attempts (one deployment and one start per subtask), and the job finishes", Run: func(t *T) {
			t.adoptAcross(func(leader *serverProc) {
				if !leader.stop() {
					t.Errorf("the leader did not exit within 10s of SIGTERM (killed); expected a graceful stop")
				}
			})
		}},
	{Name: "adoption/paused-leader", Requires: adoptionRequires, Instances: 2,
		Doc: "SIGSTOP of the leader past its session's TTL while a job's two subtasks run, then SIGCONT: the standby adopts both attempts, the old leader's token is refused for them at their TaskExecutors, they keep running, and the job finishes with one start per subtask", Run: adoptPausedLeader},
	{Name: "adoption/finished-in-the-gap", Requires: adoptionRequires, Instances: 1,
		Doc: "SIGKILL of the only instance while a job's two subtasks run; one finishes before the restarted instance leads: it counts as finished (never deployed again), the other is adopted, and the job finishes", Run: finishedInTheGap},
	{Name: "adoption/canceled-in-the-gap", Requires: adoptionRequires, Instances: 1,
		Doc: "SIGKILL of the only instance while a job's one subtask runs under NoRestart; it ends before the restarted instance leads, and the runner's TaskExecutor lists it to AdoptAttempts as CANCELED: the new JobMaster, which cannot tell whether its predecessor asked, takes it as a task failure, and the job ends FAILED without deploying it again", Run: canceledInTheGap},
	{Name: "adoption/unreachable-task-executor", Requires: adoptionRequires, Instances: 2,
		Doc: "SIGKILL of the leader while a job's two subtasks run and one of their TaskExecutors is cut off the network: the subtasks it runs are deployed anew only after it stopped them at the end of its task lease (never two attempts at once), those elsewhere are adopted, and the job finishes", Run: unreachableTaskExecutor},
}

// gateGraph is one vertex of n "gate" subtasks that run until the case
// opens gate: nothing of the job has ended while they run.
func gateGraph(n int32, gate string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "gate", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "gate", Parallelism: n,
		Config: map[string]string{"gate": gate}}}}
}

// adoptAcross runs a job of two gate subtasks on the leader of two
// instances, ends the leader with end, and checks that the standby
// adopts the running attempts: it deploys nothing of the job, each
// subtask started once, and the job finishes.
func (t *T) adoptAcross(end func(leader *serverProc)) {
	id, old, leader := t.runningBesideStandby(gateGraph)
	end(leader)
	t.adoptedAndFinished(id, old.Token, id)
}

// adoptedAndFinished waits for the job's leadership after old and its
// new JobMaster's adoption, opens gate, and checks that the job finishes
// with each of its two subtasks deployed and started once.
func (t *T) adoptedAndFinished(id string, old election.Token, gate string) {
	info := t.regrant(id, old)
	t.waitAdopted(id, info.Token)
	t.env.open(gate)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED", r.GetStatus(), r.GetFailure().GetMessage())
	}
	t.ranOnce(id, 2)
}

// waitAdopted waits until the job's new JobMaster (token now) has asked a
// TaskExecutor for what it holds of the job: AdoptAttempts, or any call
// that moves the TaskExecutor to the new token (which ends the old
// token's standing there). An implementation that adopts some other way
// still makes some call under the new token before the attempts end. It
// returns as the first such call arrives at some TaskExecutor, which may
// not have handled it yet: a case that needs the old token refused waits
// for the answers (adoptedAt).
func (t *T) waitAdopted(id string, now election.Token) {
	if !t.wait(t.waits.failover, func() bool {
		for _, e := range t.events(id, "") {
			if e.Token == now && e.Source != "store" && e.Source != "client" {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no call to a TaskExecutor under the job's new token %s within %v of its grant; expected the new JobMaster to find the running attempts (AdoptAttempts)", now, t.waits.failover)
	}
}

// ranOnce checks that each of the job's subtasks was deployed once and
// started once: the attempts running when the leader changed were
// adopted, not deployed again.
func (t *T) ranOnce(id string, subtasks int) {
	deployed, started := t.deploysAndStarts(id)
	if len(started) != subtasks {
		t.Errorf("subtasks started: %v; expected %d subtasks", started, subtasks)
	}
	for subtask, n := range started {
		if n != 1 || deployed[subtask] != 1 {
			t.Errorf("subtask %s was deployed %d times and started %d times; expected once each: an attempt that runs on when its JobMaster changes is adopted by the new one, not deployed again", subtask, deployed[subtask], n)
		}
	}
}

// deploysAndStarts counts, by subtask, the job's deployments (SubmitTask
// at any TaskExecutor) and its attempts' starts.
func (t *T) deploysAndStarts(id string) (deployed, started map[string]int) {
	deployed, started = map[string]int{}, map[string]int{}
	for _, e := range t.events(id, "") {
		subtask, _, _ := strings.Cut(e.Attempt, "#")
		switch e.Op {
		case "SubmitTask":
			deployed[subtask]++
		case "attempt-start":
			started[subtask]++
		}
	}
	return deployed, started
}

// adoptPausedLeader pauses the leader until the standby has taken the
// job over and adopted its attempts, resumes it, and checks that the old
// token is refused for the adopted attempts, which run on.
func adoptPausedLeader(t *T) {
	id, old, leader := t.runningBesideStandby(gateGraph)
	leader.signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			leader.signal(syscall.SIGCONT)
		}
	}()
	info := t.regrant(id, old.Token)
	t.waitAdopted(id, info.Token)
	// Where each attempt runs, as its TaskExecutor logged the start. The
	// old token is refused for an attempt only once its TaskExecutor has
	// handled the adoption: waitAdopted returns as the first call under
	// the new token arrives at some TaskExecutor, before it is handled,
	// and perhaps before the new JobMaster asked the other one at all.
	var adopted []Event
	for _, e := range t.events(id, "attempt-start") {
		if t.env.taskExecutor(e.Source) == nil {
			continue
		}
		if !t.wait(t.waits.failover, func() bool { return adoptedAt(t.env.log, id, e.Source, e.Attempt, info.Token) }) {
			t.Errorf("%s did not answer AdoptAttempts under the job's new token %s listing attempt %s within %v of the adoption's start; expected the new JobMaster to adopt every running attempt", e.Source, info.Token, e.Attempt, t.waits.failover)
			continue
		}
		adopted = append(adopted, e)
	}
	leader.signal(syscall.SIGCONT)
	resumed = true
	for _, e := range adopted {
		te := t.env.taskExecutor(e.Source)
		a := attemptID(e.Attempt)
		client := clusterv1connect.NewTaskExecutorServiceClient(t.env.http, te.url)
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		_, err := client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: id, JobMasterToken: protoToken(old.Token), Attempt: a})
		cancel()
		if err == nil {
			t.Errorf("CancelTask of %s with the old leader's token %s succeeded at %s; expected it refused (STALE_FENCING_TOKEN): the new JobMaster adopted the attempt under its token %s", e.Attempt, old.Token, e.Source, info.Token)
		}
	}
	if evs := t.events(id, "attempt-stop"); len(evs) > 0 {
		t.Errorf("%v before the job's gate opened; expected the adopted attempts to run on", evs[0])
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED", r.GetStatus(), r.GetFailure().GetMessage())
	}
	t.ranOnce(id, 2)
}

// adoptedAt reports whether TaskExecutor te has answered an
// AdoptAttempts call under token now that listed the job's attempt (an
// "Adopted" event): from then on the attempt and the job are the new
// token's there, and the older token is refused for them. The
// AdoptAttempts event itself proves nothing yet: it is logged as the call
// arrives, before the TaskExecutor has handled it.
func adoptedAt(log *Log, id, te, attempt string, now election.Token) bool {
	return len(log.Events(func(e Event) bool {
		return e.Op == "Adopted" && e.Key == id && e.Source == te && e.Attempt == attempt && e.Token == now
	})) > 0
}

// finishedInTheGap kills the only instance while a job's two subtasks
// run, lets one finish while no JobMaster listens, restarts the instance,
// and checks that the finished attempt counts as it would have: not
// deployed again; the other is adopted.
func finishedInTheGap(t *T) {
	id := t.job("j")
	first, second := id+"-first", id+"-second"
	g := &jobplanev1.JobGraph{Name: "two-gates", Vertices: []*jobplanev1.JobVertex{
		{Id: "first", Invokable: "gate", Parallelism: 1, Config: map[string]string{"gate": first}},
		{Id: "second", Invokable: "gate", Parallelism: 1, Config: map[string]string{"gate": second}},
	}}
	t.mustSubmit(id, g)
	t.waitRunning(id, 2)
	old := t.leaderOf(election.Job(id))
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	t.env.open(first)
	t.setup(func() {
		if !t.wait(30*time.Second, func() bool { return len(t.events(id, "attempt-stop")) > 0 }) {
			t.Fatalf("the first subtask did not stop within 30s of its gate opening")
		}
	})
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.adoptedAndFinished(id, old.Token, second)
}

// canceledInTheGap is finishedInTheGap for an attempt that fails while no
// JobMaster listens, listed by its TaskExecutor as CANCELED (see
// reportFailuresAsCanceled).
func canceledInTheGap(t *T) {
	id := t.job("j")
	t.runCanceledUnasked(id)
	old := t.leaderOf(election.Job(id))
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	t.env.open(id + "-fail")
	t.setup(func() {
		if !t.wait(30*time.Second, func() bool { return len(t.events(id, "attempt-stop")) > 0 }) {
			t.Fatalf("the subtask did not stop within 30s of its fail gate opening")
		}
	})
	deployed := len(t.events(id, "SubmitTask"))
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	info := t.regrant(id, old.Token)
	t.waitAdopted(id, info.Token)
	t.failedNotRedeployed(id, deployed, "the restarted instance led it", "an attempt AdoptAttempts lists as CANCELED")
}

// unreachableTaskExecutor cuts one TaskExecutor of a running job off the
// network once it holds a task lease, kills the leader, and checks that
// the new JobMaster deploys the subtasks that TaskExecutor runs anew only
// after it stopped them (the lease it was granted ended), and adopts the
// others.
func unreachableTaskExecutor(t *T) {
	id, old, leader := t.runningBesideStandby(gateGraph)
	starts := t.events(id, "attempt-start")
	if len(starts) == 0 {
		t.Fatalf("no attempt of job %s started on the runner's TaskExecutors", id)
	}
	cut := t.env.taskExecutor(starts[0].Source)
	if cut == nil {
		t.Fatalf("attempt %s started at %s, not a TaskExecutor of the runner", starts[0].Attempt, starts[0].Source)
	}
	cutSubtasks := map[string]bool{}
	var since time.Time
	for _, e := range starts {
		if e.Source == cut.id {
			subtask, _, _ := strings.Cut(e.Attempt, "#")
			cutSubtasks[subtask] = true
			since = e.Time
		}
	}
	// The lease that keeps the cut TaskExecutor's attempts running is
	// one granted after they started.
	if !t.wait(t.waits.failover, func() bool { return cut.leasedSince(since) }) {
		t.Fatalf("no heartbeat of %s was answered with a task lease within %v of its attempts' start; expected the server to grant one (HeartbeatFromTaskExecutorResponse.task_lease), as a server that adopts does", cut.id, t.waits.failover)
	}
	cut.cut.Store(true)
	t.Cleanup(func() { cut.cut.Store(false) })
	t.env.log.Add(Event{Source: "client", Op: "cut", Key: id, Detail: cut.id})
	t.killLeader(leader)
	info := t.regrant(id, old.Token)
	// The subtasks cut off are deployed anew, once their lease ended.
	redeployed := func() map[string]Event {
		out := map[string]Event{}
		for _, e := range t.events(id, "SubmitTask") {
			subtask, _, _ := strings.Cut(e.Attempt, "#")
			if e.Token == info.Token && cutSubtasks[subtask] {
				if _, seen := out[subtask]; !seen {
					out[subtask] = e
				}
			}
		}
		return out
	}
	if !t.wait(t.waits.redeploy, func() bool { return len(redeployed()) == len(cutSubtasks) }) {
		t.Fatalf("subtasks deployed anew under the new token %s within %v: %v; expected %d (those that ran on the unreachable %s) once its task lease ended", info.Token, t.waits.redeploy, redeployed(), len(cutSubtasks), cut.id)
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED", r.GetStatus(), r.GetFailure().GetMessage())
	}
	// Each subtask cut off stopped at the unreachable TaskExecutor before
	// it was deployed anew.
	for subtask, deploy := range redeployed() {
		stopped := false
		for _, e := range t.events(id, "attempt-stop") {
			if e.Source == cut.id && strings.HasPrefix(e.Attempt, subtask+"#") && e.Seq < deploy.Seq {
				stopped = true
			}
		}
		if !stopped {
			t.Errorf("subtask %s was deployed anew at %s under %s while its attempt at the unreachable %s still ran; expected the new JobMaster to deploy it only once the task lease granted there had ended", subtask, deploy.Source, info.Token, cut.id)
		}
	}
	// The others were adopted: deployed and started once.
	deployed, started := t.deploysAndStarts(id)
	for subtask, n := range started {
		want := 1
		if cutSubtasks[subtask] {
			want = 2
		}
		if n != want || deployed[subtask] != want {
			t.Errorf("subtask %s was deployed %d times and started %d times; expected %d each: an attempt at a reachable TaskExecutor is adopted, one at an unreachable one deployed anew once", subtask, deployed[subtask], n, want)
		}
	}
}

// taskExecutor returns the runner's TaskExecutor with the id, or nil.
func (e *env) taskExecutor(id string) *taskExec {
	for _, te := range e.tes {
		if te.id == id {
			return te
		}
	}
	return nil
}

// attemptID parses an attempt key, vertex/subtask#attempt (attemptKey).
func attemptID(key string) *jobplanev1.ExecutionAttemptId {
	var (
		vertex           string
		subtask, attempt int32
	)
	i, j := strings.LastIndexByte(key, '/'), strings.LastIndexByte(key, '#')
	if i < 0 || j < i {
		return &jobplanev1.ExecutionAttemptId{VertexId: key}
	}
	vertex = key[:i]
	_, _ = fmt.Sscanf(key[i+1:], "%d#%d", &subtask, &attempt)
	return &jobplanev1.ExecutionAttemptId{VertexId: vertex, SubtaskIndex: subtask, AttemptNumber: attempt}
}
