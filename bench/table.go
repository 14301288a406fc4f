package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Row is one line of the results table: one measure of one scenario, as
// the spread of its runs, beside the floor measured in the same run where
// there is one.
type Row struct {
	// ID numbers the scenario and its variant, such as "1a".
	ID string
	// Scenario says what ran, such as "submit, h2c, free slots".
	Scenario string
	// Measure names the figure and its unit, such as "acks/s" or "p99 ms".
	Measure string
	// Value is the spread of the figure over the runs; no runs (N = 0)
	// means the figure could not be measured, and Note says why.
	Value Spread
	// Floor is the same figure of the floor, measured alternately with
	// Value in the same run; N = 0 means the row has no floor.
	Floor Spread
	// Target is the goal from DESIGN.md §6, in words; empty for none.
	Target string
	// Note adds what the figures alone do not say.
	Note string
}

// Ratio returns the median of the value over the median of the floor,
// and false when the row has no floor.
func (r Row) Ratio() (float64, bool) {
	if !r.Value.Valid() || !r.Floor.Valid() || r.Floor.Median == 0 {
		return 0, false
	}
	return r.Value.Median / r.Floor.Median, true
}

// Table is a list of rows that renders to the terminal and to Markdown.
type Table struct {
	Rows []Row
}

// Add appends rows.
func (t *Table) Add(rows ...Row) { t.Rows = append(t.Rows, rows...) }

var tableHeader = []string{"#", "Scenario", "Measure", "Median", "Spread (min–max)", "Runs", "Floor", "Ratio", "Target", "Note"}

// cells returns the row's cells in the order of tableHeader.
func (r Row) cells() []string {
	median, spread, runs, floor, ratio := "—", "—", "0", "", ""
	if r.Value.Valid() {
		median = FormatNumber(r.Value.Median)
		spread = FormatNumber(r.Value.Min) + "–" + FormatNumber(r.Value.Max)
		runs = fmt.Sprint(r.Value.N)
	}
	if r.Floor.Valid() {
		floor = FormatNumber(r.Floor.Median)
	}
	if x, ok := r.Ratio(); ok {
		ratio = fmt.Sprintf("%.2f×", x)
	}
	return []string{r.ID, r.Scenario, r.Measure, median, spread, runs, floor, ratio, r.Target, r.Note}
}

// FormatNumber formats a figure with as many digits as it deserves:
// integers as such, then three significant digits at most two decimals.
func FormatNumber(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case v == math.Trunc(v) && a < 1e12:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// WriteText renders the table with aligned columns for a terminal.
func (t *Table) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	return tw.Flush()
}

// WriteMarkdown renders the table as a GitHub-flavoured Markdown table.
func (t *Table) WriteMarkdown(w io.Writer) error {
	line := func(cells []string) string {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		return "| " + strings.Join(esc, " | ") + " |\n"
	}
	var b strings.Builder
	b.WriteString(line(tableHeader))
	sep := make([]string, len(tableHeader))
	for i := range sep {
		sep[i] = "---"
		if i >= 3 && i <= 7 {
			sep[i] = "---:" // numbers align right
		}
	}
	b.WriteString("|" + strings.Join(sep, "|") + "|\n")
	for _, r := range t.Rows {
		b.WriteString(line(r.cells()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
