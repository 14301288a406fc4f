package runner

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestPatterns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		patterns []string
		want     bool
	}{
		{"fencing/stale-offer-refused", []string{"fencing"}, true},
		{"fencing/stale-offer-refused", []string{"fencing/"}, true},
		{"fencing/stale-offer-refused", []string{"*/stale-*"}, true},
		{"fencing/stale-offer-refused", []string{"fencing/stale-offer-refused"}, true},
		{"fencing/stale-offer-refused", []string{"fenc"}, false},
		{"fencing/stale-offer-refused", []string{"persist", "lifecycle/*"}, false},
	} {
		if got := matches(tc.name, tc.patterns); got != tc.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tc.name, tc.patterns, got, tc.want)
		}
	}
}

// The README lists every case, with the text --list prints.
func TestReadmeListsEveryCase(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	names := map[string]bool{}
	for _, c := range append(append(Cases(), StoreCases()...), TaskExecutorCases()...) {
		if names[c.Name] {
			t.Errorf("two cases are named %s", c.Name)
		}
		names[c.Name] = true
		if line := "- `" + c.Name + "`: " + c.Doc; !strings.Contains(readme, line) {
			t.Errorf("README.md lacks %q", line)
		}
	}
	if len(names) < 30 {
		t.Errorf("%d cases; the suite promises at least 30", len(names))
	}
}

// The repository's README and docs/contract.md state how many cases the
// suite has, as the runner counts them.
func TestDocsStateTheCaseCounts(t *testing.T) {
	server, store, te := len(Cases()), len(StoreCases()), len(TaskExecutorCases())
	for file, want := range map[string][]string{
		"../../README.md":        {fmt.Sprintf("%d cases against any server, %d against any HA store and %d against any TaskExecutor", server, store, te)},
		"../../docs/contract.md": {fmt.Sprintf("%d cases on idempotency", server), fmt.Sprintf("%d store cases and %d TaskExecutor cases", store, te)},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not say %q", file, w)
			}
		}
	}
}
