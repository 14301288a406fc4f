// A job's page: its summary followed live through WatchJob, its vertices
// and subtasks (a page of them at a time), its exception history, once it
// ended its result (values and accumulators), and a cancel button.

import { useEffect, useState } from "preact/hooks";
import { JobView, type JobDetails, type JobResult, type JobSummary } from "../gen/jobplane/v1/job_pb.js";
import { type Dispatcher, duration, message, stateName, terminal, time } from "./api.js";
import { Checkpoints } from "./checkpoints.js";
import { Dataflow } from "./graph.js";
import { StatusBadge } from "./jobs.js";
import { type Subtask, TaskOutput } from "./output.js";

/** How many subtasks a page of the subtasks table lists. */
export const subtaskPageSize = 100;

interface FollowedJob {
  /** The job's first page (the server's default size): its graph, and its vertices' states. */
  job?: JobDetails;
  /** The page of subtasks that pageToken names (subtaskPageSize of them). */
  page?: JobDetails;
  summary?: JobSummary;
  /** The token of the next page of subtasks; "" on the last. */
  next: string;
  error?: unknown;
}

/**
 * useJob follows job id: GetJob (full view: the first page, which alone
 * carries the graph, and the page of subtasks that pageToken names) at
 * first and again after each change WatchJob reports; the watch resumes
 * from its last token when its stream ends, until the job has ended.
 */
function useJob(client: Dispatcher, id: string, pageToken: string): FollowedJob {
  const [job, setJob] = useState<JobDetails>();
  const [page, setPage] = useState<JobDetails>();
  const [next, setNext] = useState("");
  const [summary, setSummary] = useState<JobSummary>();
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    const ctl = new AbortController();
    const signal = ctl.signal;
    const details = () =>
      Promise.all([
        client.getJob({ jobId: id, view: JobView.FULL }, { signal }),
        client.getJob({ jobId: id, view: JobView.FULL, pageSize: subtaskPageSize, pageToken }, { signal }),
      ]).then(
        ([first, r]) => { setJob(first.job); setPage(r.job); setNext(r.nextPageToken); setError(undefined); },
        (e) => !signal.aborted && setError(e),
      );
    (async () => {
      let resumeToken = "";
      let fails = 0;
      await details();
      while (!signal.aborted) {
        try {
          for await (const ev of client.watchJob({ jobId: id, resumeToken }, { signal })) {
            resumeToken = ev.resumeToken || resumeToken;
            fails = 0;
            if (ev.event.case !== "job") continue;
            const s = ev.event.value;
            setSummary(s);
            await details();
            if (terminal(s.status)) return;
          }
        } catch (e) {
          if (signal.aborted) return;
          setError(e);
          fails++;
        }
        // The stream ended (a leader change, a restart): resume after a pause.
        await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** fails, 5000)));
      }
    })();
    return () => ctl.abort();
  }, [client, id, pageToken]);
  return { job, page, summary: summary ?? job?.summary, next, error };
}

/** useResult reads an ended job's result (nothing before it ended). */
function useResult(client: Dispatcher, id: string, ended: boolean): { result?: JobResult; error?: unknown } {
  const [result, setResult] = useState<JobResult>();
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    if (!ended) return;
    const ctl = new AbortController();
    client.getJobResult({ jobId: id }, { signal: ctl.signal }).then(
      (r) => { setResult(r.result); setError(undefined); },
      (e) => !ctl.signal.aborted && setError(e),
    );
    return () => ctl.abort();
  }, [client, id, ended]);
  return { result, error };
}

/** A value as text when it is UTF-8, else "base64:" and its base64 (as the CLI prints it). */
export function valueText(b: Uint8Array): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(b);
  } catch {
    return "base64:" + btoa(String.fromCharCode(...b));
  }
}

function Result({ client, id, ended }: { client: Dispatcher; id: string; ended: boolean }) {
  const { result, error } = useResult(client, id, ended);
  if (!ended) return null;
  const accumulators = Object.entries(result?.accumulators ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return (
    <section aria-label="Result">
      <h2>Result</h2>
      {error !== undefined && <p class="error" role="alert">{message(error)}</p>}
      {result !== undefined && (
        <>
          <h3>Values</h3>
          {result.values.length === 0 ? (
            <p>No subtask returned a value.</p>
          ) : (
            <table aria-label="Values">
              <thead><tr><th>Vertex</th><th>Subtask</th><th>Attempt</th><th>Value</th></tr></thead>
              <tbody>
                {result.values.map((v) => (
                  <tr key={`${v.attempt?.vertexId}/${v.attempt?.subtaskIndex}`}>
                    <td class="mono">{v.attempt?.vertexId}</td><td>{v.attempt?.subtaskIndex}</td><td>{v.attempt?.attemptNumber}</td>
                    <td><pre>{valueText(v.value)}</pre></td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <h3>Accumulators</h3>
          {accumulators.length === 0 ? (
            <p>None.</p>
          ) : (
            <table aria-label="Accumulators">
              <thead><tr><th>Name</th><th>Total</th></tr></thead>
              <tbody>
                {accumulators.map(([name, total]) => (
                  <tr key={name}><td class="mono">{name}</td><td>{total.toString()}</td></tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </section>
  );
}

/**
 * The first and last subtask (counted from 1, in vertex order) a page
 * lists, and how many the job has. A page lists only the vertices it has
 * subtasks of, so where it starts is counted in the graph's vertices when
 * the job has its graph, else from the page's number.
 */
function pageRange(job: JobDetails, page: JobDetails, pages: number): string {
  const graph = job.jobGraph?.vertices;
  const total = (graph ?? job.vertices).reduce((n, v) => n + v.parallelism, 0);
  const listed = page.vertices.reduce((n, v) => n + v.subtasks.length, 0);
  if (listed === 0) return `none of ${total}`;
  const v0 = page.vertices.find((v) => v.subtasks.length > 0)!;
  let first = pages * subtaskPageSize + 1;
  const at = graph?.findIndex((v) => v.id === v0.vertexId) ?? -1;
  if (at >= 0) first = graph!.slice(0, at).reduce((n, v) => n + v.parallelism, 0) + v0.subtasks[0].subtaskIndex + 1;
  return `${first}–${first + listed - 1} of ${total}`;
}

export function JobPage({ client, id }: { client: Dispatcher; id: string }) {
  // The tokens of the subtask pages before this one, and this one's.
  const [pages, setPages] = useState<string[]>([]);
  const [pageToken, setPageToken] = useState("");
  useEffect(() => { setPages([]); setPageToken(""); }, [client, id]);
  const { job, page, summary, next, error } = useJob(client, id, pageToken);
  const [cancelError, setCancelError] = useState<unknown>();
  const [output, setOutput] = useState<Subtask>();
  const cancel = async () => {
    if (!confirm(`Cancel job ${id}?`)) return;
    try {
      await client.cancelJob({ jobId: id, reason: "canceled from the dashboard" });
      setCancelError(undefined);
    } catch (e) {
      setCancelError(e);
    }
  };
  return (
    <>
      <h1>Job <span class="mono">{id}</span></h1>
      {error !== undefined && <p class="error" role="alert">{message(error)}</p>}
      {summary !== undefined && (
        <section class="summary" aria-label="Summary">
          <dl>
            <dt>Name</dt><dd>{summary.name}</dd>
            <dt>Status</dt><dd data-testid="job-status"><StatusBadge status={summary.status} /></dd>
            <dt>Submitted</dt><dd>{time(summary.submitTime)}{summary.submittedBy !== "" && ` by ${summary.submittedBy}`}</dd>
            <dt>Duration</dt><dd>{duration(summary.submitTime, summary.endTime)}</dd>
            <dt>Restarts</dt><dd>{summary.restartCount}</dd>
            {summary.failure !== undefined && (<><dt>Failure</dt><dd class="error">{summary.failure.message}</dd></>)}
            {summary.cancellation !== undefined && (<><dt>Cancel requested</dt><dd>{time(summary.cancellation.requestedTime)}: {summary.cancellation.reason}</dd></>)}
          </dl>
          {!terminal(summary.status) && <button class="danger" onClick={cancel}>Cancel job</button>}
          {cancelError !== undefined && <p class="error" role="alert">{message(cancelError)}</p>}
        </section>
      )}
      {job !== undefined && (
        <>
          {job.jobGraph !== undefined && (
            <>
              <h2>Dataflow</h2>
              <Dataflow graph={job.jobGraph} vertices={job.vertices} />
            </>
          )}
          <h2>Vertices</h2>
          <table aria-label="Vertices">
            <thead><tr><th>Vertex</th><th>Name</th><th>Parallelism</th><th>State</th><th>Started</th><th>Ended</th></tr></thead>
            <tbody>
              {job.vertices.map((v) => (
                <tr key={v.vertexId}>
                  <td class="mono">{v.vertexId}</td><td>{v.name}</td><td>{v.parallelism}</td>
                  <td>{stateName(v.state)}</td><td>{time(v.startTime)}</td><td>{time(v.endTime)}</td>
                </tr>
              ))}
              {/* The first page lists the vertices it has subtasks of: the graph's others, without their state. */}
              {(job.jobGraph?.vertices ?? [])
                .filter((g) => !job.vertices.some((v) => v.vertexId === g.id))
                .map((g) => (
                  <tr key={g.id}>
                    <td class="mono">{g.id}</td><td>{g.name}</td><td>{g.parallelism}</td>
                    <td title="past the first page of subtasks: see the subtasks' pages">—</td><td>—</td><td>—</td>
                  </tr>
                ))}
            </tbody>
          </table>
          <h2>Subtasks</h2>
          {(pages.length > 0 || next !== "") && (
            <nav class="pager" aria-label="Subtask pages">
              <button disabled={pages.length === 0} onClick={() => { setPageToken(pages[pages.length - 1]); setPages(pages.slice(0, -1)); }}>
                Previous subtasks
              </button>
              <span data-testid="subtask-range">Subtasks {page !== undefined && pageRange(job, page, pages.length)}</span>
              <button disabled={next === ""} onClick={() => { setPages([...pages, pageToken]); setPageToken(next); }}>
                Next subtasks
              </button>
            </nav>
          )}
          <table aria-label="Subtasks">
            <thead><tr><th>Vertex</th><th>Subtask</th><th>Attempt</th><th>State</th><th>Since</th><th>TaskExecutor</th><th>Failure</th><th>Output</th></tr></thead>
            <tbody>
              {(page?.vertices ?? []).flatMap((v) =>
                v.subtasks.map((s) => (
                  <tr key={`${v.vertexId}/${s.subtaskIndex}`}>
                    <td>{v.name || v.vertexId}</td><td>{s.subtaskIndex}</td><td>{s.attemptNumber}</td><td>{stateName(s.state)}</td>
                    <td>{time(s.stateTime)}</td>
                    <td class="mono">{s.taskExecutorId || "—"}</td><td>{s.failure?.message ?? ""}</td>
                    <td>
                      <button
                        class="link"
                        aria-label={`Output of ${v.name} #${s.subtaskIndex}`}
                        onClick={() => setOutput({ vertexId: v.vertexId, vertexName: v.name, index: s.subtaskIndex })}
                      >
                        Show
                      </button>
                    </td>
                  </tr>
                )),
              )}
            </tbody>
          </table>
          {output !== undefined && <TaskOutput client={client} jobId={id} subtask={output} />}
          {(job.checkpoints !== undefined || job.jobGraph?.config?.checkpoints !== undefined) && (
            <Checkpoints client={client} jobId={id} stats={job.checkpoints} running={summary !== undefined && !terminal(summary.status)} />
          )}
          <Result client={client} id={id} ended={summary !== undefined && terminal(summary.status)} />
          <h2>Exceptions</h2>
          <p>
            The failures that restarted or failed the job, most recent first ({summary?.restartCount ?? 0} restarts).
          </p>
          {job.exceptionHistory.length === 0 ? (
            <p>None.</p>
          ) : (
            <ol class="exceptions" aria-label="Exceptions">
              {job.exceptionHistory.map((f) => (
                <li>
                  <time>{time(f.time)}</time>
                  {f.attempt !== undefined && (
                    <span>
                      {" "}vertex <span class="mono">{f.attempt.vertexId}</span>, subtask {f.attempt.subtaskIndex}, attempt {f.attempt.attemptNumber}
                      {f.taskExecutorId !== "" && <> on <span class="mono">{f.taskExecutorId}</span></>}
                    </span>
                  )}
                  <pre>{f.message}</pre>
                </li>
              ))}
            </ol>
          )}
        </>
      )}
    </>
  );
}
