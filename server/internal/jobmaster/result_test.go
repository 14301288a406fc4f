package jobmaster

import (
	"strings"
	"testing"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// The job's result bounds count what is kept (each value as its entry of
// JobResult.values is encoded: here, without an attempt id, 4 bytes more
// than the value): a subtask's result that
// would go over them is refused and leaves nothing behind, and a subtask
// that runs again (forgetResult, as a region restarts) gives its room
// back, so a job whose subtasks restart is bounded by what its final
// attempts return, not by every attempt's.
func TestResultBounds(t *testing.T) {
	t.Parallel()
	jm := &JobMaster{cfg: Config{MaxResultValueBytes: 20, MaxAccumulators: 2}, tasks: make([]task, 3)}
	finished := func(value string, names ...string) *jobplanev1.TaskExecutionStatus {
		st := &jobplanev1.TaskExecutionStatus{Value: []byte(value), Accumulators: map[string]int64{}}
		for _, n := range names {
			st.Accumulators[n] = 1
		}
		return st
	}
	steps := []struct {
		name string
		do   func() string
		want string // a part of the refusal; "" when kept
	}{
		{"first value and name", func() string { return jm.keepResult(0, finished("123456", "a")) }, ""},
		{"values over the job's bound", func() string { return jm.keepResult(1, finished("1234567", "a")) }, "max_result_value_bytes"},
		{"a shared name is no new one", func() string { return jm.keepResult(1, finished("123456", "a", "b")) }, ""},
		{"a third name", func() string { return jm.keepResult(2, finished("", "c")) }, "max_accumulators"},
		{"after subtask 0 runs again, its room is free", func() string { jm.forgetResult(0); return jm.keepResult(2, finished("123456", "b")) }, ""},
	}
	for _, s := range steps {
		got := s.do()
		if (s.want == "") != (got == "") || !strings.Contains(got, s.want) {
			t.Fatalf("%s: refusal %q, want one naming %q", s.name, got, s.want)
		}
	}
	if jm.results.valueBytes != 20 || len(jm.results.names) != 2 || jm.results.names["b"] != 2 || jm.tasks[0].value != nil {
		t.Errorf("kept %d bytes, names %v, subtask 0's value %q; want 20 bytes, names a (once) and b (twice), and subtask 0's forgotten", jm.results.valueBytes, jm.results.names, jm.tasks[0].value)
	}
}
