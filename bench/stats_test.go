package bench

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted on purpose
	}
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"one sample", []float64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 of 1..100", hundred, 100, 100},
		{"tiny p takes the smallest", []float64{3, 1, 2}, 0.1, 1},
		{"p50 of an even count is the lower middle", []float64{4, 1, 3, 2}, 50, 2},
		{"p99 of ten is the largest", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Percentile(tt.xs, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
			}
		})
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil) = %v, want NaN", got)
	}
}

func TestPercentileLeavesInputAlone(t *testing.T) {
	t.Parallel()
	xs := []float64{3, 1, 2}
	Percentile(xs, 50)
	Median(xs)
	if xs[0] != 3 || xs[1] != 1 || xs[2] != 2 {
		t.Errorf("input reordered to %v", xs)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1}, 10},
	}
	for _, tt := range tests {
		if got := Median(tt.xs); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestSpreadOf(t *testing.T) {
	t.Parallel()
	got := SpreadOf([]float64{9, 3, 5})
	want := Spread{Median: 5, Min: 3, Max: 9, N: 3}
	if got != want {
		t.Errorf("SpreadOf = %+v, want %+v", got, want)
	}
	if !got.Valid() {
		t.Error("a spread of three runs is not valid")
	}
	if empty := SpreadOf(nil); empty.Valid() || empty.N != 0 {
		t.Errorf("SpreadOf(nil) = %+v, want no runs and not valid", empty)
	}
}

func TestLatencyMs(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	if got := LatencyMs(ds, 50); got != 2 {
		t.Errorf("LatencyMs p50 = %v, want 2", got)
	}
	if got := LatencyMs(ds, 99); got != 3 {
		t.Errorf("LatencyMs p99 = %v, want 3", got)
	}
}
