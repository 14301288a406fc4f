package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// Timings of the HA cluster tests: short, and valid together (the
// heartbeat timeout stays below two thirds of the TTL). The TTL leaves
// room for a pause longer than the heartbeat timeout after which the
// paused leader still leads: its lease certainly holds for 0.9 TTL after
// its last renewal, and renewals come every third of the TTL.
const (
	haSessionTTL = 6 * time.Second
	haTimeout    = 1500 * time.Millisecond
)

// haCluster is an HA store process, two jobmanager processes on it and two
// taskexecutor processes, each TaskExecutor keeping an attempt log.
type haCluster struct {
	store       hastore.Store // a client of the HA store process
	jobManagers []*jobManagerProc
	attemptLogs []string
	http        *http.Client
}

type jobManagerProc struct {
	*process
	url string
}

func startHACluster(t *testing.T) *haCluster {
	t.Helper()
	dir := t.TempDir()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &haCluster{http: &http.Client{Transport: tr}}

	hsAddr := filepath.Join(dir, "hastore-addr")
	hs := startJobplane(t, "hastore", "--listen", "127.0.0.1:0", "--listen-addr-file", hsAddr, "--data-dir", filepath.Join(dir, "hastore"))
	hsURL := "http://" + waitForFile(t, hs, hsAddr)
	c.store = hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: c.http, BaseURL: hsURL})

	for i := range 2 {
		addr := filepath.Join(dir, fmt.Sprintf("jm%d-addr", i))
		p := startJobplane(t, "jobmanager", "--hastore", hsURL, "--listen", "127.0.0.1:0", "--listen-addr-file", addr,
			"--session-ttl", haSessionTTL.String(), "--heartbeat-interval", "200ms", "--heartbeat-timeout", haTimeout.String(),
			// Without a task lease: these tests check that TaskExecutors
			// stop a silent leader's tasks after the heartbeat timeout
			// (with a lease, they keep running: internal/failover).
			"--task-lease", "0")
		c.jobManagers = append(c.jobManagers, &jobManagerProc{process: p, url: "http://" + waitForFile(t, p, addr)})
		if i == 0 {
			c.waitLeader(t, 0) // the first one leads
		}
	}
	for i := range 2 {
		log := filepath.Join(dir, fmt.Sprintf("te%d-attempts.jsonl", i))
		c.attemptLogs = append(c.attemptLogs, log)
		startJobplane(t, "taskexecutor", "--hastore", hsURL, "--slots", "4", "--cancel-grace", "200ms", "--attempt-log", log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := c.dispatcher(0).GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && resp.GetTaskExecutorCount() == 2 {
			return c
		}
		if ctx.Err() != nil {
			t.Fatalf("two TaskExecutors never registered: %v, %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *haCluster) dispatcher(i int) jobplanev1connect.DispatcherServiceClient {
	return jobplanev1connect.NewDispatcherServiceClient(c.http, c.jobManagers[i].url)
}

// leader returns the index of the leading jobmanager.
func (c *haCluster) leader(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.store.Leader(ctx, election.JobManager)
		cancel()
		if err == nil {
			for i, jm := range c.jobManagers {
				if jm.url == info.Address {
					return i
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no jobmanager leads after 30s")
	return -1
}

// waitLeader waits until jobmanager i leads.
func (c *haCluster) waitLeader(t *testing.T, i int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.store.Leader(ctx, election.JobManager)
		cancel()
		if err == nil && info.Address == c.jobManagers[i].url {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobmanager %d not leading after 30s: %+v, %v", i, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAllRunning waits until every subtask of the job runs, as the
// leading jobmanager reports it.
func (c *haCluster) waitAllRunning(t *testing.T, jobID string, subtasks int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.dispatcher(c.leader(t)).GetJob(ctx, &jobplanev1.GetJobRequest{JobId: jobID})
		cancel()
		if err == nil {
			for _, n := range resp.GetJob().GetSummary().GetTaskCounts() {
				if n.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING && int(n.GetCount()) == subtasks {
					return
				}
			}
			last = fmt.Sprint(resp.GetJob().GetSummary())
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("job %s never had all %d subtasks RUNNING; last: %s", jobID, subtasks, last)
}

// A leader stalled by SIGSTOP, for less than the heartbeat timeout, for
// longer than it but less than the session TTL, and past the TTL (the
// standby takes over), never has a subtask run twice at once: the
// TaskExecutors' own records of every attempt's start and stop show no
// overlap.
func TestStalledLeaderNeverRunsASubtaskTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("process pause cycles")
	}
	c := startHACluster(t)
	const subtasks = 6
	graph := &jobplanev1.JobGraph{
		Name:     "stall",
		Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: "sleep", Parallelism: subtasks, Config: map[string]string{"duration": "10m"}}},
		Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
			FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 1000, Delay: durationpb.New(100 * time.Millisecond)},
		}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.dispatcher(0).SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "stall", JobGraph: graph}); err != nil {
		t.Fatal(err)
	}
	c.waitAllRunning(t, "stall", subtasks)
	waitAttemptsRunning(t, c.attemptLogs, subtasks)

	for _, pause := range []time.Duration{
		haTimeout / 3, // shorter than the heartbeat timeout: nothing happens
		2 * haTimeout, // longer, but the leader keeps its lease
		haSessionTTL + haSessionTTL/3 + 500*time.Millisecond, // longer than any lease: the standby takes over
	} {
		leader := c.leader(t)
		p := c.jobManagers[leader]
		t.Logf("pausing jobmanager %d for %v", leader, pause)
		stopped := time.Now()
		sigstop(t, p.cmd.Process.Pid)
		// The pause itself: the fault being injected, not a wait for state.
		time.Sleep(pause)
		if pause > haSessionTTL {
			c.waitLeader(t, 1-leader) // the standby took over
		}
		resumed := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if pause > haTimeout {
			// The TaskExecutors stopped the silent JobMaster's tasks
			// themselves, while it was still paused.
			stops := 0
			for _, r := range readAttempts(t, c.attemptLogs) {
				if r.Event == "stop" && r.Time.After(stopped) && r.Time.Before(resumed) {
					stops++
				}
			}
			if stops < subtasks {
				t.Errorf("pause of %v: %d attempts stopped during the pause, want all %d (stopped by their TaskExecutors)", pause, stops, subtasks)
			}
		}
		c.waitAllRunning(t, "stall", subtasks)
		// The JobMaster's view can be older than the TaskExecutors' (it
		// may not have heard yet that they stopped the tasks): the next
		// pause starts once every subtask runs on a TaskExecutor again.
		waitAttemptsRunning(t, c.attemptLogs, subtasks)
	}

	leader := c.dispatcher(c.leader(t))
	if _, err := leader.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "stall"}); err != nil {
		t.Fatal(err)
	}
	res, err := leader.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "stall", Wait: true})
	if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("result = %v, %v; want CANCELED", res, err)
	}
	records := waitAttemptsRunning(t, c.attemptLogs, 0) // after the job ended
	if overlaps := overlappingAttempts(records); len(overlaps) > 0 {
		t.Errorf("%d overlapping runs of one subtask:\n%s", len(overlaps), strings.Join(overlaps, "\n"))
	}
	t.Logf("%d attempt records, no subtask ran twice at once", len(records))
}

// sigstop stops a process with SIGSTOP and waits until every one of its
// threads is stopped: the signal is delivered asynchronously, and a thread
// running on another core could still answer a request meanwhile. Without
// procfs it does not wait.
func sigstop(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(stats) == 0 {
			return
		}
		running := 0
		for _, f := range stats {
			b, err := os.ReadFile(f)
			// The state follows the command name, which is in parentheses.
			if i := strings.LastIndexByte(string(b), ')'); err == nil && i >= 0 && i+2 < len(b) && b[i+2] != 'T' && b[i+2] != 't' {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads of process %d still running 10s after SIGSTOP", running, pid)
		}
	}
}

// readAttempts reads the TaskExecutors' attempt logs.
func readAttempts(t *testing.T, logs []string) []taskexecutor.AttemptRecord {
	t.Helper()
	var out []taskexecutor.AttemptRecord
	for _, name := range logs {
		f, err := os.Open(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r taskexecutor.AttemptRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out = append(out, r)
		}
		f.Close()
	}
	return out
}

// waitAttemptsRunning waits until exactly n attempts that started have
// not stopped, by the TaskExecutors' own records, and returns the
// records.
func waitAttemptsRunning(t *testing.T, logs []string, n int) []taskexecutor.AttemptRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		records := readAttempts(t, logs)
		running := 0
		for _, r := range records {
			switch r.Event {
			case "start":
				running++
			case "stop":
				running--
			}
		}
		if running == n {
			return records
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts running after 30s, want %d", running, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// overlappingAttempts returns a description of every pair of runs of one
// subtask whose times overlap.
func overlappingAttempts(records []taskexecutor.AttemptRecord) []string {
	type run struct {
		start, stop time.Time
		who         string
	}
	type subtask struct {
		job, vertex string
		index       int
	}
	type attempt struct {
		subtask
		te      string
		attempt int
		epoch   uint64
	}
	open := map[attempt]time.Time{}
	runs := map[subtask][]run{}
	for _, r := range records {
		a := attempt{subtask{r.JobID, r.VertexID, r.SubtaskIndex}, r.TaskExecutor, r.Attempt, r.Epoch}
		switch r.Event {
		case "start":
			open[a] = r.Time
		case "stop":
			runs[a.subtask] = append(runs[a.subtask], run{open[a], r.Time, fmt.Sprintf("%s attempt %d epoch %d", a.te, a.attempt, a.epoch)})
			delete(open, a)
		}
	}
	var out []string
	for st, rs := range runs {
		slices.SortFunc(rs, func(a, b run) int { return a.start.Compare(b.start) })
		for i := 1; i < len(rs); i++ {
			if rs[i].start.Before(rs[i-1].stop) {
				out = append(out, fmt.Sprintf("%s/%s/%d: %s ran %v–%v, %s started %v",
					st.job, st.vertex, st.index, rs[i-1].who, rs[i-1].start.Format("15:04:05.000"), rs[i-1].stop.Format("15:04:05.000"),
					rs[i].who, rs[i].start.Format("15:04:05.000")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// A request that waited at a paused leader while the standby took over is
// answered NOT_LEADER, pointing at the new leader: a read is not answered
// with the old leadership, and a submission is not PERSIST_FAILED.
func TestPausedLeaderAnswersNotLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("process pause")
	}
	c := startHACluster(t)
	old := c.leader(t)
	p := c.jobManagers[old]
	sigstop(t, p.cmd.Process.Pid)
	// Requests sent now wait in the paused process's socket buffers.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := c.dispatcher(old)
	overview := make(chan error, 1)
	go func() {
		_, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		overview <- err
	}()
	submit := make(chan error, 1)
	go func() {
		_, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "queued", JobGraph: &jobplanev1.JobGraph{
			Name: "queued", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}},
		}})
		submit <- err
	}()
	c.waitLeader(t, 1-old)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"GetClusterOverview": overview, "SubmitJob": submit} {
		err := <-ch
		if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) {
			t.Errorf("%s queued at the paused leader: err = %v; want UNAVAILABLE NOT_LEADER", name, err)
			continue
		}
		if _, md, _ := apierror.Info(err); md["leader_address"] != c.jobManagers[1-old].url {
			t.Errorf("%s: leader_address = %q, want the new leader %q", name, md["leader_address"], c.jobManagers[1-old].url)
		}
	}
}
