package bench

import (
	"math"
	"strings"
	"testing"
)

func TestFormatNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    float64
		want string
	}{
		{7, "7"},
		{12345, "12345"},
		{1234.56, "1235"},
		{42.44, "42.4"},
		{0.123, "0.12"},
		{math.NaN(), "—"},
	}
	for _, tt := range tests {
		if got := FormatNumber(tt.v); got != tt.want {
			t.Errorf("FormatNumber(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestRowRatio(t *testing.T) {
	t.Parallel()
	r := Row{Value: SpreadOf([]float64{50, 40, 60}), Floor: SpreadOf([]float64{100, 90, 110})}
	if got, ok := r.Ratio(); !ok || got != 0.5 {
		t.Errorf("Ratio = %v, %v; want 0.5, true", got, ok)
	}
	if _, ok := (Row{Value: r.Value}).Ratio(); ok {
		t.Error("a row without a floor has a ratio")
	}
}

func TestTableRenders(t *testing.T) {
	t.Parallel()
	var tab Table
	tab.Add(
		Row{ID: "1a", Scenario: "submit | h2c", Measure: "acks/s", Value: SpreadOf([]float64{900, 1000, 1100}), Floor: SpreadOf([]float64{2000}), Target: "≥ 0.8× floor"},
		Row{ID: "5", Scenario: "scale", Measure: "running jobs", Note: "could not run: boom"},
	)
	var md strings.Builder
	if err := tab.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(md.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("markdown has %d lines, want 4 (header, separator, 2 rows):\n%s", len(lines), md.String())
	}
	for _, want := range []string{`submit \| h2c`, "| 1000 |", "| 900–1100 |", "| 3 |", "| 2000 |", "| 0.50× |"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("markdown row %q lacks %q", lines[2], want)
		}
	}
	if !strings.Contains(lines[3], "| — | — | 0 |") || !strings.Contains(lines[3], "could not run: boom") {
		t.Errorf("markdown row of a failed measure = %q, want dashes, 0 runs and the note", lines[3])
	}
	var txt strings.Builder
	if err := tab.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	tl := strings.Split(strings.TrimSpace(txt.String()), "\n")
	if len(tl) != 3 {
		t.Fatalf("text has %d lines, want 3:\n%s", len(tl), txt.String())
	}
	if col := strings.Index(tl[0], "Median"); col < 0 || strings.Index(tl[1], "1000") != col {
		t.Errorf("text columns not aligned:\n%s", txt.String())
	}
}
