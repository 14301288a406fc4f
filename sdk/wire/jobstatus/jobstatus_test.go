package jobstatus_test

import (
	"testing"

	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

func TestJobTransitions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to jobstatus.Status
		ok       bool
	}{
		{jobstatus.Initializing, jobstatus.Created, true},
		{jobstatus.Initializing, jobstatus.Canceled, true},
		{jobstatus.Initializing, jobstatus.Failed, true},
		{jobstatus.Initializing, jobstatus.Running, false},
		{jobstatus.Created, jobstatus.Running, true},
		{jobstatus.Running, jobstatus.Finished, true},
		{jobstatus.Running, jobstatus.Restarting, true},
		{jobstatus.Running, jobstatus.Failing, true},
		{jobstatus.Running, jobstatus.Cancelling, true},
		{jobstatus.Running, jobstatus.Suspended, true},
		{jobstatus.Running, jobstatus.Created, false},
		{jobstatus.Running, jobstatus.Canceled, false},
		{jobstatus.Restarting, jobstatus.Running, true},
		{jobstatus.Failing, jobstatus.Failed, true},
		{jobstatus.Failing, jobstatus.Finished, false},
		{jobstatus.Cancelling, jobstatus.Canceled, true},
		{jobstatus.Cancelling, jobstatus.Running, false},
		{jobstatus.Finished, jobstatus.Running, false},
		{jobstatus.Failed, jobstatus.Restarting, false},
		{jobstatus.Canceled, jobstatus.Cancelling, false},
		{jobstatus.Suspended, jobstatus.Running, false},
	} {
		got, err := jobstatus.Move(tc.from, tc.to)
		if tc.ok && (err != nil || got != tc.to) {
			t.Errorf("Move(%v, %v) = %v, %v; want %v", tc.from, tc.to, got, err, tc.to)
		}
		if !tc.ok && (err == nil || got != tc.from) {
			t.Errorf("Move(%v, %v) = %v, %v; want refused", tc.from, tc.to, got, err)
		}
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s                  jobstatus.Status
		global, terminated bool
	}{
		{jobstatus.Finished, true, true},
		{jobstatus.Failed, true, true},
		{jobstatus.Canceled, true, true},
		{jobstatus.Suspended, false, true},
		{jobstatus.Running, false, false},
		{jobstatus.Cancelling, false, false},
		{jobstatus.Initializing, false, false},
	} {
		if got := jobstatus.IsGloballyTerminal(tc.s); got != tc.global {
			t.Errorf("IsGloballyTerminal(%v) = %v, want %v", tc.s, got, tc.global)
		}
		if got := jobstatus.IsTerminal(tc.s); got != tc.terminated {
			t.Errorf("IsTerminal(%v) = %v, want %v", tc.s, got, tc.terminated)
		}
	}
}

func TestExecTransitions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to jobstatus.State
		ok       bool
	}{
		{jobstatus.ExecCreated, jobstatus.ExecScheduled, true},
		{jobstatus.ExecScheduled, jobstatus.ExecDeploying, true},
		{jobstatus.ExecDeploying, jobstatus.ExecRunning, true},
		{jobstatus.ExecDeploying, jobstatus.ExecFinished, true},
		{jobstatus.ExecRunning, jobstatus.ExecFinished, true},
		{jobstatus.ExecRunning, jobstatus.ExecFailed, true},
		{jobstatus.ExecCanceling, jobstatus.ExecCanceled, true},
		{jobstatus.ExecFinished, jobstatus.ExecRunning, false},
		{jobstatus.ExecFailed, jobstatus.ExecCanceled, false},
		{jobstatus.ExecRunning, jobstatus.ExecDeploying, false},
		{jobstatus.ExecCreated, jobstatus.ExecRunning, false},
	} {
		if got := jobstatus.CanMoveExec(tc.from, tc.to); got != tc.ok {
			t.Errorf("CanMoveExec(%v, %v) = %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
	for _, s := range []jobstatus.State{jobstatus.ExecFinished, jobstatus.ExecCanceled, jobstatus.ExecFailed} {
		if !jobstatus.IsExecTerminal(s) {
			t.Errorf("IsExecTerminal(%v) = false", s)
		}
	}
	if jobstatus.IsExecTerminal(jobstatus.ExecRunning) {
		t.Error("IsExecTerminal(RUNNING) = true")
	}
}
