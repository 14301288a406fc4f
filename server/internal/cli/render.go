package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// The renderers below are pure: messages in, text out. The verbs choose
// a table renderer for -o table and printStructured for -o json|yaml.

// statusName is a JobStatus without its enum prefix, such as "RUNNING".
func statusName(s jobplanev1.JobStatus) string {
	return strings.TrimPrefix(s.String(), "JOB_STATUS_")
}

// stateName is an ExecutionState without its enum prefix, such as
// "RUNNING".
func stateName(s jobplanev1.ExecutionState) string {
	return strings.TrimPrefix(s.String(), "EXECUTION_STATE_")
}

// countsText summarizes subtask counts by state, such as
// "2 running, 1 finished"; "-" when there are none.
func countsText(counts []*jobplanev1.ExecutionStateCount) string {
	var parts []string
	for _, c := range counts {
		if c.GetCount() > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.GetCount(), strings.ToLower(stateName(c.GetState()))))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// total is the sum of the counts.
func total(counts []*jobplanev1.ExecutionStateCount) int {
	n := 0
	for _, c := range counts {
		n += int(c.GetCount())
	}
	return n
}

// timeText formats a timestamp in UTC to the second; "-" when unset.
func timeText(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05")
}

// durationText rounds d for display: tenths of a second under a minute,
// seconds above.
func durationText(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// elapsed is how long a job has run: from its submission to its end, or
// to now while it has not ended; "-" when it has no submit time.
func elapsed(s *jobplanev1.JobSummary, now time.Time) string {
	if s.GetSubmitTime() == nil {
		return "-"
	}
	end := now
	if s.GetEndTime() != nil {
		end = s.GetEndTime().AsTime()
	}
	return durationText(end.Sub(s.GetSubmitTime().AsTime()))
}

// failureText describes a failure on one line: its message, and the
// attempt and TaskExecutor it happened on when known.
func failureText(f *jobplanev1.FailureInfo) string {
	if f == nil {
		return ""
	}
	msg := strings.Join(strings.Fields(f.GetMessage()), " ")
	if a := f.GetAttempt(); a != nil {
		msg += fmt.Sprintf(" (vertex %s, subtask %d, attempt %d", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber())
		if te := f.GetTaskExecutorId(); te != "" {
			msg += ", on " + te
		}
		msg += ")"
	}
	return msg
}

// renderJobList writes jobs as a table.
func renderJobList(w io.Writer, jobs []*jobplanev1.JobSummary, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tNAME\tSTATUS\tSUBTASKS\tRESTARTS\tSUBMITTED\tDURATION")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.GetJobId(), orDash(j.GetName()), statusName(j.GetStatus()),
			countsText(j.GetTaskCounts()), j.GetRestartCount(), timeText(j.GetSubmitTime()), elapsed(j, now))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// maxSubtaskRows bounds the subtask rows renderJobDetails writes unless
// asked for all.
const maxSubtaskRows = 100

// renderJobDetails writes a job's summary, its vertices, its subtasks
// (at most maxSubtaskRows unless all), and its exception history.
func renderJobDetails(w io.Writer, d *jobplanev1.JobDetails, now time.Time, all bool) {
	s := d.GetSummary()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Job:\t%s\n", s.GetJobId())
	if s.GetName() != "" {
		fmt.Fprintf(tw, "Name:\t%s\n", s.GetName())
	}
	fmt.Fprintf(tw, "Status:\t%s\n", statusName(s.GetStatus()))
	fmt.Fprintf(tw, "Submitted:\t%s\n", timeText(s.GetSubmitTime()))
	if s.GetRunId() != "" {
		fmt.Fprintf(tw, "Run:\t%s\n", s.GetRunId())
	}
	if c := s.GetCancellation(); c != nil {
		fmt.Fprintf(tw, "Cancel request:\t%s\n", cancellationText(c))
	}
	if s.GetSubmittedBy() != "" {
		fmt.Fprintf(tw, "Submitted by:\t%s\n", s.GetSubmittedBy())
	}
	if s.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", timeText(s.GetEndTime()))
	}
	fmt.Fprintf(tw, "Duration:\t%s\n", elapsed(s, now))
	fmt.Fprintf(tw, "Restarts:\t%d\n", s.GetRestartCount())
	fmt.Fprintf(tw, "Subtasks:\t%s\n", countsText(s.GetTaskCounts()))
	if cp := d.GetCheckpoints(); cp != nil {
		fmt.Fprintf(tw, "Checkpoints:\t%s\n", checkpointsText(cp, now))
	}
	if f := s.GetFailure(); f != nil {
		if s.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_FAILED {
			fmt.Fprintf(tw, "Failure:\t%s\n", failureText(f))
		} else {
			// The failure that caused the latest restart: the job runs on.
			fmt.Fprintf(tw, "Last failure:\t%s, at %s\n", failureText(f), timeText(f.GetTime()))
		}
	}
	tw.Flush()

	if len(d.GetVertices()) == 0 {
		if terminal(s.GetStatus()) {
			// The leader keeps an ended job's vertices for a while only,
			// and in memory: a new leader knows the job by its result.
			fmt.Fprintln(w, "\n(the cluster no longer keeps this ended job's vertices and subtasks: its leader keeps them for a while after a job ends)")
		}
		renderExceptions(w, d.GetExceptionHistory())
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERTEX\tNAME\tPARALLELISM\tSTATE\tSUBTASKS")
	for _, v := range d.GetVertices() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", v.GetVertexId(), orDash(v.GetName()), v.GetParallelism(),
			stateName(v.GetState()), countsText(v.GetTaskCounts()))
	}
	tw.Flush()

	var rows, more int
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERTEX\tSUBTASK\tATTEMPT\tSTATE\tTASK EXECUTOR\tFAILURE")
	for _, v := range d.GetVertices() {
		for _, st := range v.GetSubtasks() {
			if !all && rows >= maxSubtaskRows {
				more++
				continue
			}
			rows++
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", v.GetVertexId(), st.GetSubtaskIndex(), st.GetAttemptNumber(),
				stateName(st.GetState()), orDash(st.GetTaskExecutorId()), orDash(failureText(st.GetFailure())))
		}
	}
	tw.Flush()
	if more > 0 {
		fmt.Fprintf(w, "... and %d more subtasks (--all lists every one)\n", more)
	}

	renderExceptions(w, d.GetExceptionHistory())
}

// renderExceptions writes a job's exception history, if any.
func renderExceptions(w io.Writer, h []*jobplanev1.FailureInfo) {
	if len(h) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Exception history (most recent first):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tFAILURE")
		for _, f := range h {
			fmt.Fprintf(tw, "%s\t%s\n", timeText(f.GetTime()), failureText(f))
		}
		tw.Flush()
	}
}

// resultText is the line that says how a job ended.
func resultText(r *jobplanev1.JobResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s %s", r.GetJobId(), statusName(r.GetStatus()))
	if r.GetSubmitTime() != nil && r.GetEndTime() != nil {
		fmt.Fprintf(&b, " after %s", durationText(r.GetEndTime().AsTime().Sub(r.GetSubmitTime().AsTime())))
	}
	if n := r.GetRestartCount(); n == 1 {
		b.WriteString(" (1 restart)")
	} else if n > 1 {
		fmt.Fprintf(&b, " (%d restarts)", n)
	}
	if f := r.GetFailure(); f != nil {
		fmt.Fprintf(&b, ": %s", failureText(f))
	}
	return b.String()
}

// renderResult writes an ended job's result: how it ended, then the
// values its subtasks returned and its accumulators, when it has any.
func renderResult(w io.Writer, r *jobplanev1.JobResult) {
	fmt.Fprintln(w, resultText(r))
	if r.GetRunId() != "" {
		fmt.Fprintf(w, "run %s\n", r.GetRunId())
	}
	if c := r.GetCancellation(); c != nil {
		fmt.Fprintf(w, "cancel request: %s\n", cancellationText(c))
	}
	if vs := r.GetValues(); len(vs) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Values:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VERTEX\tSUBTASK\tATTEMPT\tVALUE")
		for _, v := range vs {
			a := v.GetAttempt()
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber(), valueText(v.GetValue()))
		}
		tw.Flush()
	}
	if acc := r.GetAccumulators(); len(acc) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Accumulators:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVALUE")
		for _, name := range slices.Sorted(maps.Keys(acc)) {
			fmt.Fprintf(tw, "%s\t%d\n", name, acc[name])
		}
		tw.Flush()
	}
}

// valueText shows a task's value: as text (quoted when it holds control
// characters or spaces at its ends) when it is valid UTF-8, else as
// "base64:" and its standard base64 encoding.
func valueText(v []byte) string {
	if !utf8.Valid(v) {
		return "base64:" + base64.StdEncoding.EncodeToString(v)
	}
	s := string(v)
	if strings.TrimSpace(s) != s || strings.ContainsFunc(s, unicode.IsControl) || strings.HasPrefix(s, "base64:") || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}

// renderCluster writes the cluster overview and its TaskExecutors.
func renderCluster(w io.Writer, o *jobplanev1.GetClusterOverviewResponse, tes []*jobplanev1.TaskExecutorInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	leader := o.GetLeader()
	addr := orDash(leader.GetAddress())
	if t := leader.GetToken(); t != nil {
		addr += fmt.Sprintf(" (epoch %d)", t.GetEpoch())
	}
	fmt.Fprintf(tw, "Leader:\t%s\n", addr)
	if o.StandbyCount != nil {
		fmt.Fprintf(tw, "Standbys:\t%d\n", o.GetStandbyCount())
	}
	fmt.Fprintf(tw, "TaskExecutors:\t%d\n", o.GetTaskExecutorCount())
	fmt.Fprintf(tw, "Slots:\t%d free of %d\n", o.GetFreeSlotCount(), o.GetSlotCount())
	fmt.Fprintf(tw, "Jobs:\t%d running, %d finished, %d canceled, %d failed\n",
		o.GetRunningJobCount(), o.GetFinishedJobCount(), o.GetCanceledJobCount(), o.GetFailedJobCount())
	tw.Flush()
	if len(tes) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK EXECUTOR\tADDRESS\tSLOTS\tFREE\tLAST HEARD\tINVOKABLES")
	for _, te := range tes {
		heard := "-"
		if s := te.GetSilence(); s != nil {
			heard = durationText(s.AsDuration()) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", te.GetTaskExecutorId(), orDash(te.GetAddress()), te.GetSlotCount(),
			te.GetFreeSlotCount(), heard, orDash(strings.Join(te.GetInvokables(), ",")))
	}
	tw.Flush()
}

// checkpointsText summarizes a job's checkpoint statistics on one line,
// such as "5 completed, 1 failed, 6 in progress; latest 5 (1.2s ago);
// restored from savepoint sp-j-3".
func checkpointsText(st *jobplanev1.CheckpointStats, now time.Time) string {
	c := st.GetCounts()
	text := fmt.Sprintf("%d completed, %d failed", c.GetCompleted(), c.GetFailed())
	if id := st.GetInProgressId(); id != 0 {
		text += fmt.Sprintf(", %d in progress", id)
	}
	if l := st.GetLatest(); l != nil {
		text += fmt.Sprintf("; latest %d", l.GetCheckpointId())
		if at := l.GetAckTime(); at != nil {
			text += fmt.Sprintf(" (%s ago)", durationText(now.Sub(at.AsTime())))
		}
	}
	if from := st.GetRestoredFrom(); from != "" {
		text += "; restored from " + restoredText(from)
	}
	return text
}

// restoredText names what subtasks were restored from: a checkpoint id
// (digits) or a savepoint id.
func restoredText(from string) string {
	if strings.Trim(from, "0123456789") == "" {
		return "checkpoint " + from
	}
	return "savepoint " + from
}

// sizeText formats a size in bytes with a binary unit, such as "512 B"
// or "1.5 KiB".
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// checkpointDuration is how long a checkpoint took, from its trigger to
// its last acknowledgement: microseconds under a millisecond,
// milliseconds under a second, else as durationText; "-" when either time is unknown.
func checkpointDuration(cp *jobplanev1.CheckpointInfo) string {
	if cp.GetTriggerTime() == nil || cp.GetAckTime() == nil {
		return "-"
	}
	d := max(cp.GetAckTime().AsTime().Sub(cp.GetTriggerTime().AsTime()), 0)
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return durationText(d)
}

// renderCheckpoints writes a job's checkpoint statistics and the
// completed checkpoints the cluster keeps.
func renderCheckpoints(w io.Writer, jobID string, resp *jobplanev1.ListCheckpointsResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Job:\t%s\n", jobID)
	if st := resp.GetStats(); st != nil {
		c := st.GetCounts()
		fmt.Fprintf(tw, "Triggered:\t%d\n", c.GetTriggered())
		fmt.Fprintf(tw, "Completed:\t%d\n", c.GetCompleted())
		fmt.Fprintf(tw, "Failed:\t%d\n", c.GetFailed())
		if id := st.GetInProgressId(); id != 0 {
			fmt.Fprintf(tw, "In progress:\t%d\n", id)
		}
		if l := st.GetLatest(); l != nil {
			age := ""
			if at := l.GetAckTime(); at != nil {
				age = fmt.Sprintf(" (%s ago)", durationText(now.Sub(at.AsTime())))
			}
			fmt.Fprintf(tw, "Latest:\t%d%s\n", l.GetCheckpointId(), age)
		}
		if from := st.GetRestoredFrom(); from != "" {
			fmt.Fprintf(tw, "Restored from:\t%s\n", restoredText(from))
		}
	}
	tw.Flush()
	if len(resp.GetCheckpoints()) == 0 {
		if resp.GetStats() == nil {
			fmt.Fprintln(w, "\n(no checkpoints: the job takes none (its config sets no checkpoints.interval), it has ended "+
				"(its checkpoints go with it; its savepoints stay), or no JobMaster runs it now)")
		} else {
			fmt.Fprintln(w, "\n(no completed checkpoint is kept yet)")
		}
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTRIGGERED\tDURATION\tSIZE\tSUBTASK STATES")
	for _, cp := range resp.GetCheckpoints() {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\n", cp.GetCheckpointId(), timeText(cp.GetTriggerTime()), checkpointDuration(cp),
			sizeText(cp.GetStateBytes()), cp.GetSubtaskStates())
	}
	tw.Flush()
}

// renderSavepoints writes savepoints as a table.
func renderSavepoints(w io.Writer, sps []*jobplanev1.SavepointInfo) {
	if len(sps) == 0 {
		fmt.Fprintln(w, "(no savepoints)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SAVEPOINT\tJOB ID\tCHECKPOINT\tTRIGGERED\tDURATION\tSIZE\tSUBTASK STATES")
	for _, sp := range sps {
		cp := sp.GetCheckpoint()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\n", sp.GetSavepointId(), sp.GetJobId(), cp.GetCheckpointId(),
			timeText(cp.GetTriggerTime()), checkpointDuration(cp), sizeText(cp.GetStateBytes()), cp.GetSubtaskStates())
	}
	tw.Flush()
}

// field is one top-level entry of a structured (-o json|yaml) output
// made of several messages.
type field struct {
	name string
	msgs []proto.Message // one message, or a list when list is set
	list bool
}

// marshalJSON is protojson with the proto's field names, as job files
// use them.
func marshalJSON(m proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
}

// printStructured writes m as JSON or YAML (format "json" or "yaml"),
// with the proto's field names.
func printStructured(w io.Writer, format string, m proto.Message) error {
	data, err := marshalJSON(m)
	if err != nil {
		return err
	}
	return writeJSONAs(w, format, data)
}

// printFields writes an object of the fields as JSON or YAML.
func printFields(w io.Writer, format string, fields ...field) error {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(f.name)
		b.Write(name)
		b.WriteByte(':')
		if f.list {
			b.WriteByte('[')
		}
		for j, m := range f.msgs {
			if j > 0 {
				b.WriteByte(',')
			}
			data, err := marshalJSON(m)
			if err != nil {
				return err
			}
			b.Write(data)
		}
		if f.list {
			b.WriteByte(']')
		} else if len(f.msgs) == 0 {
			b.WriteString("null")
		}
	}
	b.WriteByte('}')
	return writeJSONAs(w, format, b.Bytes())
}

// writeJSONAs writes the JSON document data indented, or as block-style
// YAML, keeping the order of its keys.
func writeJSONAs(w io.Writer, format string, data []byte) error {
	if format == "json" {
		var out bytes.Buffer
		if err := json.Indent(&out, data, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err := w.Write(out.Bytes())
		return err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(data, &node); err != nil {
		return err
	}
	blockStyle(&node)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle drops the flow style and quotes that JSON parsed as YAML
// has; the encoder still quotes a string that would read as another type.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// cancellationText describes a job's recorded cancel request: its reason,
// id and time, as far as they are known.
func cancellationText(c *jobplanev1.Cancellation) string {
	var parts []string
	if c.GetReason() != "" {
		parts = append(parts, strconv.Quote(c.GetReason()))
	}
	if c.GetRequestId() != "" {
		parts = append(parts, "id "+c.GetRequestId())
	}
	if c.GetRequestedTime() != nil {
		parts = append(parts, "at "+timeText(c.GetRequestedTime()))
	}
	if len(parts) == 0 {
		return "yes"
	}
	return strings.Join(parts, ", ")
}
