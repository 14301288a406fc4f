package taskexecutor

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// Task output. Each execution attempt writes its output (the lines its
// Task.Logger logs, the bytes written to Task.Output, an exec command's
// stdout and stderr) into a buffer of its own that keeps the tail: the
// last Config.OutputBytes bytes, while offsets count every byte written.
// Once the attempt ended, its buffer is kept for Config.OutputRetention,
// and among the last Config.OutputAttempts attempts that ended; then it
// is forgotten. Nothing wakes up to forget it: expired buffers are
// dropped when an attempt starts or ends and when output is read. So a
// TaskExecutor holds at most (slots + OutputAttempts) × OutputBytes bytes
// of output. With Config.OutputDir, the outputs are files on disk instead
// (outputdisk.go), bounded by Config.OutputMaxBytes.

// Defaults of the output a TaskExecutor keeps (see Config).
const (
	// DefaultOutputBytes is the tail of an attempt's output kept: 64 KiB.
	DefaultOutputBytes = 64 << 10
	// DefaultOutputRetention is how long an ended attempt's output is kept.
	DefaultOutputRetention = 10 * time.Minute
	// DefaultOutputAttempts is how many ended attempts' output is kept.
	DefaultOutputAttempts = 512
)

// Bounds of one GetTaskOutput answer.
const (
	defaultOutputRead = 64 << 10
	maxOutputRead     = 1 << 20
)

// outputKey identifies an attempt's output.
type outputKey struct {
	jobID, vertexID  string
	subtask, attempt int32
}

func outputKeyOf(jobID string, a *jobplanev1.ExecutionAttemptId) outputKey {
	return outputKey{jobID: jobID, vertexID: a.GetVertexId(), subtask: a.GetSubtaskIndex(), attempt: a.GetAttemptNumber()}
}

// output is the tail of one attempt's output; it is an io.Writer. Its
// bytes sit in a ring: the byte at offset x is at buf[x%limit] while
// kept, and buf grows up to limit bytes as they come.
type output struct {
	mu    sync.Mutex
	limit int // bytes kept; 0 keeps none
	buf   []byte
	// disk, if set, keeps the bytes on disk instead of buf.
	disk *diskOutput
	end  int64 // bytes written in all: the offset after the last one
	// runs counts the runs of the attempt writing here (a newer JobMaster
	// may deploy the same attempt again); writes made while none runs are
	// dropped, so that nothing comes after an ended attempt's end.
	runs int
	// endedAt is when the last run ended, and ended the number of the
	// entry in outputs.ended that stands for it; owned by outputs.mu.
	endedAt time.Time
	ended   uint64
}

func newOutput(limit int) *output { return &output{limit: max(limit, 0)} }

// Write appends p to the output, dropping the oldest bytes beyond the
// limit; it never fails, and drops p if the attempt does not run.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.runs == 0 {
		return len(p), nil
	}
	o.write(p)
	return len(p), nil
}

// write appends p; o.mu must be held.
func (o *output) write(p []byte) {
	n := len(p)
	if o.limit == 0 {
		o.end += int64(n)
		return
	}
	if n > o.limit {
		// Only the last limit bytes can be kept.
		o.end += int64(n - o.limit)
		p = p[n-o.limit:]
	}
	if o.disk != nil {
		o.disk.write(p, o.end, o.limit)
		o.end += int64(len(p))
		return
	}
	if len(o.buf) < o.limit && o.end+int64(len(p)) > int64(o.limit) {
		// The ring is about to wrap: give it its full size.
		grown := make([]byte, o.limit)
		copy(grown, o.buf)
		o.buf = grown
	}
	if len(o.buf) < o.limit {
		o.buf = append(o.buf, p...)
		o.end += int64(len(p))
		return
	}
	for len(p) > 0 {
		at := int(o.end % int64(o.limit))
		c := copy(o.buf[at:], p)
		p = p[c:]
		o.end += int64(c)
	}
}

// read returns up to n kept bytes from offset from on, the offset they
// start at, and the end of the output. An offset before the first byte
// kept, or past the end, reads from the first byte kept.
func (o *output) read(from int64, n int) (data []byte, offset, end int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.disk != nil {
		data, offset = o.disk.read(from, n, o.end, o.limit)
		return data, offset, o.end
	}
	first := o.end - int64(min(int64(len(o.buf)), o.end))
	if from < first || from > o.end {
		from = first
	}
	n = int(min(int64(n), o.end-from))
	data = make([]byte, 0, n)
	for len(data) < n {
		at := int(from+int64(len(data))) % len(o.buf)
		data = append(data, o.buf[at:min(len(o.buf), at+n-len(data))]...)
	}
	return data, from, o.end
}

// bytes returns every byte kept.
func (o *output) bytes() []byte {
	data, _, _ := o.read(0, o.limit)
	return data
}

// outputs are the outputs of the attempts that run or ran on a
// TaskExecutor.
type outputs struct {
	limit     int
	retention time.Duration
	keep      int // ended outputs kept at most
	now       func() time.Time
	// dir, if set, is where outputs are kept, and maxBytes bounds the
	// bytes they take there (used).
	dir      string
	maxBytes int64
	used     atomic.Int64

	mu sync.Mutex
	m  map[outputKey]*output
	// ended lists the outputs that ended, oldest end first; an entry
	// whose number is not its output's any more (the attempt ran again)
	// is skipped. count is the number of outputs in m that do not run.
	ended []endedOutput
	seq   uint64
	count int
}

type endedOutput struct {
	key outputKey
	o   *output
	seq uint64
}

// newOutputs returns the outputs of a TaskExecutor of cfg, with the
// defaults of cfg's output bounds applied.
func newOutputs(cfg Config) *outputs {
	s := &outputs{limit: cfg.OutputBytes, retention: cfg.OutputRetention, keep: cfg.OutputAttempts, now: time.Now, m: make(map[outputKey]*output)}
	if s.limit == 0 {
		s.limit = DefaultOutputBytes
	}
	if s.retention == 0 {
		s.retention = DefaultOutputRetention
	}
	if s.keep == 0 {
		s.keep = DefaultOutputAttempts
	}
	return s
}

// openOutputs returns the outputs of a TaskExecutor of cfg: in memory, or
// on disk under cfg.OutputDir (created if need be) with the outputs
// found there, as attempts that ended when their files were last written.
func openOutputs(cfg Config) (*outputs, error) {
	if cfg.OutputDir == "" {
		return newOutputs(cfg), nil
	}
	if cfg.OutputRetention == 0 {
		cfg.OutputRetention = DefaultOutputDiskRetention
	}
	if cfg.OutputAttempts == 0 {
		cfg.OutputAttempts = math.MaxInt // OutputMaxBytes bounds them
	}
	s := newOutputs(cfg)
	s.dir, s.maxBytes = cfg.OutputDir, cfg.OutputMaxBytes
	if s.maxBytes == 0 {
		s.maxBytes = DefaultOutputMaxBytes
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("taskexecutor: output directory: %w", err)
	}
	found, times, err := loadOutputs(s.dir, &s.used)
	if err != nil {
		return nil, fmt.Errorf("taskexecutor: output directory: %w", err)
	}
	loaded := make([]endedOutput, 0, len(found))
	for key, d := range found {
		o := newOutput(s.limit)
		o.disk, o.end, o.endedAt = d, d.end(), times[key]
		s.m[key] = o
		loaded = append(loaded, endedOutput{key: key, o: o})
	}
	slices.SortFunc(loaded, func(a, b endedOutput) int { return a.o.endedAt.Compare(b.o.endedAt) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range loaded {
		s.seq++
		e.o.ended, e.seq = s.seq, s.seq
		s.ended = append(s.ended, e)
		s.count++
	}
	s.expireLocked()
	return s, nil
}

// start returns the output a run of the attempt writes to: the
// attempt's, continued if it ran here before and is still kept.
func (s *outputs) start(key outputKey) *output {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	o := s.m[key]
	if o == nil {
		o = newOutput(s.limit)
		if s.dir != "" && s.limit > 0 {
			o.disk = newDiskOutput(s.dir, key, &s.used)
		}
		s.m[key] = o
	} else if !o.endedAt.IsZero() {
		o.endedAt = time.Time{}
		s.count--
	}
	o.mu.Lock()
	o.runs++
	if o.disk != nil && len(o.disk.segs) == 0 {
		// A file from the start, so that an attempt that writes nothing
		// is found after a restart too.
		o.disk.rotate(o.end)
	}
	o.mu.Unlock()
	return o
}

// finish records that a run of the attempt ended: once none runs, the
// output is kept for the retention.
func (s *outputs) finish(key outputKey, o *output) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o.mu.Lock()
	o.runs--
	running := o.runs > 0
	if !running && o.disk != nil {
		if o.disk.closeFile() != nil {
			o.disk.drop()
		}
	}
	o.mu.Unlock()
	if !running && s.m[key] == o {
		s.seq++
		o.endedAt, o.ended = s.now(), s.seq
		s.ended = append(s.ended, endedOutput{key: key, o: o, seq: s.seq})
		s.count++
	}
	s.expireLocked()
}

// get returns the attempt's output if kept, and whether the attempt has
// ended.
func (s *outputs) get(key outputKey) (o *output, ended, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	o = s.m[key]
	if o == nil {
		return nil, false, false
	}
	return o, !o.endedAt.IsZero(), true
}

// expireLocked forgets the ended outputs past the retention, and the
// oldest beyond the number kept; s.mu must be held.
func (s *outputs) expireLocked() {
	now := s.now()
	for len(s.ended) > 0 {
		e := s.ended[0]
		current := e.o.ended == e.seq && !e.o.endedAt.IsZero() && s.m[e.key] == e.o
		if current && s.count <= s.keep && (s.dir == "" || s.used.Load() <= s.maxBytes) && now.Sub(e.o.endedAt) < s.retention {
			return
		}
		s.ended[0] = endedOutput{}
		s.ended = s.ended[1:]
		if current {
			delete(s.m, e.key)
			s.count--
			if e.o.disk != nil {
				e.o.mu.Lock()
				e.o.disk.drop()
				e.o.mu.Unlock()
			}
		}
	}
}

// taskLogger returns the logger of an attempt: text lines into w, from
// level Info on.
func taskLogger(w *output) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}

// GetTaskOutput serves TaskExecutorService.GetTaskOutput from the
// attempt's kept output.
func (h *handler) GetTaskOutput(_ context.Context, req *clusterv1.GetTaskOutputRequest) (*clusterv1.GetTaskOutputResponse, error) {
	var fields []apierror.Field
	if req.GetJobId() == "" {
		fields = append(fields, apierror.Field{Path: "job_id", Description: "required"})
	}
	if req.GetAttempt() == nil {
		fields = append(fields, apierror.Field{Path: "attempt", Description: "required"})
	}
	if req.GetOffset() < 0 {
		fields = append(fields, apierror.Field{Path: "offset", Description: "must not be negative"})
	}
	if req.GetMaxBytes() < 0 {
		fields = append(fields, apierror.Field{Path: "max_bytes", Description: "must not be negative"})
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	a := req.GetAttempt()
	o, ended, ok := h.te.outputs.get(outputKeyOf(req.GetJobId(), a))
	if !ok {
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND,
			fmt.Sprintf("TaskExecutor %s keeps no output of attempt %d of subtask %d of vertex %s of job %s",
				h.te.cfg.ID, a.GetAttemptNumber(), a.GetSubtaskIndex(), a.GetVertexId(), req.GetJobId()),
			map[string]string{
				"job_id": req.GetJobId(), "vertex_id": a.GetVertexId(), "subtask_index": fmt.Sprint(a.GetSubtaskIndex()),
				"attempt_number": fmt.Sprint(a.GetAttemptNumber()), "task_executor_id": h.te.cfg.ID,
			})
	}
	n := int(req.GetMaxBytes())
	switch {
	case n == 0:
		n = defaultOutputRead
	case n > maxOutputRead:
		n = maxOutputRead
	}
	data, offset, end := o.read(req.GetOffset(), n)
	return &clusterv1.GetTaskOutputResponse{
		Data: data, Offset: offset, NextOffset: offset + int64(len(data)), EndOffset: end, Ended: ended,
	}, nil
}
