// Command mutants measures the conformance suite by mutation testing: it
// plants each of a list of bugs (mutants) in the reference server, one at
// a time, builds the server with the bug (through `go build -overlay`, the
// source tree left as it is), runs the suite against it, and reports
// which mutants a case caught. A mutant counts as caught (killed) only
// when a case failed by its own assertion: a failure that is a timeout
// ("no answer") or a step the case needed before its check ("setup")
// does not count.
//
//	go run ./conformance/internal/mutants [-run REGEXP] [-readme conformance/README.md]
//
// Mutants of the HA store's own code (server/hastore, but its client and
// the contract's fallbacks, which run in the server) are run against the
// store mode of the suite, the others against the server mode.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jobplane/jobplane/conformance/runner"
)

func main() {
	var (
		run      = flag.String("run", "", "run only the mutants whose name matches this regular expression")
		readme   = flag.String("readme", "", "replace the table between the mutants markers of this file with the run's")
		check    = flag.Bool("check", false, "only check that every mutant applies and builds")
		parallel = flag.Int("parallel", 2, "cases run at once by the suite")
		verbose  = flag.Bool("v", false, "print the suite's failures for each mutant")
		allCases = flag.Bool("all", false, "run every case against each mutant, not only until the first catch")
	)
	flag.Parse()
	all = *allCases
	if err := mainErr(*run, *readme, *check, *parallel, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

// all: run every case against each mutant (-all).
var all bool

// outcome is what one mutant's run came to.
type outcome struct {
	m      Mutant
	status string   // "killed", "survived" or "build error"
	by     []string // the cases that caught it
	note   string
}

func mainErr(run, readme string, checkOnly bool, parallel int, verbose bool) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	if err := validate(mutants); err != nil {
		return err
	}
	re, err := regexp.Compile(run)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "jobplane-mutants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	rev, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output() // the run's commit
	var results []outcome
	start := time.Now()
	for i, m := range mutants {
		if !re.MatchString(m.Name) {
			continue
		}
		o := outcome{m: m}
		bin, err := buildMutant(root, filepath.Join(dir, fmt.Sprint(i)), m)
		switch {
		case err != nil:
			o.status, o.note = "build error", err.Error()
		case checkOnly:
			o.status = "builds"
		default:
			o.status, o.by, o.note = runSuite(bin, m, parallel, verbose)
		}
		fmt.Printf("%-55s %-11s %s\n", m.Name, o.status, strings.Join(o.by, ", "))
		results = append(results, o)
	}
	table := report(results, strings.TrimSpace(string(rev)), time.Since(start))
	fmt.Print(table)
	if readme != "" && !checkOnly && run == "" {
		return replaceTable(readme, table)
	}
	for _, o := range results {
		if o.status == "build error" {
			return fmt.Errorf("%s: %s", o.m.Name, o.note)
		}
	}
	return nil
}

// validate checks the list itself: unique names of a known family, each
// Old found exactly once in its file.
func validate(ms []Mutant) error {
	families := []string{"idempotency", "persist", "fencing", "cleanup", "recovery", "adoption", "checkpoints", "lifecycle"}
	seen := map[string]bool{}
	for _, m := range ms {
		family, _, ok := strings.Cut(m.Name, "/")
		switch {
		case !ok || !slices.Contains(families, family):
			return fmt.Errorf("mutant %q: its name must be family/name, the family one of %v", m.Name, families)
		case seen[m.Name]:
			return fmt.Errorf("mutant %q is listed twice", m.Name)
		case m.Doc == "":
			return fmt.Errorf("mutant %q has no Doc", m.Name)
		}
		seen[m.Name] = true
		src, err := os.ReadFile(m.File)
		if err != nil {
			return fmt.Errorf("mutant %q: %w", m.Name, err)
		}
		if n := strings.Count(string(src), m.Old); n != 1 {
			return fmt.Errorf("mutant %q: its Old text occurs %d times in %s; it must occur once", m.Name, n, m.File)
		}
	}
	return nil
}

// buildMutant builds the server with m applied, in dir, and returns the
// binary.
func buildMutant(root, dir string, m Mutant) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		return "", err
	}
	mutated := filepath.Join(dir, filepath.Base(m.File))
	if err := os.WriteFile(mutated, []byte(strings.Replace(string(src), m.Old, m.New, 1)), 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, m.File): mutated}})
	if err != nil {
		return "", err
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "jobplane")
	cmd := exec.Command("go", "build", "-trimpath", "-overlay", overlayFile, "-o", bin, "./server/cmd/jobplane")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// storeSide reports whether m changes the HA store's own code, which the
// store mode of the suite checks. The store's client (hastorerpc.Client)
// and the contract's fallbacks (FinishJob in steps) run in the server that
// calls the store, and are checked with it.
func storeSide(m Mutant) bool {
	return strings.HasPrefix(m.File, "server/hastore/") && !strings.HasSuffix(m.File, "/client.go") && m.File != "server/hastore/fallback.go"
}

// runSuite runs the suite against the mutated server bin (and, for a
// store-side mutant, against its store) and returns the cases that caught
// the mutant by their own assertions.
func runSuite(bin string, m Mutant, parallel int, verbose bool) (status string, by []string, note string) {
	// The server cases run the server against the runner's own store; the
	// store cases run the store. A mutant of the store's own code is seen
	// only by the latter, any other only by the former.
	configs := []runner.Config{{
		ServerCommand: bin + " jobmanager --hastore {hastore} --listen {listen}",
		Features:      map[string]bool{runner.FeatureResourceManager: true, runner.FeatureFailover: true, runner.FeatureAdoption: true, runner.FeatureCheckpoints: true, runner.FeatureInvokableCheck: true},
	}}
	if storeSide(m) {
		configs = []runner.Config{{StoreCommand: bin + " hastore --log-level warn --listen {listen} --data-dir {data}"}}
	}
	var unsure []string
	for _, cfg := range configs {
		cfg.Parallel, cfg.CaseTimeout, cfg.Out, cfg.StopAtFirstCatch = parallel, 90*time.Second, io.Discard, !all
		sum, err := runner.Run(context.Background(), cfg)
		if err != nil {
			return "survived", nil, "the suite did not run: " + err.Error()
		}
		for _, r := range sum.Results {
			if r.Outcome != "failed" {
				continue
			}
			if verbose {
				for _, msg := range r.Messages {
					fmt.Printf("    %s: %s\n", r.Name, msg)
				}
			}
			if runner.CaughtByAssertion(r) {
				by = append(by, r.Name)
			} else {
				unsure = append(unsure, r.Name)
			}
		}
	}
	if len(by) > 0 {
		return "killed", by, ""
	}
	if len(unsure) > 0 {
		note = "failed only by timeouts or setup: " + strings.Join(unsure, ", ")
	}
	return "survived", nil, note
}

// report renders the outcomes as a Markdown table with the kill rate.
func report(results []outcome, rev string, took time.Duration) string {
	var b strings.Builder
	killed, total := 0, 0
	for _, o := range results {
		if o.status == "killed" {
			killed++
		}
		if o.status == "killed" || o.status == "survived" {
			total++
		}
	}
	fmt.Fprintf(&b, "Run on %s at commit %s, in %s: **%d of %d mutants killed",
		time.Now().UTC().Format("2006-01-02"), rev, took.Round(time.Second), killed, total)
	if total > 0 {
		fmt.Fprintf(&b, " (%.0f%%)", 100*float64(killed)/float64(total))
	}
	b.WriteString("**.\n\n| mutant | bug | outcome | caught by |\n| --- | --- | --- | --- |\n")
	for _, o := range results {
		by := strings.Join(firstN(o.by, 3), ", ")
		if len(o.by) > 3 {
			by += fmt.Sprintf(" and %d more", len(o.by)-3)
		}
		if o.note != "" {
			by = strings.TrimSpace(by + " " + o.note)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", o.m.Name, o.m.Doc, o.status, by)
	}
	return b.String()
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

const (
	beginMarker = "<!-- mutants:begin -->"
	endMarker   = "<!-- mutants:end -->"
)

// replaceTable puts table between the markers of the file.
func replaceTable(file, table string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", file, beginMarker, endMarker)
	}
	s = s[:i+len(beginMarker)] + "\n" + table + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}
