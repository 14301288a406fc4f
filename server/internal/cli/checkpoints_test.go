package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

func TestCheckpointsText(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *jobplanev1.CheckpointStats
		want string
	}{
		{"none yet", &jobplanev1.CheckpointStats{Counts: &jobplanev1.CheckpointCounts{Triggered: 1}, InProgressId: 1}, "0 completed, 0 failed, 1 in progress"},
		{"running", &jobplanev1.CheckpointStats{Counts: &jobplanev1.CheckpointCounts{Triggered: 7, Completed: 5, Failed: 1}, InProgressId: 7,
			Latest: &jobplanev1.CheckpointInfo{CheckpointId: 6, TriggerTime: ts(0), AckTime: ts(time.Second)}, RestoredFrom: "3"},
			"5 completed, 1 failed, 7 in progress; latest 6 (1.5s ago); restored from checkpoint 3"},
		{"from a savepoint", &jobplanev1.CheckpointStats{Counts: &jobplanev1.CheckpointCounts{}, RestoredFrom: "sp-j-4"},
			"0 completed, 0 failed; restored from savepoint sp-j-4"},
	} {
		if got := checkpointsText(tc.st, t0.Add(2500*time.Millisecond)); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 20: "5.0 MiB"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// The status view has a checkpoints line when the job has checkpoint
// statistics, and none when it has not.
func TestRenderJobDetailsCheckpoints(t *testing.T) {
	d := &jobplanev1.JobDetails{Summary: &jobplanev1.JobSummary{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, SubmitTime: ts(0)},
		Checkpoints: &jobplanev1.CheckpointStats{Counts: &jobplanev1.CheckpointCounts{Triggered: 2, Completed: 2},
			Latest: &jobplanev1.CheckpointInfo{CheckpointId: 2, AckTime: ts(time.Second)}}}
	var b bytes.Buffer
	renderJobDetails(&b, d, t0.Add(3*time.Second), false)
	if want := "Checkpoints:  2 completed, 0 failed; latest 2 (2s ago)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
	d.Checkpoints = nil
	b.Reset()
	renderJobDetails(&b, d, t0, false)
	if strings.Contains(b.String(), "Checkpoints") {
		t.Errorf("a job without checkpoint statistics has a checkpoints line:\n%s", b.String())
	}
}

func TestRenderCheckpoints(t *testing.T) {
	resp := &jobplanev1.ListCheckpointsResponse{
		Stats: &jobplanev1.CheckpointStats{Counts: &jobplanev1.CheckpointCounts{Triggered: 13, Completed: 12, Failed: 1}, InProgressId: 13,
			Latest: &jobplanev1.CheckpointInfo{CheckpointId: 12, AckTime: ts(12 * time.Second)}, RestoredFrom: "sp-j-2"},
		Checkpoints: []*jobplanev1.CheckpointInfo{
			{CheckpointId: 11, TriggerTime: ts(10 * time.Second), AckTime: ts(10*time.Second + 1500*time.Microsecond), StateBytes: 12, SubtaskStates: 2},
			{CheckpointId: 12, TriggerTime: ts(11 * time.Second), AckTime: ts(12 * time.Second), StateBytes: 2048, SubtaskStates: 2},
		},
	}
	var b bytes.Buffer
	renderCheckpoints(&b, "j", resp, t0.Add(13*time.Second))
	want := "" +
		"Job:            j\n" +
		"Triggered:      13\n" +
		"Completed:      12\n" +
		"Failed:         1\n" +
		"In progress:    13\n" +
		"Latest:         12 (1s ago)\n" +
		"Restored from:  savepoint sp-j-2\n" +
		"\n" +
		"ID  TRIGGERED            DURATION  SIZE     SUBTASK STATES\n" +
		"11  2026-12-01 13:00:10  2ms       12 B     2\n" +
		"12  2026-12-01 13:00:11  1s        2.0 KiB  2\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	renderCheckpoints(&b, "j", &jobplanev1.ListCheckpointsResponse{}, t0)
	if !strings.Contains(b.String(), "(no checkpoints: the job takes none") {
		t.Errorf("no checkpoints:\n%s", b.String())
	}
}

func TestRenderSavepoints(t *testing.T) {
	sps := []*jobplanev1.SavepointInfo{{SavepointId: "sp-j-3", JobId: "j", Checkpoint: &jobplanev1.CheckpointInfo{
		CheckpointId: 3, TriggerTime: ts(0), AckTime: ts(300 * time.Microsecond), StateBytes: 6, SubtaskStates: 2}}}
	var b bytes.Buffer
	renderSavepoints(&b, sps)
	want := "" +
		"SAVEPOINT  JOB ID  CHECKPOINT  TRIGGERED            DURATION  SIZE  SUBTASK STATES\n" +
		"sp-j-3     j       3           2026-12-01 13:00:00  300µs     6 B   2\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	renderSavepoints(&b, nil)
	if b.String() != "(no savepoints)\n" {
		t.Errorf("no savepoints: %q", b.String())
	}
}

// A server that keeps no checkpoints answers UNIMPLEMENTED, which every
// checkpoint verb says in words.
func TestClientCheckpointsUnimplemented(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(jobplanev1connect.NewDispatcherServiceHandler(jobplanev1connect.UnimplementedDispatcherServiceHandler{}))
	s := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &p
	s.Start()
	t.Cleanup(s.Close)
	c := &cliCluster{url: s.URL, bin: jobplaneBinary(t)}
	for _, args := range [][]string{{"checkpoints", "j"}, {"savepoint", "j"}, {"savepoints"}, {"delete-savepoint", "sp"}} {
		expect(t, strings.Join(args, " "), c.run(t, args...), exitError, nil, []string{"jobplane: this server's HA store keeps no checkpoints or savepoints"})
	}
}

// countJob counts on 2 subtasks until canceled, checkpointed every 100ms.
const countJob = "name: long-count\nvertices:\n  - {id: count, invokable: count, parallelism: 2, config: {to: \"100000000\", every: 10ms}}\n" +
	"config:\n  checkpoints: {interval: 100ms, retained: 3}\n"

// The checkpoint verbs, run as a user runs them against `jobplane
// standalone`: the example job resumes from a checkpoint after its
// failure; a job's checkpoints; savepoints taken, listed, restored from
// and deleted; and the errors.
func TestClientCheckpoints(t *testing.T) {
	c := startCLICluster(t)

	t.Run("the example resumes from a checkpoint", func(t *testing.T) {
		r := c.run(t, "submit", "--id", "example", example("checkpoints.yaml"))
		expect(t, "submit checkpoints.yaml", r, exitOK, []string{"FINISHED after", "restart"}, nil)
		r = c.run(t, "status", "example")
		expect(t, "status", r, exitOK, []string{"Checkpoints:  ", " completed, ", "; restored from checkpoint "}, nil)
	})

	job := writeJob(t, "count.yaml", countJob)
	expect(t, "submit", c.run(t, "submit", "-d", "--id", "counter", job), exitOK, nil, nil)
	var r cliResult
	for deadline := time.Now().Add(60 * time.Second); ; {
		r = c.run(t, "checkpoints", "counter", "-o", "json")
		var resp jobplanev1.ListCheckpointsResponse
		if r.code == exitOK && protojson.Unmarshal([]byte(r.stdout), &resp) == nil && len(resp.GetCheckpoints()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of counter after 60s: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r = c.run(t, "checkpoints", "counter")
	expect(t, "checkpoints", r, exitOK, []string{"ID  TRIGGERED  ", "DURATION  SIZE  SUBTASK STATES", " B   2\n"}, nil)
	// The labels are aligned to the longest shown: "In progress:" shows
	// only while a checkpoint is in flight.
	for _, line := range []string{`(?m)^Job: +counter$`, `(?m)^Completed: +[0-9]+$`, `(?m)^Latest: +[0-9]+ `} {
		if !regexp.MustCompile(line).MatchString(r.stdout) {
			t.Errorf("checkpoints: stdout lacks a line matching %s:\n%s", line, r.stdout)
		}
	}
	expect(t, "status", c.run(t, "status", "counter"), exitOK, []string{"Checkpoints:  ", " completed, 0 failed", "; latest "}, nil)

	spID := regexp.MustCompile(`^sp-counter-[0-9a-f]{16}-[0-9]+\n$`) // sp-<job>-<run digest>-<checkpoint>
	r = c.run(t, "savepoint", "counter")
	expect(t, "savepoint", r, exitOK, nil, []string{"of job counter is durable", "job counter runs on"})
	if !spID.MatchString(r.stdout) {
		t.Errorf("savepoint stdout = %q, want the savepoint id alone", r.stdout)
	}
	first := strings.TrimSpace(r.stdout)
	r = c.run(t, "savepoint", "--stop", "counter")
	expect(t, "savepoint --stop", r, exitOK, nil, []string{"job counter was stopped"})
	stopped := strings.TrimSpace(r.stdout)
	expect(t, "wait", c.run(t, "wait", "counter"), exitJobCanceled, []string{"job counter CANCELED"}, nil)
	expect(t, "savepoint of a stopped job", c.run(t, "savepoint", "counter"), exitError, nil, []string{"job counter is ending or has ended"})

	r = c.run(t, "savepoints", "--job", "counter")
	expect(t, "savepoints", r, exitOK, []string{"SAVEPOINT", "JOB ID", first + "  counter", stopped + "  counter"}, nil)
	r = c.run(t, "savepoints", "-o", "json")
	var list jobplanev1.ListSavepointsResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.GetSavepoints()) != 2 {
		t.Errorf("savepoints -o json: %v\n%s", err, r.stdout)
	}

	// --restore-from overrides the file's restore_from_savepoint.
	restored := writeJob(t, "restored.yaml", "name: restored\nvertices:\n  - {id: count, invokable: count, parallelism: 2, config: {to: \"1\", every: 10ms}}\n"+
		"config: {restore_from_savepoint: no-such-savepoint}\n")
	expect(t, "submit --restore-from", c.run(t, "submit", "--id", "restored", "--restore-from", stopped, restored), exitOK, []string{"FINISHED"}, nil)
	expect(t, "status of the restored job", c.run(t, "status", "restored"), exitOK, []string{"; restored from savepoint " + stopped}, nil)
	expect(t, "submit from no savepoint", c.run(t, "submit", "--id", "unrestored", restored), exitError, nil,
		[]string{`no savepoint "no-such-savepoint" (named by the job file's config.restore_from_savepoint)`, "nothing was submitted"})
	expect(t, "submit --restore-from no savepoint", c.run(t, "submit", "--restore-from", "gone", example("checkpoints.yaml")), exitError, nil,
		[]string{`no savepoint "gone" (named by --restore-from)`})

	for _, id := range []string{first, stopped, stopped} {
		expect(t, "delete-savepoint", c.run(t, "delete-savepoint", id), exitOK, []string{"savepoint " + id + " deleted"}, nil)
	}
	expect(t, "savepoints after deletion", c.run(t, "savepoints", "--job", "counter"), exitOK, []string{"(no savepoints)"}, nil)

	expect(t, "checkpoints of no job", c.run(t, "checkpoints", "no-such-job"), exitError, nil, []string{"no-such-job"})
	expect(t, "savepoint of no job", c.run(t, "savepoint", "no-such-job"), exitError, nil, []string{"no-such-job"})
	expect(t, "savepoint without a job", c.run(t, "savepoint"), exitUsage, nil, []string{"accepts 1 arg"})
	expect(t, "complete a savepoint id", c.run(t, "__complete", "delete-savepoint", ""), exitOK, nil, nil)
}
