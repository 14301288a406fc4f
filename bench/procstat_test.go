package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestProcStatsOfSelf(t *testing.T) {
	t.Parallel()
	pid := os.Getpid()
	rss, err := RSSBytes(pid)
	if err != nil || rss <= 0 {
		t.Fatalf("RSSBytes(self) = %d, %v; want a positive size", rss, err)
	}
	m, err := NewCPUMeter(pid)
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	_ = x
	if cores, err := m.Cores(); err != nil || cores < 0 {
		t.Fatalf("Cores = %v, %v; want a non-negative figure", cores, err)
	}
}

// parseGCCPU reads the GC CPU metric's value among the others, and fails
// on an exposition without it.
func TestParseGCCPU(t *testing.T) {
	t.Parallel()
	text := "# HELP go_cpu_classes_gc_total_cpu_seconds_total x\n" +
		"go_cpu_classes_gc_mark_assist_cpu_seconds_total 0.25\n" +
		"go_cpu_classes_gc_total_cpu_seconds_total 1.5\n" +
		"process_cpu_seconds_total 10\n"
	got, err := parseGCCPU(strings.NewReader(text))
	if err != nil || got != 1500*time.Millisecond {
		t.Errorf("parseGCCPU = %v, %v; want 1.5s", got, err)
	}
	if _, err := parseGCCPU(strings.NewReader("process_cpu_seconds_total 10\n")); err == nil {
		t.Error("parseGCCPU without the metric: no error")
	}
}
