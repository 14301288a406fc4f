package jobmaster

import (
	"fmt"
	"maps"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/sdk/wire/taskvalue"
)

// Task results. Each subtask's FINISHED attempt may return a value and
// accumulators (TaskExecutionStatus.value and .accumulators). The
// JobMaster keeps them with the subtask's runtime (task), which a restart
// of the subtask's region resets, so that only the attempt that finally
// FINISHED counts; when the job ends, they go into its result
// (Result.Values and .Accumulators), which the Dispatcher writes to the HA
// store with the rest of the JobResult. The bounds are checked as each
// subtask finishes: a value over MaxTaskValueBytes, or an invalid
// accumulator name, fails the attempt (the restart strategy decides what
// follows: the TaskExecutor normally fails it first); values that
// together go over MaxResultValueBytes (each counted as its entry of
// JobResult.values is encoded, attempt id included, so that many small
// values cannot take the result past the store's limit either), or
// accumulator names past
// MaxAccumulators, fail the job, and the attempt that went over is not
// kept, so the result always fits.

// results are the running totals of the kept results, which bound them.
type results struct {
	// valueBytes counts each kept value as its entry of JobResult.values
	// is encoded (the value, its attempt's id and the framing), so that
	// many small values cannot take the result past the store's limit.
	valueBytes int
	names      map[string]int // accumulator name -> subtasks using it
}

// taskValueMax, resultValueMax and accumulatorsMax are the limits in force.
func (jm *JobMaster) taskValueMax() int {
	return orDefault(jm.cfg.MaxTaskValueBytes, taskvalue.DefaultMaxTaskValueBytes)
}

func (jm *JobMaster) resultValueMax() int {
	return orDefault(jm.cfg.MaxResultValueBytes, taskvalue.DefaultMaxResultValueBytes)
}

func (jm *JobMaster) accumulatorsMax() int {
	return orDefault(jm.cfg.MaxAccumulators, taskvalue.DefaultMaxAccumulators)
}

func orDefault(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// attemptResultError says why a FINISHED status's result breaks the
// per-attempt bounds; "" when it does not.
func (jm *JobMaster) attemptResultError(st *jobplanev1.TaskExecutionStatus) string {
	if n, limit := len(st.GetValue()), jm.taskValueMax(); n > limit {
		return fmt.Sprintf("the task's value is %d bytes, over the limit of %d (ServerLimits.max_task_value_bytes)", n, limit)
	}
	for name := range st.GetAccumulators() {
		if err := taskvalue.CheckName(name); err != nil {
			return "the task used an invalid accumulator name: " + err.Error()
		}
	}
	return ""
}

// keepResult keeps ev's finished attempt's result, unless it would take
// the job's over its bounds: then it returns why, and keeps nothing.
func (jm *JobMaster) keepResult(ev int32, st *jobplanev1.TaskExecutionStatus) string {
	value, accums := st.GetValue(), st.GetAccumulators()
	size := 0
	if len(value) > 0 {
		size = protowire.SizeBytes(proto.Size(&jobplanev1.SubtaskValue{Attempt: st.GetAttempt(), Value: value})) + 1
	}
	if total, limit := jm.results.valueBytes+size, jm.resultValueMax(); total > limit {
		return fmt.Sprintf("the values of the job's subtasks come to %d bytes, over the limit of %d (ServerLimits.max_result_value_bytes)", total, limit)
	}
	added := 0
	for name := range accums {
		if jm.results.names[name] == 0 {
			added++
		}
	}
	if n, limit := len(jm.results.names)+added, jm.accumulatorsMax(); n > limit {
		return fmt.Sprintf("the job's tasks used %d accumulator names, over the limit of %d (ServerLimits.max_accumulators)", n, limit)
	}
	if jm.results.names == nil {
		jm.results.names = map[string]int{}
	}
	for name := range accums {
		jm.results.names[name]++
	}
	jm.results.valueBytes += size
	t := &jm.tasks[ev]
	t.value, t.valueSize, t.accums = value, size, maps.Clone(accums)
	return ""
}

// forgetResult drops ev's kept result, as its subtask runs again.
func (jm *JobMaster) forgetResult(ev int32) {
	t := &jm.tasks[ev]
	jm.results.valueBytes -= t.valueSize
	for name := range t.accums {
		if jm.results.names[name]--; jm.results.names[name] == 0 {
			delete(jm.results.names, name)
		}
	}
	t.value, t.valueSize, t.accums = nil, 0, nil
}

// finished takes ev's FINISHED status: an attempt whose result breaks the
// per-attempt bounds fails; a result that would take the job's over its
// bounds fails the job.
func (jm *JobMaster) finished(ev int32, st *jobplanev1.TaskExecutionStatus, executor string) {
	if msg := jm.attemptResultError(st); msg != "" {
		jm.attemptFailed(ev, msg, executor)
		return
	}
	why := jm.keepResult(ev, st)
	jm.setState(ev, st.GetState())
	if why == "" || jm.status != jobstatus.Running && jm.status != jobstatus.Restarting {
		return // within bounds, or the job ends anyway (without this value)
	}
	jm.logger().Info("the job's results are over their bounds; failing the job", "cause", why)
	info := &jobplanev1.FailureInfo{Message: why, Time: timestamppb.Now(), Attempt: jm.attemptID(ev), TaskExecutorId: executor}
	jm.restartOrFail(info, nil, false)
}

// resultValues are the values of the subtasks whose attempt FINISHED, in
// execution vertex order (JobGraph vertex order, then subtask index).
func (jm *JobMaster) resultValues() []*jobplanev1.SubtaskValue {
	var out []*jobplanev1.SubtaskValue
	for ev := range int32(len(jm.tasks)) {
		if v := jm.tasks[ev].value; len(v) > 0 && jm.graph.State(ev) == jobstatus.ExecFinished {
			out = append(out, &jobplanev1.SubtaskValue{Attempt: jm.attemptID(ev), Value: v})
		}
	}
	return out
}

// resultAccumulators sums the accumulators of the subtasks whose attempt
// FINISHED; nil when there are none.
func (jm *JobMaster) resultAccumulators() map[string]int64 {
	var out map[string]int64
	for ev := range int32(len(jm.tasks)) {
		if jm.graph.State(ev) != jobstatus.ExecFinished {
			continue
		}
		for name, n := range jm.tasks[ev].accums {
			if out == nil {
				out = map[string]int64{}
			}
			out[name] += n
		}
	}
	return out
}
