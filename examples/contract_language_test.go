package examples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// bcp14 is the sentence that every proto file and docs/contract.md carry,
// so that a MUST in any of them reads as RFC 2119 defines it.
const bcp14 = `The key words "MUST", "MUST NOT", "SHOULD", "SHOULD NOT" and "MAY" in this contract are to be interpreted as described in RFC 2119 (BCP 14) when, and only when, they appear in all capitals.`

// referenceValue finds a sentence that states what the reference
// implementation does; the contract marks each such one informative.
var referenceValue = regexp.MustCompile(`reference (server|store|TaskExecutor)`)

// notAKeyword finds capitalized phrases that look like RFC 2119 key words
// but are not among the five the contract uses.
var notAKeyword = regexp.MustCompile(`\bMAY NOT\b|\bSHALL\b|\bREQUIRED\b|\bRECOMMENDED\b|\bOPTIONAL\b`)

// Every proto file states the conformance language in its header, marks
// what it says of the reference implementation as informative, and uses
// no capitalized word that RFC 2119 gives a meaning the contract does not
// declare; docs/contract.md states the same sentence.
func TestContractStatesItsConformanceLanguage(t *testing.T) {
	root := filepath.Join("..", "proto")
	var files []string
	if err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
			files = append(files, path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no .proto files under proto/")
	}
	for _, path := range files {
		text := commentText(t, path)
		if !strings.Contains(text, bcp14) {
			t.Errorf("%s: its comments do not state the conformance language (%q)", path, bcp14)
		}
		for _, s := range strings.SplitAfter(text, ". ") {
			if referenceValue.MatchString(s) && !strings.Contains(strings.ToLower(s), "informative") {
				t.Errorf("%s: %q speaks of the reference implementation without marking it informative", path, s)
			}
			if m := notAKeyword.FindString(s); m != "" {
				t.Errorf("%s: %q uses %q, which is not one of the contract's key words", path, s, m)
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), bcp14) {
		t.Errorf("docs/contract.md does not state the conformance language (%q)", bcp14)
	}
}

// commentText returns the // comments of a proto file joined into one
// line of words, so that sentences wrapped over lines read whole.
func commentText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, line := range strings.Split(string(b), "\n") {
		if _, c, ok := strings.Cut(line, "//"); ok {
			words = append(words, strings.Fields(c)...)
		}
	}
	return strings.Join(words, " ")
}
