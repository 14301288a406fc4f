// Typed errors decoded from the error details that jobplane servers send
// (proto/jobplane/v1/error.proto): every error a jobplane handler answers
// carries one google.rpc.ErrorInfo of domain "jobplane" whose reason is an
// ErrorReason's name without its prefix, and, for some reasons, a typed
// detail beside it.

import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { ErrorReason, NotLeaderDetailsSchema, StaleTokenDetailsSchema } from "../gen/jobplane/v1/error_pb.js";
import type { FencingToken } from "../gen/jobplane/v1/leadership_pb.js";

/** The ErrorInfo domain of every jobplane error. */
export const ERROR_DOMAIN = "jobplane";

/**
 * JobplaneError is an error answered by a jobplane server (or, with reason
 * ERROR_REASON_UNSPECIFIED, by something in front of it): its code, its
 * reason and its ErrorInfo metadata. The more specific classes below extend
 * it; `cause` is the ConnectError it was decoded from.
 */
export class JobplaneError extends Error {
  /** The gRPC / Connect status code. */
  readonly code: Code;
  /** The reason from the jobplane ErrorInfo; UNSPECIFIED when there is none. */
  readonly reason: ErrorReason;
  /** The ErrorInfo metadata (snake_case keys, string values). */
  readonly metadata: Readonly<Record<string, string>>;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause.message, { cause });
    this.name = new.target.name;
    this.code = cause.code;
    this.reason = reason;
    this.metadata = metadata;
  }
}

/**
 * NotLeaderError (UNAVAILABLE, NOT_LEADER): the server does not lead the
 * election that owns the call; `leaderAddress` is the leader's base URL
 * when the server knows it. The Client follows it by itself.
 */
export class NotLeaderError extends JobplaneError {
  /** The election, e.g. "jobmanager". */
  readonly election: string;
  /** The leader's base URL, or "" when unknown. */
  readonly leaderAddress: string;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    const d = cause.findDetails(NotLeaderDetailsSchema)[0];
    this.election = d?.leader?.election || metadata["election"] || "";
    this.leaderAddress = d?.leader?.address || metadata["leader_address"] || "";
  }
}

/**
 * StaleTokenError (ABORTED, STALE_FENCING_TOKEN): the call carried a
 * fencing token older than the receiver's current one; nothing was done.
 */
export class StaleTokenError extends JobplaneError {
  /** The election of the refused token, e.g. "job/<id>". */
  readonly election: string;
  /** The current grant as the receiver knows it, if it does. */
  readonly current: FencingToken | undefined;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    const d = cause.findDetails(StaleTokenDetailsSchema)[0];
    this.election = d?.election || metadata["election"] || "";
    this.current = d?.current;
  }
}

/**
 * DuplicateJobError (ALREADY_EXISTS, JOB_ALREADY_EXISTS): a job with this
 * id exists with another plan.
 */
export class DuplicateJobError extends JobplaneError {
  /** The job's id. */
  readonly jobId: string;
  /** Whether the existing job has ended for good (it has a job result). */
  readonly globallyTerminated: boolean;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    this.jobId = metadata["job_id"] ?? "";
    this.globallyTerminated = metadata["globally_terminated"] === "true";
  }
}

/** Violation is one offending field of a request. */
export interface Violation {
  /** The field's path in proto names, e.g. "job_graph.vertices[0].id". */
  readonly field: string;
  /** What is wrong with it. */
  readonly description: string;
}

/**
 * InvalidJobError (INVALID_ARGUMENT): the request was refused unread, one
 * violation per offending field (google.rpc.BadRequest); nothing was done.
 */
export class InvalidJobError extends JobplaneError {
  /** The offending fields. */
  readonly violations: readonly Violation[];

  /** Decodes the violations from cause's BadRequest details, unless they are given. */
  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>, violations?: Violation[]) {
    super(cause, reason, metadata);
    this.violations =
      violations ??
      cause.findDetails(BadRequestSchema).flatMap((br) => br.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
  }
}

/**
 * InvokableNotOfferedError (FAILED_PRECONDITION, INVOKABLE_NOT_OFFERED): the
 * new job names invokables that no TaskExecutor registered with the cluster
 * offers, so nothing was done. Submit it again once a TaskExecutor that
 * offers them has joined (a Worker that registered them, or for exec one
 * allowed to run it). A cluster with no TaskExecutor registered at all
 * accepts the job instead, and it waits. Since contract 1.2.
 */
export class InvokableNotOfferedError extends JobplaneError {
  /** The invokables not offered, in increasing order. */
  readonly invokables: readonly string[];
  /** Every invokable the registered TaskExecutors offer, in increasing order. */
  readonly offered: readonly string[];
  /** The invokable field of each vertex that needs one, e.g. "job_graph.vertices[2].invokable". */
  readonly violations: readonly Violation[];

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    const list = (s: string | undefined) => (s ? s.split(",") : []);
    this.invokables = list(metadata["invokables"]);
    this.offered = list(metadata["offered"]);
    this.violations = cause.findDetails(BadRequestSchema).flatMap((br) => br.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
  }
}

/** JobNotFoundError (NOT_FOUND, JOB_NOT_FOUND): no job with this id is known. */
export class JobNotFoundError extends JobplaneError {
  /** The job's id. */
  readonly jobId: string;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    this.jobId = metadata["job_id"] ?? "";
  }
}

/**
 * JobTerminalError (FAILED_PRECONDITION, JOB_TERMINAL): the job already
 * ended in a status that forbids the call (cancelling a FINISHED job).
 */
export class JobTerminalError extends JobplaneError {}

/**
 * JobNotTerminalError (FAILED_PRECONDITION, JOB_NOT_TERMINAL): the job has
 * not ended, so it has no result yet.
 */
export class JobNotTerminalError extends JobplaneError {}

/**
 * SavepointNotFoundError (NOT_FOUND, SAVEPOINT_NOT_FOUND): no savepoint has
 * this id, such as the one a submitted job's restoreFromSavepoint names.
 */
export class SavepointNotFoundError extends JobplaneError {
  /** The savepoint's id, or "" when the server did not say. */
  readonly savepointId: string;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    this.savepointId = metadata["savepoint_id"] ?? "";
  }
}

/**
 * SavepointFailedError (ABORTED, SAVEPOINT_FAILED): the savepoint could not
 * be taken, and nothing was stored: the job was not running all its
 * subtasks, a subtask declined or did not answer in time, or the store
 * refused the write (the message says which). The job runs on; try again
 * once it runs.
 */
export class SavepointFailedError extends JobplaneError {
  /** The job's id, or "" when the server did not say. */
  readonly jobId: string;

  constructor(cause: ConnectError, reason: ErrorReason, metadata: Record<string, string>) {
    super(cause, reason, metadata);
    this.jobId = metadata["job_id"] ?? "";
  }
}

/**
 * CheckpointsUnsupportedError (UNIMPLEMENTED): the server keeps no
 * checkpoints or savepoints, because its HA store does not or because it
 * predates contract 1.2. The Client's checkpoint and savepoint calls throw
 * it; toJobplaneError does not, since other calls (a Worker's
 * GetTaskOutput) may be unimplemented for other reasons.
 */
export class CheckpointsUnsupportedError extends JobplaneError {}

/**
 * reasonOf returns the jobplane reason that err carries: its ErrorInfo of
 * domain "jobplane", or ERROR_REASON_UNSPECIFIED when it has none (the
 * answer of a proxy, the transport or the RPC framework).
 */
export function reasonOf(err: unknown): ErrorReason {
  if (err instanceof JobplaneError) return err.reason;
  const ce = err instanceof ConnectError ? err : undefined;
  if (ce === undefined) return ErrorReason.UNSPECIFIED;
  return info(ce).reason;
}

function info(ce: ConnectError): { reason: ErrorReason; metadata: Record<string, string> } {
  for (const d of ce.findDetails(ErrorInfoSchema)) {
    if (d.domain !== ERROR_DOMAIN) continue;
    const v = (ErrorReason as unknown as Record<string, number | undefined>)[d.reason];
    if (typeof v === "number") return { reason: v as ErrorReason, metadata: { ...d.metadata } };
  }
  return { reason: ErrorReason.UNSPECIFIED, metadata: {} };
}

/**
 * retryDelayMs returns the delay, in milliseconds, after which the server
 * asks the call to be made again (the google.rpc.RetryInfo of a refusal
 * at a rate limit, such as SUBMIT_RATE_EXCEEDED), or undefined when the
 * error carries none.
 */
export function retryDelayMs(err: unknown): number | undefined {
  const ce = err instanceof JobplaneError && err.cause instanceof ConnectError ? err.cause : ConnectError.from(err);
  for (const d of ce.findDetails(RetryInfoSchema)) {
    if (d.retryDelay === undefined) continue;
    return Number(d.retryDelay.seconds) * 1000 + Math.ceil(d.retryDelay.nanos / 1e6);
  }
  return undefined;
}

/**
 * checkpointsError is toJobplaneError for the checkpoint and savepoint
 * calls, where UNIMPLEMENTED, with or without a reason, means that the
 * server keeps none: a CheckpointsUnsupportedError.
 */
export function checkpointsError(err: unknown): unknown {
  const typed = toJobplaneError(err);
  if (!(typed instanceof JobplaneError) || typed.code !== Code.Unimplemented || typed instanceof CheckpointsUnsupportedError) return typed;
  return new CheckpointsUnsupportedError(typed.cause as ConnectError, typed.reason, { ...typed.metadata });
}

/**
 * unsent reports whether err says that the request reached no server: the
 * connection could not be made (refused, its host not resolved, its
 * connect timed out). Only then is a call that is not idempotent certainly
 * without effect.
 */
export function unsent(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 16; e = e.cause, depth++) {
    if (e instanceof JobplaneError || e instanceof ConnectError) continue;
    const { code, syscall } = e as { code?: unknown; syscall?: unknown };
    if (syscall === "connect" || syscall === "getaddrinfo") return true;
    if (code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN") return true;
    // Node tries each address of a name in turn (autoSelectFamily): none connected.
    if (e instanceof AggregateError) return e.errors.length > 0 && e.errors.every((x) => unsent(x));
    return false;
  }
  return false;
}

/**
 * toJobplaneError turns any error of a call into the JobplaneError class
 * that its reason names (a plain JobplaneError for the others); an error
 * that is not a ConnectError is returned unchanged.
 */
export function toJobplaneError(err: unknown): unknown {
  if (err instanceof JobplaneError) return err;
  const ce = ConnectError.from(err);
  if (!(err instanceof ConnectError) && ce.code === Code.Unknown && !(err instanceof Error)) return err;
  const { reason, metadata } = info(ce);
  switch (reason) {
    case ErrorReason.NOT_LEADER:
      return new NotLeaderError(ce, reason, metadata);
    case ErrorReason.STALE_FENCING_TOKEN:
      return new StaleTokenError(ce, reason, metadata);
    case ErrorReason.JOB_ALREADY_EXISTS:
      return new DuplicateJobError(ce, reason, metadata);
    case ErrorReason.JOB_NOT_FOUND:
      return new JobNotFoundError(ce, reason, metadata);
    case ErrorReason.JOB_TERMINAL:
      return new JobTerminalError(ce, reason, metadata);
    case ErrorReason.JOB_NOT_TERMINAL:
      return new JobNotTerminalError(ce, reason, metadata);
    case ErrorReason.SAVEPOINT_NOT_FOUND:
      return new SavepointNotFoundError(ce, reason, metadata);
    case ErrorReason.SAVEPOINT_FAILED:
      return new SavepointFailedError(ce, reason, metadata);
    case ErrorReason.INVOKABLE_NOT_OFFERED:
      return new InvokableNotOfferedError(ce, reason, metadata);
  }
  if (ce.code === Code.InvalidArgument) return new InvalidJobError(ce, reason, metadata);
  return new JobplaneError(ce, reason, metadata);
}
