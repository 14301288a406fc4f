// Submitting a job: its JobGraph in the protobuf JSON form, or the same
// in YAML (the form of the CLI's job files), edited as text. The server's refusal is shown, and the fields it names (a
// google.rpc.BadRequest) are listed each at its line; a click selects the
// field in the text.

import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { useRef, useState } from "preact/hooks";
import { BadRequestSchema } from "../gen/google/rpc/error_details_pb.js";
import { JobGraphSchema } from "../gen/jobplane/v1/job_graph_pb.js";
import { type Dispatcher, message } from "./api.js";
import { parseDocument } from "yaml";
import { lineOf, locate, spanOf } from "./locate.js";

const example = `{
  "name": "hello",
  "vertices": [
    { "id": "greet", "name": "greet", "invokable": "sleep", "parallelism": 2, "config": { "duration": "5s" } },
    { "id": "done", "name": "done", "invokable": "noop", "parallelism": 1 }
  ],
  "edges": [
    { "sourceVertexId": "greet", "targetVertexId": "done", "distribution": "DISTRIBUTION_PATTERN_ALL_TO_ALL", "resultType": "RESULT_PARTITION_TYPE_PIPELINED" }
  ]
}
`;

/** A refusal of one field: where it is in the text, when it was found. */
interface Problem {
  field: string;
  description: string;
  span?: [number, number];
  line?: number;
}

function newJobId(): string {
  const b = crypto.getRandomValues(new Uint8Array(8));
  return "ui-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

export function SubmitPage({ client }: { client: Dispatcher }) {
  const [text, setText] = useState(example);
  const [jobId, setJobId] = useState("");
  const [problems, setProblems] = useState<Problem[]>([]);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const editor = useRef<HTMLTextAreaElement>(null);

  const select = (p: Problem) => {
    const t = editor.current;
    if (t === null || p.span === undefined) return;
    t.focus();
    t.setSelectionRange(p.span[0], p.span[1]);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    setProblems([]);
    setError(undefined);
    // JSON is YAML: one parser for both, which keeps where each field is.
    const doc = parseDocument(text, { prettyErrors: false });
    if (doc.errors.length > 0) {
      const e = doc.errors[0]!;
      setError(`The text is neither JSON nor YAML: line ${lineOf(text, e.pos[0])}: ${e.message}`);
      return;
    }
    const json = doc.toJS() as JsonValue;
    let graph;
    try {
      graph = fromJson(JobGraphSchema, json);
    } catch (err) {
      setError(`The text is not a JobGraph: ${(err as Error).message}`);
      return;
    }
    const id = jobId.trim() || newJobId();
    setBusy(true);
    try {
      await client.submitJob({ jobId: id, jobGraph: graph });
      location.hash = `#/jobs/${encodeURIComponent(id)}`;
    } catch (err) {
      // INVALID_ARGUMENT, and FAILED_PRECONDITION for an invokable no
      // TaskExecutor offers, name their fields in a BadRequest.
      const violations = err instanceof ConnectError ? err.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations) : [];
      setError(message(err));
      if (violations.length === 0) return;
      const spans = locate(doc, "job_graph");
      setProblems(
        violations.map((v) => {
          const span = spanOf(spans, v.field);
          return { field: v.field, description: v.description, span, line: span && lineOf(text, span[0]) };
        }),
      );
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <h1>Submit a job</h1>
      <form class="submit" onSubmit={submit}>
        <label>
          Job id <span class="hint">(optional: one is made up)</span>
          <input value={jobId} onInput={(e) => setJobId(e.currentTarget.value)} pattern="[A-Za-z0-9_-]{1,64}" />
        </label>
        <label for="graph">Job graph (JSON or YAML)</label>
        <textarea
          id="graph"
          ref={editor}
          spellcheck={false}
          rows={18}
          value={text}
          aria-invalid={problems.length > 0 || error !== undefined}
          aria-describedby="problems"
          onInput={(e) => setText(e.currentTarget.value)}
        />
        <div id="problems" aria-live="polite">
          {error !== undefined && <p class="error" role="alert">{error}</p>}
          {problems.length > 0 && (
            <>
              <p class="hint">The fields it names ({problems.length}):</p>
              <ul class="problems" aria-label="Refused fields">
                {problems.map((p) => (
                  <li>
                    <button type="button" class="link" onClick={() => select(p)} disabled={p.span === undefined}>
                      {p.line !== undefined ? `line ${p.line}` : "—"}
                    </button>{" "}
                    <code>{p.field}</code>: {p.description}
                  </li>
                ))}
              </ul>
            </>
          )}
        </div>
        <button type="submit" disabled={busy}>Submit</button>
      </form>
    </>
  );
}
