package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ),
// which is 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUTime returns the user plus system CPU time the process pid has used,
// from /proc/PID/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields are counted
	// after its closing parenthesis, where field 3 (state) comes first.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// RSSBytes returns the resident set size of process pid, from VmRSS in
// /proc/PID/status.
func RSSBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// CPUMeter measures the cores a process uses over an interval.
type CPUMeter struct {
	pid   int
	cpu   time.Duration
	start time.Time
}

// NewCPUMeter starts measuring process pid.
func NewCPUMeter(pid int) (*CPUMeter, error) {
	cpu, err := CPUTime(pid)
	if err != nil {
		return nil, err
	}
	return &CPUMeter{pid: pid, cpu: cpu, start: time.Now()}, nil
}

// Cores returns the cores used since the meter started or was last read,
// and restarts it.
func (m *CPUMeter) Cores() (float64, error) {
	cpu, err := CPUTime(m.pid)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	cores := (cpu - m.cpu).Seconds() / now.Sub(m.start).Seconds()
	m.cpu, m.start = cpu, now
	return cores, nil
}

// gcCPUMetric is the JobManager's metric of the CPU time its garbage
// collector used, as the Go runtime estimates it.
const gcCPUMetric = "go_cpu_classes_gc_total_cpu_seconds_total"

// GCCPUTime reads the GC CPU time (gcCPUMetric) from the /metrics of the
// server at base.
func GCCPUTime(ctx context.Context, base string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseGCCPU(resp.Body)
}

// parseGCCPU finds gcCPUMetric in a Prometheus text exposition.
func parseGCCPU(r io.Reader) (time.Duration, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), gcCPUMetric+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", gcCPUMetric, err)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /metrics", gcCPUMetric)
}
