// A TaskExecutor in node: it serves TaskExecutorService
// (proto/jobplane/cluster/v1), registers its slots with the cluster's
// ResourceManager leader, and runs the user functions registered by name
// in the slots that JobMasters deploy attempts to.

import { randomBytes } from "node:crypto";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { durationMs, timestampNow, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client as ConnectClient, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { JobMasterService, TaskExecutorJobAction, TaskExecutorJobReportSchema, type TaskExecutorJobReport } from "../gen/jobplane/cluster/v1/job_master_service_pb.js";
import { ResourceManagerService } from "../gen/jobplane/cluster/v1/resource_manager_service_pb.js";
import { SlotReportSchema, type SlotReport } from "../gen/jobplane/cluster/v1/slot_pb.js";
import {
  AdoptedJobSchema,
  CheckpointAckSchema,
  HeldAttemptSchema,
  TaskExecutorService,
  type AdoptedJob,
  type CheckpointAck,
  type RequestSlotRequest,
  type SlotRequest,
  SubmitTaskRequestSchema,
  type SubmitTaskRequest,
  type TaskDeployment,
  type TriggerCheckpointRequest,
  TriggerCheckpointResponseSchema,
  type TriggerCheckpointResponse,
} from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { HAStoreService } from "../gen/jobplane/hastore/v1/ha_store_service_pb.js";
import { SubtaskStateSchema, type SubtaskState } from "../gen/jobplane/v1/checkpoint_pb.js";
import { ErrorReason, type ItemError } from "../gen/jobplane/v1/error_pb.js";
import {
  ExecutionState,
  TaskExecutionStatusSchema,
  type ExecutionAttemptId,
  type TaskExecutionStatus,
} from "../gen/jobplane/v1/execution_pb.js";
import { FencingTokenSchema, type FencingToken } from "../gen/jobplane/v1/leadership_pb.js";
import { reasonOf } from "./errors.js";
import { apiError, badRequest, itemError, staleToken, type Field } from "./fence.js";
import { DEFAULT_OUTPUT_READ, MAX_OUTPUT_READ, Outputs, logLine, type OutputKey } from "./output.js";

/**
 * State is a subtask's part of a checkpoint: the bytes its task gives, or
 * a pointer to state it wrote elsewhere. Set at most one of the two; a
 * State with neither means the task keeps nothing.
 */
export interface State {
  /**
   * The state itself, kept in the HA store with the checkpoint (the
   * JobManager limits its size: ServerLimits.max_inline_state_bytes, 64
   * KiB by default). An empty array is kept as empty state.
   */
  data?: Uint8Array;
  /**
   * Names state the task wrote elsewhere, such as a file or object URL
   * (1 to 2,048 bytes); jobplane keeps it and hands it back, and never
   * reads it. Empty means none.
   */
  pointer?: string;
}

/**
 * CheckpointFunction gives a task's state for a checkpoint. It is called
 * while the attempt runs, once per checkpoint id, beside the task
 * function; signal aborts when the attempt is canceled or ends. Throwing
 * (or rejecting) declines the checkpoint, which is then discarded, as
 * does a State with both data and pointer.
 */
export type CheckpointFunction = (checkpointId: bigint, signal: AbortSignal) => Promise<State> | State;

/** Task is what a task function is given: the attempt it runs and a signal that aborts when it is canceled. */
export interface Task {
  /** The job's id. */
  readonly jobId: string;
  /** The vertex's id. */
  readonly vertexId: string;
  /** The vertex's name. */
  readonly taskName: string;
  /** This subtask's index, from 0. */
  readonly subtaskIndex: number;
  /** The vertex's parallelism. */
  readonly subtasks: number;
  /** The attempt's number, from 0: it grows with each restart. */
  readonly attempt: number;
  /** The vertex's configuration, verbatim from the JobGraph. */
  readonly config: Readonly<Record<string, string>>;
  /** Aborts when the attempt is canceled (by its JobMaster, a newer one, or the worker's stop). */
  readonly signal: AbortSignal;
  /**
   * The subtask's state from the job's latest completed checkpoint (or
   * the savepoint the job was submitted to restore from), which it goes
   * on from; undefined when it starts afresh (the job's first run, or no
   * checkpoint completed yet).
   */
  readonly restored?: Readonly<State>;
  /** The checkpoint (its decimal id) or savepoint that restored comes from; "" when the subtask starts afresh. */
  readonly restoredFrom: string;
  /**
   * onCheckpoint registers fn to give the task's state whenever the job
   * checkpoints (JobConfig.checkpoints); a later call replaces it. Until
   * a task registers a function, its checkpoints keep the state it was
   * restored from (none if it started afresh).
   */
  onCheckpoint(fn: CheckpointFunction): void;
  /**
   * setValue sets the value the subtask returns when its function
   * resolves: the job's result carries it (JobResult.values). A later call
   * replaces it; the bytes are copied, and a string is encoded as UTF-8.
   * A value over WorkerOptions.maxValueBytes (the cluster's
   * ServerLimits.max_task_value_bytes, 64 KiB by default) fails the
   * attempt; the value of an attempt that fails or is canceled is dropped.
   */
  setValue(value: Uint8Array | string): void;
  /**
   * add adds delta (default 1) to the subtask's accumulator name, a
   * named counter the job's result sums over its subtasks, one finished
   * attempt each (JobResult.accumulators). A name must be 1 to 128 bytes
   * of [A-Za-z0-9_.-]; an invalid name, or more than
   * WorkerOptions.maxAccumulators names, fails the attempt when it ends.
   */
  add(name: string, delta?: number | bigint): void;
  /**
   * log writes one line to the attempt's output, as the Go TaskExecutor's
   * Task.Logger does: `time=… level=INFO msg=… key=value…`, each value
   * quoted when it holds a space, a quote or an equals sign. The output
   * is what GetTaskOutput (`jobplane logs`) serves.
   */
  log(message: string, attrs?: Record<string, unknown>): void;
  /**
   * output takes bytes (a string is encoded as UTF-8) into the attempt's
   * output, after the lines log wrote before; the Go TaskExecutor's
   * Task.Output. The worker keeps the last WorkerOptions.outputBytes
   * bytes of it (offsets count every byte written), and drops what is
   * written once the attempt ended. Writing never fails nor blocks. What
   * the function prints with console.log is not captured.
   */
  readonly output: TaskOutput;
}

/** TaskOutput is where a task writes its output (Task.output). */
export interface TaskOutput {
  /** write appends data, a string as UTF-8; it never fails, and drops the data once the attempt ended. */
  write(data: Uint8Array | string): void;
}

/** The reference limits of task results (ServerLimits.max_task_value_bytes and max_accumulators). */
export const DEFAULT_MAX_TASK_VALUE_BYTES = 64 << 10;
export const DEFAULT_MAX_ACCUMULATORS = 1000;
const ACCUMULATOR_NAME = /^[A-Za-z0-9_.-]{1,128}$/;

/**
 * TaskFunction runs one attempt: its promise resolving ends it FINISHED,
 * rejecting ends it FAILED with the error's message, and returning after
 * its signal aborted ends it CANCELED.
 */
export type TaskFunction = (task: Task) => Promise<void> | void;

/** WorkerOptions configure a Worker. */
export interface WorkerOptions {
  /**
   * Base URLs of processes serving HAStoreService (any jobmanager or
   * standalone process of the cluster): the worker follows the
   * ResourceManager's leader through the first that answers. Required.
   */
  hastore: string | string[];
  /** Slots, each running one attempt at a time. Default 4. */
  slots?: number;
  /** The TaskExecutor's id. Default "ts-" and 16 random hex digits. */
  id?: string;
  /** Loopback host to listen on. Default "127.0.0.1". */
  host?: string;
  /** Port to listen on; 0 picks a free one. Default 0. */
  port?: number;
  /** Pause before a failed registration or report is tried again. Default 100 ms. */
  retryIntervalMs?: number;
  /**
   * How long before a silent JobMaster's deadline the worker cancels its
   * job's attempts (at most a third of the JobMaster's heartbeat timeout),
   * and how long stop waits for canceled functions to return. Default
   * 1000 ms.
   */
  cancelGraceMs?: number;
  /** Receives the worker's log lines; default: none. */
  log?: (line: string) => void;
  /** The largest value a task may return (Task.setValue); a larger one fails the attempt. Default DEFAULT_MAX_TASK_VALUE_BYTES. */
  maxValueBytes?: number;
  /** The most accumulator names a task may use (Task.add); more fail the attempt. Default DEFAULT_MAX_ACCUMULATORS. */
  maxAccumulators?: number;
  /**
   * How much of each attempt's output (Task.log and Task.output) is kept:
   * its last outputBytes bytes, served by GetTaskOutput. Default
   * DEFAULT_OUTPUT_BYTES (64 KiB); negative keeps none (offsets still
   * count).
   */
  outputBytes?: number;
  /**
   * How long an attempt's output is kept after the attempt ended.
   * Default DEFAULT_OUTPUT_RETENTION_MS (10 minutes) in memory,
   * DEFAULT_OUTPUT_DISK_RETENTION_MS (24 hours) with outputDir; negative
   * forgets it as soon as the attempt ended.
   */
  outputRetentionMs?: number;
  /**
   * How many ended attempts' outputs are kept at most; the oldest are
   * forgotten first. Default DEFAULT_OUTPUT_ATTEMPTS (512) in memory, no
   * bound with outputDir (outputMaxBytes bounds them there).
   */
  outputAttempts?: number;
  /**
   * If set, the directory (created if need be) where the attempts'
   * outputs are kept instead of memory: one file per segment of
   * outputBytes bytes, named after the ids in base64url (no id can name
   * a path outside it), written through a buffer and never synced. A
   * worker started on a directory serves the outputs found there (those
   * the attempts run by a worker of the same id wrote before it
   * restarted) as ended attempts, until they expire. The files are the
   * Go TaskExecutor's (--output-dir). Default: none, in memory.
   */
  outputDir?: string;
  /**
   * Bounds the bytes the outputs take in outputDir (each file counts
   * whole 4 KiB blocks, at least one); beyond it, the outputs of the
   * attempts that ended first are removed first. Running attempts'
   * outputs are never cut. Default DEFAULT_OUTPUT_MAX_BYTES (256 MiB).
   * Ignored without outputDir.
   */
  outputMaxBytes?: number;
}

type OutputOption = "outputBytes" | "outputRetentionMs" | "outputAttempts" | "outputDir" | "outputMaxBytes";

const JOBMANAGER = "jobmanager";

/**
 * How long a call under a ResourceManager token newer than the newest seen
 * waits for the HA store to show that token as the grant of "jobmanager",
 * as the reference TaskExecutor does (its grantWait): a ResourceManager
 * calls only once the worker registered there, which follows the
 * worker's observation of its grant, so the wait is only for a watch that
 * lags the grant. It stays well below the ResourceManager's 10 s call
 * timeout, and bounds how long a forged token holds its call.
 */
const grantWaitMs = 2_000;
const jobElection = (jobId: string) => "job/" + jobId;

interface RunningTask {
  readonly req: SubmitTaskRequest;
  /** The JobMaster token the attempt runs under: the one it was deployed under, or the newer one that adopted it (AdoptAttempts). */
  token: FencingToken;
  /** The token the attempt was deployed under. */
  readonly deployed: FencingToken;
  /** Where its state changes are reported: its JobMaster's address. */
  address: string;
  /**
   * If not 0, the attempt is held for a newer JobMaster of its job to
   * adopt, and this is when (performance.now()) it stops if none does.
   */
  heldUntil: number;
  readonly abort: AbortController;
  state: ExecutionState;
  failure: string;
  ended: boolean;
  stopCause: string;
  done: Promise<void>;
  /** Aborts once the attempt is canceled or its function returned: its checkpoint functions' signal. */
  readonly ending: AbortController;
  /** The task's checkpoint function, once it registered one. */
  checkpointFn?: CheckpointFunction;
  /** The latest checkpoint the task was asked for, and its answer: a repeat of that id gets the same answer. */
  snapshot?: { id: bigint; ack: Promise<CheckpointAck> };
  /** What the task returns (setValue, add), reported only with its FINISHED state; final once its function returned. */
  value?: Uint8Array;
  accumulators: Map<string, bigint>;
  badName?: string;
  final: boolean;
  /** The report of its latest state change: the next is sent once it settled, so that its JobMaster gets them in order. */
  reporting?: Promise<void>;
}

/** statusOf is an attempt's status as every report carries it: its state, failure and, once FINISHED, its result. */
function statusOf(t: RunningTask, time?: Timestamp): TaskExecutionStatus {
  const finished = t.state === ExecutionState.FINISHED;
  return create(TaskExecutionStatusSchema, {
    attempt: t.req.attempt,
    state: t.state,
    failureMessage: t.failure,
    time,
    value: finished ? t.value : undefined,
    accumulators: finished ? Object.fromEntries(t.accumulators) : undefined,
  });
}

interface Slot {
  readonly index: number;
  allocationId: string;
  jobId: string;
  task?: RunningTask;
  freeing: boolean;
}

interface JobState {
  /** The newest JobMaster token seen for the job. */
  token?: FencingToken;
  /** The JobMaster's base URL, "" when unknown. */
  address: string;
  /** The JobMaster's heartbeat timeout; 0 while unknown. */
  timeoutMs: number;
  /** When (performance.now()) the JobMaster was last heard, as of when the call was sent. */
  contact: number;
  /** The lease the last heartbeat answer granted (performance.now()); 0 for none. */
  leaseUntil: number;
  /** When the first offer to this JobMaster was sent; 0 before. */
  offered: number;
  /** Since when (performance.now()) the job holds no slot here; 0 while it holds one. */
  idleSince: number;
  /**
   * The task lease the current JobMaster granted: in the last heartbeat
   * answer that vouched for the job, or since, in the answer to an offer
   * that registered this worker or in a deployment (OfferSlotsResponse,
   * SubmitTask(s)Request .task_lease); 0 for none. With one, the job's
   * attempts stop by contact + taskLeaseMs (neither the heartbeat timeout
   * nor leaseUntil applies), and a newer JobMaster holds the older one's
   * attempts instead of canceling them.
   */
  taskLeaseMs: number;
  /** The latest deadline (performance.now()) of the attempts the current JobMaster adopted: the job's attempts run at least until then. 0 for none. */
  adoptedUntil: number;
}

/** The stop cause of a held attempt that no JobMaster adopted by its deadline. */
const notAdopted = "held for a newer JobMaster past its task lease, and not adopted";

/** How long a job that holds nothing here is remembered (its newest token still fencing older ones), as the reference TaskExecutor does. */
const idleJobMemoryMs = 60_000;

interface OfferQueue {
  jobId: string;
  address: string;
  token: FencingToken;
  slots: { index: number; allocationId: string }[];
  sending: boolean;
}

function epochOf(t: FencingToken | undefined): bigint {
  return t?.epoch ?? 0n;
}

function sameToken(a: FencingToken | undefined, b: FencingToken | undefined): boolean {
  return epochOf(a) === epochOf(b) && (a?.sessionId ?? "") === (b?.sessionId ?? "");
}

function sameAttempt(a: ExecutionAttemptId | undefined, b: ExecutionAttemptId | undefined): boolean {
  return a?.vertexId === b?.vertexId && a?.subtaskIndex === b?.subtaskIndex && a?.attemptNumber === b?.attemptNumber;
}

function isExecTerminal(s: ExecutionState): boolean {
  return s === ExecutionState.FINISHED || s === ExecutionState.FAILED || s === ExecutionState.CANCELED;
}

/** stateOf returns the State a SubtaskState holds; undefined for none. */
function stateOf(s: SubtaskState | undefined): State | undefined {
  switch (s?.state.case) {
    case "inline":
      return { data: s.state.value };
    case "pointer":
      return { pointer: s.state.value };
  }
  return undefined;
}

/** subtaskState returns a task's state as the SubtaskState of attempt a. */
function subtaskState(a: ExecutionAttemptId | undefined, st: State | undefined): SubtaskState {
  const out = create(SubtaskStateSchema, { vertexId: a?.vertexId ?? "", subtaskIndex: a?.subtaskIndex ?? 0 });
  if (st?.pointer) out.state = { case: "pointer", value: st.pointer };
  else if (st?.data !== undefined) out.state = { case: "inline", value: st.data };
  return out;
}

function ms(d: Duration | undefined): number {
  return d === undefined ? 0 : durationMs(d);
}

/**
 * Worker is a TaskExecutor implemented in node. It serves
 * TaskExecutorService (Connect, gRPC and gRPC-Web over h2c: HTTP/2 without TLS)
 * on a loopback port, follows the ResourceManager's leader through the HA
 * store's ObserveLeader, registers and heart-beats there, offers the slots
 * the ResourceManager allocates to the jobs' JobMasters, runs the attempts
 * they deploy with the function registered under the attempt's invokable
 * name, reports every state change, and heart-beats with the JobMasters.
 *
 * Fencing follows the contract: a call with a ResourceManager token older
 * than the newest seen, or a JobMaster token older than the newest seen
 * for its job, is refused with ABORTED (STALE_FENCING_TOKEN); a newer
 * JobMaster token becomes the job's, and the attempts deployed under the
 * older one are canceled and never reported. A job whose JobMaster was not
 * heard from for its heartbeat timeout has its attempts canceled and its
 * slots freed.
 *
 * Under a task lease (the JobMaster's heartbeat answers grant one, as do,
 * from the start, its answer to the offer that registered the worker and
 * its deployments), a newer JobMaster does not cancel the older one's
 * attempts: they keep running, held, until the deadline they had under
 * their own token (which nothing extends), reporting nothing and keeping
 * their slots, for the newer JobMaster to adopt
 * (TaskExecutorService.AdoptAttempts); adopted, they run under the newer
 * token and report there. One that no JobMaster adopts by its deadline is
 * canceled and its slot freed.
 */
export class Worker {
  /** The TaskExecutor's id. */
  readonly id: string;
  private readonly functions = new Map<string, TaskFunction>();
  private readonly opts: Required<Omit<WorkerOptions, "hastore" | "id" | OutputOption>> & { hastore: string[] };
  /** The outputs of the attempts that run or ran here. */
  private readonly outputs: Outputs;
  private readonly slots: Slot[];
  private readonly jobs = new Map<string, JobState>();
  private readonly offers = new Map<string, OfferQueue>();
  private readonly jmClients = new Map<string, ConnectClient<typeof JobMasterService>>();
  private readonly sessions: Http2SessionManager[] = [];
  /** The newest ResourceManager token seen: observed as the grant of "jobmanager", or taken in a call once the grant showed it. */
  private rmToken: FencingToken | undefined;
  /** The grant of "jobmanager" last observed (undefined: no leader, or none observed yet). */
  private rmGrant: FencingToken | undefined;
  /** Whether the observation of "jobmanager" runs and has answered since it (re)started. */
  private rmWatching = false;
  /** The calls waiting for the observation to change (see checkResourceManager). */
  private readonly rmWaiters = new Set<() => void>();
  /** The HA store's clients that check JobMaster tokens (checkJobMaster), made at the first check. */
  private storeClients: ConnectClient<typeof HAStoreService>[] | undefined;
  private server: http2.Http2Server | undefined;
  private readonly h2sessions = new Set<http2.ServerHttp2Session>();
  private addr = "";
  private readonly stopping = new AbortController();
  private loops: Promise<void>[] = [];
  private hbIntervalMs = 0;
  private wakeHeartbeat: () => void = () => {};
  /** Fires at the earliest deadline of the held attempts (see scheduleHeld). */
  private heldTimer: NodeJS.Timeout | undefined;

  /**
   * Creates a worker; register functions, then start it. With outputDir,
   * it creates the directory and loads the outputs there, and throws if
   * it cannot.
   */
  constructor(options: WorkerOptions) {
    const hastore = (Array.isArray(options.hastore) ? options.hastore : [options.hastore]).map((u) => u.replace(/\/+$/, ""));
    if (hastore.length === 0) throw new TypeError("jobplane worker: want at least one hastore URL");
    this.id = options.id ?? "ts-" + randomBytes(8).toString("hex");
    this.opts = {
      slots: 4,
      host: "127.0.0.1",
      port: 0,
      retryIntervalMs: 100,
      cancelGraceMs: 1000,
      log: () => {},
      maxValueBytes: DEFAULT_MAX_TASK_VALUE_BYTES,
      maxAccumulators: DEFAULT_MAX_ACCUMULATORS,
      ...options,
      hastore,
    };
    this.outputs = new Outputs(options);
    this.slots = Array.from({ length: this.opts.slots }, (_, index) => ({ index, allocationId: "", jobId: "", freeing: false }));
  }

  /** register makes fn run the attempts of vertices whose invokable is name; call it before start. */
  register(name: string, fn: TaskFunction): this {
    if (this.server) throw new Error("jobplane worker: register functions before start");
    this.functions.set(name, fn);
    return this;
  }

  /** The base URL the worker serves TaskExecutorService at; "" before start. */
  get address(): string {
    return this.addr;
  }

  /** jobMasterToken returns the newest JobMaster token the worker has seen for a job, if any. */
  jobMasterToken(jobId: string): FencingToken | undefined {
    return this.jobs.get(jobId)?.token;
  }

  /** start listens, then registers with the ResourceManager in the background; it resolves with the worker's address. */
  async start(): Promise<string> {
    const handler = connectNodeAdapter({ routes: (router: ConnectRouter) => this.routes(router) });
    // HTTP/2 with prior knowledge (h2c), as jobplane's processes call
    // each other. (Node serves HTTP/1.1 and HTTP/2 on one cleartext port
    // only through its TLS server's ALPN.)
    const server = http2.createServer(handler);
    server.on("session", (session) => {
      this.h2sessions.add(session);
      session.once("close", () => this.h2sessions.delete(session));
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.opts.port, this.opts.host, () => resolve());
    });
    const a = server.address() as AddressInfo;
    const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
    this.addr = `http://${host}:${a.port}`;
    this.loops.push(this.followResourceManager(), this.heartbeatJobMasters());
    return this.addr;
  }

  /**
   * stop cancels every attempt, waits up to cancelGraceMs for their
   * functions to return, stops the loops and the server, and resolves once
   * they ended.
   */
  async stop(): Promise<void> {
    this.stopping.abort();
    this.wakeHeartbeat();
    clearTimeout(this.heldTimer);
    for (const s of this.slots) s.task?.abort.abort();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(this.slots.map((s) => s.task?.done)),
      new Promise((resolve) => (timer = setTimeout(resolve, this.opts.cancelGraceMs))),
    ]);
    clearTimeout(timer);
    await Promise.allSettled(this.loops);
    for (const s of this.sessions) s.abort();
    const server = this.server;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of this.h2sessions) s.destroy(); // connections clients keep open
      });
    }
  }

  private log(line: string): void {
    this.opts.log(`taskexecutor ${this.id}: ${line}`);
  }

  private transport(baseUrl: string) {
    const sessionManager = new Http2SessionManager(baseUrl);
    this.sessions.push(sessionManager);
    return createConnectTransport({ baseUrl, httpVersion: "2", sessionManager });
  }

  private jobMaster(address: string): ConnectClient<typeof JobMasterService> {
    let c = this.jmClients.get(address);
    if (!c) {
      c = createClient(JobMasterService, this.transport(address));
      this.jmClients.set(address, c);
    }
    return c;
  }

  /** sleep waits msec, or until signal (default: the worker's stop) aborts. */
  private sleep(msec: number, signal: AbortSignal = this.stopping.signal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const t = setTimeout(done, msec);
      function done() {
        clearTimeout(t);
        signal.removeEventListener("abort", done);
        resolve();
      }
      signal.addEventListener("abort", done, { once: true });
    });
  }

  // ---- the ResourceManager ----

  /** followResourceManager observes the leader of "jobmanager" and registers and heart-beats at it. */
  private async followResourceManager(): Promise<void> {
    const stores = this.opts.hastore.map((url) => createClient(HAStoreService, this.transport(url)));
    let leader: { address: string; token?: FencingToken } = { address: "" };
    let session: AbortController | undefined;
    let running: Promise<void> = Promise.resolve();
    let i = 0;
    while (!this.stopping.signal.aborted) {
      const observing = new AbortController();
      const signal = AbortSignal.any([this.stopping.signal, observing.signal]);
      try {
        for await (const ev of stores[i].observeLeader({ election: JOBMANAGER }, { signal })) {
          if (ev.event.case !== "leader") continue;
          const info = ev.event.value;
          // Seen before it is followed: a call under an older
          // ResourceManager token is refused from now on.
          this.observeGrant(info.token);
          if (info.address === leader.address && sameToken(info.token, leader.token)) continue;
          leader = { address: info.address, token: info.token };
          session?.abort();
          await running;
          session = new AbortController();
          if (info.address !== "" && epochOf(info.token) !== 0n) {
            running = this.serveResourceManager(info.address, info.token!, AbortSignal.any([signal, session.signal]));
          }
        }
      } catch (e) {
        if (!this.stopping.signal.aborted) this.log(`observing the leader at ${this.opts.hastore[i]} failed: ${String(e)}`);
      } finally {
        observing.abort();
        this.grantLost();
      }
      i = (i + 1) % stores.length;
      await this.sleep(this.opts.retryIntervalMs);
    }
    session?.abort();
    await running;
  }

  /** serveResourceManager registers at the leader and heart-beats there until signal aborts. */
  private async serveResourceManager(address: string, token: FencingToken, signal: AbortSignal): Promise<void> {
    const rm = createClient(ResourceManagerService, this.transport(address));
    let registrationId = "";
    let intervalMs = this.opts.retryIntervalMs;
    while (!signal.aborted) {
      try {
        const call = AbortSignal.any([signal, AbortSignal.timeout(10_000)]);
        if (registrationId === "") {
          const r = await rm.registerTaskExecutor(
            {
              taskExecutorId: this.id,
              address: this.addr,
              resourceManagerToken: token,
              slotReport: this.slotReport(),
              invokables: [...this.functions.keys()],
            },
            { signal: call },
          );
          registrationId = r.registrationId;
          intervalMs = Math.max(ms(r.heartbeatInterval), 10);
          this.log(`registered with the ResourceManager at ${address} (epoch ${token.epoch})`);
        }
        const resp = await rm.heartbeat(
          { taskExecutorId: this.id, registrationId, resourceManagerToken: token, slotReport: this.slotReport() },
          { signal: call },
        );
        for (const info of resp.jobMasters) {
          const jobId = info.election.startsWith("job/") ? info.election.slice(4) : "";
          if (jobId === "" || info.address === "" || !this.holds(jobId)) continue;
          const j = this.jobs.get(jobId);
          if (!j || epochOf(j.token) < epochOf(info.token) || j.address === "") this.adopt(jobId, info.token!, info.address);
        }
        // Ends with the session: the observation of the next leader
        // waits for this loop to end.
        await this.sleep(intervalMs, signal);
      } catch (e) {
        if (signal.aborted) return;
        if (reasonOf(e) === ErrorReason.NOT_REGISTERED) registrationId = "";
        this.log(`ResourceManager call failed: ${String(e)}`);
        await this.sleep(this.opts.retryIntervalMs, signal);
      }
    }
  }

  private slotReport(): SlotReport {
    return create(SlotReportSchema, {
      slots: this.slots.map((s) => ({ slotIndex: s.index, allocationId: s.allocationId, jobId: s.jobId })),
    });
  }

  private holds(jobId: string): boolean {
    return this.slots.some((s) => s.jobId === jobId);
  }

  // ---- fencing ----

  private job(jobId: string): JobState {
    let j = this.jobs.get(jobId);
    if (!j) {
      j = { address: "", timeoutMs: 0, contact: 0, leaseUntil: 0, offered: 0, idleSince: performance.now(), taskLeaseMs: 0, adoptedUntil: 0 };
      this.jobs.set(jobId, j);
    }
    return j;
  }

  /**
   * adopt records the JobMaster token t for a job unless it is older than
   * the newest seen: a newer one cancels the older one's attempts, whose
   * slots are then offered to the newer JobMaster, unless they are held for
   * it to adopt (see keepForAdoption). It returns whether t was admitted.
   */
  private adopt(jobId: string, t: FencingToken, address: string): boolean {
    const j = this.job(jobId);
    const cur = epochOf(j.token);
    if (t.epoch < cur) return false;
    if (t.epoch > cur) {
      if (j.token) this.log(`job ${jobId}: newer JobMaster (epoch ${t.epoch}); canceling the older one's attempts`);
      const held = this.keepForAdoption(jobId, j);
      for (const s of this.slots) {
        if (s.jobId !== jobId || held.has(s)) continue;
        const previous = s.task && !sameToken(s.task.token, t) ? s.task : undefined;
        previous?.abort.abort();
        if (j.token && address !== "") {
          const allocationId = s.allocationId;
          void (previous?.done ?? Promise.resolve()).then(() => this.queueOffer(jobId, address, t, s.index, allocationId));
        }
      }
      j.token = t;
      j.contact = performance.now();
      j.leaseUntil = 0;
      j.offered = 0;
      // The newer JobMaster grants a task lease of its own, or none.
      j.taskLeaseMs = 0;
      j.adoptedUntil = 0;
      // Held (their token no longer the job's) from now on: stopped at their deadline.
      if (held.size > 0) this.scheduleHeld();
    }
    if (address !== "") j.address = address;
    return true;
  }

  // ---- attempts held for a newer JobMaster to adopt ----

  /** held says whether slot s holds an attempt held for a newer JobMaster of its job. */
  private static held(s: Slot, j: JobState | undefined): boolean {
    return s.task !== undefined && s.task.heldUntil !== 0 && !sameToken(s.task.token, j?.token);
  }

  /**
   * keepForAdoption, called as a newer JobMaster of the job appears (before
   * it becomes the job's), holds the attempts of the current one if it
   * granted a task lease (or adopted them: they run as long as they were
   * held, even before its first heartbeat answer grants a lease), until the job's deadline now (if still to come);
   * it returns the slots held, those held for an older one included.
   */
  private keepForAdoption(jobId: string, j: JobState): Set<Slot> {
    const held = new Set<Slot>();
    let until = 0;
    if (j.taskLeaseMs > 0 || j.adoptedUntil !== 0) {
      const d = this.deadline(j);
      if (d > performance.now()) until = d;
    }
    for (const s of this.slots) {
      const t = s.task;
      if (s.jobId !== jobId || !t) continue;
      if (t.heldUntil !== 0) {
        held.add(s);
      } else if (until !== 0 && sameToken(t.token, j.token)) {
        t.heldUntil = until;
        held.add(s);
      }
    }
    if (held.size > 0) this.log(`job ${jobId}: newer JobMaster; holding ${held.size} of the older one's attempts for it to adopt`);
    return held;
  }

  /**
   * expireHeld cancels the held attempts whose deadline has come, freeing
   * their slots, and returns the earliest deadline still to come (0 for
   * none).
   */
  private expireHeld(now: number): number {
    let next = 0;
    for (const s of this.slots) {
      const t = s.task;
      if (!t || !Worker.held(s, this.jobs.get(s.jobId))) continue;
      if (now < t.heldUntil) {
        if (next === 0 || t.heldUntil < next) next = t.heldUntil;
        continue;
      }
      t.heldUntil = 0;
      this.log(`job ${s.jobId}: no JobMaster adopted a held attempt within its task lease; canceling it and freeing its slot`);
      this.release(s, notAdopted);
    }
    return next;
  }

  /** scheduleHeld has expireHeld run at the earliest deadline of the held attempts. */
  private scheduleHeld(): void {
    clearTimeout(this.heldTimer);
    this.heldTimer = undefined;
    if (this.stopping.signal.aborted) return;
    const next = this.expireHeld(performance.now());
    if (next === 0) return;
    this.heldTimer = setTimeout(() => this.scheduleHeld(), Math.max(next - performance.now(), 0) + 1);
    this.heldTimer.unref();
  }

  /**
   * adoptHeld moves the job's held attempts to token (reported at address
   * from now on), and lists in out every attempt and allocation the job
   * holds here under it.
   */
  private adoptHeld(j: JobState, out: AdoptedJob, token: FencingToken, address: string): void {
    for (const s of this.slots) {
      if (s.jobId !== out.jobId || s.freeing) continue;
      out.allocationIds.push(s.allocationId);
      const t = s.task;
      if (!t || (!sameToken(t.token, token) && t.heldUntil === 0)) continue; // none, or an older attempt being canceled
      if (t.heldUntil > j.adoptedUntil) j.adoptedUntil = t.heldUntil;
      t.token = token;
      t.address = address;
      t.heldUntil = 0;
      out.attempts.push(
        create(HeldAttemptSchema, {
          allocationId: s.allocationId,
          deployedUnder: t.deployed,
          status: statusOf(t),
        }),
      );
    }
  }

  /** follow admits a call from a job's JobMaster (see adopt), or throws STALE_FENCING_TOKEN. */
  private follow(jobId: string, token: FencingToken | undefined): void {
    if (!this.adopt(jobId, token ?? create(FencingTokenSchema), "")) throw staleToken(jobElection(jobId), this.jobs.get(jobId)?.token);
    this.admit(jobId);
  }

  /** observeGrant records the grant of "jobmanager" the store shows; it counts as seen. */
  private observeGrant(t: FencingToken | undefined): void {
    this.rmGrant = epochOf(t) === 0n ? undefined : t;
    this.rmWatching = true;
    if (epochOf(t) > epochOf(this.rmToken)) this.rmToken = t;
    this.grantChanged();
  }

  /** grantLost records that the observation failed: a newer token cannot be checked until it answers again. */
  private grantLost(): void {
    this.rmWatching = false;
    this.grantChanged();
  }

  private grantChanged(): void {
    for (const wake of this.rmWaiters) wake();
    this.rmWaiters.clear();
  }

  /**
   * checkResourceManager admits a call under the ResourceManager token t.
   * The newest token seen passes at once (no promise: the steady state
   * costs what it did); an older one, or another of the same epoch (never
   * granted), throws STALE_FENCING_TOKEN. A newer one becomes the newest
   * only if it is the grant the store shows: the returned promise waits
   * for the observation up to grantWaitMs, then rejects with
   * STALE_FENCING_TOKEN naming the grant, or STORE_UNAVAILABLE if the
   * observation is not running. A refusal changes nothing.
   */
  private checkResourceManager(t: FencingToken | undefined, signal?: AbortSignal): Promise<void> | undefined {
    if (this.admitResourceManager(t)) return undefined;
    return this.awaitGrant(t, signal);
  }

  /** admitResourceManager is checkResourceManager's verdict now: true admits, false waits for the grant; a refusal throws. */
  private admitResourceManager(t: FencingToken | undefined): boolean {
    if (sameToken(t, this.rmToken)) return true;
    if (epochOf(t) <= epochOf(this.rmToken)) throw this.staleResourceManager();
    if (sameToken(t, this.rmGrant)) {
      this.rmToken = t;
      return true;
    }
    return false;
  }

  private async awaitGrant(t: FencingToken | undefined, signal?: AbortSignal): Promise<void> {
    const deadline = Date.now() + grantWaitMs;
    for (let left = grantWaitMs; left > 0; left = deadline - Date.now()) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", done);
          this.rmWaiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        signal?.addEventListener("abort", done, { once: true });
        this.rmWaiters.add(done);
      });
      if (signal?.aborted) throw new ConnectError("the call ended while it waited for the ResourceManager's grant", Code.Canceled);
      if (this.admitResourceManager(t)) return;
    }
    if (!this.rmWatching) {
      throw apiError(ErrorReason.STORE_UNAVAILABLE, "the HA store could not be observed to check the ResourceManager's token; nothing was done, retry", {
        election: JOBMANAGER,
      });
    }
    throw this.staleResourceManager();
  }

  /**
   * checkJobMaster admits a call from a JobMaster of jobId under token t,
   * before the call changes anything. The job's current token, or an older
   * one (which adopt refuses), passes at once (no promise: the steady state
   * costs what it did); another token of the current epoch was never
   * granted, and throws STALE_FENCING_TOKEN. A newer token, or the job's
   * first here, passes only if the HA store shows it as the grant of
   * "job/<job_id>": the returned promise reads it (GetLeader, linearizable
   * since contract 1.2) within grantWaitMs, and rejects with
   * STALE_FENCING_TOKEN naming the grant, or STORE_UNAVAILABLE if no store
   * answered. The token's session proves nothing: that of the grant of
   * "jobmanager" is public. A refusal changes nothing.
   */
  private checkJobMaster(jobId: string, t: FencingToken | undefined, signal?: AbortSignal): Promise<void> | undefined {
    const current = this.jobs.get(jobId)?.token;
    if (sameToken(t, current) || epochOf(t) < epochOf(current)) return undefined;
    if (epochOf(t) === epochOf(current)) throw staleToken(jobElection(jobId), current);
    return this.readJobGrant(jobId, t, signal);
  }

  /** readJobGrant resolves if the HA store shows t as the grant of the job's election (see checkJobMaster). */
  private async readJobGrant(jobId: string, t: FencingToken | undefined, signal?: AbortSignal): Promise<void> {
    const election = jobElection(jobId);
    const call = AbortSignal.any([AbortSignal.timeout(grantWaitMs), ...(signal ? [signal] : [])]);
    this.storeClients ??= this.opts.hastore.map((url) => createClient(HAStoreService, this.transport(url)));
    let grant: FencingToken | undefined;
    let answered = false;
    for (const store of this.storeClients) {
      try {
        grant = (await store.getLeader({ election }, { signal: call })).leader?.token;
        answered = true;
        break;
      } catch (e) {
        this.log(`reading the grant of ${election} failed: ${String(e)}`);
        if (call.aborted) break;
      }
    }
    if (answered && sameToken(grant, t)) return;
    if (answered) throw staleToken(election, grant);
    if (signal?.aborted) throw new ConnectError("the call ended while it read the JobMaster's grant", Code.Canceled);
    throw apiError(ErrorReason.STORE_UNAVAILABLE, "the HA store could not be read to check the JobMaster's token; nothing was done, retry", { election });
  }

  /** staleResourceManager refuses a token that is not the current one, naming the grant the store shows, else the newest seen. */
  private staleResourceManager(): ConnectError {
    const current = this.rmGrant !== undefined && epochOf(this.rmGrant) >= epochOf(this.rmToken) ? this.rmGrant : this.rmToken;
    return staleToken(JOBMANAGER, current);
  }

  /** grace is how long before a deadline of length d the attempts are canceled: the cancel grace, at most a third of d. */
  private grace(d: number): number {
    return Math.min(this.opts.cancelGraceMs, d / 3);
  }

  /**
   * deadline is when the job's attempts must start stopping; 0 for none.
   * Under a task lease: contact + the lease, less the grace; else the
   * heartbeat timeout after contact or the end of the heartbeat lease,
   * whichever comes first, less the grace. Attempts the JobMaster adopted
   * run at least as long as they were held.
   */
  private deadline(j: JobState): number {
    let d = 0;
    if (j.contact === 0) {
      // no contact yet: no deadline
    } else if (j.taskLeaseMs > 0) {
      d = j.contact + j.taskLeaseMs - this.grace(j.taskLeaseMs);
    } else if (j.timeoutMs > 0) {
      let end = j.contact + j.timeoutMs;
      if (j.leaseUntil !== 0 && j.leaseUntil < end) end = j.leaseUntil;
      d = end - this.grace(j.timeoutMs);
    }
    if (d !== 0 && j.adoptedUntil > d) d = j.adoptedUntil;
    return d;
  }

  /** admit stops the job's attempts and frees its slots first if its JobMaster's deadline passed. */
  private admit(jobId: string): void {
    const j = this.jobs.get(jobId);
    if (!j) return;
    const d = this.deadline(j);
    if (d !== 0 && performance.now() >= d) {
      const cause = `JobMaster unreachable for ${j.timeoutMs}ms; the TaskExecutor stopped the job's tasks`;
      // A held attempt stops by its own deadline (expireHeld), not the job's.
      for (const s of this.slots) if (s.jobId === jobId && !s.freeing && !Worker.held(s, j)) this.release(s, cause);
      j.timeoutMs = 0;
      j.contact = 0;
      j.offered = 0;
    }
  }

  /** touch records contact at `at` with the job's JobMaster of token. */
  private touch(jobId: string, token: FencingToken | undefined, at: number): void {
    this.admit(jobId);
    const j = this.jobs.get(jobId);
    if (j && sameToken(j.token, token) && at > j.contact) j.contact = at;
  }

  /**
   * registered records that the job's JobMaster of token took this
   * worker's registration (an offer), sent at sent, with its heartbeat
   * interval and timeout, and the task lease it grants (0 for none): under
   * one the job's attempts run under the lease from the start.
   */
  private registered(jobId: string, token: FencingToken, sent: number, intervalMs: number, timeoutMs: number, leaseMs: number): void {
    if (intervalMs > 0 && (this.hbIntervalMs <= 0 || intervalMs < this.hbIntervalMs)) {
      this.hbIntervalMs = intervalMs;
      this.wakeHeartbeat();
    }
    const j = this.jobs.get(jobId);
    if (!j || !sameToken(j.token, token) || timeoutMs <= 0) return;
    if (leaseMs > 0) j.taskLeaseMs = leaseMs;
    j.timeoutMs = timeoutMs;
    if (sent > j.contact) j.contact = sent;
  }

  /**
   * followDeployment admits a deployment under token, taking the
   * JobMaster's timeout from it if none is known, and the task lease it
   * carries (if any) while the job holds slots here.
   */
  private followDeployment(jobId: string, token: FencingToken | undefined, timeout: Duration | undefined, lease: Duration | undefined): void {
    if (!this.adopt(jobId, token ?? create(FencingTokenSchema), "")) throw staleToken(jobElection(jobId), this.jobs.get(jobId)?.token);
    const j = this.job(jobId);
    const leaseMs = ms(lease);
    if (leaseMs > 0 && this.holds(jobId)) j.taskLeaseMs = leaseMs;
    const t = ms(timeout);
    if (t > 0 && this.holds(jobId) && j.timeoutMs <= 0) {
      j.timeoutMs = t;
      if (j.offered > j.contact) j.contact = j.offered;
    }
    this.admit(jobId);
  }

  // ---- slots and offers ----

  private release(s: Slot, cause: string): void {
    const t = s.task;
    if (t && !t.ended) {
      if (cause !== "" && t.stopCause === "") t.stopCause = cause;
      t.abort.abort();
      s.freeing = true;
      return;
    }
    s.allocationId = "";
    s.jobId = "";
    s.task = undefined;
    s.freeing = false;
  }

  private slotFields(prefix: string, r: SlotRequest | RequestSlotRequest): Field[] {
    const fs: Field[] = [];
    const req = (name: string, empty: boolean) => empty && fs.push({ path: prefix + name, description: "required" });
    req("allocation_id", r.allocationId === "");
    req("job_id", r.jobId === "");
    req("job_master_address", r.jobMasterAddress === "");
    req("job_master_token", epochOf(r.jobMasterToken) === 0n);
    if (r.slotIndex < 0 || r.slotIndex >= this.slots.length) {
      fs.push({ path: prefix + "slot_index", description: `${r.slotIndex} is out of range [0, ${this.slots.length})` });
    }
    return fs;
  }

  private allocate(r: SlotRequest | RequestSlotRequest): void {
    const s = this.slots[r.slotIndex];
    if (s.allocationId === r.allocationId) return;
    if (s.allocationId !== "") {
      throw apiError(ErrorReason.SLOT_OCCUPIED, "slot is allocated to another allocation", {
        task_executor_id: this.id,
        slot_index: String(s.index),
        allocation_id: s.allocationId,
      });
    }
    if (!this.adopt(r.jobId, r.jobMasterToken!, r.jobMasterAddress)) throw staleToken(jobElection(r.jobId), this.jobs.get(r.jobId)?.token);
    s.allocationId = r.allocationId;
    s.jobId = r.jobId;
    this.queueOffer(r.jobId, r.jobMasterAddress, r.jobMasterToken!, s.index, s.allocationId);
  }

  /** queueOffer queues a slot for the job's JobMaster; the slots queued together go in one OfferSlots. */
  private queueOffer(jobId: string, address: string, token: FencingToken, index: number, allocationId: string): void {
    if (this.stopping.signal.aborted) return;
    const key = `${jobId}\u0000${address}\u0000${token.sessionId}\u0000${token.epoch}`;
    let q = this.offers.get(key);
    if (!q) {
      q = { jobId, address, token, slots: [], sending: false };
      this.offers.set(key, q);
    }
    q.slots.push({ index, allocationId });
    if (!q.sending) {
      q.sending = true;
      const queue = q;
      setImmediate(() => void this.sendOffers(key, queue));
    }
  }

  private async sendOffers(key: string, q: OfferQueue): Promise<void> {
    while (q.slots.length > 0) {
      const slots = q.slots;
      q.slots = [];
      await this.offer(q, slots);
    }
    this.offers.delete(key);
  }

  /** offer offers slots to a JobMaster, registering this worker with it, and frees those it does not take. */
  private async offer(q: OfferQueue, slots: { index: number; allocationId: string }[]): Promise<void> {
    const jm = this.jobMaster(q.address);
    const accepted = new Set<string>();
    for (let attempt = 0; attempt < 20 && !this.stopping.signal.aborted; attempt++) {
      const sent = performance.now();
      const j = this.jobs.get(q.jobId);
      if (j && sameToken(j.token, q.token) && j.offered === 0) j.offered = sent;
      try {
        const resp = await jm.offerSlots(
          {
            jobId: q.jobId,
            jobMasterToken: q.token,
            taskExecutorId: this.id,
            address: this.addr,
            offers: slots.map((s) => ({ allocationId: s.allocationId, slotIndex: s.index })),
            deploymentsInAnswer: true,
          },
          { signal: AbortSignal.any([this.stopping.signal, AbortSignal.timeout(10_000)]) },
        );
        this.registered(q.jobId, q.token, sent, ms(resp.heartbeatInterval), ms(resp.heartbeatTimeout), ms(resp.taskLease));
        for (const a of resp.accepted) accepted.add(a.allocationId);
        if (resp.deployments.length > 0) {
          try {
            this.followDeployment(q.jobId, q.token, resp.heartbeatTimeout, resp.taskLease);
            for (const d of resp.deployments) {
              try {
                this.deploy(this.submitRequest(q.jobId, q.token, d));
              } catch (e) {
                this.log(`a deployment in an offer's answer was refused: ${String(e)}`);
              }
            }
          } catch (e) {
            this.log(`the deployments in an offer's answer were refused: ${String(e)}`);
          }
        }
        break;
      } catch (e) {
        const r = reasonOf(e);
        if (r === ErrorReason.STALE_FENCING_TOKEN || r === ErrorReason.NOT_LEADER) break;
        this.log(`offering slots of job ${q.jobId} failed; retrying: ${String(e)}`);
        await this.sleep(this.opts.retryIntervalMs);
      }
    }
    const j = this.jobs.get(q.jobId);
    for (const o of slots) {
      if (accepted.has(o.allocationId)) continue;
      const s = this.slots[o.index];
      const idle = s.task === undefined || s.task.ended;
      if (s.allocationId === o.allocationId && idle && j && sameToken(j.token, q.token)) this.release(s, "");
    }
  }

  // ---- deployments ----

  private submitRequest(jobId: string, token: FencingToken, d: TaskDeployment): SubmitTaskRequest {
    return create(SubmitTaskRequestSchema, {
      jobId,
      jobMasterToken: token,
      allocationId: d.allocationId,
      attempt: d.attempt,
      taskName: d.taskName,
      invokable: d.invokable,
      config: d.config,
      numberOfSubtasks: d.numberOfSubtasks,
      restoredState: d.restoredState,
      restoredFrom: d.restoredFrom,
    });
  }

  private static taskFields(prefix: string, allocationId: string, attempt: ExecutionAttemptId | undefined, invokable: string): Field[] {
    const fs: Field[] = [];
    if (allocationId === "") fs.push({ path: prefix + "allocation_id", description: "required" });
    if (attempt === undefined) fs.push({ path: prefix + "attempt", description: "required" });
    if (invokable === "") fs.push({ path: prefix + "invokable", description: "required" });
    return fs;
  }

  private static jobFields(jobId: string, token: FencingToken | undefined): Field[] {
    const fs: Field[] = [];
    if (jobId === "") fs.push({ path: "job_id", description: "required" });
    if (epochOf(token) === 0n) fs.push({ path: "job_master_token", description: "required" });
    return fs;
  }

  /** deploy deploys one attempt as SubmitTask does, once its JobMaster's token was admitted. */
  private deploy(req: SubmitTaskRequest): void {
    const s = this.slots.find((c) => c.allocationId === req.allocationId && c.jobId === req.jobId);
    if (!s) {
      throw apiError(ErrorReason.SLOT_NOT_ALLOCATED, "no slot is allocated to this job under this allocation", {
        allocation_id: req.allocationId,
        job_id: req.jobId,
      });
    }
    const token = req.jobMasterToken!;
    const t = s.task;
    if (t) {
      if (sameAttempt(t.req.attempt, req.attempt) && sameToken(t.token, token)) return;
      if (!isExecTerminal(t.state)) {
        throw apiError(ErrorReason.SLOT_OCCUPIED, "another attempt still runs in the slot", {
          task_executor_id: this.id,
          slot_index: String(s.index),
          allocation_id: s.allocationId,
        });
      }
    }
    if ((this.jobs.get(req.jobId)?.timeoutMs ?? 0) <= 0) {
      throw apiError(
        ErrorReason.NOT_REGISTERED,
        "no heartbeat timeout is known for the job's JobMaster: it registers this TaskExecutor (or takes an offer with its address) or names its timeout in the deployment",
        { job_id: req.jobId, task_executor_id: this.id },
      );
    }
    const fn = this.functions.get(req.invokable);
    if (!fn) {
      throw apiError(ErrorReason.UNKNOWN_INVOKABLE, `no invokable "${req.invokable}" is registered on TaskExecutor ${this.id}`, {
        invokable: req.invokable,
      });
    }
    const task: RunningTask = {
      req,
      token,
      deployed: token,
      address: this.jobs.get(req.jobId)?.address ?? "",
      heldUntil: 0,
      abort: new AbortController(),
      state: ExecutionState.DEPLOYING,
      failure: "",
      ended: false,
      stopCause: "",
      done: Promise.resolve(),
      ending: new AbortController(),
      accumulators: new Map(),
      final: false,
    };
    task.abort.signal.addEventListener("abort", () => task.ending.abort(), { once: true });
    s.task = task;
    task.done = this.run(task, fn);
  }

  /** run runs an attempt and reports its states to the JobMaster that deployed (or adopted) it while that is the job's. */
  private async run(task: RunningTask, fn: TaskFunction): Promise<void> {
    const req = task.req;
    this.setState(task, ExecutionState.RUNNING, "");
    const signal = task.abort.signal;
    let state = ExecutionState.FINISHED;
    let failure = "";
    const outKey: OutputKey = { jobId: req.jobId, vertexId: req.attempt?.vertexId ?? "", subtask: req.attempt?.subtaskIndex ?? 0, attempt: req.attempt?.attemptNumber ?? 0 };
    const out = this.outputs.start(outKey);
    const encoder = new TextEncoder();
    try {
      const running = Promise.resolve().then(() =>
        fn({
          jobId: req.jobId,
          vertexId: req.attempt?.vertexId ?? "",
          taskName: req.taskName,
          subtaskIndex: req.attempt?.subtaskIndex ?? 0,
          subtasks: req.numberOfSubtasks,
          attempt: req.attempt?.attemptNumber ?? 0,
          config: { ...req.config },
          signal,
          restored: stateOf(req.restoredState),
          restoredFrom: req.restoredFrom,
          onCheckpoint: (cp: CheckpointFunction) => {
            task.checkpointFn = cp;
          },
          setValue: (value: Uint8Array | string) => {
            if (task.final) return;
            task.value = typeof value === "string" ? new TextEncoder().encode(value) : Uint8Array.from(value);
          },
          add: (name: string, delta: number | bigint = 1) => {
            if (task.final) return;
            if (!task.accumulators.has(name) && !ACCUMULATOR_NAME.test(name)) {
              task.badName ??= name;
              return;
            }
            task.accumulators.set(name, (task.accumulators.get(name) ?? 0n) + BigInt(delta));
          },
          log: (message: string, attrs?: Record<string, unknown>) => out.write(encoder.encode(logLine(message, attrs))),
          output: { write: (data: Uint8Array | string) => out.write(typeof data === "string" ? encoder.encode(data) : data) },
        }),
      );
      // As with the reference TaskExecutor's functions, a canceled attempt
      // ends when its function returns: the slot is not taken by another
      // attempt meanwhile.
      await running;
    } catch (e) {
      state = ExecutionState.FAILED;
      failure = e instanceof Error ? e.message : String(e);
    }
    task.final = true;
    this.outputs.finish(outKey, out);
    if (signal.aborted) {
      state = ExecutionState.CANCELED;
      failure = task.stopCause;
    } else if (state === ExecutionState.FINISHED) {
      const why = this.resultError(task);
      if (why !== "") {
        state = ExecutionState.FAILED;
        failure = why;
      }
    }
    task.ended = true;
    task.ending.abort();
    for (const s of this.slots) if (s.task === task && s.freeing) this.release(s, "");
    await this.setState(task, state, failure);
  }

  /** resultError says why a finished attempt's result breaks the limits; "" when it does not. */
  private resultError(t: RunningTask): string {
    if (t.badName !== undefined) {
      return `the task used an invalid accumulator name ${JSON.stringify(t.badName)}: it must be 1 to 128 bytes of [A-Za-z0-9_.-]`;
    }
    const n = t.value?.length ?? 0;
    if (n > this.opts.maxValueBytes) {
      return `the task's value is ${n} bytes, over the limit of ${this.opts.maxValueBytes} (ServerLimits.max_task_value_bytes)`;
    }
    if (t.accumulators.size > this.opts.maxAccumulators) {
      return `the task used ${t.accumulators.size} accumulators, over the limit of ${this.opts.maxAccumulators} (ServerLimits.max_accumulators)`;
    }
    return "";
  }

  /**
   * setState records an attempt's state and reports it to the attempt's
   * JobMaster under the attempt's token, unless that is not the job's (a
   * newer JobMaster disowned the attempt, or holds it for adoption).
   */
  private async setState(task: RunningTask, state: ExecutionState, failure: string): Promise<void> {
    task.state = state;
    task.failure = failure;
    const jobId = task.req.jobId;
    const j = this.jobs.get(jobId);
    const address = task.address;
    if (!j || !sameToken(j.token, task.token) || address === "") return;
    const status = statusOf(task, timestampNow());
    const token = task.token;
    // The JobMaster takes the changes in the order they arrive: RUNNING
    // must not overtake a FINISHED sent while it was on its way.
    const previous = task.reporting;
    const report = (async () => {
      await previous;
      await this.report(task, address, status, token);
    })();
    task.reporting = report;
    await report;
  }

  /**
   * report sends one state change of an attempt to its JobMaster under the
   * token it was decided under, trying again a few times.
   */
  private async report(task: RunningTask, address: string, status: TaskExecutionStatus, token: FencingToken): Promise<void> {
    const jobId = task.req.jobId;
    for (let attempt = 0; attempt < 3 && !this.stopping.signal.aborted; attempt++) {
      try {
        await this.jobMaster(address).updateTaskExecutionState(
          { jobId, jobMasterToken: token, taskExecutorId: this.id, status },
          { signal: AbortSignal.any([this.stopping.signal, AbortSignal.timeout(10_000)]) },
        );
        return;
      } catch (e) {
        // A newer JobMaster adopted the attempt while the report was with
        // the one it was sent to: that JobMaster's answer, whatever it is,
        // says nothing of the attempt now, whose state went to the new one
        // with the adoption. (As the Go TaskExecutor, since dda2c02.)
        if (!sameToken(task.token, token)) return;
        const r = reasonOf(e);
        if (r === ErrorReason.EXECUTION_NOT_FOUND) {
          task.abort.abort();
          return;
        }
        if (r === ErrorReason.STALE_FENCING_TOKEN || r === ErrorReason.NOT_LEADER) return;
        // Otherwise the heartbeats carry the state (complete reports).
        await this.sleep(this.opts.retryIntervalMs);
      }
    }
  }

  // ---- heartbeats with the JobMasters ----

  /** heartbeatJobMasters sends one full heartbeat per interval to each address whose JobMasters this worker follows. */
  private async heartbeatJobMasters(): Promise<void> {
    while (!this.stopping.signal.aborted) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, this.hbIntervalMs > 0 ? this.hbIntervalMs : 1000);
        const wake = () => done();
        this.wakeHeartbeat = wake;
        function done() {
          clearTimeout(t);
          resolve();
        }
      });
      if (this.stopping.signal.aborted) return;
      await this.heartbeatRound();
      this.expireSilent();
    }
  }

  private followed(): Map<string, Map<string, FencingToken>> {
    const out = new Map<string, Map<string, FencingToken>>();
    for (const s of this.slots) {
      if (s.jobId === "") continue;
      const j = this.jobs.get(s.jobId);
      if (!j || j.address === "" || !j.token) continue;
      if (!out.has(j.address)) out.set(j.address, new Map());
      out.get(j.address)!.set(s.jobId, j.token);
    }
    return out;
  }

  private complete(jobId: string, token: FencingToken): TaskExecutorJobReport {
    const attempts: TaskExecutionStatus[] = [];
    const allocationIds: string[] = [];
    const j = this.jobs.get(jobId);
    for (const s of this.slots) {
      if (s.jobId !== jobId || Worker.held(s, j)) continue; // held for this JobMaster to adopt: not yet under its token
      allocationIds.push(s.allocationId);
      const t = s.task;
      if (t && sameToken(t.token, token)) {
        attempts.push(statusOf(t));
      }
    }
    return create(TaskExecutorJobReportSchema, { jobId, jobMasterToken: token, following: true, complete: true, attempts, allocationIds });
  }

  private async heartbeatRound(): Promise<void> {
    const calls = [...this.followed()].map(async ([address, jobs]) => {
      const sent = performance.now();
      const reports = [...jobs].map(([jobId, token]) => this.complete(jobId, token));
      try {
        const resp = await this.jobMaster(address).heartbeatFromTaskExecutor(
          { taskExecutorId: this.id, address: this.addr, full: true, jobs: reports },
          { signal: AbortSignal.any([this.stopping.signal, AbortSignal.timeout(Math.max(2 * this.hbIntervalMs, 1000))]) },
        );
        const named = new Map(resp.jobs.map((a) => [a.jobId, a]));
        for (const a of resp.jobs) {
          const j = this.jobs.get(a.jobId);
          if (a.action === TaskExecutorJobAction.NOT_LEADER) {
            if (j && j.address === address && sameToken(j.token, jobs.get(a.jobId))) j.address = "";
          } else if (a.action === TaskExecutorJobAction.FOLLOW && a.jobMasterToken) {
            this.adopt(a.jobId, a.jobMasterToken, address);
          }
        }
        const lease = resp.leaseRemaining ? sent + ms(resp.leaseRemaining) : 0;
        for (const [jobId, token] of jobs) {
          const a = named.get(jobId);
          if (a && a.action !== TaskExecutorJobAction.REPORT) continue; // not vouched for
          this.touch(jobId, token, sent);
          const j = this.jobs.get(jobId);
          if (j && sameToken(j.token, token)) {
            j.taskLeaseMs = ms(resp.taskLease);
            if (lease !== 0) j.leaseUntil = lease;
          }
        }
      } catch (e) {
        if (!this.stopping.signal.aborted) this.log(`heartbeat to the JobMasters at ${address} failed: ${String(e)}`);
      }
    });
    await Promise.all(calls);
  }

  /**
   * expireSilent stops the held attempts past their deadline and the
   * (other) attempts of jobs whose JobMaster has been silent past its
   * deadline, and forgets the jobs that held nothing here
   * for idleJobMemoryMs.
   */
  private expireSilent(): void {
    const now = performance.now();
    this.scheduleHeld(); // held attempts past their deadline first
    for (const [jobId, j] of this.jobs) {
      if (this.holds(jobId)) {
        j.idleSince = 0;
        this.admit(jobId);
      } else if (j.idleSince === 0) {
        j.idleSince = now;
      } else if (now - j.idleSince > idleJobMemoryMs) {
        this.jobs.delete(jobId);
      }
    }
  }

  // ---- TaskExecutorService ----

  private routes(router: ConnectRouter): void {
    router.service(TaskExecutorService, {
      requestSlot: async (req, ctx) => {
        this.log(`RequestSlot: job ${req.jobId}, allocation ${req.allocationId}`);
        const fields = this.slotFields("", req);
        if (epochOf(req.resourceManagerToken) === 0n) fields.unshift({ path: "resource_manager_token", description: "required" });
        if (fields.length > 0) throw badRequest(fields);
        const wait = this.checkResourceManager(req.resourceManagerToken, ctx.signal);
        if (wait) await wait;
        this.allocate(req);
        return {};
      },
      requestSlots: async (req, ctx) => {
        this.log(`RequestSlots: ${req.slots.length} slots`);
        const fields: Field[] = [];
        if (epochOf(req.resourceManagerToken) === 0n) fields.push({ path: "resource_manager_token", description: "required" });
        req.slots.forEach((r, i) => fields.push(...this.slotFields(`slots[${i}].`, r)));
        if (fields.length > 0) throw badRequest(fields);
        const wait = this.checkResourceManager(req.resourceManagerToken, ctx.signal);
        if (wait) await wait;
        const refused: ItemError[] = [];
        req.slots.forEach((r, i) => {
          try {
            this.allocate(r);
          } catch (e) {
            refused.push(itemError(i, e));
          }
        });
        return { refused };
      },
      submitTask: async (req, ctx) => {
        const fields = [...Worker.jobFields(req.jobId, req.jobMasterToken), ...Worker.taskFields("", req.allocationId, req.attempt, req.invokable)];
        if (fields.length > 0) throw badRequest(fields);
        const check = this.checkJobMaster(req.jobId, req.jobMasterToken, ctx.signal);
        if (check) await check;
        this.followDeployment(req.jobId, req.jobMasterToken, req.heartbeatTimeout, req.taskLease);
        this.deploy(req);
        return {};
      },
      submitTasks: async (req, ctx) => {
        const fields = Worker.jobFields(req.jobId, req.jobMasterToken);
        req.tasks.forEach((d, i) => fields.push(...Worker.taskFields(`tasks[${i}].`, d.allocationId, d.attempt, d.invokable)));
        if (fields.length > 0) throw badRequest(fields);
        const check = this.checkJobMaster(req.jobId, req.jobMasterToken, ctx.signal);
        if (check) await check;
        this.followDeployment(req.jobId, req.jobMasterToken, req.heartbeatTimeout, req.taskLease);
        const refused: ItemError[] = [];
        req.tasks.forEach((d, i) => {
          try {
            this.deploy(this.submitRequest(req.jobId, req.jobMasterToken!, d));
          } catch (e) {
            refused.push(itemError(i, e));
          }
        });
        return { refused };
      },
      cancelTask: async (req, ctx) => {
        const check = this.checkJobMaster(req.jobId, req.jobMasterToken, ctx.signal);
        if (check) await check;
        this.follow(req.jobId, req.jobMasterToken);
        for (const s of this.slots) {
          if (s.jobId === req.jobId && s.task && sameAttempt(s.task.req.attempt, req.attempt)) s.task.abort.abort();
        }
        return {};
      },
      freeSlot: async (req, ctx) => {
        const check = this.checkJobMaster(req.jobId, req.jobMasterToken, ctx.signal);
        if (check) await check;
        this.follow(req.jobId, req.jobMasterToken);
        for (const s of this.slots) if (s.allocationId === req.allocationId && s.jobId === req.jobId) this.release(s, "");
        return {};
      },
      freeSlots: async (req, ctx) => {
        const fields = Worker.jobFields(req.jobId, req.jobMasterToken);
        if (fields.length > 0) throw badRequest(fields);
        const check = this.checkJobMaster(req.jobId, req.jobMasterToken, ctx.signal);
        if (check) await check;
        this.follow(req.jobId, req.jobMasterToken);
        const ids = new Set(req.allocationIds);
        for (const s of this.slots) if (ids.has(s.allocationId) && s.jobId === req.jobId) this.release(s, "");
        return {};
      },
      heartbeat: async (req, ctx) => {
        let jobId = "";
        let token: FencingToken | undefined;
        switch (req.sender.case) {
          case "resourceManagerToken": {
            const wait = this.checkResourceManager(req.sender.value, ctx.signal);
            if (wait) await wait;
            break;
          }
          case "jobMaster":
            jobId = req.sender.value.jobId;
            token = req.sender.value.token;
            if (jobId === "") throw badRequest([{ path: "job_master.job_id", description: "required" }]);
            {
              const check = this.checkJobMaster(jobId, token, ctx.signal);
              if (check) await check;
            }
            this.follow(jobId, token);
            break;
          default:
            throw badRequest([{ path: "sender", description: "required" }]);
        }
        const tasks: TaskExecutionStatus[] = [];
        if (jobId !== "") {
          for (const s of this.slots) {
            const t = s.task;
            if (s.jobId === jobId && t && sameToken(t.token, token)) {
              tasks.push(statusOf(t));
            }
          }
        }
        return { taskExecutorId: this.id, slotReport: this.slotReport(), tasks };
      },
      adoptAttempts: async (req, ctx) => {
        const fields: Field[] = [];
        req.jobs.forEach((e, i) => {
          for (const f of Worker.jobFields(e.jobId, e.jobMasterToken)) fields.push({ path: `jobs[${i}].${f.path}`, description: f.description });
          if (e.jobMasterAddress === "") fields.push({ path: `jobs[${i}].job_master_address`, description: "required" });
        });
        if (req.jobs.length === 0) fields.push({ path: "jobs", description: "required" });
        if (fields.length > 0) throw badRequest(fields);
        this.log(`AdoptAttempts: ${req.jobs.length} jobs`);
        // An entry for a job that holds nothing here has nothing to hand
        // over: it is answered empty at once, its token neither read from
        // the store nor taken (the contract's MAY). A leader that took over
        // many jobs names each to every TaskExecutor, and a read for each
        // would flood the store. An older token than the job's current one
        // is still refused, as it needs no read.
        const holding = new Set<string>();
        for (const s of this.slots) if (s.jobId !== "" && !s.freeing) holding.add(s.jobId);
        const empty = req.jobs.map((e) => {
          const current = this.jobs.get(e.jobId)?.token;
          return !holding.has(e.jobId) && !(current !== undefined && e.jobMasterToken!.epoch < current.epoch);
        });
        // The other jobs' new tokens are read in parallel; a store that
        // could not be read refuses the whole call, before anything is
        // taken.
        const checked = await Promise.all(
          req.jobs.map(async (e, i) => {
            if (empty[i]) return undefined;
            try {
              await this.checkJobMaster(e.jobId, e.jobMasterToken, ctx.signal);
              return undefined;
            } catch (err) {
              return err;
            }
          }),
        );
        for (const err of checked) {
          if (err !== undefined && ConnectError.from(err).code !== Code.Aborted) throw err;
        }
        // A held attempt past its deadline stops before anything is taken.
        this.scheduleHeld();
        const jobs: AdoptedJob[] = [];
        const refused: ItemError[] = [];
        req.jobs.forEach((e, i) => {
          const out = create(AdoptedJobSchema, { jobId: e.jobId });
          jobs.push(out);
          const token = e.jobMasterToken!;
          if (empty[i]) return;
          if (checked[i] !== undefined) {
            refused.push(itemError(i, checked[i]));
            return;
          }
          if (!this.adopt(e.jobId, token, e.jobMasterAddress)) {
            refused.push(itemError(i, staleToken(jobElection(e.jobId), this.jobs.get(e.jobId)?.token)));
            return;
          }
          this.admit(e.jobId);
          this.adoptHeld(this.job(e.jobId), out, token, e.jobMasterAddress);
        });
        this.scheduleHeld(); // the adopted attempts are held no longer
        return { jobs, refused };
      },
      getTaskOutput: (req) => {
        const fields: Field[] = [];
        if (req.jobId === "") fields.push({ path: "job_id", description: "required" });
        if (req.attempt === undefined) fields.push({ path: "attempt", description: "required" });
        if (req.offset < 0n) fields.push({ path: "offset", description: "must not be negative" });
        if (req.maxBytes < 0) fields.push({ path: "max_bytes", description: "must not be negative" });
        if (fields.length > 0) throw badRequest(fields);
        const a = req.attempt!;
        const kept = this.outputs.get({ jobId: req.jobId, vertexId: a.vertexId, subtask: a.subtaskIndex, attempt: a.attemptNumber });
        if (!kept) {
          throw apiError(
            ErrorReason.EXECUTION_NOT_FOUND,
            `TaskExecutor ${this.id} keeps no output of attempt ${a.attemptNumber} of subtask ${a.subtaskIndex} of vertex ${a.vertexId} of job ${req.jobId}`,
            {
              job_id: req.jobId,
              vertex_id: a.vertexId,
              subtask_index: String(a.subtaskIndex),
              attempt_number: String(a.attemptNumber),
              task_executor_id: this.id,
            },
          );
        }
        const n = req.maxBytes === 0 ? DEFAULT_OUTPUT_READ : Math.min(req.maxBytes, MAX_OUTPUT_READ);
        // Offsets past 2^53 cannot be reached by bytes written here: read from the first kept.
        const from = req.offset > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(req.offset);
        const { data, offset, end } = kept.o.read(from, n);
        return { data, offset: BigInt(offset), nextOffset: BigInt(offset + data.length), endOffset: BigInt(end), ended: kept.ended };
      },
      triggerCheckpoint: (req, ctx) => this.triggerCheckpoint(req, ctx),
    });
  }

  // ---- checkpoints ----

  /**
   * triggerCheckpoint asks the named attempts for their state (see the
   * proto) and answers once each gave it or declined; the wait is bounded
   * by the call's deadline (DEADLINE_EXCEEDED) and by each attempt's end.
   */
  private async triggerCheckpoint(req: TriggerCheckpointRequest, ctx: HandlerContext): Promise<TriggerCheckpointResponse> {
    const fields = Worker.jobFields(req.jobId, req.jobMasterToken);
    if (req.checkpointId === 0n) fields.push({ path: "checkpoint_id", description: "required" });
    if (req.attempts.length === 0) fields.push({ path: "attempts", description: "required" });
    req.attempts.forEach((a, i) => a.vertexId === "" && fields.push({ path: `attempts[${i}].vertex_id`, description: "required" }));
    if (fields.length > 0) throw badRequest(fields);
    const check = this.checkJobMaster(req.jobId, req.jobMasterToken, ctx.signal);
    if (check) await check;
    this.follow(req.jobId, req.jobMasterToken);
    const acks = req.attempts.map((a) => {
      const t = this.slots.find((s) => s.jobId === req.jobId && s.task && sameAttempt(s.task.req.attempt, a))?.task;
      if (!t || !sameToken(t.token, req.jobMasterToken) || t.ended || t.state !== ExecutionState.RUNNING) {
        return Promise.resolve(
          create(CheckpointAckSchema, { attempt: a, declined: `the attempt is not running under this JobMaster on TaskExecutor ${this.id}` }),
        );
      }
      return this.snapshot(t, req.checkpointId);
    });
    let onAbort: () => void = () => {};
    const expired = new Promise<never>((_, reject) => {
      onAbort = () =>
        reject(new ConnectError(`checkpoint ${req.checkpointId}: waiting for the tasks' state: ${String(ctx.signal.reason)}`, Code.DeadlineExceeded));
      if (ctx.signal.aborted) onAbort();
      else ctx.signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return create(TriggerCheckpointResponseSchema, { acks: await Promise.race([Promise.all(acks), expired]) });
    } finally {
      ctx.signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * snapshot returns the attempt's answer to checkpoint id, asking its
   * task once per id (a repeat waits for the same answer). A task that
   * registered no function answers with the state it was restored from:
   * it has not said it keeps any other.
   */
  private snapshot(t: RunningTask, id: bigint): Promise<CheckpointAck> {
    if (t.snapshot?.id === id) return t.snapshot.ack;
    const a = t.req.attempt;
    const fn = t.checkpointFn;
    let ack: Promise<CheckpointAck>;
    if (!fn) {
      ack = Promise.resolve(create(CheckpointAckSchema, { attempt: a, state: subtaskState(a, stateOf(t.req.restoredState)) }));
    } else {
      const declined = (why: string) => create(CheckpointAckSchema, { attempt: a, declined: why });
      const signal = t.ending.signal;
      let end: () => void = () => {};
      const ended = new Promise<CheckpointAck>((resolve) => {
        end = () => resolve(declined(`the attempt ended before it gave its state for checkpoint ${id} on TaskExecutor ${this.id}`));
      });
      if (signal.aborted) end();
      else signal.addEventListener("abort", end, { once: true });
      const given = Promise.resolve()
        .then(() => fn(id, signal))
        .then(
          (st) => {
            if (st?.pointer && st.data !== undefined) return declined(`the task gave both state bytes and a pointer for checkpoint ${id}; give one`);
            return create(CheckpointAckSchema, { attempt: a, state: subtaskState(a, st ?? undefined) });
          },
          (e: unknown) => declined(`the task declined checkpoint ${id} on TaskExecutor ${this.id}: ${e instanceof Error ? e.message : String(e)}`),
        );
      ack = Promise.race([given, ended]).finally(() => signal.removeEventListener("abort", end));
    }
    t.snapshot = { id, ack };
    return ack;
  }
}
