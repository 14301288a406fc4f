package bench

import (
	"runtime/pprof"
	"strings"
	"testing"
)

func TestParseMemStatsOfARealProfile(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := pprof.Lookup("heap").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	ms, err := ParseMemStats(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if ms.HeapAlloc == 0 || ms.HeapInuse == 0 || ms.HeapObjects == 0 {
		t.Errorf("ParseMemStats = %+v, want every figure positive", ms)
	}
}

func TestParseMemStats(t *testing.T) {
	t.Parallel()
	const tail = "heap profile: 1: 2 [3: 4] @ heap/1048576\n# runtime.MemStats\n# Alloc = 10\n# HeapAlloc = 1234\n# HeapSys = 9\n# HeapInuse = 2048\n# HeapObjects = 17\n# HeapIdle = 5\n# HeapReleased = 3\n# NextGC = 4096\n# PauseNs = [1 2 3]\n# NumGC = 4\n"
	tests := []struct {
		name    string
		profile string
		want    MemStats
		wantErr bool
	}{
		{"all figures", tail, MemStats{HeapAlloc: 1234, HeapInuse: 2048, HeapObjects: 17, HeapIdle: 5, HeapReleased: 3, NextGC: 4096}, false},
		{"no MemStats block", "heap profile: 1: 2 [3: 4] @ heap/1048576\n", MemStats{}, true},
		{"a figure missing", strings.Replace(tail, "# HeapObjects = 17\n", "", 1), MemStats{}, true},
		{"HeapAlloc only before the block", "# HeapAlloc = 5\n# runtime.MemStats\n# HeapInuse = 1\n# HeapObjects = 1\n", MemStats{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseMemStats(tt.profile)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseMemStats = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
