package cli

import (
	"encoding/json"
	"testing"
)

// resultJob returns values from exec commands (text and bytes that are
// not UTF-8, through JOBPLANE_VALUE_FILE) and from the built-in count,
// whose accumulator counts its steps.
const resultJob = `name: results
vertices:
  - id: text
    invokable: exec
    parallelism: 2
    config:
      argv: '["sh", "-c", "printf \"hello from %s\" $JOBPLANE_SUBTASK_INDEX > \"$JOBPLANE_VALUE_FILE\""]'
  - id: bytes
    invokable: exec
    parallelism: 1
    config:
      argv: '["sh", "-c", "printf \"\\377\\000\" > \"$JOBPLANE_VALUE_FILE\""]'
  - id: count
    invokable: count
    parallelism: 2
    config:
      to: "2"
      every: 1ms
`

// jobplane result shows an ended job's values (text when UTF-8, else
// base64) and accumulators, or the JobResult as protojson with -o json;
// its exit code is the job's; a job that has not ended is an error that
// points to wait.
func TestResultVerb(t *testing.T) {
	c := startCLICluster(t)
	expect(t, "submit", c.run(t, "submit", "--id", "res-1", writeJob(t, "results.yaml", resultJob)), exitOK, []string{"FINISHED after"}, nil)

	r := c.run(t, "result", "res-1")
	expect(t, "result", r, exitOK, []string{
		"job res-1 FINISHED after", "Values:", "VERTEX", "text    0        0        hello from 0", "text    1        0        hello from 1",
		"bytes   0        0        base64:/wA=", "count   0        0        2", "Accumulators:", "count.steps  4",
	}, nil)

	r = c.run(t, "result", "-o", "json", "res-1")
	var out struct {
		Status string `json:"status"`
		Values []struct {
			Attempt struct {
				VertexID     string `json:"vertex_id"`
				SubtaskIndex int    `json:"subtask_index"`
			} `json:"attempt"`
			Value []byte `json:"value"`
		} `json:"values"`
		Accumulators map[string]string `json:"accumulators"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitOK {
		t.Fatalf("result -o json: %v (exit %d)\n%s%s", err, r.code, r.stdout, r.stderr)
	}
	if out.Status != "JOB_STATUS_FINISHED" || len(out.Values) != 5 || string(out.Values[0].Value) != "hello from 0" ||
		out.Values[2].Attempt.VertexID != "bytes" || string(out.Values[2].Value) != "\xff\x00" || out.Accumulators["count.steps"] != "4" {
		t.Errorf("result -o json: %+v, want FINISHED, 5 values (text first, bytes third), count.steps 4", out)
	}

	expect(t, "unknown", c.run(t, "result", "no-such-job"), exitError, nil, []string{"no-such-job"})
	forever := c.run(t, "submit", "-d", "--id", "res-running", example("forever.yaml"))
	expect(t, "submit forever", forever, exitOK, nil, nil)
	expect(t, "running", c.run(t, "result", "res-running"), exitError, nil, []string{"has not ended yet", "jobplane wait res-running"})
	expect(t, "cancel", c.run(t, "cancel", "res-running"), exitOK, nil, nil)
	expect(t, "wait canceled", c.run(t, "wait", "res-running"), exitJobCanceled, nil, nil)
	expect(t, "canceled", c.run(t, "result", "res-running"), exitJobCanceled, []string{"CANCELED"}, nil)
}
