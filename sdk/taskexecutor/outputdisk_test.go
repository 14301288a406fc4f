package taskexecutor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openDisk returns outputs kept in dir.
func openDisk(t *testing.T, cfg Config) *outputs {
	t.Helper()
	s, err := openOutputs(cfg)
	if err != nil {
		t.Fatalf("openOutputs: %v", err)
	}
	return s
}

// files returns the names of the files in dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// On disk, an output reads as in memory: the tail of limit bytes, and
// offsets that count every byte.
func TestOutputOnDiskReadsAsInMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limit  int
		writes []string
	}{
		{"under the limit", 16, []string{"abc", "def"}},
		{"exactly the limit", 6, []string{"abc", "def"}},
		{"wraps", 5, []string{"abc", "def", "gh"}},
		{"a write larger than the limit", 4, []string{"ab", "cdefghij", "k"}},
		{"a first write larger than the limit", 4, []string{"abcdefgh"}},
		{"many small writes", 7, strings.Split("the quick brown fox jumps over the lazy dog", "")},
		{"many segments", 10, strings.Split(strings.Repeat("0123456789abcdef", 20), "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openDisk(t, Config{OutputDir: dir, OutputBytes: tc.limit})
			key := outputKey{jobID: "j", vertexID: "v"}
			o := s.start(key)
			mem := running(tc.limit)
			for _, w := range tc.writes {
				_, _ = o.Write([]byte(w))
				_, _ = mem.Write([]byte(w))
			}
			check := func(o *output) {
				t.Helper()
				all := strings.Join(tc.writes, "")
				for from := 0; from <= len(all)+1; from++ {
					for _, n := range []int{1, 3, 1 << 20} {
						data, offset, end := o.read(int64(from), n)
						wdata, woffset, wend := mem.read(int64(from), n)
						if string(data) != string(wdata) || offset != woffset || end != wend {
							t.Fatalf("read(%d, %d) = %q at %d, end %d; in memory %q at %d, end %d", from, n, data, offset, end, wdata, woffset, wend)
						}
					}
				}
			}
			check(o) // while it runs
			s.finish(key, o)
			check(o)
			if n := len(files(t, dir)); n > 2 {
				t.Errorf("%d files for one attempt, want at most its last two segments", n)
			}
		})
	}
}

// A TaskExecutor that starts again with the directory serves the outputs
// of the attempts that ended before, as ended ones.
func TestOutputOnDiskOutlivesTheProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{OutputDir: dir, OutputBytes: 100}
	s := openDisk(t, cfg)
	var want [3]string
	for i := range want {
		key := outputKey{jobID: "job", vertexID: "v", subtask: int32(i), attempt: 1}
		o := s.start(key)
		for line := range 20 * i {
			_, _ = fmt.Fprintf(o, "subtask %d line %d\n", i, line)
		}
		data, _, _ := o.read(0, 1<<20)
		want[i] = string(data)
		s.finish(key, o)
	}

	s2 := openDisk(t, cfg)
	for i := range want {
		key := outputKey{jobID: "job", vertexID: "v", subtask: int32(i), attempt: 1}
		o, ended, ok := s2.get(key)
		if !ok || !ended {
			t.Fatalf("subtask %d after the restart: kept %v, ended %v; want kept and ended", i, ok, ended)
		}
		total := 0
		for line := range 20 * i {
			total += len(fmt.Sprintf("subtask %d line %d\n", i, line))
		}
		data, offset, end := o.read(0, 1<<20)
		if string(data) != want[i] || end != int64(total) || offset != int64(total-len(want[i])) {
			t.Errorf("subtask %d after the restart: %q at %d, end %d; want %q at %d, end %d", i, data, offset, end, want[i], total-len(want[i]), total)
		}
	}
	if _, _, ok := s2.get(outputKey{jobID: "job", vertexID: "v", subtask: 9}); ok {
		t.Error("an attempt that never ran is found")
	}
	// The attempt runs again there: its output goes on from its end.
	key := outputKey{jobID: "job", vertexID: "v", subtask: 1, attempt: 1}
	o := s2.start(key)
	_, _, before := o.read(0, 0)
	_, _ = o.Write([]byte("again\n"))
	s2.finish(key, o)
	if data, _, end := o.read(0, 1<<20); !strings.HasSuffix(string(data), "line 19\nagain\n") || end != before+6 {
		t.Errorf("after running again: %q, end %d; want it to end with the new line, at %d", data, end, before+6)
	}
}

// An attempt that ran again goes on in its files, whether it wrote
// before or not, and takes no more room than its bytes.
func TestOutputOnDiskOfAnAttemptThatRunsAgain(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"", "first run\n"} {
		dir := t.TempDir()
		s := openDisk(t, Config{OutputDir: dir, OutputBytes: 64})
		key := outputKey{jobID: "j", vertexID: "v"}
		o := s.start(key)
		_, _ = o.Write([]byte(first))
		s.finish(key, o)
		o = s.start(key)
		_, _ = o.Write([]byte("second run\n"))
		s.finish(key, o)
		want := first + "second run\n"
		if data, _, end := o.read(0, 100); string(data) != want || end != int64(len(want)) {
			t.Errorf("after writing %q, then again: %q (end %d), want %q", first, data, end, want)
		}
		names := files(t, dir)
		if len(names) > 2 || s.used.Load() != int64(len(names))*outputBlock {
			t.Errorf("after writing %q, then again: files %v, %d bytes counted; want at most two, a block each", first, names, s.used.Load())
		}
		s2 := openDisk(t, Config{OutputDir: dir, OutputBytes: 64})
		if o, _, ok := s2.get(key); !ok {
			t.Errorf("after writing %q, then again: not found after a restart", first)
		} else if data, _, _ := o.read(0, 100); string(data) != want {
			t.Errorf("after writing %q, then again, and a restart: %q, want %q", first, data, want)
		}
	}
}

// Ended outputs on disk go after the retention, and beyond the bytes
// kept, those that ended first go first; running ones stay.
func TestOutputsOnDiskExpire(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := &clock{t: time.Unix(1000, 0)}
	s := openDisk(t, Config{OutputDir: dir, OutputRetention: time.Minute, OutputMaxBytes: 3 * outputBlock})
	s.now = c.now
	key := func(i int) outputKey { return outputKey{jobID: "j", vertexID: "v", subtask: int32(i)} }
	run := func(i int) {
		o := s.start(key(i))
		_, _ = fmt.Fprintf(o, "subtask %d", i)
		s.finish(key(i), o)
	}
	kept := func(i int) bool { _, _, ok := s.get(key(i)); return ok }

	run(0)
	c.add(30 * time.Second)
	run(1)
	running := s.start(key(9))
	_, _ = running.Write([]byte("still running"))
	c.add(30 * time.Second)
	if kept(0) {
		t.Error("output 0 kept past the retention")
	}
	if !kept(1) {
		t.Error("output 1 forgotten before the retention")
	}
	// Three blocks: the running one and two ended ones.
	run(2)
	run(3)
	if kept(1) {
		t.Error("output 1 kept beyond the bytes kept")
	}
	for _, i := range []int{2, 3} {
		if !kept(i) {
			t.Errorf("output %d forgotten, want the last two kept", i)
		}
	}
	if got := len(files(t, dir)); got != 3 {
		t.Errorf("%d files in the directory (%v), want 3: those of the outputs kept", got, files(t, dir))
	}
	c.add(time.Hour)
	if kept(2) || kept(3) {
		t.Error("outputs kept an hour after they ended")
	}
	if data, _, _ := running.read(0, 100); string(data) != "still running" {
		t.Errorf("the running attempt's output = %q", data)
	}
	if got := files(t, dir); len(got) != 1 {
		t.Errorf("files left: %v, want only the running attempt's", got)
	}
}

// Outputs found on disk that are past the retention are removed as the
// TaskExecutor starts.
func TestOutputsOnDiskExpireAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{OutputDir: dir, OutputRetention: time.Hour}
	s := openDisk(t, cfg)
	for i := range 2 {
		key := outputKey{jobID: "j", vertexID: "v", subtask: int32(i)}
		o := s.start(key)
		_, _ = o.Write([]byte("out"))
		s.finish(key, o)
	}
	old := time.Now().Add(-2 * time.Hour)
	name := outputName(outputKey{jobID: "j", vertexID: "v", subtask: 0}, 0)
	if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
		t.Fatal(err)
	}
	s2 := openDisk(t, cfg)
	if _, _, ok := s2.get(outputKey{jobID: "j", vertexID: "v", subtask: 0}); ok {
		t.Error("an output two hours old is served with a retention of one hour")
	}
	if _, _, ok := s2.get(outputKey{jobID: "j", vertexID: "v", subtask: 1}); !ok {
		t.Error("a fresh output was forgotten")
	}
	if got := files(t, dir); len(got) != 1 {
		t.Errorf("files left: %v, want one", got)
	}
}

// Whatever the ids, an output's files stay inside the directory, and
// their names give the ids back.
func TestOutputNamesStayInTheDirectory(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	s := openDisk(t, Config{OutputDir: dir})
	for _, key := range []outputKey{
		{jobID: "../../escape", vertexID: "v"},
		{jobID: "j", vertexID: "../../../escape"},
		{jobID: "/abs/path", vertexID: "/"},
		{jobID: "..", vertexID: ".."},
		{jobID: ".", vertexID: ""},
		{jobID: "j.1.2", vertexID: "v.out", subtask: 3, attempt: 4},
		{jobID: "naïve\x00nul", vertexID: "\\back\\slash"},
	} {
		name := outputName(key, 12)
		if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." || filepath.Base(name) != name {
			t.Errorf("outputName(%q) = %q, not a plain name", key, name)
		}
		if got, start, ok := parseOutputName(name); !ok || got != key || start != 12 {
			t.Errorf("parseOutputName(%q) = %q, %d, %v; want %q, 12", name, got, start, ok, key)
		}
		o := s.start(key)
		_, _ = o.Write([]byte("x"))
		s.finish(key, o)
	}
	if got := files(t, parent); len(got) != 1 || got[0] != "out" {
		t.Errorf("the directory's parent holds %v, want only the output directory", got)
	}
	if got := files(t, dir); len(got) != 7 {
		t.Errorf("the output directory holds %v, want 7 files", got)
	}
	// Too long a name keeps the output in memory.
	long := outputKey{jobID: strings.Repeat("j", 200), vertexID: "v"}
	if name := outputName(long, 0); name != "" {
		t.Errorf("outputName of a 200-byte id = %q, want none", name)
	}
	o := s.start(long)
	_, _ = o.Write([]byte("in memory"))
	s.finish(long, o)
	if data, _, _ := o.read(0, 100); string(data) != "in memory" {
		t.Errorf("output of a long id = %q", data)
	}
	for _, name := range []string{"x.out", "a.b.c.d.e.out", "YQ.dg.1.2.-3.out", "YQ.dg.01.2.3.out", "YQ==.dg.1.2.3.out"} {
		if _, _, ok := parseOutputName(name); ok {
			t.Errorf("parseOutputName(%q) accepted it", name)
		}
	}
}

// BenchmarkOutputWrite measures a task's line of output, in memory and
// on disk (buffered, a system call per 4 KiB).
func BenchmarkOutputWrite(b *testing.B) {
	line := []byte(strings.Repeat("x", 99) + "\n")
	for _, tc := range []struct {
		name string
		cfg  func(*testing.B) Config
	}{
		{"memory", func(*testing.B) Config { return Config{} }},
		{"disk", func(b *testing.B) Config { return Config{OutputDir: b.TempDir()} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := openOutputs(tc.cfg(b))
			if err != nil {
				b.Fatal(err)
			}
			key := outputKey{jobID: "j", vertexID: "v"}
			o := s.start(key)
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				_, _ = o.Write(line)
			}
			s.finish(key, o)
		})
	}
}
