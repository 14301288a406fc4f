package taskexecutor

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Task output on disk. With Config.OutputDir set, an attempt's output
// goes to files of its own under that directory instead of a ring in
// memory: one file per segment of at most Config.OutputBytes bytes, the
// last two segments kept, so that the last OutputBytes bytes can always
// be read. Writes are buffered (a few KiB per running attempt) and never
// synced: a read flushes the buffer first, an attempt's end closes its
// file, and output is kept on disk, not made durable. A TaskExecutor that
// starts with a directory finds the outputs that are there, as ended
// attempts (nothing runs yet), and serves them until they expire: they
// are kept for Config.OutputRetention after they ended, and while all
// the outputs on disk take at most Config.OutputMaxBytes; beyond it, the
// outputs of the attempts that ended first are removed first.

// Defaults of the output a TaskExecutor keeps on disk (see Config).
const (
	// DefaultOutputDiskRetention is how long an ended attempt's output is
	// kept on disk: 24 hours.
	DefaultOutputDiskRetention = 24 * time.Hour
	// DefaultOutputMaxBytes bounds the output kept on disk: 256 MiB.
	DefaultOutputMaxBytes = 256 << 20
)

const (
	// outputBlock is what a file counts for at least, and the unit its
	// size is rounded up to, against Config.OutputMaxBytes: what it takes
	// on a disk, so that many tiny outputs are bounded too.
	outputBlock = 4096
	// outputSuffix ends the name of every output file.
	outputSuffix = ".out"
	// maxOutputName bounds an output file's name; an attempt whose name
	// would be longer keeps its output in memory.
	maxOutputName = 240
	// outputBufferBytes is the write buffer of a running attempt.
	outputBufferBytes = 4096
)

// outputName returns the name of the file that holds the segment of the
// attempt's output that starts at offset start. The job's and vertex's
// ids are written in unpadded base64url, whose alphabet holds no path
// separator nor dot: whatever the ids, the name stays a plain file name
// inside the directory. It returns "" when the name would be too long.
func outputName(key outputKey, start int64) string {
	enc := base64.RawURLEncoding
	name := fmt.Sprintf("%s.%s.%d.%d.%d%s", enc.EncodeToString([]byte(key.jobID)), enc.EncodeToString([]byte(key.vertexID)),
		key.subtask, key.attempt, start, outputSuffix)
	if len(name) > maxOutputName {
		return ""
	}
	return name
}

// parseOutputName is the inverse of outputName; ok is false for any other
// name.
func parseOutputName(name string) (key outputKey, start int64, ok bool) {
	rest, found := strings.CutSuffix(name, outputSuffix)
	if !found {
		return outputKey{}, 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 {
		return outputKey{}, 0, false
	}
	enc := base64.RawURLEncoding
	job, err1 := enc.DecodeString(parts[0])
	vertex, err2 := enc.DecodeString(parts[1])
	subtask, err3 := strconv.ParseInt(parts[2], 10, 32)
	attempt, err4 := strconv.ParseInt(parts[3], 10, 32)
	start, err5 := strconv.ParseInt(parts[4], 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || len(job) == 0 || start < 0 {
		return outputKey{}, 0, false
	}
	key = outputKey{jobID: string(job), vertexID: string(vertex), subtask: int32(subtask), attempt: int32(attempt)}
	if outputName(key, start) != name {
		return outputKey{}, 0, false // not in the canonical form
	}
	return key, start, true
}

// diskBytes is what a file of size bytes counts for against
// Config.OutputMaxBytes.
func diskBytes(size int64) int64 {
	return max((size+outputBlock-1)/outputBlock*outputBlock, outputBlock)
}

// segment is one file of an attempt's output: its bytes from offset
// start on.
type segment struct{ start, size int64 }

// diskOutput is the part of an output kept on disk; owned by its output,
// whose mutex guards it.
type diskOutput struct {
	dir  string
	key  outputKey
	segs []segment // oldest first; at most two
	// f and w write the last segment while the attempt runs; nil
	// otherwise.
	f *os.File
	w *bufio.Writer
	// used counts the bytes on disk of all the outputs (diskBytes of
	// each segment).
	used *atomic.Int64
}

// newDiskOutput returns the disk part of the attempt's output, or nil if
// its files' names would be too long (it is then kept in memory).
func newDiskOutput(dir string, key outputKey, used *atomic.Int64) *diskOutput {
	if outputName(key, 1<<62) == "" {
		return nil
	}
	return &diskOutput{dir: dir, key: key, used: used}
}

func (d *diskOutput) path(start int64) string { return filepath.Join(d.dir, outputName(d.key, start)) }

// write appends p, whose first byte is at offset at; limit bounds a
// segment, and p is at most limit bytes. A write that fails drops what
// is kept, and the next one starts a new segment.
func (d *diskOutput) write(p []byte, at int64, limit int) {
	if last := len(d.segs) - 1; d.f == nil || d.segs[last].start+d.segs[last].size != at || d.segs[last].size+int64(len(p)) > int64(limit) {
		d.rotate(at)
		if d.f == nil {
			return
		}
	}
	if _, err := d.w.Write(p); err != nil {
		d.drop()
		return
	}
	last := &d.segs[len(d.segs)-1]
	d.used.Add(diskBytes(last.size+int64(len(p))) - diskBytes(last.size))
	last.size += int64(len(p))
}

// rotate closes the segment written and starts one at offset at: the
// last one stays if it ends there, the older ones are removed.
func (d *diskOutput) rotate(at int64) {
	if err := d.closeFile(); err != nil {
		d.drop()
	}
	keep := 0
	if n := len(d.segs); n > 0 && d.segs[n-1].size > 0 && d.segs[n-1].start+d.segs[n-1].size == at {
		keep = 1 // an empty one would share the new one's name
	}
	for len(d.segs) > keep {
		d.removeSegment(d.segs[0])
		d.segs = d.segs[1:]
	}
	f, err := os.OpenFile(d.path(at), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	d.f, d.w = f, bufio.NewWriterSize(f, outputBufferBytes)
	d.segs = append(d.segs, segment{start: at})
	d.used.Add(diskBytes(0))
}

// flush writes the buffered bytes to the file.
func (d *diskOutput) flush() {
	if d.w != nil && d.w.Flush() != nil {
		d.drop()
	}
}

// closeFile flushes and closes the segment written, if any.
func (d *diskOutput) closeFile() error {
	if d.f == nil {
		return nil
	}
	err := d.w.Flush()
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	d.f, d.w = nil, nil
	return err
}

// drop removes every segment: what could not be written (a full disk)
// is not kept, and offsets go on counting.
func (d *diskOutput) drop() {
	if d.f != nil {
		_ = d.f.Close()
		d.f, d.w = nil, nil
	}
	for _, s := range d.segs {
		d.removeSegment(s)
	}
	d.segs = nil
}

func (d *diskOutput) removeSegment(s segment) {
	_ = os.Remove(d.path(s.start))
	d.used.Add(-diskBytes(s.size))
}

// read returns up to n bytes from offset from on, as output.read does,
// of an output whose end is end and whose last limit bytes are kept.
func (d *diskOutput) read(from int64, n int, end int64, limit int) (data []byte, offset int64) {
	d.flush()
	first := end
	if len(d.segs) > 0 {
		first = max(d.segs[0].start, end-int64(limit))
	}
	if from < first || from > end {
		from = first
	}
	n = int(min(int64(n), end-from))
	data = make([]byte, 0, n)
	for _, s := range d.segs {
		if len(data) == n {
			break
		}
		at := from + int64(len(data))
		if at < s.start || at >= s.start+s.size {
			continue
		}
		f, err := os.Open(d.path(s.start))
		if err != nil {
			break
		}
		buf := make([]byte, min(int64(n-len(data)), s.start+s.size-at))
		k, _ := f.ReadAt(buf, at-s.start)
		_ = f.Close()
		data = append(data, buf[:k]...)
		if k < len(buf) {
			break // the file is shorter than known: what follows is lost
		}
	}
	return data, from
}

// loadOutputs returns the outputs found in dir, each with the time its
// last segment was written, and removes the files of segments that
// cannot be read (all but each output's last two, and those that do not
// follow on).
func loadOutputs(dir string, used *atomic.Int64) (map[outputKey]*diskOutput, map[outputKey]time.Time, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	found := make(map[outputKey]*diskOutput)
	times := make(map[outputKey]time.Time)
	for _, e := range entries {
		key, start, ok := parseOutputName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		d := found[key]
		if d == nil {
			d = &diskOutput{dir: dir, key: key, used: used}
			found[key] = d
		}
		d.segs = append(d.segs, segment{start: start, size: info.Size()})
		used.Add(diskBytes(info.Size()))
		if t := info.ModTime(); t.After(times[key]) {
			times[key] = t
		}
	}
	for _, d := range found {
		// ReadDir sorts by name, not by offset.
		segs := d.segs
		for i := 1; i < len(segs); i++ {
			for j := i; j > 0 && segs[j].start < segs[j-1].start; j-- {
				segs[j], segs[j-1] = segs[j-1], segs[j]
			}
		}
		keep := len(segs) - 1
		if keep > 0 && segs[keep-1].start+segs[keep-1].size == segs[keep].start {
			keep--
		}
		for _, s := range segs[:keep] {
			d.removeSegment(s)
		}
		d.segs = segs[keep:]
	}
	return found, times, nil
}

// end returns the offset after the last byte of a loaded output.
func (d *diskOutput) end() int64 {
	last := d.segs[len(d.segs)-1]
	return last.start + last.size
}

var _ io.Writer = (*output)(nil)
