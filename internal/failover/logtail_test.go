package failover

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// logTail reads a process's log as it grows: each call of lines returns
// the complete lines written since the last call.
type logTail struct {
	path    string
	offset  int64
	partial []byte // the start of a line not yet ended
}

// lines returns the lines completed since the last call; none if the log
// does not exist yet.
func (t *logTail) lines() ([]string, error) {
	f, err := os.Open(t.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	t.offset += int64(len(data))
	data = append(t.partial, data...)
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		t.partial = data
		return nil, nil
	}
	t.partial = bytes.Clone(data[end+1:])
	return strings.Split(string(data[:end]), "\n"), nil
}

// parseLogLine reads one line of a jobplane process's log in the default
// text format (slog's key=value pairs, a value quoted where it needs to
// be): its time, its message and every attribute by key. ok is false for
// a line that is not such a record.
func parseLogLine(line string) (at time.Time, msg string, attrs map[string]string, ok bool) {
	attrs = map[string]string{}
	for s := strings.TrimSpace(line); s != ""; s = strings.TrimLeft(s, " ") {
		k, rest, found := strings.Cut(s, "=")
		if !found || k == "" || strings.ContainsAny(k, " \"") {
			return time.Time{}, "", nil, false
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return time.Time{}, "", nil, false
			}
			v, _ = strconv.Unquote(q)
			s = rest[len(q):]
		} else {
			v, s, _ = strings.Cut(rest, " ")
		}
		attrs[k] = v
	}
	at, err := time.Parse(time.RFC3339Nano, attrs["time"])
	if err != nil {
		return time.Time{}, "", nil, false
	}
	return at, attrs["msg"], attrs, true
}

func TestParseLogLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line  string
		ok    bool
		msg   string
		attrs map[string]string
	}{
		{`time=2026-12-03T13:50:18.123Z level=INFO msg="adopted attempts" job=recover-0000011 token=3/7 task_executor=te-1 attempts=1 slots=1`,
			true, "adopted attempts", map[string]string{"job": "recover-0000011", "attempts": "1", "task_executor": "te-1"}},
		{`time=2026-12-03T13:50:18.5+01:00 level=INFO msg="adoption over; deploying what no TaskExecutor holds" why="the task lease has passed" subtasks=1`,
			true, "adoption over; deploying what no TaskExecutor holds", map[string]string{"why": "the task lease has passed", "subtasks": "1"}},
		{`time=2026-12-03T13:50:18.123Z level=WARN msg=x err="a \"quoted\" = b"`, true, "x", map[string]string{"err": `a "quoted" = b`}},
		{`panic: runtime error`, false, "", nil},
		{`time=yesterday msg=x`, false, "", nil},
		{`time=2026-12-03T13:50:18.123Z msg="unterminated`, false, "", nil},
	} {
		at, msg, attrs, ok := parseLogLine(tc.line)
		if ok != tc.ok || msg != tc.msg {
			t.Errorf("parseLogLine(%q) = %q, ok %v; want %q, ok %v", tc.line, msg, ok, tc.msg, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if at.IsZero() {
			t.Errorf("parseLogLine(%q): no time", tc.line)
		}
		for k, v := range tc.attrs {
			if attrs[k] != v {
				t.Errorf("parseLogLine(%q)[%s] = %q, want %q", tc.line, k, attrs[k], v)
			}
		}
	}
}

// A log read as it grows yields each complete line once, a line written
// in two pieces once it ends.
func TestLogTail(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/log"
	tail := &logTail{path: path}
	if got, err := tail.lines(); err != nil || len(got) != 0 {
		t.Fatalf("before the log exists: %q, %v; want nothing", got, err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, step := range []struct {
		write string
		want  []string
	}{
		{"a\nb", []string{"a"}},
		{"c", nil},
		{"\nd\ne\n", []string{"bc", "d", "e"}},
		{"", nil},
	} {
		if _, err := f.WriteString(step.write); err != nil {
			t.Fatal(err)
		}
		got, err := tail.lines()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, "|") != strings.Join(step.want, "|") {
			t.Errorf("after writing %q: lines %q, want %q", step.write, got, step.want)
		}
	}
}
