// A job's page: its summary followed live through WatchJob, its vertices
// and subtasks, its exception history, and a cancel button.

import { useEffect, useState } from "preact/hooks";
import { JobView, type JobDetails, type JobSummary } from "../gen/jobplane/v1/job_pb.js";
import { type Dispatcher, duration, message, stateName, terminal, time } from "./api.js";
import { Checkpoints } from "./checkpoints.js";
import { Dataflow } from "./graph.js";
import { StatusBadge } from "./jobs.js";
import { type Subtask, TaskOutput } from "./output.js";

/**
 * useJob follows job id: GetJob (full view) at first and again after each
 * change WatchJob reports; the watch resumes from its last token when its
 * stream ends, until the job has ended.
 */
function useJob(client: Dispatcher, id: string): { job?: JobDetails; summary?: JobSummary; error?: unknown } {
  const [job, setJob] = useState<JobDetails>();
  const [summary, setSummary] = useState<JobSummary>();
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    const ctl = new AbortController();
    const signal = ctl.signal;
    const details = () =>
      client.getJob({ jobId: id, view: JobView.FULL }, { signal }).then(
        (r) => { setJob(r.job); setError(undefined); },
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
  }, [client, id]);
  return { job, summary: summary ?? job?.summary, error };
}

export function JobPage({ client, id }: { client: Dispatcher; id: string }) {
  const { job, summary, error } = useJob(client, id);
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
            </tbody>
          </table>
          <h2>Subtasks</h2>
          <table aria-label="Subtasks">
            <thead><tr><th>Vertex</th><th>Subtask</th><th>Attempt</th><th>State</th><th>TaskExecutor</th><th>Failure</th><th>Output</th></tr></thead>
            <tbody>
              {job.vertices.flatMap((v) =>
                v.subtasks.map((s) => (
                  <tr key={`${v.vertexId}/${s.subtaskIndex}`}>
                    <td>{v.name}</td><td>{s.subtaskIndex}</td><td>{s.attemptNumber}</td><td>{stateName(s.state)}</td>
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
          <h2>Exceptions</h2>
          {job.exceptionHistory.length === 0 ? (
            <p>None.</p>
          ) : (
            <ol class="exceptions" aria-label="Exceptions">
              {job.exceptionHistory.map((f) => (
                <li><time>{time(f.time)}</time> <pre>{f.message}</pre></li>
              ))}
            </ol>
          )}
        </>
      )}
    </>
  );
}
