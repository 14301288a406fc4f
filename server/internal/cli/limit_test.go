package cli

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The CLI waits out a refusal for the submission rate, saying so, and
// says that a job refused at a limit was not submitted.
func TestCLISubmitAtLimits(t *testing.T) {
	// One submission at once, then one every 5s: the second comes before
	// the bucket refills, and waits for it.
	c := startCLICluster(t, "--submit-rate", "0.2", "--submit-burst", "1", "--max-jobs", "1")
	job := example("forever.yaml")
	if r := c.run(t, "submit", "-d", "--id", "first", job); r.code != exitOK {
		t.Fatalf("first submission: %+v", r)
	}
	r := c.run(t, "submit", "-d", "--id", "second", job)
	if r.code != exitError {
		t.Errorf("second submission: exit code %d, want %d (refused at the job limit)", r.code, exitError)
	}
	for _, want := range []string{
		"the cluster limits this client's submission rate; it asks to retry in",
		"the cluster's live jobs are at its limit of 1",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("second submission: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "may or may not have been persisted") {
		t.Errorf("a refusal at a limit is said to be of unknown outcome:\n%s", r.stderr)
	}
	// The refusals are counted, by reason.
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	m := scrapeMetrics(t, hc, c.url)
	if m[`jobplane_limit_refusals_total{reason="SUBMIT_RATE_EXCEEDED"}`] < 1 || m[`jobplane_limit_refusals_total{reason="TOO_MANY_JOBS"}`] != 1 {
		t.Errorf("limit refusals counted: rate %v, jobs %v; want at least 1 and 1",
			m[`jobplane_limit_refusals_total{reason="SUBMIT_RATE_EXCEEDED"}`], m[`jobplane_limit_refusals_total{reason="TOO_MANY_JOBS"}`])
	}
	if r := c.run(t, "cancel", "first"); r.code != exitOK {
		t.Fatalf("cancel: %+v", r)
	}
	if r := c.run(t, "wait", "first"); r.code != exitJobCanceled {
		t.Fatalf("wait: %+v", r)
	}
	// Room again: the submission waits for the rate, if it must, and is
	// accepted.
	if r := c.run(t, "submit", "-d", "--id", "second", job); r.code != exitOK || strings.TrimSpace(r.stdout) != "second" {
		t.Fatalf("second submission after the first ended: %+v", r)
	}
}

// scrapeMetrics reads GET /metrics at base into a map from series (the
// name and its labels as printed, such as `jobplane_slots{state="free"}`)
// to value.
func scrapeMetrics(t *testing.T, client *http.Client, base string) map[string]float64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %q: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		series[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return series
}
