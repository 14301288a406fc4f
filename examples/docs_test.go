package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// docUses accounts for every fenced block of README.md and docs/*.md, by
// the marker <!-- name --> on the line above it: the test that runs (or
// compiles) the block as written, as "directory.TestName" from the
// repository's root, or why no test runs it.
var docUses = map[string]struct{ test, notRun string }{
	"readme:setup": {notRun: "make test is the suite these tests belong to, and make run serves 127.0.0.1:8080 until stopped: " +
		"TestQuickStart checks (make -n) that make run says it builds, builds bin/jobplane with -v and runs its standalone, and starts that " +
		"server, with the flags of make run's recipe, on a free port in its place; TestDocsBlocksAreAccountedFor checks that both targets exist"},
	"readme:server": {test: "examples.TestQuickStart"},
	"readme:tour":   {test: "examples.TestQuickStart"},
	"readme:hello":  {test: "examples.TestReadmeShowsExamplesHello"},
	"readme:layout": {notRun: "a map of the directories, not a command"},
	"design:layout": {notRun: "a map of the directories, not a command"},
	"design:model":  {notRun: "a diagram, not a command"},

	"clients:cli":          {test: "examples.TestDocsCLI"},
	"clients:checkpoints":  {test: "examples.TestDocsCheckpoints"},
	"clients:reuse":        {test: "examples.TestDocsIDReuse"},
	"clients:worker":       {test: "examples.TestDocsShowExamples"},
	"clients:localcluster": {test: "examples.TestDocsShowExamples"},
	"clients:curl":         {test: "examples.TestDocsCurl"},
	"clients:buf-curl":     {test: "examples.TestDocsBufCurl"},
	"clients:grpc":         {test: "examples.TestDocsGRPC"},

	"ops:processes":        {test: "internal/failover.TestDocsProcesses"},
	"ops:processes-client": {test: "internal/failover.TestDocsProcesses"},
	"ops:jobmanagers":      {test: "internal/failover.TestDocsOperations"},
	"ops:taskexecutor":     {test: "internal/failover.TestDocsOperations"},
	"ops:client":           {test: "internal/failover.TestDocsOperations"},
	"ops:replace":          {test: "internal/failover.TestDocsOperations"},
	"ops:join":             {test: "internal/failover.TestDocsOperations"},
	"ops:backup":           {test: "internal/failover.TestDocsOperations"},
	"ops:metrics":          {test: "examples.TestDocsMetricsScrape"},
	"ops:otlp":             {test: "examples.TestDocsOTLP"},
	"ops:pprof":            {test: "examples.TestDocsPprof"},

	"security:certs":        {test: "internal/failover.TestDocsSecureCluster"},
	"security:jobmanagers":  {test: "internal/failover.TestDocsSecureCluster"},
	"security:taskexecutor": {test: "internal/failover.TestDocsSecureCluster"},
	"security:client":       {test: "internal/failover.TestDocsSecureCluster"},
	"security:tokens":       {test: "examples.TestDocsAuth"},
	"security:policy":       {test: "examples.TestDocsAuth"},
	"security:cli":          {test: "examples.TestDocsAuth"},
	"security:fuzz": {notRun: "go test -race ./... ./sdk/... is the whole Go suite (make test runs it), make fuzz fuzzes " +
		"for minutes, and make fuzz-smoke is part of make test; the targets are checked to exist"},

	"contract:generate": {notRun: "make generate rewrites gen/ in the working tree, and make lint is part of make test, " +
		"whose check-generated runs the same generation into a temporary directory"},

	"bench:make": {notRun: "benchmarks take minutes to tens of minutes of CPU; make test runs every row once, briefly, " +
		"through make bench-quick"},
	"bench:go": {notRun: "benchmarks; make bench-quick (in make test) runs these packages' benchmarks once each"},
	"bench:failover": {notRun: "twenty failovers of real processes per store, minutes each; make bench-quick (in make test) " +
		"runs the same measurement with 2 cycles"},
}

// A docFence is one fenced block of a documentation page.
type docFence struct {
	file   string // relative to the repository's root
	line   int    // of the opening fence
	marker string // the name in the <!-- name --> line above it; "" when none
	body   string
}

// repoRoot is the repository's root, where the tests of this package find
// the pages.
const repoRoot = ".."

// docPages returns README.md and every docs/*.md, relative to the root.
func docPages(t testing.TB) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages in docs/")
	}
	out := []string{"README.md"}
	for _, p := range pages {
		rel, _ := filepath.Rel(repoRoot, p)
		out = append(out, rel)
	}
	return out
}

var (
	markerLine = regexp.MustCompile(`^<!-- ([a-z0-9:-]+) -->$`)
	fenceOpen  = regexp.MustCompile("^```[a-z]*$")
)

// docFences returns every fenced block of every page, in order.
func docFences(t testing.TB) []docFence {
	t.Helper()
	var all []docFence
	for _, page := range docPages(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			if !fenceOpen.MatchString(lines[i]) {
				continue
			}
			f := docFence{file: page, line: i + 1}
			if i > 0 {
				if m := markerLine.FindStringSubmatch(lines[i-1]); m != nil {
					f.marker = m[1]
				}
			}
			var body strings.Builder
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				body.WriteString(lines[i] + "\n")
			}
			if i == len(lines) {
				t.Fatalf("%s:%d: a fenced block that never closes", page, f.line)
			}
			f.body = body.String()
			all = append(all, f)
		}
	}
	return all
}

// docBlock returns the body of the one fenced block marked
// <!-- marker --> in README.md or docs/*.md.
func docBlock(t testing.TB, marker string) string {
	t.Helper()
	var found []docFence
	for _, f := range docFences(t) {
		if f.marker == marker {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d blocks are marked <!-- %s --> in README.md and docs/, want 1", len(found), marker)
	}
	return found[0].body
}

var (
	makeCall = regexp.MustCompile(`(?m)(?:^|&&|;|\|\|)[ \t]*make((?:[ \t]+[a-z][a-z-]*)+)`)
	repoPath = regexp.MustCompile(`(?:^|\s)(\./[^\s'"]*)`)
)

// Every block of the README and docs/ is marked, and its marker is either
// named by the test that runs it or listed in docUses as not run, with
// the reason. The make targets and the repository paths that any block
// names exist.
func TestDocsBlocksAreAccountedFor(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, f := range docFences(t) {
		where := fmt.Sprintf("%s:%d", f.file, f.line)
		if f.marker == "" {
			t.Errorf("%s: a block without a <!-- page:name --> marker above it; mark it and account for it in docUses", where)
			continue
		}
		if prev, ok := seen[f.marker]; ok {
			t.Errorf("%s: marker %s is used at %s already", where, f.marker, prev)
		}
		seen[f.marker] = where
		use, ok := docUses[f.marker]
		switch {
		case !ok:
			t.Errorf("%s: block %s is neither run by a test nor listed as not run in docUses", where, f.marker)
		case (use.test == "") == (use.notRun == ""):
			t.Errorf("docUses[%q] must name either the test that runs it or why none does", f.marker)
		case use.test != "":
			checkRunBy(t, f.marker, use.test)
		}
		for _, m := range makeCall.FindAllStringSubmatch(f.body, -1) {
			for _, target := range strings.Fields(m[1]) {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(makefile) {
					t.Errorf("%s: `make %s`: the Makefile has no target %s", where, target, target)
				}
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(f.body, -1) {
			p := strings.TrimSuffix(strings.TrimSuffix(m[1], "..."), "/")
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s: %s is not in the repository", where, m[1])
			}
		}
	}
	var stale []string
	for marker := range docUses {
		if _, ok := seen[marker]; !ok {
			stale = append(stale, marker)
		}
	}
	sort.Strings(stale)
	for _, m := range stale {
		t.Errorf("docUses lists %s, but no page has a block marked so", m)
	}
}

// checkRunBy checks that test ("dir.TestName") exists and that its file
// names the marker, as a test that takes the block by it does.
func checkRunBy(t *testing.T, marker, test string) {
	t.Helper()
	dir, name, ok := strings.Cut(test, ".")
	if !ok {
		t.Errorf("docUses[%q]: %q is not directory.TestName", marker, test)
		return
	}
	files, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*_test.go"))
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "\nfunc "+name+"(t *testing.T) {") {
			if !strings.Contains(string(src), `"`+marker+`"`) {
				t.Errorf("docUses[%q] names %s, but %s never names the marker", marker, test, file)
			}
			return
		}
	}
	t.Errorf("docUses[%q] names %s, which is not a test in %s", marker, test, dir)
}

var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	notInID  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	inFences = regexp.MustCompile("(?ms)^```.*?^```$")
)

// anchors returns the anchors GitHub gives a page's headings.
func anchors(page string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(inFences.ReplaceAllString(page, ""), -1) {
		id := strings.ToLower(notInID.ReplaceAllString(m[1], ""))
		out = append(out, strings.ReplaceAll(id, " ", "-"))
	}
	return out
}

// Every relative link of the README and docs/ leads to a file of the
// repository, and to a heading of it where it names one.
func TestDocsLinks(t *testing.T) {
	for _, page := range append(docPages(t), "conformance/README.md", "sdk/ts/README.md") {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		text := inFences.ReplaceAllString(string(b), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := page
			if path != "" {
				target = filepath.Join(filepath.Dir(page), path)
			}
			b, err := os.ReadFile(filepath.Join(repoRoot, target))
			if err != nil {
				if _, serr := os.Stat(filepath.Join(repoRoot, target)); serr != nil {
					t.Errorf("%s: link %s: %v", page, link, serr)
				}
				continue // a directory
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !slices.Contains(anchors(string(b)), anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", page, link, target, anchor)
			}
		}
	}
}
