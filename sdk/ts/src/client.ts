// The jobplane client: submit, watch, wait and cancel jobs, and list and
// take their checkpoints and savepoints, through a cluster's
// DispatcherService, following its leader.

import { randomBytes } from "node:crypto";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client as ConnectClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type { SavepointInfo } from "../gen/jobplane/v1/checkpoint_pb.js";
import { DispatcherService, type ListCheckpointsResponse } from "../gen/jobplane/v1/dispatcher_service_pb.js";
import { ErrorReason } from "../gen/jobplane/v1/error_pb.js";
import { JobGraphSchema, type JobGraph } from "../gen/jobplane/v1/job_graph_pb.js";
import { JobStatus, type JobResult, type JobSummary } from "../gen/jobplane/v1/job_pb.js";
import { checkpointsError, InvalidJobError, JobplaneError, NotLeaderError, retryDelayMs, toJobplaneError, unsent } from "./errors.js";

/** ClientOptions configures a Client. Every field is optional. */
export interface ClientOptions {
  /** The HTTP version to speak: "1.1" (default) or "2" (h2c, or TLS for https URLs). */
  httpVersion?: "1.1" | "2";
  /**
   * How long a call may keep failing with retryable errors (UNAVAILABLE,
   * no leader, a connection lost) before it gives up, counted from its
   * first failure since it last got an answer. Default 60 000 ms. A
   * refusal that carries a google.rpc.RetryInfo (a cluster's submission
   * rate limit) is retried after the delay it asks when that fits in the
   * same budget, and thrown at once otherwise (`retryDelayMs(err)` reads
   * the delay).
   */
  retryMaxElapsedMs?: number;
  /** The first pause between retries, doubling up to 2 s. Default 100 ms. */
  retryInitialBackoffMs?: number;
  /**
   * The bearer token sent with every call (`Authorization: Bearer ...`),
   * for a cluster that authenticates its clients: a static token or a
   * JWT, or a function asked before each call (to read a file or refresh
   * a JWT). Send tokens over https:// only. Default: none.
   */
  token?: string | (() => string | Promise<string>);
}

/** CallOptions bound one call. */
export interface CallOptions {
  /** Aborts the call (and its retries). */
  signal?: AbortSignal;
}

/** SubmitOptions configure Client.submit. */
export interface SubmitOptions extends CallOptions {
  /** The job's id: 1 to 64 characters from [A-Za-z0-9_-]. Default: newJobId(). */
  jobId?: string;
}

/** SavepointOptions configure Client.triggerSavepoint. */
export interface SavepointOptions extends CallOptions {
  /**
   * Cancel the job once its savepoint is durable (stop with savepoint):
   * the job ends CANCELED, and a job submitted with
   * config.restoreFromSavepoint naming the savepoint goes on from where it
   * stopped. Default false: the job runs on.
   */
  stop?: boolean;
}

/** SavepointsOptions configure Client.savepoints. */
export interface SavepointsOptions extends CallOptions {
  /** The most savepoints one call asks for. Default 0: the server's choice (100). */
  pageSize?: number;
}

/** Submitted is what Client.submit returns. */
export interface Submitted {
  /** The job's id. */
  jobId: string;
  /** True if this submission created the job; false for a repeat of an existing one. */
  created: boolean;
  /** The job's status as the submission left it. */
  status: JobStatus;
}

/** The job graph as a message or as the plain object that initializes one. */
export type JobGraphInit = JobGraph | MessageInitShape<typeof JobGraphSchema>;

const jobIdPattern = /^[A-Za-z0-9_-]{1,64}$/;

/** newJobId returns a new random job id: 128 bits in lowercase hex, as the Go SDK makes them. */
export function newJobId(): string {
  return randomBytes(16).toString("hex");
}

/** isGloballyTerminal reports whether a job in this status has ended for good: FINISHED, FAILED or CANCELED. */
export function isGloballyTerminal(s: JobStatus): boolean {
  return s === JobStatus.FINISHED || s === JobStatus.FAILED || s === JobStatus.CANCELED;
}

/** bearer returns an interceptor that sends token on every call. */
function bearer(token: string | (() => string | Promise<string>)): Interceptor {
  return (next) => async (req) => {
    const t = typeof token === "string" ? token : await token();
    req.header.set("Authorization", `Bearer ${t}`);
    return next(req);
  };
}

/** How long one GetJobResult call of wait lasts before wait calls again. */
const waitChunkMs = 5 * 60 * 1000;

/** The longest pause before a failed client heartbeat is sent again. */
const heartbeatRetryMs = 500;

/**
 * Client talks to a jobplane cluster's DispatcherService over the Connect
 * protocol (HTTP/1.1 by default, or HTTP/2). It is given one or more of
 * the cluster's URLs, calls the one that led last, follows NOT_LEADER
 * answers to the leader they name, and moves to the next URL when one does
 * not answer. Every call it makes but triggerSavepoint is safe to repeat
 * (submission is idempotent by job id), so it retries UNAVAILABLE answers
 * and lost connections with a backoff, bounded by retryMaxElapsedMs;
 * triggerSavepoint is retried only where the cluster certainly did
 * nothing. Errors are thrown as the JobplaneError classes of errors.ts.
 */
export class Client {
  private readonly urls: string[];
  private readonly opts: Required<Omit<ClientOptions, "token">> & Pick<ClientOptions, "token">;
  private readonly clients = new Map<string, ConnectClient<typeof DispatcherService>>();
  private readonly sessions: Http2SessionManager[] = [];
  private current: string;

  /** Creates a client of the cluster at these base URLs (e.g. "http://127.0.0.1:8080"). Throws if none is given. */
  constructor(urls: string | string[], options: ClientOptions = {}) {
    this.urls = (Array.isArray(urls) ? urls : [urls]).map((u) => u.replace(/\/+$/, ""));
    if (this.urls.length === 0 || this.urls.some((u) => !/^https?:\/\/[^/]+$/.test(u))) {
      throw new TypeError(`jobplane: want one or more base URLs such as http://host:port, got ${JSON.stringify(urls)}`);
    }
    this.opts = { httpVersion: "1.1", retryMaxElapsedMs: 60_000, retryInitialBackoffMs: 100, ...options };
    this.current = this.urls[0];
  }

  /** The URL the client calls first: the leader as last learnt. */
  get leader(): string {
    return this.current;
  }

  /** dispatcher returns the generated DispatcherService client of one URL, for calls this class does not wrap. */
  dispatcher(url: string = this.current): ConnectClient<typeof DispatcherService> {
    let c = this.clients.get(url);
    if (c === undefined) {
      let sessionManager: Http2SessionManager | undefined;
      if (this.opts.httpVersion === "2") {
        sessionManager = new Http2SessionManager(url);
        this.sessions.push(sessionManager);
      }
      const transport = createConnectTransport({
        baseUrl: url,
        httpVersion: this.opts.httpVersion,
        sessionManager,
        interceptors: this.opts.token === undefined ? [] : [bearer(this.opts.token)],
      });
      c = createClient(DispatcherService, transport);
      this.clients.set(url, c);
    }
    return c;
  }

  /** close releases the client's HTTP/2 sessions; HTTP/1.1 connections close when idle. */
  close(): void {
    for (const s of this.sessions) s.abort();
    this.sessions.length = 0;
    this.clients.clear();
  }

  /**
   * submit submits a job and resolves once the cluster persisted it. The
   * job id is options.jobId or a new one; every retry sends the same id, so
   * the job is created at most once. Throws InvalidJobError (the graph or
   * id is invalid: see its violations) and DuplicateJobError (the id is
   * taken by another graph).
   */
  async submit(graph: JobGraphInit, options: SubmitOptions = {}): Promise<Submitted> {
    const jobId = options.jobId ?? newJobId();
    if (!jobIdPattern.test(jobId)) {
      const description = "want 1 to 64 characters from [A-Za-z0-9_-]";
      const ce = new ConnectError(`invalid argument: job_id: ${description}`, Code.InvalidArgument);
      throw new InvalidJobError(ce, ErrorReason.INVALID_ARGUMENT, {}, [{ field: "job_id", description }]);
    }
    const jobGraph = create(JobGraphSchema, graph as MessageInitShape<typeof JobGraphSchema>);
    const resp = await this.call(options.signal, (d, signal) => d.submitJob({ jobId, jobGraph }, { signal }));
    return { jobId: resp.jobId || jobId, created: resp.created, status: resp.status };
  }

  /**
   * wait resolves with the job's result once it has ended for good,
   * following the leader meanwhile; bound it with options.signal. A job
   * that ended FAILED or CANCELED is no error: look at the result's status.
   */
  async wait(jobId: string, options: CallOptions = {}): Promise<JobResult> {
    const detach = this.attach(jobId, options);
    try {
      return await this.waitResult(jobId, options);
    } finally {
      await detach();
    }
  }

  private async waitResult(jobId: string, options: CallOptions): Promise<JobResult> {
    for (;;) {
      const result = await this.call(options.signal, async (d, signal) => {
        const chunk = AbortSignal.any([signal, AbortSignal.timeout(waitChunkMs)]);
        try {
          return (await d.getJobResult({ jobId, wait: true }, { signal: chunk })).result;
        } catch (e) {
          if (chunk.aborted && !signal.aborted) return undefined; // the chunk ended: wait again
          throw e;
        }
      });
      if (result !== undefined) return result;
    }
  }

  /**
   * result resolves with the result of a job that has ended for good, as
   * the cluster keeps it in its HA store (also after a restart or a change
   * of leader): its status and failure, the values its subtasks' finished
   * attempts returned (values, in vertex then subtask order) and its
   * accumulators (each summed over one finished attempt per subtask). It
   * does not wait: a job that has not ended throws JobNotTerminalError
   * (wait waits), an unknown one JobNotFoundError.
   */
  async result(jobId: string, options: CallOptions = {}): Promise<JobResult> {
    const resp = await this.call(options.signal, (d, signal) => d.getJobResult({ jobId }, { signal }));
    if (!resp.result) throw new Error(`jobplane: GetJobResult answered no result for job ${jobId}`);
    return resp.result;
  }

  /**
   * cancel cancels the job and resolves with its status then: CANCELLING,
   * or CANCELED once it ended. Cancelling a cancelled job again is no
   * error; one that FINISHED or FAILED throws JobTerminalError.
   */
  async cancel(jobId: string, options: CallOptions = {}): Promise<JobStatus> {
    const resp = await this.call(options.signal, (d, signal) => d.cancelJob({ jobId }, { signal }));
    return resp.status;
  }

  /**
   * watch yields the job's summary as its status changes, from its current
   * one, until a globally terminal one (which it yields last), resuming
   * the stream where it broke off across leader changes. A restart is a
   * change too (a server of contract 1.2 sends one when the restart count
   * grows, also while the job stays RUNNING; restarts faster than the loop
   * reads may come as one). Leaving the loop (break) closes the stream.
   */
  async *watch(jobId: string, options: CallOptions = {}): AsyncGenerator<JobSummary, void, undefined> {
    const detach = this.attach(jobId, options);
    try {
      yield* this.watchStream(jobId, options);
    } finally {
      await detach();
    }
  }

  /**
   * attach sends the job's client heartbeats (ReportClientHeartbeat) until
   * the returned function is called or options.signal aborts. A job whose
   * JobConfig sets client_heartbeat_timeout (an attached job) is canceled
   * by the cluster when no heartbeat arrives for that long: attach keeps
   * it alive while this client is, at a third of that timeout. For a
   * detached or unknown job it makes one call and stops. wait and watch
   * attach by themselves while they run.
   */
  attach(jobId: string, options: CallOptions = {}): () => Promise<void> {
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const beats = (async () => {
      let intervalMs = 0; // a third of the job's timeout, once known
      while (!signal.aborted) {
        const url = this.current;
        let pause = intervalMs;
        try {
          const call = AbortSignal.any([signal, AbortSignal.timeout(intervalMs > 0 ? intervalMs : 10_000)]);
          const resp = await this.dispatcher(url).reportClientHeartbeat({ jobId }, { signal: call });
          const timeoutMs = resp.timeout ? Number(resp.timeout.seconds) * 1000 + resp.timeout.nanos / 1e6 : 0;
          if (timeoutMs <= 0) return; // a detached job
          intervalMs = pause = Math.max(1, Math.floor(timeoutMs / 3));
        } catch (e) {
          if (signal.aborted) return;
          const typed = toJobplaneError(e);
          if (typed instanceof JobplaneError && (typed.code === Code.NotFound || typed.code === Code.InvalidArgument)) return;
          if (typed instanceof NotLeaderError && typed.leaderAddress !== "") this.follow(url, typed.leaderAddress);
          else if (!(typed instanceof JobplaneError && typed.reason !== ErrorReason.UNSPECIFIED)) this.follow(url, "");
          pause = Math.min(intervalMs || heartbeatRetryMs, heartbeatRetryMs);
        }
        await sleep(pause, signal).catch(() => {});
      }
    })();
    return async () => {
      stop.abort();
      await beats;
    };
  }

  /**
   * checkpoints resolves with the job's completed checkpoints that the
   * cluster's HA store keeps (the newest `retained` of its
   * config.checkpoints), in id order, and its checkpoint statistics
   * (`stats`: counts, the latest, what it restored from; unset while no
   * JobMaster runs the job). A job without checkpoints has neither.
   * Throws JobNotFoundError for an unknown job and
   * CheckpointsUnsupportedError when the server keeps no checkpoints.
   */
  async checkpoints(jobId: string, options: CallOptions = {}): Promise<ListCheckpointsResponse> {
    return this.call(options.signal, (d, signal) => d.listCheckpoints({ jobId }, { signal })).catch(rethrowCheckpoints);
  }

  /**
   * triggerSavepoint takes a savepoint of a running job and resolves with
   * it once it is durable: every running subtask gives its state, and the
   * states are kept until deleteSavepoint, whatever becomes of the job.
   * Its savepointId is what config.restoreFromSavepoint names. With
   * options.stop the job is then canceled.
   *
   * The call is not idempotent (a repeat takes a second savepoint, or
   * finds a stopped job ending), so it is retried only where the cluster
   * certainly did nothing: a NOT_LEADER answer, a connection that could
   * not be made. A failure whose outcome is unknown (no answer, a
   * connection cut, the leader's own UNAVAILABLE) is thrown at once: the
   * savepoint may or may not have been taken (savepoints(jobId) lists the
   * job's), and with stop the job may be ending.
   *
   * Throws JobNotFoundError; JobTerminalError for a job that is ending or
   * has ended; SavepointFailedError when the savepoint could not be taken
   * (the job runs on; try again once all its subtasks run);
   * CheckpointsUnsupportedError.
   */
  async triggerSavepoint(jobId: string, options: SavepointOptions = {}): Promise<SavepointInfo> {
    const stop = options.stop ?? false;
    const resp = await this.call(options.signal, (d, signal) => d.triggerSavepoint({ jobId, stop }, { signal }), false).catch(
      rethrowCheckpoints,
    );
    if (resp.savepoint === undefined) throw new Error("jobplane: TriggerSavepoint answered without its savepoint");
    return resp.savepoint;
  }

  /**
   * savepoints yields the savepoints the cluster keeps, in savepoint id
   * order, reading a page at a time as the loop goes: only jobId's unless
   * it is "" or omitted (whether or not that job still exists). Each page
   * is retried as any call; an error ends the loop by throwing
   * (CheckpointsUnsupportedError when the server keeps no savepoints).
   */
  async *savepoints(jobId = "", options: SavepointsOptions = {}): AsyncGenerator<SavepointInfo, void, undefined> {
    const pageSize = options.pageSize ?? 0;
    let pageToken = "";
    do {
      const page = await this.call(options.signal, (d, signal) => d.listSavepoints({ jobId, pageSize, pageToken }, { signal })).catch(
        rethrowCheckpoints,
      );
      yield* page.savepoints;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /**
   * deleteSavepoint deletes a savepoint. Deleting one that does not exist
   * (or no longer does) is no error; jobs that restored from it run on.
   * Throws CheckpointsUnsupportedError when the server keeps no savepoints.
   */
  async deleteSavepoint(savepointId: string, options: CallOptions = {}): Promise<void> {
    await this.call(options.signal, (d, signal) => d.deleteSavepoint({ savepointId }, { signal })).catch(rethrowCheckpoints);
  }

  private async *watchStream(jobId: string, options: CallOptions): AsyncGenerator<JobSummary, void, undefined> {
    let resumeToken = "";
    let last: JobSummary | undefined;
    const retry = this.retrier(options.signal);
    for (;;) {
      const url = this.current;
      const ac = new AbortController();
      const signal = options.signal ? AbortSignal.any([options.signal, ac.signal]) : ac.signal;
      try {
        for await (const msg of this.dispatcher(url).watchJob({ jobId, resumeToken }, { signal })) {
          if (msg.event.case !== "job") continue; // a heartbeat
          const job = msg.event.value;
          retry.progress();
          resumeToken = msg.resumeToken;
          if (msg.coalesced && last && job.status === last.status && job.restartCount === last.restartCount) continue;
          last = job;
          yield job;
          if (isGloballyTerminal(job.status)) return;
        }
      } catch (e) {
        await retry.next(url, e);
        continue;
      } finally {
        ac.abort();
      }
      // The stream ended without a terminal status: the server went away.
      await retry.next(url, new ConnectError("watch stream ended", Code.Unavailable));
    }
  }

  /**
   * call runs fn at the leader until it succeeds, following NOT_LEADER and
   * retrying what may be retried. A call that is not idempotent is tried
   * again only where the earlier attempt certainly did nothing (see
   * Retrier.next).
   */
  private async call<T>(
    signal: AbortSignal | undefined,
    fn: (d: ConnectClient<typeof DispatcherService>, signal: AbortSignal) => Promise<T>,
    idempotent = true,
  ): Promise<T> {
    const retry = this.retrier(signal, idempotent);
    for (;;) {
      const url = this.current;
      try {
        return await fn(this.dispatcher(url), signal ?? new AbortController().signal);
      } catch (e) {
        await retry.next(url, e);
      }
    }
  }

  private retrier(signal: AbortSignal | undefined, idempotent = true): Retrier {
    const follow = (url: string, address: string) => this.follow(url, address);
    return new Retrier(follow, signal, this.opts.retryInitialBackoffMs, this.opts.retryMaxElapsedMs, idempotent);
  }

  /** follow makes address the URL to call, or the next one of the list when address is empty. */
  private follow(failedUrl: string, address: string): void {
    if (address !== "") {
      this.current = address.replace(/\/+$/, "");
      return;
    }
    if (this.current !== failedUrl) return; // already moved on
    const i = this.urls.indexOf(failedUrl);
    this.current = this.urls[(i + 1) % this.urls.length];
  }
}

/**
 * The codes of a call whose connection broke (or that a proxy ended) when
 * they come without a jobplane reason: a jobplane handler's own answers
 * with these codes carry one. Node reports a connection reset (a server
 * that died, a proxy that hung up) as ABORTED, an HTTP/2 stream reset
 * as CANCELED or INTERNAL, an answer cut short as INTERNAL or UNKNOWN.
 * The caller's own abort is told apart by its signal.
 */
const transportCodes: ReadonlySet<Code> = new Set([Code.Unknown, Code.Internal, Code.Aborted, Code.Canceled]);

/** Retrier paces the retries of one call and decides which errors are retried. */
class Retrier {
  private firstFailure = 0;
  private pause: number;

  constructor(
    private readonly follow: (failedUrl: string, address: string) => void,
    private readonly signal: AbortSignal | undefined,
    private readonly initial: number,
    private readonly maxElapsed: number,
    /** False for a call that must not be repeated once it may have reached a handler. */
    private readonly idempotent: boolean,
  ) {
    this.pause = initial;
  }

  /** progress records that the call got an answer: the retry budget starts again. */
  progress(): void {
    this.firstFailure = 0;
    this.pause = this.initial;
  }

  /** next throws err as a JobplaneError unless it is retryable; otherwise it moves on and waits. */
  async next(url: string, err: unknown): Promise<void> {
    const typed = toJobplaneError(err);
    if (this.signal?.aborted) throw typed;
    const now = Date.now();
    if (this.firstFailure === 0) this.firstFailure = now;
    if (!(typed instanceof JobplaneError) || now - this.firstFailure > this.maxElapsed) throw typed;
    const delay = retryDelayMs(typed);
    if (delay !== undefined) {
      // The server asks for the call again after delay (a rate limit):
      // wait that long, within the retry budget.
      if (now + delay - this.firstFailure > this.maxElapsed) throw typed;
      await sleep(delay, this.signal);
      return;
    }
    if (!this.idempotent && !(typed instanceof NotLeaderError) && !unsent(err)) {
      // Not a refusal that did nothing (NOT_LEADER, a delay asked for, a
      // connection never made): the attempt may have taken effect, and a
      // repeat could take it again.
      throw typed;
    }
    if (typed instanceof NotLeaderError) {
      const moved = typed.leaderAddress !== "" && typed.leaderAddress !== url;
      this.follow(url, typed.leaderAddress);
      if (moved) return; // straight to the leader, no pause
    } else if (typed.code === Code.Unavailable || typed.code === Code.DeadlineExceeded) {
      // Without a reason nothing answered (or a proxy did): try the next URL.
      if (typed.reason === ErrorReason.UNSPECIFIED) this.follow(url, "");
    } else if (!(typed.reason === ErrorReason.UNSPECIFIED && transportCodes.has(typed.code))) {
      throw typed; // an answer from a handler: final
    } else {
      this.follow(url, ""); // the connection broke mid-call
    }
    await sleep(this.pause, this.signal);
    this.pause = Math.min(this.pause * 2, 2000);
  }
}

/** rethrowCheckpoints throws a checkpoint or savepoint call's error, UNIMPLEMENTED as CheckpointsUnsupportedError. */
function rethrowCheckpoints(err: unknown): never {
  throw checkpointsError(err);
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
