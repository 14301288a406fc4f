package taskexecutor

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// running returns an output of limit bytes that takes writes.
func running(limit int) *output {
	o := newOutput(limit)
	o.runs = 1
	return o
}

func TestOutputKeepsTheTail(t *testing.T) {
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
		{"keeps none", 0, []string{"abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := running(tc.limit)
			all := strings.Join(tc.writes, "")
			for _, w := range tc.writes {
				if n, err := o.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			kept := all[max(0, len(all)-tc.limit):]
			data, offset, end := o.read(0, 1<<20)
			if string(data) != kept || offset != int64(len(all)-len(kept)) || end != int64(len(all)) {
				t.Errorf("read(0) = %q at %d, end %d; want %q at %d, end %d", data, offset, end, kept, len(all)-len(kept), len(all))
			}
			// Every offset inside what is kept reads from there.
			for from := len(all) - len(kept); from <= len(all); from++ {
				data, offset, _ := o.read(int64(from), 3)
				want := all[from:min(len(all), from+3)]
				if string(data) != want || offset != int64(from) {
					t.Errorf("read(%d, 3) = %q at %d, want %q", from, data, offset, want)
				}
			}
			// Past the end reads from the first byte kept.
			if data, offset, _ := o.read(int64(len(all)+10), 1<<20); string(data) != kept || offset != int64(len(all)-len(kept)) {
				t.Errorf("read past the end = %q at %d, want %q at %d", data, offset, kept, len(all)-len(kept))
			}
		})
	}
}

func TestOutputFollowedByOffset(t *testing.T) {
	t.Parallel()
	o := running(1 << 10)
	var want, got bytes.Buffer
	var next int64
	for i := range 200 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		_, _ = o.Write([]byte(line))
		if i%7 == 0 {
			// A reader following with small reads never skips nor repeats.
			for {
				data, offset, end := o.read(next, 5)
				if offset != next {
					t.Fatalf("read(%d) starts at %d", next, offset)
				}
				got.Write(data)
				next = offset + int64(len(data))
				if next == end {
					break
				}
			}
		}
	}
	for {
		data, offset, end := o.read(next, 1<<20)
		got.Write(data)
		next = offset + int64(len(data))
		if next == end {
			break
		}
	}
	if got.String() != want.String() {
		t.Errorf("followed output differs:\n got %q\nwant %q", got.String(), want.String())
	}
}

func TestOutputConcurrentWrites(t *testing.T) {
	t.Parallel()
	o := running(64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				_, _ = o.Write([]byte("0123456789"))
			}
		})
	}
	wg.Wait()
	data, offset, end := o.read(0, 1<<20)
	if end != 40_000 || offset != 40_000-64 || len(data) != 64 {
		t.Errorf("after 40,000 bytes: %d bytes at %d, end %d; want the last 64", len(data), offset, end)
	}
}

func TestOutputDropsWritesOnceEnded(t *testing.T) {
	t.Parallel()
	s := newOutputs(Config{OutputBytes: 64})
	key := outputKey{jobID: "j", vertexID: "v"}
	o := s.start(key)
	_, _ = o.Write([]byte("during "))
	s.finish(key, o)
	_, _ = o.Write([]byte("after"))
	got, ended, ok := s.get(key)
	if !ok || !ended {
		t.Fatalf("get = %v, ended %v; want the ended output", ok, ended)
	}
	if data, _, end := got.read(0, 100); string(data) != "during " || end != 7 {
		t.Errorf("output = %q (end %d), want only what was written while it ran", data, end)
	}
	// Deployed again (a newer JobMaster, same attempt): the output goes on.
	o2 := s.start(key)
	if o2 != o {
		t.Fatal("a new run of the attempt got a new output")
	}
	_, _ = o2.Write([]byte("again"))
	if _, ended, _ := s.get(key); ended {
		t.Error("the attempt runs again, but its output says ended")
	}
	if data, _, _ := o2.read(0, 100); string(data) != "during again" {
		t.Errorf("output = %q, want the runs one after the other", data)
	}
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestOutputsExpire(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1000, 0)}
	s := newOutputs(Config{OutputRetention: time.Minute, OutputAttempts: 3})
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
	running := s.start(key(9)) // runs for ever: never expires
	if !kept(0) || !kept(1) {
		t.Fatal("outputs forgotten before the retention")
	}
	c.add(30 * time.Second)
	if kept(0) {
		t.Error("output 0 kept past the retention")
	}
	if !kept(1) {
		t.Error("output 1 forgotten before the retention")
	}
	// At most three ended outputs: the oldest go first.
	run(2)
	run(3)
	run(4)
	if kept(1) {
		t.Error("output 1 kept beyond the number of ended attempts kept")
	}
	for i := 2; i <= 4; i++ {
		if !kept(i) {
			t.Errorf("output %d forgotten, want the last three kept", i)
		}
	}
	c.add(time.Hour)
	for i := 2; i <= 4; i++ {
		if kept(i) {
			t.Errorf("output %d kept an hour after it ended", i)
		}
	}
	if o, ended, ok := s.get(key(9)); !ok || ended || o != running {
		t.Errorf("the running attempt's output: kept %v, ended %v; want kept, running", ok, ended)
	}
	if len(s.m) != 1 || s.count != 0 {
		t.Errorf("%d outputs kept (%d ended), want only the running one", len(s.m), s.count)
	}
}

func TestOutputsOfAnAttemptThatRanAgainExpireFromItsLastEnd(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1000, 0)}
	s := newOutputs(Config{OutputRetention: time.Minute})
	s.now = c.now
	key := outputKey{jobID: "j", vertexID: "v"}
	s.finish(key, s.start(key))
	c.add(50 * time.Second)
	s.finish(key, s.start(key)) // ran again, ended again
	c.add(50 * time.Second)
	if _, _, ok := s.get(key); !ok {
		t.Error("forgotten a minute after its first end, though it ended again since")
	}
	c.add(20 * time.Second)
	if _, _, ok := s.get(key); ok {
		t.Error("kept past the retention after its last end")
	}
}
