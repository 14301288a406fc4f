package bench

import (
	"os"
	"testing"
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
