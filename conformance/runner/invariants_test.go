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
