package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// parseJobFile never panics, names the file in every refusal, and what it
// accepts is a graph that, written back as JSON (which is YAML too),
// parses again to the same graph.
func FuzzParseJobFile(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "..", "..", "examples", "*.yaml"))
	for _, path := range examples {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"name: j\nvertices:\n  - id: a\n    invokable: noop\n    parallelism: 2\n    config: {k: v}\nconfig:\n  restart_strategy:\n    fixed_delay: {attempts: 1, delay: 1s}\n",
		`{"name": "j", "vertices": [{"id": "a", "invokable": "noop", "parallelism": 2}], "config": {"restartStrategy": {"fixedDelay": {"attempts": 1, "delay": "1s"}}}}`,
		"vertices:\n  - {id: a, invokable: noop, parallelism: 1}\nedges:\n  - {source_vertex_id: a, target_vertex_id: a, distribution: ALL_TO_ALL, result_type: PIPELINED}\n",
		"vertices: [{id: a, invokable: noop, parallelism: 0, nope: 1}]",
		`{"vertices": [`,
		"- a\n- b\n",
		"a: &x [*x]\n",
		"\t\n:",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		jf, err := parseJobFile("job.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "job.yaml") {
				t.Fatalf("the error %q does not name the file first", err)
			}
			return
		}
		js, err := protojson.Marshal(jf.graph)
		if err != nil {
			t.Fatalf("an accepted graph does not encode as JSON: %v", err)
		}
		again, err := parseJobFile("again.json", js)
		if err != nil {
			t.Fatalf("the accepted graph, as JSON %s, is refused: %v", js, err)
		}
		if !proto.Equal(again.graph, jf.graph) {
			t.Fatalf("the accepted graph, as JSON, parses as another: %v, then %v", jf.graph, again.graph)
		}
	})
}
