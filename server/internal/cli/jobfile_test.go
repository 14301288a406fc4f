package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Every example job file is a valid JobGraph.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parseJobFile(name, data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(f.graph.GetVertices()) == 0 {
			t.Errorf("%s: no vertices", name)
		}
	}
}

func TestParseJobFileAcceptsYAMLAndJSON(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"yaml", "name: j\nvertices:\n  - id: a\n    invokable: noop\n    parallelism: 2\n    config: {k: v}\nconfig:\n  restart_strategy:\n    fixed_delay: {attempts: 1, delay: 1s}\n"},
		{"json, proto names", `{"name": "j", "vertices": [{"id": "a", "invokable": "noop", "parallelism": 2, "config": {"k": "v"}}], "config": {"restart_strategy": {"fixed_delay": {"attempts": 1, "delay": "1s"}}}}`},
		{"json, json names", `{"name": "j", "vertices": [{"id": "a", "invokable": "noop", "parallelism": 2, "config": {"k": "v"}}], "config": {"restartStrategy": {"fixedDelay": {"attempts": 1, "delay": "1s"}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseJobFile("job", []byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			g := f.graph
			if g.GetName() != "j" || len(g.GetVertices()) != 1 || g.GetVertices()[0].GetParallelism() != 2 ||
				g.GetVertices()[0].GetConfig()["k"] != "v" || g.GetConfig().GetRestartStrategy().GetFixedDelay().GetDelay().AsDuration().Seconds() != 1 {
				t.Errorf("graph = %v", g)
			}
		})
	}
}

// A bad job file yields an error that names the file, the line and the
// column, and shows the line.
func TestParseJobFileErrorsArePlaced(t *testing.T) {
	const cycle = `name: loop
vertices:
  - {id: a, invokable: noop, parallelism: 1}
  - {id: b, invokable: noop, parallelism: 1}
edges:
  - source_vertex_id: a
    target_vertex_id: b
    distribution: DISTRIBUTION_PATTERN_POINTWISE
    result_type: RESULT_PARTITION_TYPE_PIPELINED
  - source_vertex_id: b
    target_vertex_id: a
    distribution: DISTRIBUTION_PATTERN_POINTWISE
    result_type: RESULT_PARTITION_TYPE_PIPELINED
`
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"unknown field", "name: j\nvertices:\n  - id: a\n    invokable: noop\n    paralelism: 1\n",
			[]string{"job.yaml:5:5: unknown field \"paralelism\"", "    5 |     paralelism: 1", "^"}},
		{"wrong type", "name: j\nvertices:\n  - id: a\n    invokable: noop\n    parallelism: many\n",
			[]string{"job.yaml:5:18", "many"}},
		{"bad enum", "name: j\nvertices: [{id: a, invokable: noop, parallelism: 1}, {id: b, invokable: noop, parallelism: 1}]\nedges:\n  - {source_vertex_id: a, target_vertex_id: b, distribution: SIDEWAYS, result_type: RESULT_PARTITION_TYPE_BLOCKING}\n",
			[]string{"job.yaml:4:62: unknown enum value", "SIDEWAYS"}},
		{"cycle", cycle, []string{"the job graph is invalid", "job.yaml:5:1: job_graph.edges: the edges form a cycle", "    5 | edges:"}},
		{"zero parallelism", "vertices:\n  - id: a\n    invokable: noop\n    parallelism: 0\n",
			[]string{"job.yaml:4:5: job_graph.vertices[0].parallelism: parallelism 0: must be at least 1"}},
		{"missing parallelism placed at its vertex", "vertices:\n  - id: a\n    invokable: noop\n",
			[]string{"job.yaml:2:5: job_graph.vertices[0].parallelism"}},
		{"unknown edge vertex", "vertices: [{id: a, invokable: noop, parallelism: 1}]\nedges:\n  - source_vertex_id: a\n    target_vertex_id: nowhere\n    distribution: DISTRIBUTION_PATTERN_POINTWISE\n    result_type: RESULT_PARTITION_TYPE_BLOCKING\n",
			[]string{"job.yaml:4:5: job_graph.edges[0].target_vertex_id: unknown vertex \"nowhere\""}},
		{"bad override placed at its key", "vertices: [{id: a.b, invokable: noop, parallelism: 1}]\nconfig:\n  parallelism_overrides:\n    a.b: -1\n",
			[]string{`job.yaml:4:5: job_graph.config.parallelism_overrides["a.b"]`}},
		// The user who wrote attempts 0 for "no restarts" (it meant
		// unlimited before contract 1.2) is told at the line.
		{"restart attempts 0", "vertices: [{id: a, invokable: noop, parallelism: 1}]\nconfig:\n  restartStrategy:\n    fixedDelay:\n      attempts: 0\n      delay: 1s\n",
			[]string{"job.yaml:5:7: job_graph.config.restart_strategy.fixed_delay.attempts: 0 no longer means unlimited", "unlimited: true", "none strategy"}},
		{"restart attempts with unlimited", "vertices: [{id: a, invokable: noop, parallelism: 1}]\nconfig:\n  restart_strategy:\n    exponential_delay: {initial_delay: 1s, max_delay: 1m, attempts: 3, unlimited: true}\n",
			[]string{"job.yaml:4:", "job_graph.config.restart_strategy.exponential_delay.unlimited: unlimited is set together with attempts 3"}},
		{"not YAML", "name: [unclosed\nvertices: {\n", []string{"job.yaml:", "not valid YAML or JSON"}},
		{"not JSON", `{"name": "j", "vertices": [}`, []string{"job.yaml:1:28: not valid JSON"}},
		{"prose", "this is not a job\n", []string{"job.yaml:1:1: not a JobGraph"}},
		{"a list", "- a\n- b\n", []string{"job.yaml:1:1: not a JobGraph"}},
		{"binary", "\x00\x01\x02\xff", []string{"job.yaml", "not valid YAML or JSON"}},
		{"empty", "  \n", []string{"job.yaml: the file is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseJobFile("job.yaml", []byte(tc.data))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestParseFieldPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []pathStep
	}{
		{"job_graph.vertices[2].parallelism", []pathStep{{field: "job_graph", index: -1}, {field: "vertices", index: -1}, {index: 2}, {field: "parallelism", index: -1}}},
		{`job_graph.config.parallelism_overrides["a.b[0]"]`, []pathStep{{field: "job_graph", index: -1}, {field: "config", index: -1}, {field: "parallelism_overrides", index: -1}, {key: "a.b[0]", isKey: true, index: -1}}},
	} {
		got, ok := parseFieldPath(tc.path)
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseFieldPath(%q) = %+v, %v; want %+v", tc.path, got, ok, tc.want)
		}
	}
	if _, ok := parseFieldPath(`x["unterminated`); ok {
		t.Error("an unterminated key parsed")
	}
}

func TestJSONName(t *testing.T) {
	for in, want := range map[string]string{"source_vertex_id": "sourceVertexId", "name": "name", "max_parallelism": "maxParallelism"} {
		if got := jsonName(in); got != want {
			t.Errorf("jsonName(%q) = %q, want %q", in, got, want)
		}
	}
}
