// DispatcherService (dispatcher_service.proto).
//
// Everything the Dispatcher knows lives in the HA store; this process keeps
// a copy in memory (`State`), rebuilt from the store on every grant of
// `jobmanager` and dropped the moment the grant ends. Each job runs under a
// JobMaster (src/jobmaster.ts) created on each grant of `job/<id>`; the
// Dispatcher writes the result when the JobMaster reports the job's end.
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { clone, create, toBinary, type DescMessage, type Message, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampNow, type Timestamp } from "@bufbuild/protobuf/wkt";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import {
  DispatcherService,
  GetClusterOverviewResponseSchema,
  JobIdReusePolicy,
  type CancelJobRequest,
  type GetJobRequest,
  type GetJobResultRequest,
  type SubmitJobRequest,
  CancelJobRequestSchema,
  GetJobRequestSchema,
  GetJobResultRequestSchema,
  SubmitJobRequestSchema,
  ListJobsRequestSchema,
  type ListJobsRequest,
  WatchJobRequestSchema,
  PurgeJobRequestSchema,
  type PurgeJobRequest,
  ReportClientHeartbeatRequestSchema,
  type ReportClientHeartbeatRequest,
  ListTaskExecutorsRequestSchema,
  TriggerSavepointRequestSchema,
  type TriggerSavepointRequest,
  ListSavepointsRequestSchema,
  type ListSavepointsRequest,
  ListCheckpointsRequestSchema,
  type ListCheckpointsRequest,
  DeleteSavepointRequestSchema,
  type DeleteSavepointRequest,
  GetTaskOutputRequestSchema,
  type GetTaskOutputRequest,
  type ListTaskExecutorsRequest,
  WatchJobResponseSchema,
  type WatchJobRequest,
} from "./gen/jobplane/v1/dispatcher_service_pb.js";
import {
  CancellationSchema,
  JobDetailsSchema,
  JobResultSchema,
  JobStatus,
  JobStatusSchema,
  JobSummarySchema,
  JobView,
  VertexDetailsSchema,
  type Cancellation,
  type JobResult,
  type JobSummary,
} from "./gen/jobplane/v1/job_pb.js";
import { JobGraphSchema, type JobGraph } from "./gen/jobplane/v1/job_graph_pb.js";
import {
  ExecutionPlanSchema,
  JobResultState,
  type ExecutionPlan,
} from "./gen/jobplane/hastore/v1/ha_store_service_pb.js";
import type { Fence, FencingToken } from "./gen/jobplane/v1/leadership_pb.js";
import type { FailureInfo } from "./gen/jobplane/v1/job_pb.js";
import { SETTINGS } from "./settings.js";
import { JobMaster, VALUE_LIMITS, type JobOutputs, type Placement, type Subtask } from "./jobmaster.js";
import { MAX_INLINE_STATE_BYTES } from "./checkpoints.js";
import { ExecutionState } from "./gen/jobplane/v1/execution_pb.js";
import { teClient, TE_CALL_MS } from "./teclient.js";
import type { JobMasters } from "./jobmasters.js";
import { heartbeatIntervalMs, heartbeatTimeoutMs, type ResourceManager } from "./resourcemanager.js";
import { sameToken } from "./fencing.js";
import { bytesEqual, planDigest } from "./canonical.js";
import { BadRequestSchema } from "./gen/google/rpc/error_details_pb.js";
import {
  invalidArgument,
  jobNotFound,
  jpError,
  notLeader,
  reasonOf,
  type Violation,
  asHandlerError,
  guardAll,
  makeGuard,
  type Guard,
} from "./errors.js";
import { ELECTION, type HAClient, type Leadership } from "./leadership.js";
import {
  LIMITS,
  effectiveParallelism,
  graphViolations,
  jobIdViolation,
  maxBytesViolation,
  unknownFieldViolations,
} from "./validate.js";

/** How long one plan put may take before its outcome counts as unknown. */
const PUT_TIMEOUT_MS = 10_000;
/** ServerTimings.plan_recheck: twice the put timeout. */
const PLAN_RECHECK_MS = 2 * PUT_TIMEOUT_MS;
/** Deadline of other store calls. */
const STORE_TIMEOUT_MS = 3_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const TERMINAL = new Set([JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED]);

function statusName(s: JobStatus): string {
  return JobStatusSchema.values.find((v) => v.number === s)?.name ?? String(s);
}

/** A job as this leader knows it: from its plan, and its result once written. */
interface Job {
  jobId: string;
  runId: string;
  name: string;
  digest: Uint8Array;
  submittedBy: string;
  submitTime: Timestamp | undefined;
  /** The plan, while it is in the store (unset for jobs known by their result alone). */
  plan: ExecutionPlan | undefined;
  status: JobStatus;
  statusTime: Timestamp;
  cancelRequested: boolean;
  cancellation: Cancellation | undefined;
  /** A RequestJobCancel of this job failed without a known outcome. */
  cancelOutcomeUnknown?: boolean;
  /** Set once the result is durable (CreateDirtyJobResult succeeded, or read from the store). */
  result: JobResult | undefined;
  /** Whether some SubmitJob answer of this leader said `created = true` for this run. */
  answeredCreated: boolean;
  /** Woken when the job's status changes or the leadership ends. */
  waiters: Set<() => void>;
  /** Status changes under this leader, numbered from 1: the last WATCH_WINDOW are kept for WatchJob's resume tokens. */
  changes: { seq: number; summary: JobSummary }[];
  seq: number;
  /** The JobMaster running the job under this process's current grant of `job/<id>`. */
  master: JobMaster | undefined;
  restartCount: number;
  /** The failure of the latest restart (or of the end, once FAILED). */
  failure: FailureInfo | undefined;
  /** Set once the job's end is being written: nothing runs it any more. */
  finishing: boolean;
  /** The result's cleanup is done (plan deleted, result marked clean). */
  clean: boolean;
  /** An attached job's client heartbeat deadline (monotonic ms), if it has one. */
  clientDeadline: number | undefined;
  /** Accepted by this grant and never run yet: its first JobMaster has nothing to adopt. */
  fresh: boolean;
  /** Once it ended under this grant: its last JobMaster, kept for GetJob's final details until `until` (monotonic). */
  final?: { master: JobMaster; until: number };
}

/** ServerTimings.watch_resume_window. */
const WATCH_WINDOW = 64;
/** ServerTimings.slot_yield. */
const SLOT_YIELD_MS = 5000;
/** ServerTimings.stream_heartbeat. */
const STREAM_HEARTBEAT_MS = 10_000;

/** How long, and within how many subtasks over all ended jobs, an ended job's final details are kept (JobDetails.vertices). */
const FINAL_DETAILS_MS = 10 * 60_000;
const FINAL_DETAILS_MAX_SUBTASKS = 1_000_000;

/** What one grant of `jobmanager` knows; replaced on every grant. */
class State {
  readonly jobs = new Map<string, Job>();
  /** Ended jobs whose final details are kept, oldest first. */
  private readonly finals: Job[] = [];
  private finalSubtasks = 0;
  /** Plans whose put failed, kept so that a retry puts the very same message. */
  readonly pendingPlans = new Map<string, ExecutionPlan>();
  private readonly locks = new Map<string, Promise<unknown>>();
  active = true;

  constructor(readonly fence: Fence) {}

  /** Keeps an ended job's last JobMaster for GetJob, in memory, within the time and subtask bounds. */
  keepFinal(job: Job, master: JobMaster): void {
    const now = performance.now();
    job.final = { master, until: now + FINAL_DETAILS_MS };
    this.finals.push(job);
    this.finalSubtasks += master.subtasks.length;
    while (this.finals.length > 0) {
      const oldest = this.finals[0]!;
      const f = oldest.final;
      if (f && f.until > now && this.finalSubtasks <= FINAL_DETAILS_MAX_SUBTASKS) break;
      this.finals.shift();
      this.finalSubtasks -= f?.master.subtasks.length ?? 0;
      if (f) oldest.final = undefined;
    }
  }

  /** Runs `fn` after every earlier call for the same job id (one submission or cancel at a time). */
  withLock<T>(jobId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(jobId) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.locks.set(jobId, tail);
    void tail.then(() => {
      if (this.locks.get(jobId) === tail) this.locks.delete(jobId);
    });
    return next;
  }
}

/** The JobMaster whose state GetJob shows: the running one, or an ended job's last one while its final details are kept. */
function shownMaster(job: Job): JobMaster | undefined {
  if (job.master && !job.result) return job.master;
  const f = job.final;
  if (f && f.until > performance.now()) return f.master;
  return job.result ? undefined : job.master;
}

function wake(job: Job): void {
  for (const w of [...job.waiters]) w();
}

function setStatus(job: Job, s: JobStatus): void {
  if (job.status === s) return;
  job.status = s;
  job.statusTime = timestampNow();
  record(job);
  wake(job);
}

/** Records the job's current summary as a status change, for WatchJob. */
function record(job: Job): void {
  job.seq++;
  job.changes.push({ seq: job.seq, summary: summaryOf(job) });
  if (job.changes.length > WATCH_WINDOW) job.changes.shift();
}

interface ResumeToken {
  j: string; // job id
  r: string; // run id
  e: string; // the leader's epoch: tokens of another leader start over
  s: number; // the change's number
}

function encodeResume(t: ResumeToken): string {
  return Buffer.from(JSON.stringify(t), "utf8").toString("base64url");
}

function decodeResume(s: string): ResumeToken | undefined {
  try {
    const t = JSON.parse(Buffer.from(s, "base64url").toString("utf8")) as ResumeToken;
    if (typeof t.j !== "string" || typeof t.r !== "string" || typeof t.e !== "string" || typeof t.s !== "number") return undefined;
    return t;
  } catch {
    return undefined;
  }
}


/** What this grant knows of a job beyond its plan or result, as it starts: nothing yet. */
function newJobState() {
  return {
    answeredCreated: false,
    waiters: new Set(),
    changes: [],
    seq: 0,
    master: undefined,
    restartCount: 0,
    failure: undefined,
    finishing: false,
    clean: false,
    clientDeadline: undefined,
    fresh: false,
  } satisfies Partial<Job>;
}

function jobFromPlan(plan: ExecutionPlan): Job {
  return {
    jobId: plan.jobId,
    runId: plan.runId,
    name: plan.jobGraph?.name ?? "",
    digest: plan.digest,
    submittedBy: plan.submittedBy,
    submitTime: plan.submitTime,
    plan,
    status: JobStatus.INITIALIZING,
    statusTime: plan.submitTime ?? timestampNow(),
    cancelRequested: false,
    cancellation: undefined,
    result: undefined,
    ...newJobState(),
  };
}

function jobFromResult(r: JobResult): Job {
  return {
    jobId: r.jobId,
    runId: r.runId,
    name: r.name,
    digest: r.planDigest,
    submittedBy: r.submittedBy,
    submitTime: r.submitTime,
    plan: undefined,
    status: r.status,
    statusTime: r.endTime ?? timestampNow(),
    cancelRequested: r.status === JobStatus.CANCELED,
    cancellation: r.cancellation,
    result: r,
    ...newJobState(),
  };
}

function summaryOf(job: Job): JobSummary {
  return create(JobSummarySchema, {
    jobId: job.jobId,
    name: job.name,
    status: job.status,
    submitTime: job.submitTime,
    statusTime: job.statusTime,
    endTime: job.result?.endTime,
    restartCount: job.result?.restartCount ?? job.restartCount,
    failure: job.result ? (job.status === JobStatus.FAILED ? job.result.failure : undefined) : job.failure,
    taskCounts: shownMaster(job)?.taskCounts() ?? [],
    submittedBy: job.submittedBy,
    runId: job.runId,
    cancellation: job.cancellation,
  });
}

/** The plan's graph: as submitted, with the parallelism overrides applied (not normalized). */
function withOverrides(graph: JobGraph): JobGraph {
  const g = clone(JobGraphSchema, graph);
  const par = effectiveParallelism(graph);
  g.vertices.forEach((v, i) => (v.parallelism = par[i]!));
  return g;
}

export class Dispatcher {
  private state: State | undefined;

  constructor(
    private readonly store: HAClient,
    private readonly leadership: () => Leadership,
    private readonly rm: ResourceManager,
    private readonly masters: JobMasters,
    private readonly log: (msg: string) => void,
  ) {
    setInterval(() => this.checkClients(), 200).unref();
  }

  // ---- leadership ---------------------------------------------------------

  /** Recovery on a grant of `jobmanager` (conformance README, "Recovery"). */
  async recover(fence: Fence): Promise<void> {
    const st = new State(fence);
    const toClean: string[] = [];
    // 1. Every result entry, every page; dirty ones get their cleanup finished.
    let page = "";
    do {
      const r = await this.store.listJobResultEntries({ pageToken: page }, { timeoutMs: STORE_TIMEOUT_MS });
      for (const e of r.entries) {
        if (!e.result) continue;
        const job = jobFromResult(e.result);
        job.clean = e.state !== JobResultState.DIRTY;
        st.jobs.set(e.result.jobId, job);
        if (e.state === JobResultState.DIRTY) toClean.push(e.result.jobId);
      }
      page = r.nextPageToken;
    } while (page);
    for (const id of toClean) {
      await this.cleanup(st, id);
      st.jobs.get(id)!.clean = true;
    }
    // 2. Every plan, every page; a plan we cannot read is retried (by
    // failing the whole recovery, which the caller retries), never skipped.
    const ids: string[] = [];
    page = "";
    do {
      const r = await this.store.listExecutionPlans({ pageToken: page }, { timeoutMs: STORE_TIMEOUT_MS });
      ids.push(...r.jobIds);
      page = r.nextPageToken;
    } while (page);
    const toCancel: Job[] = [];
    for (const id of ids) {
      if (st.jobs.has(id)) continue; // it has a result: never run again
      let r;
      try {
        r = await this.store.getExecutionPlan({ jobId: id }, { timeoutMs: STORE_TIMEOUT_MS });
      } catch (e) {
        if (reasonOf(e).reason === "EXECUTION_PLAN_NOT_FOUND") continue; // deleted since the listing
        throw e;
      }
      if (!r.plan) continue;
      const job = jobFromPlan(r.plan);
      if (r.cancelRequested) {
        job.cancelRequested = true;
        job.cancellation = r.cancellation;
        job.status = JobStatus.CANCELLING;
        toCancel.push(job);
      }
      this.attach(job);
      st.jobs.set(id, job);
    }
    // A recovery of a grant that has ended since (a newer one is being
    // recovered, or none holds) installs nothing: a late one must not
    // replace the state of the current grant.
    if (!this.leadership().holds(fence.token)) return;
    if (this.state) this.state.active = false;
    this.state = st;
    if (fence.token) this.rm.lead(fence.token);
    this.log(`recovered ${st.jobs.size} jobs (${toCancel.length} to cancel, ${toClean.length} cleaned up)`);
    // A recovered job whose cancel was requested ends CANCELED, deploying nothing.
    for (const job of toCancel) void this.finishJob(st, job, JobStatus.CANCELED);
    for (const job of st.jobs.values()) {
      if (!job.result && !job.cancelRequested) void this.leadership().campaignJob(job.jobId);
    }
  }

  /**
   * A grant of `job/<id>` (README "Each grant of job/<id>"): check for a
   * result first (a job with one never runs again), then publish the
   * address, then run the job's JobMaster under this grant's token.
   */
  jobGranted(jobId: string, fence: Fence): void {
    const st = this.state;
    const job = st?.jobs.get(jobId);
    if (st && job && job.cancelRequested && !job.result && !job.finishing) {
      // Canceled while no JobMaster of ours ran it: it ends CANCELED, deploying nothing.
      void this.finishJob(st, job, JobStatus.CANCELED);
      return;
    }
    if (!st || !job || job.result || job.cancelRequested || job.finishing || !job.plan) {
      void this.leadership().withdrawJob(jobId);
      return;
    }
    void (async () => {
      try {
        const r = await this.store.getJobResultEntry({ jobId }, { timeoutMs: STORE_TIMEOUT_MS });
        // A result exists: the job never runs again, and is shown as it says.
        if (r.entry?.result) this.takeResult(st, job, r.entry.result);
        void this.leadership().withdrawJob(jobId);
        return;
      } catch (e) {
        if (reasonOf(e).reason !== "JOB_RESULT_NOT_FOUND") {
          this.log(`job/${jobId} granted, but its result could not be read: ${String(e)}; giving it back`);
          void this.leadership().withdrawJob(jobId).then(() => {
            // Unless the job ended meanwhile: nothing campaigns after its result.
            if (st.active && !job.finishing && !job.result) void this.leadership().campaignJob(jobId);
          });
          return;
        }
      }
      if (!st.active || job.result) return;
      try {
        await this.store.confirmLeadership({ fence, address: this.leadership().address }, { timeoutMs: STORE_TIMEOUT_MS });
      } catch (e) {
        this.log(`ConfirmLeadership job/${jobId} failed: ${String(e)}`);
        if (reasonOf(e).reason === "STALE_FENCING_TOKEN") return; // the grant is over already
      }
      if (!st.active || job.result || job.finishing || job.cancelRequested || !job.plan) return;
      this.startMaster(st, job, fence.token!);
    })();
  }

  private startMaster(st: State, job: Job, token: FencingToken): void {
    job.master?.stop("a newer grant of the job");
    const jm: JobMaster = new JobMaster(job.plan!, token, {
      address: this.leadership().address,
      rm: this.rm,
      heartbeatTimeoutMs: () => heartbeatTimeoutMs(this.leadership().sessionTtlMs),
      heartbeatIntervalMs: () => heartbeatIntervalMs(this.leadership().sessionTtlMs),
      slotYieldMs: SLOT_YIELD_MS,
      store: this.store,
      taskLeaseMs: SETTINGS.taskLeaseMs,
      learnTe: (id, address) => this.masters.learn(id, address),
      leaseGranted: (id) => this.masters.leaseGranted(id),
      leading: () => st.active && this.state === st && this.leadership().isLeader(),
      teAddress: (id) => this.masters.teAddress(id),
      log: this.log,
    }, {
      status: (s) => {
        if (job.master === jm && !job.finishing && !job.cancelRequested) setStatus(job, s);
      },
      restarted: (failure) => {
        if (job.master !== jm || job.finishing) return;
        job.restartCount++;
        job.failure = failure;
        record(job);
        wake(job);
      },
      ended: (status, failure, history, placements, outputs) => {
        if (job.master !== jm) return;
        void this.finishJob(st, job, status, failure, history, placements, outputs);
      },
    }, !job.fresh);
    job.fresh = false;
    job.master = jm;
    this.masters.add(jm);
    void jm.start();
  }

  /** This process's grant of `job/<id>` ended: its JobMaster stops at once. */
  jobLost(jobId: string, token: FencingToken): void {
    const job = this.state?.jobs.get(jobId);
    const jm = job?.master;
    if (!job || !jm || !sameToken(jm.token, token)) return;
    jm.stop("the job's leadership ended");
    this.masters.remove(jm);
    job.master = undefined;
  }

  /** The grant ended: forget everything at once, and wake every waiter. */
  lost(): void {
    const st = this.state;
    this.state = undefined;
    this.rm.lost();
    this.masters.stopAll("the process no longer leads");
    if (!st) return;
    st.active = false;
    for (const job of st.jobs.values()) {
      job.master = undefined;
      wake(job);
    }
  }

  /** The current state if this process leads now; NOT_LEADER otherwise. */
  private async leaderState(): Promise<State> {
    const st = this.state;
    if (st && st.active && this.leadership().isLeader()) return st;
    throw notLeader(await this.leadership().knownLeader());
  }

  /** NOT_LEADER when this process does not lead now; for checks made before a handler runs. */
  async notLeaderError(): Promise<ConnectError | undefined> {
    try {
      await this.leaderState();
      return undefined;
    } catch (e) {
      return e as ConnectError;
    }
  }

  /** Checked again just before answering: a call that outlived the leadership answers NOT_LEADER. */
  private async stillLeader(st: State): Promise<void> {
    if (st.active && this.state === st && this.leadership().isLeader()) return;
    throw notLeader(await this.leadership().knownLeader());
  }

  /** A fenced write was refused as stale: step down, answer NOT_LEADER. */
  private async stale(st: State): Promise<never> {
    const t = st.fence.token;
    if (t) this.leadership().staleWrite(t);
    throw notLeader(await this.leadership().knownLeader());
  }

  // ---- end of a job ---------------------------------------------------------

  /**
   * Writes the job's result, then cleans up (README "End of a job"): the
   * result (retried as the very same message), the plan's deletion, the
   * result marked clean.
   */
  private async finishJob(
    st: State,
    job: Job,
    status: JobStatus,
    failure?: FailureInfo,
    history: FailureInfo[] = [],
    placements: Placement[] = [],
    outputs?: JobOutputs,
  ): Promise<void> {
    if (job.finishing) return;
    job.finishing = true;
    this.leadership().retireJob(job.jobId);
    await this.leadership().campaignSettled(job.jobId);
    // Nothing of a job runs after its result: a candidacy of ours in
    // `job/<id>` that is not granted ends first (Withdraw answered), for the
    // store could otherwise grant it after the result
    // (CreateDirtyJobResult; QUESTIONS.md 44).
    await this.leadership().endCandidacy(job.jobId);
    job.master?.stop("the job ended");
    const build = (s: JobStatus) =>
      create(JobResultSchema, {
        jobId: job.jobId,
        status: s,
        submitTime: job.submitTime,
        endTime: timestampNow(),
        name: job.name,
        planDigest: job.digest,
        submittedBy: job.submittedBy,
        runId: job.runId,
        cancellation: s === JobStatus.CANCELED ? job.cancellation : undefined,
        failure: s === JobStatus.FAILED ? failure : undefined,
        restartCount: job.restartCount,
        // Most recent first, at most 16 (JobDetails.exception_history).
        exceptionHistory: [...history].reverse().slice(0, 16),
        values: outputs?.values ?? [],
        accumulators: outputs?.accumulators ?? {},
        placements: placements.map((p) => ({
          attempt: { vertexId: p.vertexId, subtaskIndex: p.subtaskIndex, attemptNumber: p.attemptNumber },
          taskExecutorId: p.taskExecutorId,
          taskExecutorAddress: p.taskExecutorAddress,
        })),
      });
    let result = build(status);
    while (st.active) {
      try {
        await this.store.createDirtyJobResult({ fence: st.fence, result }, { timeoutMs: STORE_TIMEOUT_MS });
        break;
      } catch (e) {
        const { reason } = reasonOf(e);
        if (reason === "STALE_FENCING_TOKEN") {
          await this.stale(st).catch(() => undefined);
          return;
        }
        if (reason === "JOB_CANCEL_REQUESTED") {
          result = build(JobStatus.CANCELED);
          continue;
        }
        if (reason === "JOB_RESULT_EXISTS") {
          // Another result is there (one of ours whose answer was lost was the
          // same message and would have succeeded): it is the job's.
          try {
            const r = await this.store.getJobResultEntry({ jobId: job.jobId }, { timeoutMs: STORE_TIMEOUT_MS });
            if (r.entry?.result) {
              result = r.entry.result;
              break;
            }
          } catch {
            /* retried below */
          }
        }
        this.log(`CreateDirtyJobResult(${job.jobId}) failed: ${String(e)}; retrying`);
        await sleep(300);
      }
    }
    if (!st.active) return;
    this.takeResult(st, job, result);
    try {
      await this.cleanup(st, job.jobId);
      job.clean = true;
    } finally {
      // After the result write nothing campaigns for the job.
      await this.leadership().withdrawJob(job.jobId);
    }
  }

  /**
   * Takes a result that is durable in the store into the job's state, once:
   * from then on every answer shows the job as the result says
   * (`terminal-is-final`). A job not ending here yet stops at once and gets
   * its end done by finishJob (whose write finds this result, then cleans up).
   */
  private takeResult(st: State, job: Job, result: JobResult): void {
    if (job.result || !st.active) return;
    // Its final details, as its last JobMaster left them (JobDetails.vertices).
    if (job.master) st.keepFinal(job, job.master);
    job.result = result;
    job.cancellation = result.cancellation ?? job.cancellation;
    job.plan = undefined;
    setStatus(job, result.status);
    if (!job.finishing) {
      job.master?.stop("the job has a result");
      void this.finishJob(st, job, result.status);
    }
  }

  /** Deletes the plan, then marks the result clean; retried until done or the grant ends. */
  private async cleanup(st: State, jobId: string): Promise<void> {
    for (const step of ["delete-plan", "mark-clean"] as const) {
      for (;;) {
        if (!st.active) throw new Error("leadership ended during cleanup");
        try {
          if (step === "delete-plan") {
            await this.store.deleteExecutionPlan({ fence: st.fence, jobId }, { timeoutMs: STORE_TIMEOUT_MS });
          } else {
            await this.store.markJobResultClean({ fence: st.fence, jobId }, { timeoutMs: STORE_TIMEOUT_MS });
          }
          break;
        } catch (e) {
          if (reasonOf(e).reason === "STALE_FENCING_TOKEN") {
            const t = st.fence.token;
            if (t) this.leadership().staleWrite(t);
            throw e;
          }
          this.log(`${step}(${jobId}) failed: ${String(e)}; retrying`);
          await sleep(300);
        }
      }
    }
  }

  // ---- handlers -------------------------------------------------------------

  /** Refuses unknown fields, with one violation each (DispatcherService comment). */
  private refuseUnknown(desc: DescMessage, req: Message, more: (Violation | undefined)[] = []): void {
    const v = [...unknownFieldViolations(desc, req), ...more.filter((x): x is Violation => x !== undefined)];
    if (v.length > 0) throw invalidArgument(v);
  }

  private lookup(st: State, jobId: string, runId: string): Job {
    const job = st.jobs.get(jobId);
    if (!job) throw jobNotFound(jobId, runId);
    if (runId && job.runId !== runId) throw jobNotFound(jobId, runId);
    return job;
  }

  async submitJob(req: SubmitJobRequest): Promise<{ jobId: string; created: boolean; status: JobStatus; runId: string }> {
    const st = await this.leaderState();
    const graph = req.jobGraph;
    const size = graph ? toBinary(JobGraphSchema, graph).length : 0;
    this.refuseUnknown(SubmitJobRequestSchema, req, [jobIdViolation(req.jobId), ...graphViolations(graph, size)]);
    const digest = planDigest(graph!);
    const jobId = req.jobId;

    const answer = await st.withLock(jobId, async () => {
      const existing = st.jobs.get(jobId);
      if (existing?.result && req.idReuse === JobIdReusePolicy.ALLOW_DUPLICATE) {
        // The kept result is removed, and the submission starts a new run.
        await this.removeResult(st, existing);
      } else if (existing) {
        return this.answerExisting(existing, digest);
      }
      this.checkInvokables(graph!);
      await this.checkSavepoint(graph!);
      // A retry of a submission whose put failed puts the very same plan.
      let plan = st.pendingPlans.get(jobId);
      if (!plan || !bytesEqual(plan.digest, digest)) {
        plan = create(ExecutionPlanSchema, {
          jobId,
          jobGraph: withOverrides(graph!),
          digest,
          submitTime: timestampNow(),
          submittedBy: "",
          runId: randomUUID(),
        });
      }
      try {
        await this.store.putExecutionPlan({ fence: st.fence, plan }, { timeoutMs: PUT_TIMEOUT_MS });
      } catch (e) {
        const { reason } = reasonOf(e);
        if (reason === "STALE_FENCING_TOKEN") return this.stale(st);
        if (reason === "JOB_RESULT_EXISTS") {
          const r = await this.store.getJobResultEntry({ jobId }, { timeoutMs: STORE_TIMEOUT_MS });
          if (!r.entry?.result) throw jpError(Code.Unavailable, "STORE_UNAVAILABLE", "job result vanished");
          const job = jobFromResult(r.entry.result);
          st.jobs.set(jobId, job);
          return this.answerExisting(job, digest);
        }
        // Read the plan back: did the put take effect, or is another plan there?
        let stored: ExecutionPlan | undefined;
        try {
          stored = (await this.store.getExecutionPlan({ jobId }, { timeoutMs: STORE_TIMEOUT_MS })).plan;
        } catch (e2) {
          if (reasonOf(e2).reason === "EXECUTION_PLAN_NOT_FOUND") {
            st.pendingPlans.set(jobId, plan);
            this.recheck(st, plan);
            throw jpError(Code.Unavailable, "PERSIST_FAILED", `the plan was not persisted: ${String(e)}`, { job_id: jobId });
          }
          st.pendingPlans.set(jobId, plan);
          this.recheck(st, plan);
          throw jpError(Code.Unavailable, "PERSIST_OUTCOME_UNKNOWN", `could not tell whether the plan was persisted: ${String(e)}`, { job_id: jobId });
        }
        if (!stored) throw jpError(Code.Unavailable, "PERSIST_OUTCOME_UNKNOWN", "empty plan read back", { job_id: jobId });
        if (stored.runId !== plan.runId) {
          // Not ours (a late put of an earlier attempt, say): it is the job.
          const job = jobFromPlan(stored);
          st.jobs.set(jobId, job);
          st.pendingPlans.delete(jobId);
          void this.leadership().campaignJob(jobId);
          return this.answerExisting(job, digest, true);
        }
        // Ours: the put took effect although its answer failed.
      }
      st.pendingPlans.delete(jobId);
      const job = jobFromPlan(plan);
      job.answeredCreated = true;
      job.fresh = true;
      this.attach(job);
      st.jobs.set(jobId, job);
      // Only now, with the plan durable, the job's election.
      void this.leadership().campaignJob(jobId);
      return { jobId, created: true, status: job.status, runId: job.runId };
    });
    await this.stillLeader(st);
    return answer;
  }

  /** JobConfig.restore_from_savepoint MUST name a savepoint that exists when the job is submitted. */
  private async checkSavepoint(graph: JobGraph): Promise<void> {
    const id = graph.config?.restoreFromSavepoint;
    if (!id) return;
    try {
      await this.store.getSavepoint({ savepointId: id }, { timeoutMs: STORE_TIMEOUT_MS });
    } catch (e) {
      if (reasonOf(e).reason === "SAVEPOINT_NOT_FOUND") {
        throw jpError(Code.NotFound, "SAVEPOINT_NOT_FOUND", `savepoint ${id} not found`, { savepoint_id: id });
      }
      throw e;
    }
  }

  /**
   * A new job naming an invokable no registered TaskExecutor offers is
   * refused (JobVertex.invokable), while at least one is registered.
   */
  private checkInvokables(graph: JobGraph): void {
    const offered = this.rm.offeredInvokables();
    if (this.rm.overview().taskExecutors === 0) return;
    const missing = new Set<string>();
    const violations: Violation[] = [];
    graph.vertices.forEach((vx, i) => {
      if (offered.has(vx.invokable)) return;
      missing.add(vx.invokable);
      violations.push({ field: `job_graph.vertices[${i}].invokable`, description: `no registered TaskExecutor offers ${vx.invokable}` });
    });
    if (violations.length === 0) return;
    throw jpError(
      Code.FailedPrecondition,
      "INVOKABLE_NOT_OFFERED",
      `no registered TaskExecutor offers ${[...missing].sort().join(", ")}`,
      { invokables: [...missing].sort().join(","), offered: [...offered].sort().join(",") },
      [{ desc: BadRequestSchema, value: { fieldViolations: violations } }],
    );
  }

  /** The answer to a submission of an id this leader knows (SubmitJob's idempotency rules). */
  private answerExisting(job: Job, digest: Uint8Array, mayCreate = false) {
    if (!bytesEqual(job.digest, digest)) {
      throw jpError(Code.AlreadyExists, "JOB_ALREADY_EXISTS", `job ${job.jobId} exists with another plan`, {
        job_id: job.jobId,
        globally_terminated: String(job.result !== undefined),
      });
    }
    // A plan that landed late, which no answer called created yet, is this
    // submission's creation.
    const created = mayCreate && !job.answeredCreated && !job.result;
    if (created) job.answeredCreated = true;
    return { jobId: job.jobId, created, status: job.status, runId: job.runId };
  }

  /**
   * After a failed or unknown put: keep reading the store for the plan for
   * plan_recheck; a plan that shows up is the job's, and runs once.
   */
  private recheck(st: State, plan: ExecutionPlan): void {
    const until = Date.now() + PLAN_RECHECK_MS;
    void (async () => {
      while (st.active && Date.now() < until) {
        await sleep(1000);
        if (!st.active || st.jobs.has(plan.jobId)) return;
        try {
          const r = await this.store.getExecutionPlan({ jobId: plan.jobId }, { timeoutMs: STORE_TIMEOUT_MS });
          if (!r.plan) continue;
          await st.withLock(plan.jobId, async () => {
            if (!st.active || st.jobs.has(plan.jobId)) return;
            st.jobs.set(plan.jobId, jobFromPlan(r.plan!));
            st.pendingPlans.delete(plan.jobId);
            void this.leadership().campaignJob(plan.jobId);
            this.log(`plan of ${plan.jobId} found after a failed put: the job is accepted`);
          });
          return;
        } catch {
          /* not there (yet), or unreadable: look again */
        }
      }
    })();
  }

  async getJob(req: GetJobRequest) {
    const st = await this.leaderState();
    const v: (Violation | undefined)[] = [
      jobIdViolation(req.jobId),
      maxBytesViolation(req.runId, 128, "run_id"),
    ];
    if (req.pageSize < 0) v.push({ field: "page_size", description: "must not be negative" });
    const full = req.view === JobView.FULL;
    // A page token names a place in the job's subtasks (job, position): it
    // holds across a change of leader, and across implementations.
    let from = 0;
    if (full && req.pageToken !== "") {
      const t = decodeSubtaskToken(req.pageToken);
      if (!t || t.jobId !== req.jobId) {
        v.push({ field: "page_token", description: "not a page token this server issued for the job" });
      } else {
        from = t.pos;
      }
    }
    this.refuseUnknown(GetJobRequestSchema, req, v);
    const job = this.lookup(st, req.jobId, req.runId);
    const jm = shownMaster(job);
    const details = create(JobDetailsSchema, {
      summary: summaryOf(job),
      exceptionHistory: job.result?.exceptionHistory ?? [...(jm?.history ?? [])].reverse().slice(0, 16),
    });
    let nextPageToken = "";
    if (jm) {
      // Reported completed only once the store write succeeded (src/checkpoints.ts).
      details.checkpoints = jm.checkpoints.stats();
      if (!full) {
        details.vertices = jm.graph.vertices.map((vx) => vertexDetails(jm, vx.id, []));
      } else {
        const size = Math.min(req.pageSize === 0 ? 1000 : req.pageSize, LIMITS.maxSubtaskPageSize);
        const page = jm.subtasks.slice(from, from + size);
        const ids = [...new Set(page.map((s) => s.vertex.id))];
        details.vertices = ids.map((id) => vertexDetails(jm, id, page.filter((s) => s.vertex.id === id)));
        if (from === 0) details.jobGraph = jm.graph;
        if (from + size < jm.subtasks.length) nextPageToken = encodeSubtaskToken({ jobId: job.jobId, pos: from + size });
      }
    }
    await this.stillLeader(st);
    return { job: details, nextPageToken };
  }

  async cancelJob(req: CancelJobRequest) {
    const st = await this.leaderState();
    this.refuseUnknown(CancelJobRequestSchema, req, [
      jobIdViolation(req.jobId),
      maxBytesViolation(req.runId, 128, "run_id"),
      maxBytesViolation(req.requestId, 128, "request_id"),
      maxBytesViolation(req.reason, 1024, "reason"),
    ]);
    const answer = await st.withLock(req.jobId, async () => {
      const job = this.lookup(st, req.jobId, req.runId);
      if (job.result) return this.cancelAnswerFromResult(job.result);
      if (job.status === JobStatus.CANCELLING || job.status === JobStatus.CANCELED) return { status: job.status };
      const cancellation = create(CancellationSchema, {
        requestId: req.requestId,
        reason: req.reason,
        requestedTime: timestampNow(),
      });
      try {
        // Recorded before anything is done for the request.
        await this.store.requestJobCancel({ fence: st.fence, jobId: job.jobId, cancellation }, { timeoutMs: STORE_TIMEOUT_MS });
      } catch (e) {
        const { reason } = reasonOf(e);
        if (reason === "STALE_FENCING_TOKEN") return this.stale(st);
        if (reason === "JOB_TERMINAL") {
          // The result came first (one of ours whose answer was lost, say):
          // read it into the job's state before answering as it says, so
          // that no later answer shows the job otherwise. Unread, nothing
          // was recorded nor told: the client cancels again.
          let result: JobResult | undefined;
          try {
            result = (await this.store.getJobResultEntry({ jobId: job.jobId }, { timeoutMs: STORE_TIMEOUT_MS })).entry?.result;
          } catch (e2) {
            this.log(`CancelJob(${job.jobId}): the result the store holds could not be read: ${String(e2)}`);
          }
          if (!result) {
            throw jpError(Code.Unavailable, "CANCEL_NOT_RECORDED", `job ${job.jobId} has a result that could not be read yet; retry`, {
              job_id: job.jobId,
            });
          }
          this.takeResult(st, job, result);
          await this.stillLeader(st);
          return this.cancelAnswerFromResult(job.result ?? result);
        }
        // The store may have kept it all the same (a lost answer): a later
        // request reads the kept one back.
        job.cancelOutcomeUnknown = true;
        throw jpError(Code.Unavailable, "CANCEL_NOT_RECORDED", `the cancellation could not be recorded: ${String(e)}`, {
          job_id: job.jobId,
        });
      }
      if (job.cancelOutcomeUnknown && !job.cancellation) {
        // The first request's cancellation is the one kept (RequestJobCancel):
        // read it back, so that JobSummary.cancellation shows it.
        try {
          const r = await this.store.getExecutionPlan({ jobId: job.jobId }, { timeoutMs: STORE_TIMEOUT_MS });
          if (r.cancellation) job.cancellation = r.cancellation;
        } catch {
          // Ours, then; a new leader reads the kept one on recovery.
        }
      }
      job.cancelRequested = true;
      job.cancellation ??= cancellation;
      setStatus(job, JobStatus.CANCELLING);
      // Its JobMaster cancels the attempts and then ends it; a job that no
      // JobMaster runs here yet ends at once, deploying nothing.
      if (job.master && !job.master.stopped) job.master.cancel();
      else void this.finishJob(st, job, JobStatus.CANCELED);
      return { status: JobStatus.CANCELLING };
    });
    await this.stillLeader(st);
    return answer;
  }

  private cancelAnswerFromResult(r: JobResult) {
    if (r.status === JobStatus.CANCELED) return { status: JobStatus.CANCELED };
    throw jpError(Code.FailedPrecondition, "JOB_TERMINAL", `job ${r.jobId} is already ${statusName(r.status)}`, {
      job_id: r.jobId,
      status: statusName(r.status),
    });
  }

  async getJobResult(req: GetJobResultRequest, ctx: HandlerContext) {
    const st = await this.leaderState();
    this.refuseUnknown(GetJobResultRequestSchema, req, [
      jobIdViolation(req.jobId),
      maxBytesViolation(req.runId, 128, "run_id"),
    ]);
    const job = this.lookup(st, req.jobId, req.runId);
    if (!job.result && !req.wait) {
      throw jpError(Code.FailedPrecondition, "JOB_NOT_TERMINAL", `job ${job.jobId} is not globally terminal`, {
        job_id: job.jobId,
        status: statusName(job.status),
      });
    }
    while (!job.result) {
      await new Promise<void>((resolve, reject) => {
        const done = () => {
          job.waiters.delete(done);
          ctx.signal.removeEventListener("abort", onAbort);
          resolve();
        };
        const onAbort = () => {
          job.waiters.delete(done);
          const deadline = ctx.timeoutMs() !== undefined && ctx.timeoutMs()! <= 0;
          reject(
            deadline
              ? jpError(Code.DeadlineExceeded, "CALL_DEADLINE_EXCEEDED", "the job did not end before the call's deadline", { job_id: job.jobId })
              : jpError(Code.Canceled, "CALL_CANCELED", "the call was canceled", { job_id: job.jobId }),
          );
        };
        if (ctx.signal.aborted) return onAbort();
        job.waiters.add(done);
        ctx.signal.addEventListener("abort", onAbort, { once: true });
      });
      await this.stillLeader(st); // also when the leadership ended while waiting
    }
    await this.stillLeader(st);
    return { result: job.result };
  }

  /**
   * WatchJob: the current summary, then each status change, ending after a
   * globally terminal one; a heartbeat after STREAM_HEARTBEAT_MS of silence;
   * NOT_LEADER once the leadership ends.
   */
  async *watchJob(req: WatchJobRequest, ctx: HandlerContext): AsyncGenerator<MessageInitShape<typeof WatchJobResponseSchema>> {
    let st: State;
    let job: Job;
    let next: number; // the number of the next change to send
    let coalesced = false;
    try {
      st = await this.leaderState();
      const v: (Violation | undefined)[] = [jobIdViolation(req.jobId), maxBytesViolation(req.runId, 128, "run_id")];
      const tok = req.resumeToken ? decodeResume(req.resumeToken) : undefined;
      if (req.resumeToken && (!tok || tok.j !== req.jobId)) {
        v.push({ field: "resume_token", description: "not a resume token of this job" });
      }
      this.refuseUnknown(WatchJobRequestSchema, req, v);
      job = this.lookup(st, req.jobId, req.runId);
      const epoch = String(st.fence.token?.epoch ?? 0n);
      const oldest = job.changes[0]?.seq ?? job.seq + 1;
      if (tok && tok.r === job.runId && tok.e === epoch && tok.s + 1 >= oldest && tok.s <= job.seq) {
        next = tok.s + 1; // exactly after the token's message
      } else {
        coalesced = tok !== undefined;
        next = -1; // start with the current summary
      }
    } catch (e) {
      throw asHandlerError(e, "WatchJob", this.log);
    }
    const epoch = String(st.fence.token?.epoch ?? 0n);
    const token = (seq: number) => encodeResume({ j: job.jobId, r: job.runId, e: epoch, s: seq });
    if (next === -1) {
      await this.stillLeader(st).catch((e) => { throw asHandlerError(e, "WatchJob", this.log); });
      yield { event: { case: "job", value: summaryOf(job) }, resumeToken: token(job.seq), coalesced };
      if (TERMINAL.has(job.status) && job.result) return;
      next = job.seq + 1;
    }
    for (;;) {
      // Resumed after the terminal message: nothing follows it.
      if (job.result && next > job.seq) return;
      const pending = job.changes.filter((c) => c.seq >= next);
      if (pending.length > 0 && pending[0]!.seq !== next) {
        throw jpError(Code.Unavailable, "STREAM_BEHIND", "the stream fell behind the job's changes; resume", { job_id: job.jobId });
      }
      for (const c of pending) {
        await this.stillLeader(st).catch((e) => { throw asHandlerError(e, "WatchJob", this.log); });
        yield { event: { case: "job", value: c.summary }, resumeToken: token(c.seq) };
        next = c.seq + 1;
        if (TERMINAL.has(c.summary.status)) return;
      }
      const woke = await new Promise<"change" | "idle">((resolve, reject) => {
        const done = () => finish("change");
        const timer = setTimeout(() => finish("idle"), STREAM_HEARTBEAT_MS);
        const onAbort = () => {
          reject(jpError(Code.Canceled, "CALL_CANCELED", "the stream was canceled"));
          finish("change"); // cleanup only: the promise is already rejected
        };
        function finish(why: "change" | "idle") {
          clearTimeout(timer);
          job.waiters.delete(done);
          ctx.signal.removeEventListener("abort", onAbort);
          resolve(why);
        }
        job.waiters.add(done);
        ctx.signal.addEventListener("abort", onAbort, { once: true });
      });
      await this.stillLeader(st).catch((e) => { throw asHandlerError(e, "WatchJob", this.log); });
      if (woke === "idle") yield { event: { case: "heartbeat", value: {} } };
    }
  }

  async listJobs(req: ListJobsRequest) {
    const st = await this.leaderState();
    const v: Violation[] = [];
    if (req.pageSize < 0) v.push({ field: "page_size", description: "must not be negative" });
    let after: { t: bigint; id: string } | undefined;
    if (req.pageToken) {
      after = decodeListToken(req.pageToken);
      if (!after) v.push({ field: "page_token", description: "not a page token this server issued" });
    }
    this.refuseUnknown(ListJobsRequestSchema, req, v);
    const size = Math.min(req.pageSize === 0 ? 100 : req.pageSize, LIMITS.maxListPageSize);
    const key = (j: Job) => ({ t: tsNanos(j.submitTime), id: j.jobId });
    // Newest submission first; ties by job id, so a token names one place.
    const before = (a: { t: bigint; id: string }, b: { t: bigint; id: string }) =>
      a.t !== b.t ? a.t > b.t : a.id < b.id;
    const all = [...st.jobs.values()]
      .filter((j) => req.statuses.length === 0 || req.statuses.includes(j.status))
      .filter((j) => !after || before(after, key(j)))
      .sort((a, b) => (before(key(a), key(b)) ? -1 : 1));
    const page = all.slice(0, size);
    const last = page[page.length - 1];
    const nextPageToken = all.length > size && last ? encodeListToken(key(last)) : "";
    await this.stillLeader(st);
    return { jobs: page.map(summaryOf), nextPageToken };
  }

  /**
   * Removes a clean result from the store (DeleteJobResultEntry, fenced)
   * and forgets the job: its id is free. JOB_RESULT_DIRTY while the cleanup
   * is not done.
   */
  private async removeResult(st: State, job: Job): Promise<void> {
    if (!job.clean) {
      throw jpError(Code.FailedPrecondition, "JOB_RESULT_DIRTY", `the cleanup of job ${job.jobId} is not done yet; retry`, { job_id: job.jobId });
    }
    try {
      await this.store.deleteJobResultEntry({ fence: st.fence, jobId: job.jobId }, { timeoutMs: STORE_TIMEOUT_MS });
    } catch (e) {
      const { reason } = reasonOf(e);
      if (reason === "STALE_FENCING_TOKEN") return this.stale(st);
      if (reason === "JOB_RESULT_DIRTY" || reason === "EXECUTION_PLAN_NOT_DELETED") {
        throw jpError(Code.FailedPrecondition, "JOB_RESULT_DIRTY", `the cleanup of job ${job.jobId} is not done yet; retry`, { job_id: job.jobId });
      }
      throw jpError(Code.Unavailable, "STORE_UNAVAILABLE", `the result could not be removed: ${String(e)}`, { job_id: job.jobId });
    }
    if (st.jobs.get(job.jobId) === job) st.jobs.delete(job.jobId);
  }

  async purgeJob(req: PurgeJobRequest) {
    const st = await this.leaderState();
    this.refuseUnknown(PurgeJobRequestSchema, req, [jobIdViolation(req.jobId), maxBytesViolation(req.runId, 128, "run_id")]);
    await st.withLock(req.jobId, async () => {
      const job = this.lookup(st, req.jobId, req.runId);
      if (!job.result) {
        throw jpError(Code.FailedPrecondition, "JOB_NOT_TERMINAL", `job ${job.jobId} is not globally terminal`, {
          job_id: job.jobId,
          status: statusName(job.status),
        });
      }
      await this.removeResult(st, job);
    });
    await this.stillLeader(st);
    return {};
  }

  /** Starts an attached job's client heartbeat deadline (JobConfig.client_heartbeat_timeout). */
  private attach(job: Job): void {
    const t = clientTimeoutMs(job);
    job.clientDeadline = t > 0 ? performance.now() + t : undefined;
  }

  async reportClientHeartbeat(req: ReportClientHeartbeatRequest) {
    const st = await this.leaderState();
    this.refuseUnknown(ReportClientHeartbeatRequestSchema, req, [jobIdViolation(req.jobId)]);
    const job = this.lookup(st, req.jobId, "");
    const t = clientTimeoutMs(job);
    await this.stillLeader(st);
    if (t <= 0 || job.result || job.cancelRequested) return {};
    job.clientDeadline = performance.now() + t;
    return { timeout: durationFromMs(t) };
  }

  /** Cancels attached jobs whose client stopped heartbeating (ReportClientHeartbeat). */
  private checkClients(): void {
    const st = this.state;
    if (!st || !st.active || !this.leadership().isLeader()) return;
    const now = performance.now();
    for (const job of st.jobs.values()) {
      if (job.clientDeadline === undefined || job.result || job.cancelRequested || now < job.clientDeadline) continue;
      job.clientDeadline = undefined;
      this.log(`job ${job.jobId}: no client heartbeat in time; canceling`);
      void this.cancelJob(create(CancelJobRequestSchema, { jobId: job.jobId, reason: "the client stopped heartbeating" })).catch((e) => {
        this.log(`canceling ${job.jobId} for its client: ${String(e)}`);
        job.clientDeadline = performance.now() + 1000; // try again
      });
    }
  }

  /** GetTaskOutput: read at the TaskExecutor where the attempt ran, found by the job's placements. */
  async getTaskOutput(req: GetTaskOutputRequest) {
    const st = await this.leaderState();
    const v: (Violation | undefined)[] = [jobIdViolation(req.jobId)];
    if (req.offset < 0n) v.push({ field: "offset", description: "must not be negative" });
    if (req.maxBytes < 0) v.push({ field: "max_bytes", description: "must not be negative" });
    if (req.attemptNumber !== undefined && req.attemptNumber < 0) v.push({ field: "attempt_number", description: "must not be negative" });
    if (!req.vertexId) v.push({ field: "vertex_id", description: "required" });
    this.refuseUnknown(GetTaskOutputRequestSchema, req, v);
    const job = this.lookup(st, req.jobId, "");
    const graph = job.plan?.jobGraph;
    const placements: Placement[] = job.master
      ? job.master.placements()
      : (job.result?.placements ?? []).map((p) => ({
          vertexId: p.attempt?.vertexId ?? "",
          subtaskIndex: p.attempt?.subtaskIndex ?? 0,
          attemptNumber: p.attempt?.attemptNumber ?? 0,
          taskExecutorId: p.taskExecutorId,
          taskExecutorAddress: p.taskExecutorAddress,
        }));
    if (graph) {
      const vertex = graph.vertices.find((x) => x.id === req.vertexId);
      if (!vertex) throw invalidArgument([{ field: "vertex_id", description: `the job has no vertex ${req.vertexId}` }]);
      if (req.subtaskIndex < 0 || req.subtaskIndex >= Math.max(1, vertex.parallelism)) {
        throw invalidArgument([{ field: "subtask_index", description: `out of the vertex's range 0..${vertex.parallelism - 1}` }]);
      }
    }
    const mine = placements.filter((p) => p.vertexId === req.vertexId && p.subtaskIndex === req.subtaskIndex);
    const p = req.attemptNumber === undefined ? mine[mine.length - 1] : mine.find((x) => x.attemptNumber === req.attemptNumber);
    const notFound = () =>
      jpError(Code.NotFound, "EXECUTION_NOT_FOUND", `no output of ${req.vertexId}[${req.subtaskIndex}] is known`, { job_id: req.jobId });
    if (!p) throw notFound();
    let r;
    try {
      r = await teClient(p.taskExecutorAddress).getTaskOutput(
        {
          jobId: req.jobId,
          attempt: { vertexId: p.vertexId, subtaskIndex: p.subtaskIndex, attemptNumber: p.attemptNumber },
          offset: req.offset,
          maxBytes: req.maxBytes,
        },
        { timeoutMs: TE_CALL_MS },
      );
    } catch (e) {
      if (reasonOf(e).reason === "EXECUTION_NOT_FOUND") throw notFound();
      throw jpError(Code.Unavailable, "TASK_EXECUTOR_UNREACHABLE", `TaskExecutor ${p.taskExecutorId} did not answer: ${String(e)}`, {
        task_executor_id: p.taskExecutorId,
      });
    }
    await this.stillLeader(st);
    return {
      data: r.data,
      offset: r.offset,
      nextOffset: r.nextOffset,
      droppedBytes: r.offset > req.offset ? r.offset - req.offset : 0n,
      endOffset: r.endOffset,
      ended: r.ended,
      attemptNumber: p.attemptNumber,
      taskExecutorId: p.taskExecutorId,
    };
  }

  /** TriggerSavepoint: answered once the savepoint is durable; with `stop`, the job is then canceled. */
  async triggerSavepoint(req: TriggerSavepointRequest) {
    const st = await this.leaderState();
    this.refuseUnknown(TriggerSavepointRequestSchema, req, [jobIdViolation(req.jobId)]);
    const job = this.lookup(st, req.jobId, "");
    const terminal = () =>
      jpError(Code.FailedPrecondition, "JOB_TERMINAL", `job ${job.jobId} is ending or ended`, { job_id: job.jobId, status: statusName(job.status) });
    if (job.result || job.finishing || job.cancelRequested) throw terminal();
    const jm = job.master;
    if (!jm || jm.stopped) {
      throw jpError(Code.Aborted, "SAVEPOINT_FAILED", `job ${job.jobId} has no running JobMaster here yet; retry`, { job_id: job.jobId });
    }
    let sp;
    try {
      sp = await jm.checkpoints.savepoint();
    } catch (e) {
      throw jpError(Code.Aborted, "SAVEPOINT_FAILED", e instanceof Error ? e.message : String(e), { job_id: job.jobId });
    }
    if (req.stop) {
      await this.cancelJob(create(CancelJobRequestSchema, { jobId: job.jobId, reason: `stopped with savepoint ${sp.savepointId}` }));
    }
    await this.stillLeader(st);
    return { savepoint: { savepointId: sp.savepointId, jobId: job.jobId, checkpoint: sp.info } };
  }

  /** ListCheckpoints: the completed checkpoints the store keeps for a job that has a plan, in id order. */
  async listCheckpoints(req: ListCheckpointsRequest) {
    const st = await this.leaderState();
    this.refuseUnknown(ListCheckpointsRequestSchema, req, [jobIdViolation(req.jobId)]);
    const job = this.lookup(st, req.jobId, "");
    const checkpoints: { checkpointId: bigint; triggerTime?: Timestamp; ackTime?: Timestamp; stateBytes: bigint; subtaskStates: number }[] = [];
    if (!job.result) {
      // A job with a result has no checkpoints left in the store (they go with its plan).
      let pageToken = "";
      do {
        const r = await this.store.listCheckpoints({ jobId: job.jobId, pageSize: 100, pageToken }, { timeoutMs: STORE_TIMEOUT_MS });
        for (const c of r.checkpoints) {
          checkpoints.push({
            checkpointId: c.checkpointId,
            triggerTime: c.triggerTime,
            ackTime: c.ackTime,
            stateBytes: c.states.reduce((n, x) => n + (x.state.case === "inline" ? BigInt(x.state.value.length) : 0n), 0n),
            subtaskStates: c.states.filter((x) => x.state.case !== undefined).length,
          });
        }
        pageToken = r.nextPageToken;
      } while (pageToken !== "");
    }
    await this.stillLeader(st);
    return { checkpoints, stats: job.master?.checkpoints.stats() };
  }

  async listSavepoints(req: ListSavepointsRequest) {
    const st = await this.leaderState();
    const v: Violation[] = [];
    if (req.pageSize < 0) v.push({ field: "page_size", description: "must not be negative" });
    this.refuseUnknown(ListSavepointsRequestSchema, req, v);
    const r = await this.store.listSavepoints({ jobId: req.jobId, pageSize: req.pageSize, pageToken: req.pageToken }, { timeoutMs: STORE_TIMEOUT_MS });
    await this.stillLeader(st);
    return {
      savepoints: r.savepoints.map((sp) => ({
        savepointId: sp.savepointId,
        jobId: sp.jobId,
        checkpoint: {
          checkpointId: sp.checkpointId,
          triggerTime: sp.triggerTime,
          ackTime: sp.ackTime,
          stateBytes: sp.states.reduce((n, x) => n + (x.state.case === "inline" ? BigInt(x.state.value.length) : 0n), 0n),
          subtaskStates: sp.states.filter((x) => x.state.case !== undefined).length,
        },
      })),
      nextPageToken: r.nextPageToken,
    };
  }

  async deleteSavepoint(req: DeleteSavepointRequest) {
    const st = await this.leaderState();
    const v: Violation[] = [];
    if (!req.savepointId) v.push({ field: "savepoint_id", description: "required" });
    this.refuseUnknown(DeleteSavepointRequestSchema, req, v);
    try {
      await this.store.deleteSavepoint({ fence: st.fence, savepointId: req.savepointId }, { timeoutMs: STORE_TIMEOUT_MS });
    } catch (e) {
      if (reasonOf(e).reason === "STALE_FENCING_TOKEN") return this.stale(st);
      throw e;
    }
    await this.stillLeader(st);
    return {};
  }

  async listTaskExecutors(req: ListTaskExecutorsRequest) {
    const st = await this.leaderState();
    const v: Violation[] = [];
    if (req.pageSize < 0) v.push({ field: "page_size", description: "must not be negative" });
    let after: string | undefined;
    if (req.pageToken) {
      after = decodeTeToken(req.pageToken);
      if (after === undefined) v.push({ field: "page_token", description: "not a ListTaskExecutors page token" });
    }
    this.refuseUnknown(ListTaskExecutorsRequestSchema, req, v);
    const size = Math.min(req.pageSize === 0 ? 100 : req.pageSize, LIMITS.maxListPageSize);
    const all = this.rm.taskExecutors().filter((te) => after === undefined || te.id > after);
    const page = all.slice(0, size);
    const last = page[page.length - 1];
    await this.stillLeader(st);
    return {
      taskExecutors: page.map((te) => ({
        taskExecutorId: te.id,
        address: te.address,
        invokables: te.invokables,
        slotCount: te.slots.length,
        freeSlotCount: te.slots.filter((s) => !s.jobId).length,
        allocatedSlots: te.slots.filter((s) => s.jobId).map((s) => ({ slotIndex: s.index, jobId: s.jobId })),
        silence: durationFromMs(Math.max(0, Math.round(te.silenceMs))),
      })),
      nextPageToken: all.length > size && last ? encodeTeToken(last.id) : "",
    };
  }

  async getClusterOverview() {
    const st = await this.leaderState();
    let running = 0, finished = 0, canceled = 0, failed = 0;
    for (const j of st.jobs.values()) {
      if (!j.result) running++;
      else if (j.status === JobStatus.FINISHED) finished++;
      else if (j.status === JobStatus.CANCELED) canceled++;
      else if (j.status === JobStatus.FAILED) failed++;
    }
    const ttl = this.leadership().sessionTtlMs;
    const cluster = this.rm.overview();
    const res = create(GetClusterOverviewResponseSchema, {
      leader: { election: ELECTION, address: this.leadership().address, token: st.fence.token },
      taskExecutorCount: cluster.taskExecutors,
      slotCount: cluster.slots,
      freeSlotCount: cluster.free,
      runningJobCount: running,
      finishedJobCount: finished,
      canceledJobCount: canceled,
      failedJobCount: failed,
      limits: {
        maxRequestBytes: BigInt(LIMITS.maxRequestBytes),
        maxResponseBytes: BigInt(LIMITS.maxResponseBytes),
        maxGraphBytes: BigInt(LIMITS.maxGraphBytes),
        maxVertices: LIMITS.maxVertices,
        maxSubtasks: LIMITS.maxSubtasks,
        maxListPageSize: LIMITS.maxListPageSize,
        maxSubtaskPageSize: LIMITS.maxSubtaskPageSize,
        // Task values and accumulators are kept under these (QUESTIONS.md 32).
        maxInlineStateBytes: BigInt(MAX_INLINE_STATE_BYTES),
        maxCheckpointBytes: BigInt(LIMITS.maxGraphBytes),
        maxTaskValueBytes: BigInt(VALUE_LIMITS.maxTaskValueBytes),
        maxResultValueBytes: BigInt(VALUE_LIMITS.maxResultValueBytes),
        maxAccumulators: VALUE_LIMITS.maxAccumulators,
      },
      timings: {
        sessionTtl: durationFromMs(ttl),
        takeover: durationFromMs(5000),
        jobRegrant: durationFromMs(5000),
        revocationNotice: durationFromMs(5000),
        taskCancel: durationFromMs(5000),
        slotYield: durationFromMs(SLOT_YIELD_MS),
        streamHeartbeat: durationFromMs(10_000),
        watchResumeWindow: 64,
        resultRetention: durationFromMs(0),
        // Below two thirds of the session TTL, as ServerTimings requires.
        taskExecutorHeartbeatTimeout: durationFromMs(heartbeatTimeoutMs(ttl)),
        taskLease: durationFromMs(SETTINGS.taskLeaseMs),
        planRecheck: durationFromMs(PLAN_RECHECK_MS),
      },
      // This server does not list the other candidates: unset (see the field's comment).
    });
    await this.stillLeader(st);
    return res;
  }

  /** Wraps a handler so that every error leaving it carries our ErrorInfo. */
  readonly guard: Guard = makeGuard((m) => this.log(m));

  /** The service as connect-node serves it; every method answers (UNIMPLEMENTED with an ErrorInfo where not built yet). */
  service(): ServiceImpl<typeof DispatcherService> {
    return {
      ...guardAll(this.guard, "", {
        submitJob: (r: SubmitJobRequest) => this.submitJob(r),
        getJob: (r: GetJobRequest) => this.getJob(r),
        listJobs: (r: ListJobsRequest) => this.listJobs(r),
        cancelJob: (r: CancelJobRequest) => this.cancelJob(r),
        getJobResult: (r: GetJobResultRequest, ctx: HandlerContext) => this.getJobResult(r, ctx),
        getClusterOverview: () => this.getClusterOverview(),
        purgeJob: (r: PurgeJobRequest) => this.purgeJob(r),
        reportClientHeartbeat: (r: ReportClientHeartbeatRequest) => this.reportClientHeartbeat(r),
        listTaskExecutors: (r: ListTaskExecutorsRequest) => this.listTaskExecutors(r),
        getTaskOutput: (r: GetTaskOutputRequest) => this.getTaskOutput(r),
        listCheckpoints: (r: ListCheckpointsRequest) => this.listCheckpoints(r),
        triggerSavepoint: (r: TriggerSavepointRequest) => this.triggerSavepoint(r),
        listSavepoints: (r: ListSavepointsRequest) => this.listSavepoints(r),
        deleteSavepoint: (r: DeleteSavepointRequest) => this.deleteSavepoint(r),
      }),
      // eslint-disable-next-line require-yield
      watchJob: (r: WatchJobRequest, ctx: HandlerContext) => this.watchJob(r, ctx),
    };
  }
}


/** A vertex's details from its JobMaster: the whole vertex's counts, and the page's subtasks. */
function vertexDetails(jm: JobMaster, vertexId: string, page: Subtask[]) {
  const all = jm.subtasks.filter((s) => s.vertex.id === vertexId);
  const vx = all[0]!.vertex;
  return create(VertexDetailsSchema, {
    vertexId,
    name: vx.name || vx.id,
    parallelism: all.length,
    taskCounts: jm.taskCounts(all),
    state: vertexState(all.map((s) => s.state)),
    subtasks: page.map((s) => ({
      subtaskIndex: s.index,
      attemptNumber: s.attempt,
      state: s.state,
      taskExecutorId: s.teId,
      failure: s.failure,
      stateTime: s.stateTime,
    })),
  });
}

/** VertexDetails.state: the common state, else the first of these some subtask is in, else CREATED. */
function vertexState(states: ExecutionState[]): ExecutionState {
  if (states.every((x) => x === states[0])) return states[0] ?? ExecutionState.CREATED;
  for (const x of [ExecutionState.FAILED, ExecutionState.CANCELING, ExecutionState.CANCELED, ExecutionState.RUNNING, ExecutionState.INITIALIZING, ExecutionState.DEPLOYING, ExecutionState.SCHEDULED]) {
    if (states.includes(x)) return x;
  }
  return ExecutionState.CREATED;
}

/** GetJob's subtasks: `<job_id>/<n>`, n the page's next subtask in listing order. */
function encodeSubtaskToken(t: { jobId: string; pos: number }): string {
  return Buffer.from(`${t.jobId}/${t.pos}`, "utf8").toString("base64url");
}

function decodeSubtaskToken(s: string): { jobId: string; pos: number } | undefined {
  const b = fromToken(s);
  const m = b && /^([A-Za-z0-9_-]{1,64})\/(\d{1,9})$/.exec(b.toString("utf8"));
  return m ? { jobId: m[1]!, pos: Number(m[2]) } : undefined;
}

function clientTimeoutMs(job: Job): number {
  const d = job.plan?.jobGraph?.config?.clientHeartbeatTimeout;
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

function tsNanos(t: Timestamp | undefined): bigint {
  return t ? t.seconds * 1_000_000_000n + BigInt(t.nanos) : 0n;
}

// Page tokens in the form every implementation writes (DispatcherService,
// "Page tokens"): base64url without padding.

/** The bytes of a base64url token without padding, or undefined if it is not one. */
function fromToken(s: string): Buffer | undefined {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) return undefined;
  const b = Buffer.from(s, "base64url");
  return b.toString("base64url") === s ? b : undefined;
}

/** ListJobs: 0x01, the submit time in Unix nanoseconds (8 bytes big-endian), the job id. */
function encodeListToken(k: { t: bigint; id: string }): string {
  const b = Buffer.alloc(9);
  b[0] = 0x01;
  b.writeBigUInt64BE(BigInt.asUintN(64, k.t), 1);
  return Buffer.concat([b, Buffer.from(k.id, "utf8")]).toString("base64url");
}

function decodeListToken(s: string): { t: bigint; id: string } | undefined {
  const b = fromToken(s);
  if (!b || b.length < 10 || b[0] !== 0x01) return undefined;
  const id = b.subarray(9).toString("utf8");
  return /^[A-Za-z0-9_-]{1,64}$/.test(id) ? { t: BigInt.asIntN(64, b.readBigUInt64BE(1)), id } : undefined;
}

/** ListTaskExecutors: the id of the page's last TaskExecutor. */
function encodeTeToken(id: string): string {
  return Buffer.from(id, "utf8").toString("base64url");
}

function decodeTeToken(s: string): string | undefined {
  const b = fromToken(s);
  return b && b.length > 0 ? b.toString("utf8") : undefined;
}
