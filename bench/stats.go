package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of xs by the
// nearest-rank method: the smallest sample that at least p percent of the
// samples do not exceed. It returns NaN for no samples; xs is not changed.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Median returns the median of xs: the middle sample, or the mean of the
// two middle ones for an even count. It returns NaN for no samples; xs is
// not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread summarizes the figures of several runs of one measurement.
type Spread struct {
	// Median, Min and Max of the runs' figures.
	Median, Min, Max float64
	// N is the number of runs.
	N int
}

// SpreadOf returns the spread of xs; its figures are NaN for no samples.
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	return Spread{Median: Median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// Valid reports whether the spread has at least one run.
func (s Spread) Valid() bool { return s.N > 0 && !math.IsNaN(s.Median) }

// Millis converts durations to milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// LatencyMs returns the p-th percentile of ds in milliseconds (NaN for
// none).
func LatencyMs(ds []time.Duration, p float64) float64 { return Percentile(Millis(ds), p) }
