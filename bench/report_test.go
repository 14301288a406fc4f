package bench

import (
	"strings"
	"testing"
	"time"
)

func TestReportMarkdown(t *testing.T) {
	t.Parallel()
	rep := &Report{Duration: 7 * time.Minute, Failed: []string{"5 (scale): boom"}}
	rep.Table.Add(Row{ID: "2", Scenario: "pile-up", Measure: "acks/s per window", Value: SpreadOf([]float64{1, 2, 3})})
	rep.Details = []Detail{{Title: "Row 2: windows", Text: "0–5 s  1 acks/s\n"}}
	m := Machine{Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Commit: "abc1234 (dirty)", GoVersion: "go1.26", Cores: 2, CPU: "cpu", Memory: "1.0 GiB", Command: "make bench"}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b, m); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# Benchmarks", "- Commit: abc1234 (dirty)", "- Cores (nproc): 2", "- Memory (MemTotal): 1.0 GiB", "- Command: `make bench`",
		"- Duration: 7m0s", "| 2 | pile-up | acks/s per window | 2 | 1–3 | 3 |", "5 (scale): boom", "## What each row measures",
		"## Row 2: windows\n\n```\n0–5 s  1 acks/s\n```",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("BENCHMARKS.md lacks %q:\n%s", want, md)
		}
	}
}
