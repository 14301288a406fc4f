package runner

import (
	"strings"
	"testing"
)

// The one-attempt-at-a-time invariant flags a start of a subtask while
// another attempt of it runs, on the same TaskExecutor or another, and
// nothing else.
func TestOneAttemptAtATime(t *testing.T) {
	ev := func(source, op, attempt string) Event {
		return Event{Source: source, Op: "attempt-" + op, Key: "j", Attempt: attempt}
	}
	for _, tc := range []struct {
		name   string
		events []Event
		bad    bool
	}{
		{"in turn", []Event{ev("te-0", "start", "v/0#0"), ev("te-0", "stop", "v/0#0"), ev("te-1", "start", "v/0#1"), ev("te-1", "stop", "v/0#1")}, false},
		{"two subtasks at once", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "start", "v/1#0"), ev("te-0", "stop", "v/0#0")}, false},
		{"restarted while it ran", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "start", "v/0#1")}, true},
		{"the same attempt twice", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "start", "v/0#0")}, true},
		{"another's stop does not end it", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "stop", "v/0#0"), ev("te-1", "start", "v/0#1")}, true},
	} {
		tr := &trace{jobs: map[string][]Event{"j": tc.events}, order: []string{"j"}}
		got := oneAttemptAtATime(tr)
		if (len(got) > 0) != tc.bad {
			t.Errorf("%s: %q; want a violation: %v", tc.name, strings.Join(got, "; "), tc.bad)
		}
	}
}

// A deleted result ends a run of its job id: a submission after it
// creates another run, which may run, without breaking created-once or
// nothing-runs-after-the-result; before the deletion, both are broken.
func TestRunsSplitAtTheResultsDeletion(t *testing.T) {
	seq := 0
	ev := func(source, op, detail string, applied bool) Event {
		seq++
		return Event{Seq: seq, Source: source, Op: op, Key: "c1-j", Detail: detail, Applied: applied}
	}
	run := func(deleted bool) []string {
		seq = 0
		events := []Event{
			ev("client", "ack", "created=true", false),
			ev("store", "create-dirty", "", true),
			ev("store", "delete-result", "", deleted),
			ev("client", "ack", "created=true", false),
			ev("store", "campaign", "", true),
		}
		tr := newTrace(events, 0, "c1-")
		return append(createdOnce(tr), nothingRunsAfterTheResult(tr)...)
	}
	if got := run(true); len(got) > 0 {
		t.Errorf("a new run after the result's deletion: %q; want no violation", strings.Join(got, "; "))
	}
	if got := run(false); len(got) != 2 {
		t.Errorf("a second creation without the result's deletion: %q; want created-once and nothing-runs-after-the-result broken", strings.Join(got, "; "))
	}
}
