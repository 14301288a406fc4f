package examples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// The job-file reference of docs/clients.md names every field a job file
// may set, in its JSON (camelCase) spelling, and every value of the enums
// it may use, so that a field added to the contract is not left out.
func TestDocsJobFileReference(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join(repoRoot, "docs", "clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## Job files\n")
	if !ok {
		t.Fatal(`docs/clients.md has no "## Job files" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	// The keys the tables' rows name: their first cell, and for the
	// restart strategies' table (a strategy, then its fields, the strategy
	// left empty on its rows after the first) the pair of the two.
	keys, pairs := map[string]bool{}, map[string]bool{}
	strategy := ""
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		first, second := strings.Trim(strings.TrimSpace(cells[1]), "`"), strings.Trim(strings.TrimSpace(cells[2]), "`")
		if first != "" {
			strategy = first
		}
		keys[first] = true
		pairs[strategy+"."+second] = true
	}
	seen := map[protoreflect.FullName]bool{}
	// walk checks the fields of m, whose rows are keyed by their own name,
	// or by parent and name when parent is set.
	var walk func(m protoreflect.MessageDescriptor, parent string)
	walk = func(m protoreflect.MessageDescriptor, parent string) {
		if seen[m.FullName()] || m.ParentFile().Package() != "jobplane.v1" {
			return // google.protobuf.Duration is a string in a job file
		}
		seen[m.FullName()] = true
		for i := range m.Fields().Len() {
			f := m.Fields().Get(i)
			if parent == "" && !keys[f.JSONName()] || parent != "" && !pairs[parent+"."+f.JSONName()] {
				t.Errorf("the job-file reference has no row for `%s` (%s)", f.JSONName(), f.FullName())
			}
			switch {
			case f.IsMap():
				// string keys and values, or string to int32: no message
			case f.Kind() == protoreflect.MessageKind && f.ContainingOneof() != nil:
				walk(f.Message(), f.JSONName()) // a restart strategy: its fields are rows of its table
			case f.Kind() == protoreflect.MessageKind:
				walk(f.Message(), "")
			case f.Kind() == protoreflect.EnumKind:
				values := f.Enum().Values()
				for j := range values.Len() {
					if v := values.Get(j); v.Number() != 0 && !strings.Contains(section, "`"+string(v.Name())+"`") {
						t.Errorf("the job-file reference lacks `%s` (a value of %s)", v.Name(), f.FullName())
					}
				}
			}
		}
	}
	walk((&jobplanev1.JobGraph{}).ProtoReflect().Descriptor(), "")
	if len(seen) < 8 {
		t.Errorf("walked %d messages, want JobGraph and every message under it", len(seen))
	}
}
