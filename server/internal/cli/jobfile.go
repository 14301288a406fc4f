package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"buf.build/go/protoyaml"
	"go.yaml.in/yaml/v3"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
)

// jobFile is a JobGraph read from a YAML or JSON file, with the file's
// node tree kept to place the contract's field violations in the file.
type jobFile struct {
	name  string
	lines []string
	root  *yaml.Node // the top-level mapping
	graph *jobplanev1.JobGraph
}

// readJobFile reads and parses the job file at path ("-" reads stdin).
func readJobFile(path string, stdin io.Reader) (*jobFile, error) {
	var (
		data []byte
		err  error
		name = path
	)
	if path == "-" {
		name = "<stdin>"
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the job file: %w", err)
	}
	return parseJobFile(name, data)
}

// yamlLineError matches the errors of the YAML parser that carry a line.
var yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseJobFile parses data, a JobGraph in YAML or JSON with the proto's
// field names (or their JSON names), and checks it by the contract's own
// rules (sdk.Validate, which runs the server's jobgraph.Prepare). Every error names the file and, where it can,
// the line and column, and shows the offending line.
func parseJobFile(name string, data []byte) (*jobFile, error) {
	f := &jobFile{name: name, lines: strings.Split(string(data), "\n")}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: the file is empty; want a JobGraph in YAML or JSON", name)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		if line, col, msg, ok := jsonSyntaxError(data); ok {
			return nil, errors.New(f.at(line, col, "not valid JSON: "+msg))
		}
		msg := err.Error()
		if m := yamlLineError.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, errors.New(f.at(line, 0, "not valid YAML or JSON: "+m[2]))
		}
		return nil, fmt.Errorf("%s: not valid YAML or JSON: %s", name, strings.TrimPrefix(msg, "yaml: "))
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		f.root = doc.Content[0]
	}
	if f.root == nil || f.root.Kind != yaml.MappingNode {
		line, col := 1, 1
		if f.root != nil {
			line, col = f.root.Line, f.root.Column
		}
		return nil, errors.New(f.at(line, col, "not a JobGraph: want a mapping of its fields (name, vertices, edges, config) in YAML or JSON"))
	}
	f.graph = &jobplanev1.JobGraph{}
	if err := (protoyaml.UnmarshalOptions{Path: name}).Unmarshal(data, f.graph); err != nil {
		return nil, f.placed(err)
	}
	// The contract's rules, but not the bounds a cluster configures
	// (vertices, subtasks, size), which the cluster checks itself.
	if err := sdk.Validate(f.graph); err != nil {
		var invalid *sdk.InvalidJobError
		if !errors.As(err, &invalid) {
			return nil, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: the job graph is invalid:\n", name)
		for _, v := range invalid.Violations {
			b.WriteString(f.violation(v.Field, v.Description))
			b.WriteString("\n")
		}
		return nil, errors.New(strings.TrimRight(b.String(), "\n"))
	}
	return f, nil
}

// protoyamlError matches the first line of an error of protoyaml:
// "path:line:column message".
var protoyamlError = regexp.MustCompile(`^(.*):(\d+):(\d+) (.*)$`)

// placed reformats the errors of protoyaml (one per problem, each with a
// line of the file under it) in the form of the other errors.
func (f *jobFile) placed(err error) error {
	var out []string
	for _, l := range strings.Split(err.Error(), "\n") {
		m := protoyamlError.FindStringSubmatch(l)
		if m == nil || m[1] != f.name {
			continue
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		out = append(out, f.at(line, col, m[4]))
	}
	if len(out) == 0 {
		return fmt.Errorf("%s: %s", f.name, strings.TrimRight(err.Error(), "\n"))
	}
	return errors.New(strings.Join(out, "\n"))
}

// jsonSyntaxError places the syntax error of data that looks like JSON
// (an object or array), which the YAML parser reports without a place.
func jsonSyntaxError(data []byte) (line, col int, msg string, ok bool) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		return 0, 0, "", false
	}
	var v any
	var syntax *json.SyntaxError
	if err := json.Unmarshal(data, &v); !errors.As(err, &syntax) {
		return 0, 0, "", false
	}
	before := data[:min(int(syntax.Offset), len(data))]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = len(before) - bytes.LastIndexByte(before, '\n') - 1
	return line, max(col, 1), syntax.Error(), true
}

// violation describes a violation of field (a path in proto names under
// "job_graph", as in google.rpc.BadRequest) at its place in the file.
func (f *jobFile) violation(field, description string) string {
	msg := field + ": " + description
	if f == nil {
		return msg
	}
	if n := f.nodeOf(field); n != nil {
		return f.at(n.Line, n.Column, msg)
	}
	return f.name + ": " + msg
}

// at formats msg at line and column (0: no column) of the file, followed
// by the line itself and a caret under the column.
func (f *jobFile) at(line, col int, msg string) string {
	var b strings.Builder
	if col > 0 {
		fmt.Fprintf(&b, "%s:%d:%d: %s", f.name, line, col, msg)
	} else {
		fmt.Fprintf(&b, "%s:%d: %s", f.name, line, msg)
	}
	if line >= 1 && line <= len(f.lines) {
		src := strings.TrimRight(f.lines[line-1], "\r")
		fmt.Fprintf(&b, "\n%5d | %s", line, src)
		if col > 0 {
			fmt.Fprintf(&b, "\n%5s | %s^", "", strings.Repeat(" ", col-1))
		}
	}
	return b.String()
}

// pathStep is one step of a field path: a field name, a list index or a
// map key.
type pathStep struct {
	field string
	index int // -1 unless a list index
	key   string
	isKey bool
}

// parseFieldPath splits a violation's field path, such as
// `job_graph.vertices[2].parallelism` or
// `job_graph.config.parallelism_overrides["a.b"]`, into steps.
func parseFieldPath(path string) ([]pathStep, bool) {
	var steps []pathStep
	for path != "" {
		switch path[0] {
		case '.':
			path = path[1:]
		case '[':
			rest := path[1:]
			if strings.HasPrefix(rest, `"`) {
				q, err := strconv.QuotedPrefix(rest)
				if err != nil || !strings.HasPrefix(rest[len(q):], "]") {
					return steps, false
				}
				k, _ := strconv.Unquote(q)
				steps = append(steps, pathStep{key: k, isKey: true, index: -1})
				path = rest[len(q)+1:]
				continue
			}
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return steps, false
			}
			i, err := strconv.Atoi(rest[:end])
			if err != nil {
				return steps, false
			}
			steps = append(steps, pathStep{index: i})
			path = rest[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			steps = append(steps, pathStep{field: path[:end], index: -1})
			path = path[end:]
		}
	}
	return steps, true
}

// nodeOf returns the node of the file closest to the field path: the
// field's key when the file has it, else its nearest enclosing element
// or field; nil when the path is not under job_graph.
func (f *jobFile) nodeOf(path string) *yaml.Node {
	steps, _ := parseFieldPath(path)
	if len(steps) == 0 || steps[0].field != "job_graph" || f.root == nil {
		return nil
	}
	best, cur := f.root, f.root
	for _, s := range steps[1:] {
		switch {
		case s.field != "" || s.isKey:
			name := s.field
			if s.isKey {
				name = s.key
			}
			k, v := mappingEntry(cur, name, !s.isKey)
			if k == nil {
				return best
			}
			best, cur = k, v
		default:
			if cur.Kind != yaml.SequenceNode || s.index < 0 || s.index >= len(cur.Content) {
				return best
			}
			cur = cur.Content[s.index]
			best = cur
		}
	}
	return best
}

// mappingEntry returns the key and value nodes of name in the mapping n;
// a field also matches by its JSON (lowerCamelCase) name.
func mappingEntry(n *yaml.Node, name string, field bool) (key, value *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	alt := name
	if field {
		alt = jsonName(name)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value == name || k.Value == alt {
			return k, n.Content[i+1]
		}
	}
	return nil, nil
}

// jsonName is protobuf's JSON name of a field: lowerCamelCase.
func jsonName(name string) string {
	var b strings.Builder
	upper := false
	for _, r := range name {
		switch {
		case r == '_':
			upper = true
		case upper && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			upper = false
		default:
			b.WriteRune(r)
			upper = false
		}
	}
	return b.String()
}
