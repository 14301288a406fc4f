// The dashboard's connection to the cluster: a client of the public
// DispatcherService, generated from the protos, over the Connect protocol
// (HTTP/1.1 fetch, as browsers speak it), with the bearer token the user
// entered kept in the browser session.

import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { DispatcherService } from "../gen/jobplane/v1/dispatcher_service_pb.js";
import { NotLeaderDetailsSchema } from "../gen/jobplane/v1/error_pb.js";
import { ExecutionState } from "../gen/jobplane/v1/execution_pb.js";
import { JobStatus } from "../gen/jobplane/v1/job_pb.js";

const tokenKey = "jobplane.token";

/** The bearer token of this browser session, or "" when none was entered. */
export function token(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

/** Keeps t as the session's bearer token ("" forgets it). */
export function setToken(t: string): void {
  if (t === "") sessionStorage.removeItem(tokenKey);
  else sessionStorage.setItem(tokenKey, t);
}

const bearer: Interceptor = (next) => (req) => {
  const t = token();
  if (t !== "") req.header.set("Authorization", "Bearer " + t);
  return next(req);
};

export type Dispatcher = Client<typeof DispatcherService>;

/** A DispatcherService client of the server at baseUrl (default: the page's own). */
export function dispatcher(baseUrl: string = location.origin): Dispatcher {
  return createClient(DispatcherService, createConnectTransport({ baseUrl, interceptors: [bearer] }));
}

/** needsToken tells whether err asks for a (new) bearer token. */
export function needsToken(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unauthenticated;
}

/**
 * notLeader returns, for an error that says the server does not lead, the
 * leader's address as that server knows it ("" when it does not know);
 * undefined for any other error.
 */
export function notLeader(err: unknown): string | undefined {
  if (!(err instanceof ConnectError) || err.code !== Code.Unavailable) return undefined;
  const said = err.findDetails(ErrorInfoSchema).some((d) => d.domain === "jobplane" && d.reason === "NOT_LEADER");
  if (!said) return undefined;
  return err.findDetails(NotLeaderDetailsSchema)[0]?.leader?.address ?? "";
}

/** message gives err as one line for the page. */
export function message(err: unknown): string {
  if (err instanceof ConnectError) return `${Code[err.code]}: ${err.rawMessage}`;
  return String(err);
}

/** The name of a job status without its prefix: "RUNNING". */
export function statusName(s: JobStatus): string {
  return (JobStatus[s] ?? String(s)).replace(/^JOB_STATUS_/, "");
}

/** The name of an execution state without its prefix: "DEPLOYING". */
export function stateName(s: ExecutionState): string {
  return (ExecutionState[s] ?? String(s)).replace(/^EXECUTION_STATE_/, "");
}

/** The statuses a job ends in. */
export function terminal(s: JobStatus): boolean {
  return s === JobStatus.FINISHED || s === JobStatus.FAILED || s === JobStatus.CANCELED;
}

/** Every job status a user can filter by, in the order of a job's life. */
export const statuses: JobStatus[] = [
  JobStatus.INITIALIZING, JobStatus.CREATED, JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.FAILING,
  JobStatus.CANCELLING, JobStatus.SUSPENDED, JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED,
];

/** A timestamp as local date and time to the second; "—" when unset. */
export function time(t: Timestamp | undefined): string {
  if (t === undefined) return "—";
  const d = timestampDate(t);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** How long from a to b (b unset: now), as "1h 2m", "3m 4s" or "5.6 s". */
export function duration(a: Timestamp | undefined, b?: Timestamp): string {
  if (a === undefined) return "—";
  const ms = (b === undefined ? Date.now() : timestampDate(b).getTime()) - timestampDate(a).getTime();
  if (ms < 60_000) return `${(Math.max(ms, 0) / 1000).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
