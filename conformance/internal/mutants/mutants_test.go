package main

import (
	"os"
	"strings"
	"testing"
)

// TestMutantsApply checks the list against the source as it is now: each
// mutant's text is found exactly once, so that no mutant silently stops
// applying as the server changes. (`make mutants` builds and runs them.)
func TestMutantsApply(t *testing.T) {
	if err := os.Chdir("../../.."); err != nil {
		t.Fatal(err)
	}
	if err := validate(mutants); err != nil {
		t.Fatal(err)
	}
	if len(mutants) < 40 {
		t.Errorf("%d mutants; the suite's measure needs at least 40", len(mutants))
	}
	for _, m := range mutants {
		if strings.HasPrefix(m.File, "sdk/taskexecutor/") || strings.HasSuffix(m.File, "_test.go") {
			t.Errorf("mutant %s changes %s: mutants are of the server and store processes the suite checks", m.Name, m.File)
		}
	}
}
