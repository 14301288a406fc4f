// JobMasterService (job_master_service.proto) for every JobMaster of this
// process, at one address: each call is routed to its job's JobMaster and
// fenced by its token; liveness is one heartbeat per TaskExecutor for all
// jobs (HeartbeatFromTaskExecutor), judged on the monotonic clock.
import { Code, type ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { performance } from "node:perf_hooks";
import {
  JobMasterService,
  TaskExecutorJobAction,
  TaskExecutorJobAnswerSchema,
  type DisconnectTaskExecutorRequest,
  type HeartbeatFromTaskExecutorRequest,
  type JobMasterServiceHeartbeatRequest,
  type JobMasterServiceRegisterTaskExecutorRequest,
  type OfferSlotsRequest,
  type TaskExecutorJobAnswer,
  type UpdateTaskExecutionStateRequest,
  type UpdateTaskExecutionStatesOfJobsRequest,
  type UpdateTaskExecutionStatesRequest,
} from "./gen/jobplane/cluster/v1/job_master_service_pb.js";
import { ItemErrorSchema, type ItemError } from "./gen/jobplane/v1/error_pb.js";
import type { TaskExecutionStatus } from "./gen/jobplane/v1/execution_pb.js";
import type { FencingToken } from "./gen/jobplane/v1/leadership_pb.js";
import { guardAll, invalidArgument, jpError, reasonOf, type Guard, type Violation } from "./errors.js";
import { judge, notLeaderOf, notRegistered, reasonEnum, requireCurrent } from "./fencing.js";
import type { JobMaster } from "./jobmaster.js";

/** A stall of the process longer than this gives every TaskExecutor a full timeout again. */
const STALL_MS = 300;

export class JobMasters {
  private readonly masters = new Map<string, JobMaster>();
  /** When each TaskExecutor was last heard (any call from it), monotonic. */
  private readonly lastHeard = new Map<string, number>();
  private readonly addresses = new Map<string, string>();
  /** When a task lease was last granted to each TaskExecutor (monotonic), for the membership's removals. */
  private readonly leases = new Map<string, number>();
  private lastTick = performance.now();

  constructor(
    private readonly timeoutMs: () => number,
    private readonly intervalMs: () => number,
    private readonly leaseRemainingMs: () => number,
    /** The task lease to grant now: 0 while the leadership does not certainly hold. */
    private readonly taskLeaseMs: () => number,
  ) {
    setInterval(() => this.tick(), 100).unref();
  }

  add(jm: JobMaster): void {
    this.masters.get(jm.jobId)?.stop("a newer grant of the job");
    this.masters.set(jm.jobId, jm);
  }

  remove(jm: JobMaster): void {
    if (this.masters.get(jm.jobId) === jm) this.masters.delete(jm.jobId);
  }

  stopAll(why: string): void {
    for (const jm of this.masters.values()) jm.stop(why);
    this.masters.clear();
  }

  get(jobId: string): JobMaster | undefined {
    return this.masters.get(jobId);
  }

  /** A task lease was granted to the TaskExecutor now (a heartbeat answer, a registration, a deployment). */
  leaseGranted(teId: string): void {
    if (this.taskLeaseMs() > 0) this.leases.set(teId, performance.now());
  }

  /** When a task lease was last granted to the TaskExecutor, if one was. */
  leaseGrantedAt(teId: string): number | undefined {
    return this.leases.get(teId);
  }

  teAddress(teId: string): string | undefined {
    return this.addresses.get(teId);
  }

  /** A TaskExecutor a JobMaster adopted attempts from: monitored from now on. */
  learn(teId: string, address: string): void {
    this.heard(teId, address);
  }

  private heard(teId: string, address?: string): void {
    this.lastHeard.set(teId, performance.now());
    if (address) this.addresses.set(teId, address);
  }

  private tick(): void {
    const now = performance.now();
    if (now - this.lastTick > STALL_MS) {
      // This process stood still: it could not hear anyone meanwhile.
      for (const k of this.lastHeard.keys()) this.lastHeard.set(k, now);
    }
    this.lastTick = now;
    const timeout = this.timeoutMs();
    for (const [teId, at] of this.lastHeard) {
      if (now - at <= timeout) continue;
      // Forgotten: its next heartbeat is asked to be full.
      this.lastHeard.delete(teId);
      for (const jm of this.masters.values()) jm.teLost(teId, `silent for ${Math.round(now - at)} ms`);
    }
    for (const jm of [...this.masters.values()]) {
      if (jm.stopped) this.remove(jm);
      else jm.yieldIfWaiting();
    }
  }

  /** The job's JobMaster, if the token is its current one; the contract's refusal otherwise. */
  private master(jobId: string, token: FencingToken | undefined): JobMaster {
    const election = `job/${jobId}`;
    const jm = this.masters.get(jobId);
    if (!jm || jm.stopped) {
      if (judge(token, token) === "malformed") requireCurrent(token, undefined, election, "job_master_token");
      throw notLeaderOf(election);
    }
    requireCurrent(token, jm.token, election, "job_master_token");
    return jm;
  }

  private required(fields: [string, unknown][]): void {
    const v: Violation[] = fields.filter(([, x]) => !x).map(([field]) => ({ field, description: "required" }));
    if (v.length > 0) throw invalidArgument(v);
  }

  private timeouts(teId: string) {
    const lease = this.taskLeaseMs();
    this.leaseGranted(teId);
    return {
      heartbeatInterval: durationFromMs(this.intervalMs()),
      heartbeatTimeout: durationFromMs(this.timeoutMs()),
      taskLease: lease > 0 ? durationFromMs(lease) : undefined,
    };
  }

  async registerTaskExecutor(req: JobMasterServiceRegisterTaskExecutorRequest) {
    this.required([["job_id", req.jobId], ["job_master_token", req.jobMasterToken], ["task_executor_id", req.taskExecutorId], ["address", req.address]]);
    const jm = this.master(req.jobId, req.jobMasterToken);
    this.heard(req.taskExecutorId, req.address);
    jm.registered.add(req.taskExecutorId);
    return this.timeouts(req.taskExecutorId);
  }

  async offerSlots(req: OfferSlotsRequest) {
    this.required([["job_id", req.jobId], ["job_master_token", req.jobMasterToken], ["task_executor_id", req.taskExecutorId]]);
    const jm = this.master(req.jobId, req.jobMasterToken);
    if (!req.address && !jm.registered.has(req.taskExecutorId)) {
      throw notRegistered(`TaskExecutor ${req.taskExecutorId} is not registered with the JobMaster`, { task_executor_id: req.taskExecutorId });
    }
    this.heard(req.taskExecutorId, req.address || undefined);
    const accepted = jm.offer(req.taskExecutorId, req.offers);
    return { accepted, ...this.timeouts(req.taskExecutorId) };
  }

  /** One state change, as UpdateTaskExecutionState takes it; EXECUTION_NOT_FOUND for an attempt the JobMaster does not know. */
  private take(jm: JobMaster, teId: string, status: TaskExecutionStatus): void {
    const st = jm.find(status.attempt);
    if (!st) {
      const a = status.attempt;
      throw jpError(Code.NotFound, "EXECUTION_NOT_FOUND", `the JobMaster knows no attempt ${a?.vertexId}[${a?.subtaskIndex}]#${a?.attemptNumber}`, {
        job_id: jm.jobId,
      });
    }
    jm.update(teId, st, status);
  }

  async updateTaskExecutionState(req: UpdateTaskExecutionStateRequest) {
    this.required([["job_id", req.jobId], ["job_master_token", req.jobMasterToken], ["task_executor_id", req.taskExecutorId], ["status", req.status?.attempt]]);
    const jm = this.master(req.jobId, req.jobMasterToken);
    this.heard(req.taskExecutorId);
    this.take(jm, req.taskExecutorId, req.status!);
    return {};
  }

  /** The changes of one job, in order; the refused ones by index. */
  private takeAll(jm: JobMaster, teId: string, statuses: TaskExecutionStatus[]): ItemError[] {
    const refused: ItemError[] = [];
    statuses.forEach((s, index) => {
      try {
        this.take(jm, teId, s);
      } catch (e) {
        refused.push(itemError(index, e));
      }
    });
    return refused;
  }

  async updateTaskExecutionStates(req: UpdateTaskExecutionStatesRequest) {
    this.required([["job_id", req.jobId], ["job_master_token", req.jobMasterToken], ["task_executor_id", req.taskExecutorId]]);
    const missing = req.statuses.findIndex((s) => !s.attempt);
    if (missing >= 0) throw invalidArgument([{ field: `statuses[${missing}].attempt`, description: "required" }]);
    const jm = this.master(req.jobId, req.jobMasterToken);
    this.heard(req.taskExecutorId);
    return { refused: this.takeAll(jm, req.taskExecutorId, req.statuses) };
  }

  async updateTaskExecutionStatesOfJobs(req: UpdateTaskExecutionStatesOfJobsRequest) {
    const v: Violation[] = [];
    if (!req.taskExecutorId) v.push({ field: "task_executor_id", description: "required" });
    req.jobs.forEach((j, i) => {
      if (!j.jobId) v.push({ field: `jobs[${i}].job_id`, description: "required" });
      j.statuses.forEach((s, k) => {
        if (!s.attempt) v.push({ field: `jobs[${i}].statuses[${k}].attempt`, description: "required" });
      });
    });
    if (v.length > 0) throw invalidArgument(v);
    this.heard(req.taskExecutorId);
    const refused: ItemError[] = [];
    const results = req.jobs.map((j, index) => {
      let jm: JobMaster;
      try {
        jm = this.master(j.jobId, j.jobMasterToken);
      } catch (e) {
        refused.push(itemError(index, e));
        return { refused: [] };
      }
      return { refused: this.takeAll(jm, req.taskExecutorId, j.statuses) };
    });
    return { refused, results };
  }

  async heartbeat(req: JobMasterServiceHeartbeatRequest) {
    this.required([["job_id", req.jobId], ["job_master_token", req.jobMasterToken], ["task_executor_id", req.taskExecutorId]]);
    const jm = this.master(req.jobId, req.jobMasterToken);
    if (!jm.registered.has(req.taskExecutorId)) {
      throw notRegistered(`TaskExecutor ${req.taskExecutorId} is not registered with the JobMaster`, { task_executor_id: req.taskExecutorId });
    }
    this.heard(req.taskExecutorId);
    for (const s of req.tasks) {
      const st = jm.find(s.attempt);
      if (st) jm.update(req.taskExecutorId, st, s);
    }
    return {};
  }

  /**
   * The per-pair heartbeat: every job the TaskExecutor follows here under
   * its JobMaster's current token is heard (no entry); a job whose JobMaster
   * here is newer is told to FOLLOW it; any other is NOT_LEADER.
   */
  async heartbeatFromTaskExecutor(req: HeartbeatFromTaskExecutorRequest) {
    this.required([["task_executor_id", req.taskExecutorId], ["address", req.address]]);
    const known = this.lastHeard.has(req.taskExecutorId);
    this.heard(req.taskExecutorId, req.address);
    const jobs: TaskExecutorJobAnswer[] = [];
    for (const j of req.jobs) {
      if (!j.following) continue;
      const jm = this.masters.get(j.jobId);
      const verdict = jm && !jm.stopped ? judge(j.jobMasterToken, jm.token) : "none";
      if (verdict === "current") {
        for (const s of j.attempts) {
          const st = jm!.find(s.attempt);
          if (st) jm!.update(req.taskExecutorId, st, s);
        }
        continue;
      }
      if (verdict === "stale") {
        jobs.push(create(TaskExecutorJobAnswerSchema, { jobId: j.jobId, action: TaskExecutorJobAction.FOLLOW, jobMasterToken: jm!.token }));
      } else {
        jobs.push(create(TaskExecutorJobAnswerSchema, { jobId: j.jobId, action: TaskExecutorJobAction.NOT_LEADER }));
      }
    }
    const lease = this.leaseRemainingMs();
    const taskLease = this.taskLeaseMs();
    this.leaseGranted(req.taskExecutorId);
    return {
      fullRequested: !known && !req.full,
      jobs,
      leaseRemaining: lease > 0 ? durationFromMs(Math.floor(lease)) : undefined,
      taskLease: taskLease > 0 ? durationFromMs(taskLease) : undefined,
    };
  }

  async disconnectTaskExecutor(req: DisconnectTaskExecutorRequest) {
    this.required([["job_id", req.jobId], ["job_master_token", req.jobMasterToken], ["task_executor_id", req.taskExecutorId]]);
    const jm = this.master(req.jobId, req.jobMasterToken);
    jm.teLost(req.taskExecutorId, `disconnected: ${req.reason}`);
    return {};
  }

  service(guard: Guard): ServiceImpl<typeof JobMasterService> {
    return guardAll(guard, "JM.", {
      registerTaskExecutor: (r: JobMasterServiceRegisterTaskExecutorRequest) => this.registerTaskExecutor(r),
      offerSlots: (r: OfferSlotsRequest) => this.offerSlots(r),
      updateTaskExecutionState: (r: UpdateTaskExecutionStateRequest) => this.updateTaskExecutionState(r),
      updateTaskExecutionStates: (r: UpdateTaskExecutionStatesRequest) => this.updateTaskExecutionStates(r),
      updateTaskExecutionStatesOfJobs: (r: UpdateTaskExecutionStatesOfJobsRequest) => this.updateTaskExecutionStatesOfJobs(r),
      heartbeatFromTaskExecutor: (r: HeartbeatFromTaskExecutorRequest) => this.heartbeatFromTaskExecutor(r),
      heartbeat: (r: JobMasterServiceHeartbeatRequest) => this.heartbeat(r),
      disconnectTaskExecutor: (r: DisconnectTaskExecutorRequest) => this.disconnectTaskExecutor(r),
    });
  }

}

/** The ItemError a one-item call's error becomes in a batch answer. */
function itemError(index: number, e: unknown): ItemError {
  const { reason, metadata } = reasonOf(e);
  return create(ItemErrorSchema, { index, reason: reasonEnum(reason || "INTERNAL"), message: e instanceof Error ? e.message : String(e), metadata });
}
