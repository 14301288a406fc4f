// The jobs page: a page of jobs at a time, filtered by status (by the
// server) and by name (on the page), read again every two seconds so that
// it follows the jobs without a reload.

import { useState } from "preact/hooks";
import type { JobStatus, JobSummary } from "../gen/jobplane/v1/job_pb.js";
import { type Dispatcher, duration, message, stateName, statuses, statusName, time } from "./api.js";
import { usePoll } from "./poll.js";

const pageSize = 50;

export function StatusBadge({ status }: { status: JobStatus }) {
  const name = statusName(status);
  return <span class={`status ${name.toLowerCase()}`}>{name}</span>;
}

function tasks(j: JobSummary): string {
  return j.taskCounts.filter((c) => c.count > 0).map((c) => `${c.count} ${stateName(c.state).toLowerCase()}`).join(", ") || "—";
}

export function JobsPage({ client }: { client: Dispatcher }) {
  const [status, setStatus] = useState<JobStatus | 0>(0);
  const [name, setName] = useState("");
  // The tokens of the pages before this one, to go back.
  const [pages, setPages] = useState<string[]>([""]);
  const pageToken = pages[pages.length - 1];
  const list = usePoll(
    (signal) => client.listJobs({ pageSize, pageToken, statuses: status === 0 ? [] : [status] }, { signal }),
    2000,
    [client, status, pageToken],
  );
  const shown = (list.value?.jobs ?? []).filter((j) => name === "" || j.name.toLowerCase().includes(name.toLowerCase()));
  return (
    <>
      <h1>Jobs</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <label>
          Status{" "}
          <select
            value={String(status)}
            onChange={(e) => {
              setStatus(Number(e.currentTarget.value) as JobStatus);
              setPages([""]);
            }}
          >
            <option value="0">any</option>
            {statuses.map((s) => <option value={String(s)}>{statusName(s)}</option>)}
          </select>
        </label>
        <label>
          Name contains <input type="search" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </label>
      </form>
      {list.error !== undefined && <p class="error" role="alert">{message(list.error)}</p>}
      <table aria-label="Jobs">
        <thead>
          <tr><th>Job</th><th>Name</th><th>Status</th><th>Tasks</th><th>Submitted</th><th>Duration</th><th>Restarts</th></tr>
        </thead>
        <tbody>
          {shown.map((j) => (
            <tr key={j.jobId} data-job={j.jobId}>
              <td><a href={`#/jobs/${encodeURIComponent(j.jobId)}`}>{j.jobId}</a></td>
              <td>{j.name}</td>
              <td><StatusBadge status={j.status} /></td>
              <td>{tasks(j)}</td>
              <td>{time(j.submitTime)}</td>
              <td>{duration(j.submitTime, j.endTime)}</td>
              <td>{j.restartCount}</td>
            </tr>
          ))}
          {list.value !== undefined && shown.length === 0 && <tr><td colSpan={7}>No job here.</td></tr>}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages of jobs">
        <button disabled={pages.length === 1} onClick={() => setPages(pages.slice(0, -1))}>Previous</button>
        <span>page {pages.length}</span>
        <button disabled={!list.value?.nextPageToken} onClick={() => setPages([...pages, list.value!.nextPageToken])}>Next</button>
      </nav>
    </>
  );
}
