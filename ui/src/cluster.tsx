// The cluster page: the leader, the TaskExecutors with their slots and
// invokables, the jobs by status, and the limits the server enforces.

import type { GetClusterOverviewResponse, TaskExecutorInfo } from "../gen/jobplane/v1/dispatcher_service_pb.js";
import { type Dispatcher, message } from "./api.js";
import { usePoll } from "./poll.js";

async function allTaskExecutors(client: Dispatcher, signal: AbortSignal): Promise<TaskExecutorInfo[]> {
  const all: TaskExecutorInfo[] = [];
  let pageToken = "";
  do {
    const r = await client.listTaskExecutors({ pageToken }, { signal });
    all.push(...r.taskExecutors);
    pageToken = r.nextPageToken;
  } while (pageToken !== "");
  return all;
}

function seconds(d: { seconds: bigint; nanos: number } | undefined): string {
  if (d === undefined) return "—";
  return `${(Number(d.seconds) + d.nanos / 1e9).toFixed(1)} s`;
}

export function ClusterPage({ client, overview }: { client: Dispatcher; overview?: GetClusterOverviewResponse }) {
  const tes = usePoll((signal) => allTaskExecutors(client, signal), 2000, [client]);
  const o = overview;
  return (
    <>
      <h1>Cluster</h1>
      {o === undefined ? (
        <p aria-busy="true">Asking the cluster…</p>
      ) : (
        <section class="cards" aria-label="Overview">
          <div class="card">
            <h2>Leader</h2>
            <p data-testid="leader">{o.leader?.address || "—"}</p>
            <p class="hint">epoch {String(o.leader?.token?.epoch ?? "—")}</p>
            <p class="hint" data-testid="standbys">
              {o.standbyCount === undefined
                ? "standbys: not known (its HA store lists no candidates)"
                : `${o.standbyCount} ${o.standbyCount === 1 ? "standby" : "standbys"}`}
            </p>
          </div>
          <div class="card">
            <h2>TaskExecutors</h2>
            <p data-testid="te-count">{o.taskExecutorCount}</p>
            <p class="hint">{o.freeSlotCount} of {o.slotCount} slots free</p>
          </div>
          <div class="card">
            <h2>Jobs</h2>
            <dl class="counts">
              <dt>not ended</dt><dd data-testid="running-jobs">{o.runningJobCount}</dd>
              <dt>finished</dt><dd>{o.finishedJobCount}</dd>
              <dt>canceled</dt><dd>{o.canceledJobCount}</dd>
              <dt>failed</dt><dd>{o.failedJobCount}</dd>
            </dl>
          </div>
        </section>
      )}
      <h2>TaskExecutors</h2>
      {tes.error !== undefined && <p class="error" role="alert">{message(tes.error)}</p>}
      <table>
        <thead>
          <tr><th>Id</th><th>Address</th><th>Slots free</th><th>Jobs in its slots</th><th>Invokables</th><th>Silent for</th></tr>
        </thead>
        <tbody>
          {(tes.value ?? []).map((te) => (
            <tr key={te.taskExecutorId}>
              <td>{te.taskExecutorId}</td>
              <td>{te.address}</td>
              <td>{te.freeSlotCount} / {te.slotCount}</td>
              <td>
                {te.allocatedSlots.map((s, i) => (
                  <>{i > 0 && ", "}<a href={`#/jobs/${encodeURIComponent(s.jobId)}`}>{s.jobId}</a></>
                ))}
              </td>
              <td>{te.invokables.join(", ")}</td>
              <td>{seconds(te.silence)}</td>
            </tr>
          ))}
          {tes.value?.length === 0 && <tr><td colSpan={6}>No TaskExecutor is registered.</td></tr>}
        </tbody>
      </table>
      {o?.limits !== undefined && (
        <>
          <h2>Limits</h2>
          <dl class="limits">
            <dt>Request</dt><dd>{String(o.limits.maxRequestBytes)} bytes</dd>
            <dt>Response</dt><dd>{String(o.limits.maxResponseBytes)} bytes</dd>
            <dt>Job graph</dt><dd>{String(o.limits.maxGraphBytes)} bytes, {o.limits.maxVertices} vertices, {o.limits.maxSubtasks} subtasks</dd>
            <dt>List page</dt><dd>{o.limits.maxListPageSize} jobs</dd>
          </dl>
        </>
      )}
    </>
  );
}
