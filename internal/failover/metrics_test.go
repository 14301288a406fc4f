package failover

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// metrics is one scrape of a process's /metrics (the Prometheus text
// format): each sample's value by its series, the metric's name and its
// labels as written ("name" or "name{a="x",b="y"}").
type metrics map[string]float64

// scrapeMetrics reads the /metrics of the server process at base.
func scrapeMetrics(ctx context.Context, hc *http.Client, base string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the samples of the Prometheus text format; comments
// are skipped.
func parseMetrics(r io.Reader) (metrics, error) {
	m := metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics: malformed line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: %w", line, err)
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// series names a series: the metric's name and its labels, in the order
// the exporter writes them (by name).
func series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name + "{")
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", labels[i], labels[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

// get returns a sample's value, 0 when the process has none (a counter
// or histogram not yet written).
func (m metrics) get(name string, labels ...string) float64 {
	return m[series(name, labels...)]
}

// histogram is a Prometheus histogram's cumulative buckets, count and
// sum, or the difference of two scrapes of it.
type histogram struct {
	bounds []float64 // upper bounds, ascending; the last is +Inf
	counts []float64 // cumulative counts, one per bound
	count  float64
	sum    float64
}

// histogram returns the histogram name with labels (without le).
func (m metrics) histogram(name string, labels ...string) histogram {
	h := histogram{count: m.get(name+"_count", labels...), sum: m.get(name+"_sum", labels...)}
	prefix := series(name+"_bucket", append(slices.Clone(labels), "le", "")...)
	prefix = strings.TrimSuffix(prefix, `""}`)
	for s := range m {
		rest, ok := strings.CutPrefix(s, prefix)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(rest, `"`), `"}`), 64)
		if err != nil {
			continue
		}
		h.bounds = append(h.bounds, le)
	}
	slices.Sort(h.bounds)
	for _, le := range h.bounds {
		h.counts = append(h.counts, m.get(name+"_bucket", append(slices.Clone(labels), "le", formatBound(le))...))
	}
	return h
}

// formatBound writes a bucket bound as the exporter does.
func formatBound(le float64) string {
	if math.IsInf(le, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(le, 'g', -1, 64)
}

// since returns what h observed after the earlier scrape of it, before.
func (h histogram) since(before histogram) histogram {
	d := histogram{bounds: h.bounds, count: h.count - before.count, sum: h.sum - before.sum}
	for i, le := range h.bounds {
		c := h.counts[i]
		if j := slices.Index(before.bounds, le); j >= 0 {
			c -= before.counts[j]
		}
		d.counts = append(d.counts, c)
	}
	return d
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linearly within the bucket that holds it (from 0 for the first
// bucket; the highest finite bound for the +Inf bucket). It also returns
// that bucket's upper bound, which the quantile certainly does not
// exceed. Both are NaN for an empty histogram.
func (h histogram) quantile(q float64) (estimate, bound float64) {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] <= 0 {
		return math.NaN(), math.NaN()
	}
	rank := q * h.counts[len(h.counts)-1]
	for i, c := range h.counts {
		if c < rank || c == 0 {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			if i == 0 {
				return math.NaN(), math.Inf(1)
			}
			return h.bounds[i-1], math.Inf(1)
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.bounds[i-1], h.counts[i-1]
		}
		return lo + (h.bounds[i]-lo)*(rank-below)/(c-below), h.bounds[i]
	}
	return math.NaN(), math.NaN()
}

func TestParseMetricsHistogram(t *testing.T) {
	t.Parallel()
	const before = `# HELP x_seconds help
# TYPE x_seconds histogram
x_seconds_bucket{kind="checkpoint",le="0.01"} 1
x_seconds_bucket{kind="checkpoint",le="0.025"} 1
x_seconds_bucket{kind="checkpoint",le="+Inf"} 1
x_seconds_sum{kind="checkpoint"} 0.005
x_seconds_count{kind="checkpoint"} 1
w_total 7
`
	const after = `x_seconds_bucket{kind="checkpoint",le="0.01"} 3
x_seconds_bucket{kind="checkpoint",le="0.025"} 5
x_seconds_bucket{kind="checkpoint",le="+Inf"} 6
x_seconds_sum{kind="checkpoint"} 0.105
x_seconds_count{kind="checkpoint"} 6
x_seconds_bucket{kind="savepoint",le="0.01"} 9
w_total 10
`
	m0, err := parseMetrics(strings.NewReader(before))
	if err != nil {
		t.Fatal(err)
	}
	m1, err := parseMetrics(strings.NewReader(after))
	if err != nil {
		t.Fatal(err)
	}
	if got := m1.get("w_total") - m0.get("w_total"); got != 3 {
		t.Errorf("w_total delta = %v, want 3", got)
	}
	h := m1.histogram("x_seconds", "kind", "checkpoint").since(m0.histogram("x_seconds", "kind", "checkpoint"))
	if h.count != 5 || math.Abs(h.sum-0.1) > 1e-9 {
		t.Errorf("delta count, sum = %v, %v; want 5, 0.1", h.count, h.sum)
	}
	if want := []float64{2, 4, 5}; !slices.Equal(h.counts, want) {
		t.Errorf("delta buckets = %v (bounds %v), want %v", h.counts, h.bounds, want)
	}
	for _, tc := range []struct {
		q, estimate, bound float64
	}{
		{0.2, 0.005, 0.01},           // rank 1 of 2 in (0, 0.01]
		{0.5, 0.01 + 0.015/4, 0.025}, // rank 2.5: half of the way from 2 to 4 → a quarter of the bucket
		{1, 0.025, math.Inf(1)},      // the +Inf bucket: its lower bound
	} {
		e, b := h.quantile(tc.q)
		if math.Abs(e-tc.estimate) > 1e-12 || b != tc.bound {
			t.Errorf("quantile(%v) = %v, %v; want %v, %v", tc.q, e, b, tc.estimate, tc.bound)
		}
	}
	if e, _ := (histogram{}).quantile(0.5); !math.IsNaN(e) {
		t.Errorf("quantile of an empty histogram = %v, want NaN", e)
	}
}
