// The JobMaster of one job, under one grant of `job/<id>`
// (job_master_service.proto; conformance README "Each grant of job/<id>").
//
// It registers at this process's ResourceManager, declares the slots its
// ready regions need, takes the slots TaskExecutors offer, deploys attempts
// with SubmitTask, follows their states, restarts failed regions under the
// job's restart strategy, and reports the job's end to the Dispatcher, which
// writes the result. A JobMaster is never reused: a new grant gets a new one.
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampNow, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import { performance } from "node:perf_hooks";
import type { ExecutionPlan } from "./gen/jobplane/hastore/v1/ha_store_service_pb.js";
import type { SlotOffer } from "./gen/jobplane/cluster/v1/job_master_service_pb.js";
import { ExecutionState, type ExecutionAttemptId, type TaskExecutionStatus } from "./gen/jobplane/v1/execution_pb.js";
import { FailureInfoSchema, JobStatus, SubtaskValueSchema, type ExecutionStateCount, type FailureInfo, type SubtaskValue } from "./gen/jobplane/v1/job_pb.js";
import { toBinary } from "@bufbuild/protobuf";
import { ResultPartitionType, SchedulingMode, type JobGraph, type JobVertex, type RestartStrategy } from "./gen/jobplane/v1/job_graph_pb.js";
import type { FencingToken } from "./gen/jobplane/v1/leadership_pb.js";
import { reasonOf } from "./errors.js";
import type { ResourceManager } from "./resourcemanager.js";
import type { HAClient } from "./leadership.js";
import { Checkpointer } from "./checkpoints.js";
import { LIMITS } from "./validate.js";
import { teClient, TE_CALL_MS } from "./teclient.js";

export const TERMINAL_EXEC = new Set([ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED]);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How long a canceled or failing job waits for its attempts to report stopped before it ends anyway (within ServerTimings.task_cancel). */
const STOP_WAIT_MS = 3000;

/** Where an attempt was deployed (JobResult.placements). */
export interface Placement {
  vertexId: string;
  subtaskIndex: number;
  attemptNumber: number;
  taskExecutorId: string;
  taskExecutorAddress: string;
}

/** JobResult.placements keeps at most this many attempts per subtask. */
const PLACEMENTS_PER_SUBTASK = 8;

export interface Subtask {
  vertex: JobVertex;
  region: number;
  index: number;
  attempt: number;
  state: ExecutionState;
  stateTime: Timestamp;
  teId: string;
  allocationId: string;
  failure: FailureInfo | undefined;
  /** The latest attempts deployed, oldest first. */
  placements: Placement[];
  /** What its FINISHED attempt returned (TaskExecutionStatus.value and accumulators). */
  finished?: { attempt: number; value: Uint8Array; accumulators: Record<string, bigint> };
}

/** ServerLimits.max_task_value_bytes, max_result_value_bytes, max_accumulators. */
export const VALUE_LIMITS = {
  maxTaskValueBytes: 64 * 1024,
  maxResultValueBytes: 256 * 1024,
  maxAccumulators: 256,
};

/** What a job's FINISHED attempts returned, for its result (JobResult.values, accumulators). */
export interface JobOutputs {
  values: SubtaskValue[];
  accumulators: Record<string, bigint>;
}

interface HeldSlot {
  allocationId: string;
  teId: string;
  slotIndex: number;
  subtask: Subtask | undefined;
}

/** What the JobMaster tells the Dispatcher. */
export interface JobHooks {
  status(s: JobStatus): void;
  restarted(failure: FailureInfo): void;
  /** The job ended; the Dispatcher writes its result. */
  ended(status: JobStatus, failure: FailureInfo | undefined, history: FailureInfo[], placements: Placement[], outputs?: JobOutputs): void;
}

/** The process's side the JobMasters share: the TaskExecutors they heard from, the timings, the leadership's lease. */
export interface JobMasterEnv {
  address: string;
  rm: ResourceManager;
  heartbeatTimeoutMs(): number;
  heartbeatIntervalMs(): number;
  /** ServerTimings.slot_yield. */
  slotYieldMs: number;
  store: HAClient;
  /** The task lease this process grants (ServerTimings.task_lease); 0 for none. */
  taskLeaseMs: number;
  /** A task lease was granted to the TaskExecutor now (SubmitTask's), for the membership's removals. */
  leaseGranted(teId: string): void;
  /** A TaskExecutor's address learnt from the ResourceManager, for calls and heartbeat monitoring. */
  learnTe(teId: string, address: string): void;
  /** Whether this process's leadership certainly holds now (FencingToken rule 1). */
  leading(): boolean;
  teAddress(teId: string): string | undefined;
  log(msg: string): void;
}

function ms(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

export class JobMaster {
  readonly jobId: string;
  readonly graph: JobGraph;
  readonly subtasks: Subtask[] = [];
  private readonly regions: { subtasks: Subtask[]; producers: Set<number> }[] = [];
  private readonly slots = new Map<string, HeldSlot>();
  /** Nothing new is deployed before this (monotonic): the predecessor's task leases must have ended. */
  private deployAfter = 0;
  /** Without a task lease, after a takeover: the TaskExecutors asked AdoptAttempts (answered or unreachable). */
  private adoptAsked: Set<string> | undefined;
  private rmToken: FencingToken | undefined;
  stopped = false;
  private ending = false;
  private canceling = false;
  /** Regions being restarted: waiting for their attempts to stop, then the delay. */
  private restarting = new Set<number>();
  private restartTimes: number[] = [];
  private restarts = 0;
  readonly history: FailureInfo[] = [];
  private lastFailure: FailureInfo | undefined;
  private declared = -1;
  /** Since when a ready region waits for slots while others sit idle (for slot_yield). */
  private waitingSince: number | undefined;
  private scheduling = false;
  private scheduleAgain = false;
  /** TaskExecutors this JobMaster has registered (by OfferSlots or RegisterTaskExecutor). */
  readonly registered = new Set<string>();
  readonly checkpoints: Checkpointer;

  constructor(
    readonly plan: ExecutionPlan,
    readonly token: FencingToken,
    private readonly env: JobMasterEnv,
    private readonly hooks: JobHooks,
    /** Whether another JobMaster may have run the job before (a recovered job, a new grant): adopt first. */
    private readonly takeover: boolean,
  ) {
    this.jobId = plan.jobId;
    this.graph = plan.jobGraph!;
    this.buildRegions();
    this.checkpoints = new Checkpointer(
      {
        jobId: this.jobId,
        runId: plan.runId,
        maxCheckpointBytes: LIMITS.maxGraphBytes,
        failRunning: (m) => this.failRunning(m),
        fence: { $typeName: "jobplane.v1.Fence", election: `job/${this.jobId}`, token },
        store: env.store,
        active: () => this.active() && !this.ending && !this.canceling,
        runningAttempts: () => this.runningAttempts(),
        log: (m) => this.log(m),
      },
      this.graph.config?.checkpoints,
      this.graph.config?.restoreFromSavepoint ?? "",
    );
  }

  /** The running attempts, for a checkpoint: only while every subtask runs or finished, none restarting. */
  private runningAttempts(): { attempt: ExecutionAttemptId; address: string }[] | undefined {
    if (this.restarting.size > 0) return undefined;
    if (!this.subtasks.every((s) => s.state === ExecutionState.RUNNING || s.state === ExecutionState.FINISHED)) return undefined;
    const out: { attempt: ExecutionAttemptId; address: string }[] = [];
    for (const s of this.subtasks) {
      if (s.state !== ExecutionState.RUNNING) continue;
      const address = this.env.teAddress(s.teId);
      if (!address) return undefined;
      out.push({ attempt: { $typeName: "jobplane.v1.ExecutionAttemptId", vertexId: s.vertex.id, subtaskIndex: s.index, attemptNumber: s.attempt }, address });
    }
    return out;
  }

  /**
   * Regions: subtasks joined by pipelined edges (vertices, here: every
   * subtask of a vertex goes with the vertex). A region consuming a blocking
   * edge waits for its producers to finish; in EAGER mode nothing waits.
   */
  private buildRegions(): void {
    const ids = this.graph.vertices.map((v) => v.id);
    const parent = ids.map((_, i) => i);
    const find = (i: number): number => (parent[i] === i ? i : (parent[i] = find(parent[i]!)));
    for (const e of this.graph.edges) {
      if (e.resultType !== ResultPartitionType.PIPELINED) continue;
      const a = find(ids.indexOf(e.sourceVertexId)), b = find(ids.indexOf(e.targetVertexId));
      if (a !== b) parent[a] = b;
    }
    const regionOf = new Map<number, number>();
    this.graph.vertices.forEach((v, i) => {
      const root = find(i);
      if (!regionOf.has(root)) {
        regionOf.set(root, this.regions.length);
        this.regions.push({ subtasks: [], producers: new Set() });
      }
      const r = regionOf.get(root)!;
      for (let k = 0; k < Math.max(1, v.parallelism); k++) {
        const st: Subtask = {
          vertex: v, region: r, index: k, attempt: 0, state: ExecutionState.CREATED,
          stateTime: timestampNow(), teId: "", allocationId: "", failure: undefined, placements: [],
        };
        this.subtasks.push(st);
        this.regions[r]!.subtasks.push(st);
      }
    });
    if (this.graph.config?.schedulingMode === SchedulingMode.EAGER) return;
    for (const e of this.graph.edges) {
      if (e.resultType !== ResultPartitionType.BLOCKING) continue;
      const src = regionOf.get(find(ids.indexOf(e.sourceVertexId)))!;
      const dst = regionOf.get(find(ids.indexOf(e.targetVertexId)))!;
      if (src !== dst) this.regions[dst]!.producers.add(src);
    }
  }

  private log(msg: string): void {
    this.env.log(`job ${this.jobId} (epoch ${this.token.epoch}): ${msg}`);
  }

  private active(): boolean {
    return !this.stopped && this.env.leading();
  }

  // ---- start and stop --------------------------------------------------------

  async start(): Promise<void> {
    this.hooks.status(JobStatus.CREATED);
    while (!this.stopped) {
      try {
        const r = await this.env.rm.local.register({ jobId: this.jobId, jobMasterAddress: this.env.address, jobMasterToken: this.token });
        this.rmToken = r.resourceManagerToken;
        break;
      } catch (e) {
        const { reason } = reasonOf(e);
        this.log(`RegisterJobMaster: ${reason || String(e)}`);
        if (reason === "STALE_FENCING_TOKEN") return this.stop("our token is not the job's grant");
        await sleep(300);
      }
    }
    // The latest checkpoint (or the savepoint the job restores from) before anything deploys.
    for (;;) {
      if (this.stopped) return;
      try {
        await this.checkpoints.init();
        break;
      } catch (e) {
        if (reasonOf(e).reason === "SAVEPOINT_NOT_FOUND") {
          this.log("the savepoint to restore from is gone");
          this.ending = true;
          this.stopped = true;
          this.hooks.ended(JobStatus.FAILED, create(FailureInfoSchema, { message: `savepoint ${this.graph.config?.restoreFromSavepoint} not found`, time: timestampNow() }), [], []);
          return;
        }
        this.log(`reading the latest checkpoint: ${String(e)}`);
        await sleep(300);
      }
    }
    if (this.stopped) return;
    this.hooks.status(JobStatus.RUNNING);
    if (this.takeover && this.env.taskLeaseMs > 0) {
      // Attempts of an earlier JobMaster may run on under its task lease:
      // adopt what TaskExecutors hold, and deploy the rest only once the
      // longest lease it could have granted has ended (AdoptAttempts).
      this.deployAfter = performance.now() + this.env.taskLeaseMs + 500;
      void this.adoptLoop();
      setTimeout(() => this.schedule(), this.env.taskLeaseMs + 600).unref();
    } else if (this.takeover) {
      // No task lease: a predecessor's attempts are canceled by the
      // TaskExecutors once this JobMaster appears, and AdoptAttempts lists
      // only what runs under this token and the allocations held for the
      // job; it is still called on every TaskExecutor this JobMaster can
      // reach before anything is deployed (AdoptAttempts: "MUST call it on
      // every TaskExecutor it can reach before it deploys anything"), and on
      // any that appears later before a slot of it is used (QUESTIONS 42).
      this.adoptAsked = new Set();
      this.deployAfter = Number.POSITIVE_INFINITY;
      void this.adoptWithoutLease();
    }
    this.schedule();
    void this.checkpoints.run();
  }

  /**
   * Calls AdoptAttempts on every registered TaskExecutor, each once, until
   * the predecessor's leases ended, or until every member of the
   * TaskExecutor membership answered (HAStoreService "TaskExecutor
   * membership"): no other TaskExecutor can hold an attempt of the job, so
   * what none listed is deployed at once.
   */
  private async adoptLoop(): Promise<void> {
    const asked = new Set<string>();
    while (this.active() && performance.now() < this.deployAfter) {
      for (const te of this.env.rm.taskExecutors()) {
        if (asked.has(te.id)) continue;
        try {
          const r = await teClient(te.address).adoptAttempts(
            { jobs: [{ jobId: this.jobId, jobMasterToken: this.token, jobMasterAddress: this.env.address }] },
            { timeoutMs: TE_CALL_MS },
          );
          asked.add(te.id);
          if (r.refused.length > 0 || !this.active()) continue;
          const job = r.jobs.find((j) => j.jobId === this.jobId);
          if (job) this.adopted(te.id, te.address, job.allocationIds, job.attempts);
        } catch (e) {
          this.log(`AdoptAttempts at ${te.id}: ${String(e)}`);
        }
      }
      const members = this.env.rm.members();
      if (members && this.active() && [...members].every((id) => asked.has(id))) {
        this.log(`every member of the TaskExecutor membership (${members.size}) answered AdoptAttempts: deploying what none holds`);
        this.deployAfter = 0;
        this.schedule();
        return;
      }
      await sleep(100);
    }
  }

  /**
   * AdoptAttempts without a task lease: a first round on every registered
   * TaskExecutor at once (an unreachable one counts as asked once its call
   * failed), then deployment; then each TaskExecutor that registers or
   * offers a slot later, before its slots are used.
   */
  private async adoptWithoutLease(): Promise<void> {
    const asked = this.adoptAsked!;
    const ask = async (id: string, address: string): Promise<void> => {
      try {
        const r = await teClient(address).adoptAttempts(
          { jobs: [{ jobId: this.jobId, jobMasterToken: this.token, jobMasterAddress: this.env.address }] },
          { timeoutMs: TE_CALL_MS },
        );
        if (r.refused.length > 0 || !this.active()) return;
        const job = r.jobs.find((j) => j.jobId === this.jobId);
        if (job) this.adopted(id, address, job.allocationIds, job.attempts);
      } catch (e) {
        this.log(`AdoptAttempts at ${id}: ${String(e)}`);
      } finally {
        asked.add(id);
      }
    };
    const pending = new Set<string>();
    let first = true;
    while (this.active() && !this.ending) {
      const targets = new Map<string, string>();
      for (const te of this.env.rm.taskExecutors()) targets.set(te.id, te.address);
      for (const sl of this.slots.values()) {
        const a = this.env.teAddress(sl.teId);
        if (a && !targets.has(sl.teId)) targets.set(sl.teId, a);
      }
      const round: Promise<void>[] = [];
      for (const [id, address] of targets) {
        if (asked.has(id) || pending.has(id)) continue;
        pending.add(id);
        round.push(ask(id, address).finally(() => {
          pending.delete(id);
          this.schedule();
        }));
      }
      if (first) {
        await Promise.all(round);
        first = false;
        if (!this.active()) return;
        this.log(`AdoptAttempts asked of ${asked.size} TaskExecutor(s) (no task lease): deploying`);
        this.deployAfter = 0;
        this.schedule();
      }
      await sleep(100);
    }
  }

  /** Takes what a TaskExecutor held for the job: its allocations as offered slots, its attempts as ours. */
  private adopted(teId: string, address: string, allocationIds: string[], attempts: { allocationId: string; status?: TaskExecutionStatus }[]): void {
    this.env.learnTe(teId, address);
    this.registered.add(teId);
    for (const id of allocationIds) {
      if (!this.slots.has(id)) this.slots.set(id, { allocationId: id, teId, slotIndex: -1, subtask: undefined });
    }
    const failedHeld: { st: Subtask; message: string; ended: ExecutionState }[] = [];
    for (const h of attempts) {
      const a = h.status?.attempt;
      const st = a && this.subtasks.find((s) => s.vertex.id === a.vertexId && s.index === a.subtaskIndex);
      if (!st || !h.status || (st.state !== ExecutionState.CREATED && st.attempt >= a.attemptNumber)) continue;
      const state = h.status.state;
      if ((state === ExecutionState.FAILED || state === ExecutionState.CANCELED) && st.state === ExecutionState.CREATED) {
        // Ended while no JobMaster took its state: taken as if reported now
        // by an attempt this JobMaster did not ask to stop, so FAILED and
        // CANCELED alike are task failures (RestartStrategy), counted once
        // the adoption is taken (AdoptAttempts, since 1.2; QUESTIONS 38).
        st.attempt = a.attemptNumber;
        st.teId = teId;
        st.allocationId = h.allocationId;
        const message = state === ExecutionState.FAILED
          ? h.status.failureMessage || "the task failed"
          : h.status.failureMessage || "the attempt was canceled while no JobMaster took its state (listed as ended by AdoptAttempts)";
        failedHeld.push({ st, message, ended: state });
        continue;
      }
      if (state === ExecutionState.FAILED || state === ExecutionState.CANCELED) {
        // The subtask is already covered by an attempt taken in this
        // adoption: this ended one is not run again; new attempts number past it.
        st.attempt = Math.max(st.attempt, a.attemptNumber + 1);
        continue;
      }
      st.attempt = a.attemptNumber;
      st.teId = teId;
      st.allocationId = h.allocationId;
      if (state === ExecutionState.FINISHED) this.keepOutputs(st, h.status);
      this.setState(st, state);
      if (!st.placements.some((p) => p.attemptNumber === st.attempt)) {
        st.placements.push({ vertexId: st.vertex.id, subtaskIndex: st.index, attemptNumber: st.attempt, taskExecutorId: teId, taskExecutorAddress: address });
      }
      const slot = this.slots.get(h.allocationId);
      if (slot) slot.subtask = st;
    }
    this.log(`adopted from ${teId}: ${attempts.length} attempts, ${allocationIds.length} allocations`);
    for (const f of failedHeld) {
      if (f.st.state === ExecutionState.CREATED) this.failed(f.st, teId, f.message, f.ended);
    }
    this.progress();
  }

  /** Deposed (or the process no longer leads): act no more. The TaskExecutors stop the attempts as they stop hearing from us. */
  stop(why: string): void {
    if (this.stopped) return;
    this.stopped = true;
    this.log(`stopped: ${why}`);
  }

  // ---- scheduling ------------------------------------------------------------

  private regionDone(r: number): boolean {
    return this.regions[r]!.subtasks.every((s) => s.state === ExecutionState.FINISHED);
  }

  private regionReady(r: number): boolean {
    return !this.restarting.has(r) && [...this.regions[r]!.producers].every((p) => this.regionDone(p));
  }

  /**
   * Slots the job needs now: one per unfinished subtask of a ready region,
   * and per subtask of a region being restarted (all of it runs again).
   */
  needed(): number {
    let n = 0;
    this.regions.forEach((reg, r) => {
      if (this.restarting.has(r)) n += reg.subtasks.length;
      else if (this.regionReady(r)) n += reg.subtasks.filter((s) => s.state !== ExecutionState.FINISHED).length;
    });
    return this.canceling || this.ending ? 0 : n;
  }

  schedule(): void {
    if (this.scheduling) {
      this.scheduleAgain = true;
      return;
    }
    this.scheduling = true;
    void this.scheduleOnce()
      .catch((e) => this.log(`scheduling failed: ${String(e)}`))
      .finally(() => {
        this.scheduling = false;
        if (this.scheduleAgain) {
          this.scheduleAgain = false;
          this.schedule();
        }
      });
  }

  private async scheduleOnce(): Promise<void> {
    if (!this.active() || this.ending || this.canceling) return;
    const need = this.needed();
    if (need !== this.declared) {
      try {
        await this.env.rm.local.declare({
          jobId: this.jobId,
          jobMasterToken: this.token,
          resourceManagerToken: this.rmToken,
          requirements: [{ slots: need, invokables: [...new Set(this.graph.vertices.map((v) => v.invokable))] }],
        });
        this.declared = need;
      } catch (e) {
        const { reason } = reasonOf(e);
        this.log(`DeclareResourceRequirements: ${reason || String(e)}`);
        if (reason === "NOT_REGISTERED") {
          // The ResourceManager changed (a new grant): register again.
          this.declared = -1;
          void this.reRegister();
          return;
        }
      }
    }
    if (performance.now() < this.deployAfter) return;
    // Deploy every ready region whose pending subtasks all fit in idle slots.
    // Without a task lease, a TaskExecutor not yet asked AdoptAttempts is not deployed to.
    const asked = this.adoptAsked;
    const idle = [...this.slots.values()].filter((s) => (!s.subtask || TERMINAL_EXEC.has(s.subtask.state)) && (!asked || asked.has(s.teId)));
    const deployments: Promise<void>[] = [];
    this.regions.forEach((reg, r) => {
      if (!this.regionReady(r)) return;
      const pending = reg.subtasks.filter((s) => s.state === ExecutionState.CREATED);
      if (pending.length === 0 || pending.length > idle.length) return;
      for (const st of pending) {
        const slot = idle.shift()!;
        if (slot.subtask && slot.subtask !== st && slot.subtask.allocationId === slot.allocationId) slot.subtask.allocationId = "";
        slot.subtask = st;
        st.allocationId = slot.allocationId;
        st.teId = slot.teId;
        this.setState(st, ExecutionState.DEPLOYING);
        deployments.push(this.deploy(st, slot));
      }
    });
    await Promise.all(deployments);
    // Slots beyond the need (their subtasks finished) go back at once; idle
    // slots of a region that waits for more go back after slot_yield
    // (OfferSlots), the declaration kept.
    const stillIdle = [...this.slots.values()].filter((s) => !s.subtask || TERMINAL_EXEC.has(s.subtask.state));
    const excess = this.slots.size - need;
    const waiting = this.regions.some((reg, r) => this.regionReady(r) && reg.subtasks.some((s) => s.state === ExecutionState.CREATED));
    if (waiting && stillIdle.length > 0) {
      this.waitingSince ??= performance.now();
    } else {
      this.waitingSince = undefined;
    }
    if (excess > 0) {
      await this.giveBack(stillIdle.slice(0, excess), "no longer needed");
    } else if (this.waitingSince !== undefined && performance.now() - this.waitingSince >= this.env.slotYieldMs) {
      this.waitingSince = undefined;
      await this.giveBack(stillIdle, "the deployment waited for more slots for slot_yield");
    }
  }

  /** Called periodically: a region waiting past slot_yield gives its idle slots back. */
  yieldIfWaiting(): void {
    if (this.waitingSince !== undefined && performance.now() - this.waitingSince >= this.env.slotYieldMs) this.schedule();
  }

  /** Frees idle slots at their TaskExecutors, and tells the ResourceManager they are free. */
  private async giveBack(slots: HeldSlot[], reason: string): Promise<void> {
    const freed: string[] = [];
    await Promise.all(
      slots.map(async (s) => {
        const address = this.env.teAddress(s.teId);
        if (!address || !this.active()) return;
        this.slots.delete(s.allocationId);
        try {
          await teClient(address).freeSlot({ jobId: this.jobId, jobMasterToken: this.token, allocationId: s.allocationId, reason }, { timeoutMs: TE_CALL_MS });
          freed.push(s.allocationId);
        } catch (e) {
          this.log(`FreeSlot ${s.allocationId}: ${String(e)}`);
        }
      }),
    );
    if (freed.length > 0) this.env.rm.freed(this.jobId, freed);
  }

  private async reRegister(): Promise<void> {
    try {
      const r = await this.env.rm.local.register({ jobId: this.jobId, jobMasterAddress: this.env.address, jobMasterToken: this.token });
      this.rmToken = r.resourceManagerToken;
    } catch (e) {
      this.log(`RegisterJobMaster again: ${String(e)}`);
      await sleep(300);
    }
    this.schedule();
  }

  private async deploy(st: Subtask, slot: HeldSlot): Promise<void> {
    const address = this.env.teAddress(slot.teId);
    const attempt = st.attempt;
    if (!address || !this.active()) {
      this.setState(st, ExecutionState.CREATED);
      return;
    }
    if (!st.placements.some((p) => p.attemptNumber === attempt)) {
      st.placements.push({ vertexId: st.vertex.id, subtaskIndex: st.index, attemptNumber: attempt, taskExecutorId: slot.teId, taskExecutorAddress: address });
      if (st.placements.length > PLACEMENTS_PER_SUBTASK) st.placements.shift();
    }
    const restore = this.checkpoints.restoreFor(st.vertex.id, st.index);
    // The lease SubmitTask grants counts from its arrival: noted when answered (or failed).
    const noteLease = () => {
      if (this.env.taskLeaseMs > 0) this.env.leaseGranted(slot.teId);
    };
    try {
      await teClient(address).submitTask(
        {
          jobId: this.jobId,
          jobMasterToken: this.token,
          allocationId: slot.allocationId,
          attempt: { vertexId: st.vertex.id, subtaskIndex: st.index, attemptNumber: st.attempt },
          taskName: st.vertex.name || st.vertex.id,
          invokable: st.vertex.invokable,
          config: st.vertex.config,
          numberOfSubtasks: Math.max(1, st.vertex.parallelism),
          heartbeatTimeout: durationFromMs(this.env.heartbeatTimeoutMs()),
          taskLease: this.env.taskLeaseMs > 0 && this.active() ? durationFromMs(this.env.taskLeaseMs) : undefined,
          restoredState: restore.state,
          restoredFrom: restore.from,
        },
        { timeoutMs: TE_CALL_MS },
      );
      noteLease();
    } catch (e) {
      noteLease();
      if (st.attempt !== attempt || st.state !== ExecutionState.DEPLOYING) return;
      const { reason } = reasonOf(e);
      this.log(`SubmitTask ${st.vertex.id}[${st.index}]#${attempt} on ${slot.teId}: ${reason || String(e)}`);
      if (reason === "SLOT_NOT_ALLOCATED" || reason === "SLOT_OCCUPIED" || reason === "STALE_FENCING_TOKEN") {
        // Nothing was deployed: the slot is not ours (any more); deploy elsewhere.
        this.slots.delete(slot.allocationId);
        st.allocationId = "";
        st.teId = "";
        this.setState(st, ExecutionState.CREATED);
        this.schedule();
        return;
      }
      // UNKNOWN_INVOKABLE fails the attempt; so does a deployment whose outcome is unknown.
      this.failed(st, slot.teId, reason === "UNKNOWN_INVOKABLE" ? `unknown invokable ${st.vertex.invokable}` : `deployment failed: ${String(e)}`);
    }
  }

  // ---- TaskExecutors' calls ----------------------------------------------------

  /** OfferSlots: accept what the job can use (and offers of slots already ours again). */
  offer(teId: string, offers: SlotOffer[]): SlotOffer[] {
    this.registered.add(teId);
    const accepted: SlotOffer[] = [];
    let room = this.needed() - this.slots.size;
    for (const o of offers) {
      const held = this.slots.get(o.allocationId);
      if (held && held.teId === teId) {
        accepted.push(o);
        continue;
      }
      if (room <= 0 || !this.active()) continue;
      this.slots.set(o.allocationId, { allocationId: o.allocationId, teId, slotIndex: o.slotIndex, subtask: undefined });
      accepted.push(o);
      room--;
    }
    if (accepted.length > 0) setImmediate(() => this.schedule());
    return accepted;
  }

  /** Looks up the subtask of an attempt: only its current attempt is known. */
  find(a: ExecutionAttemptId | undefined): Subtask | undefined {
    if (!a) return undefined;
    const st = this.subtasks.find((s) => s.vertex.id === a.vertexId && s.index === a.subtaskIndex);
    return st && st.attempt === a.attemptNumber ? st : undefined;
  }

  /** A state an attempt reported; the caller checked the attempt exists (find). */
  update(teId: string, st: Subtask, status: TaskExecutionStatus): void {
    if (TERMINAL_EXEC.has(st.state) || st.state === status.state) return; // final, or the same again
    switch (status.state) {
      case ExecutionState.FINISHED: {
        // A value over ServerLimits.max_task_value_bytes ends the task FAILED.
        if (status.value.length > VALUE_LIMITS.maxTaskValueBytes) {
          this.failed(st, teId, `the task returned a value of ${status.value.length} bytes, over the limit of ${VALUE_LIMITS.maxTaskValueBytes}`);
          return;
        }
        this.keepOutputs(st, status);
        this.setState(st, ExecutionState.FINISHED);
        const over = this.outputsOverLimit();
        if (over) {
          const failure = create(FailureInfoSchema, { message: over, time: timestampNow() });
          this.history.push(failure);
          this.lastFailure = failure;
          this.log(`failing: ${over}`);
          void this.finish(JobStatus.FAILED, failure);
          return;
        }
        this.progress();
        return;
      }
      case ExecutionState.FAILED:
        this.failed(st, teId, status.failureMessage || "the task failed");
        return;
      case ExecutionState.CANCELED:
        if (this.canceling || this.ending || this.restarting.has(st.region)) {
          this.setState(st, ExecutionState.CANCELED);
          this.progress();
        } else {
          // Not asked for: the TaskExecutor stopped it (it shut down, or
          // stopped hearing from us). A task failure (RestartStrategy):
          // counted by the strategy and kept in the exception history.
          this.failed(st, teId, "the attempt was canceled by its TaskExecutor without its JobMaster asking", ExecutionState.CANCELED);
        }
        return;
      default:
        this.setState(st, status.state);
    }
  }

  private keepOutputs(st: Subtask, status: TaskExecutionStatus): void {
    st.finished = { attempt: st.attempt, value: status.value, accumulators: { ...status.accumulators } };
  }

  /** What the FINISHED attempts returned, in vertex order, then subtask index. */
  outputs(): JobOutputs {
    const values: SubtaskValue[] = [];
    const accumulators: Record<string, bigint> = {};
    for (const st of this.subtasks) {
      const f = st.finished;
      if (st.state !== ExecutionState.FINISHED || !f || f.attempt !== st.attempt) continue;
      if (f.value.length > 0) {
        values.push(create(SubtaskValueSchema, {
          attempt: { vertexId: st.vertex.id, subtaskIndex: st.index, attemptNumber: f.attempt },
          value: f.value,
        }));
      }
      for (const [k, v] of Object.entries(f.accumulators)) accumulators[k] = (accumulators[k] ?? 0n) + v;
    }
    return { values, accumulators };
  }

  /** Why the job's values or accumulators go over ServerLimits, if they do. */
  private outputsOverLimit(): string | undefined {
    const { values, accumulators } = this.outputs();
    const bytes = values.reduce((a, v) => a + toBinary(SubtaskValueSchema, v).length, 0);
    if (bytes > VALUE_LIMITS.maxResultValueBytes) {
      return `the job's values take ${bytes} bytes, over the limit of ${VALUE_LIMITS.maxResultValueBytes}`;
    }
    const names = Object.keys(accumulators).length;
    if (names > VALUE_LIMITS.maxAccumulators) {
      return `the job uses ${names} accumulators, over the limit of ${VALUE_LIMITS.maxAccumulators}`;
    }
    return undefined;
  }

  /** A TaskExecutor this job uses is lost (silent past the heartbeat timeout, or disconnected): its attempts stopped. */
  teLost(teId: string, why: string): void {
    this.registered.delete(teId);
    const lost = [...this.slots.values()].filter((s) => s.teId === teId);
    if (lost.length === 0) return;
    for (const s of lost) this.slots.delete(s.allocationId);
    this.log(`TaskExecutor ${teId} lost: ${why}`);
    for (const st of this.subtasks) {
      if (st.teId !== teId || TERMINAL_EXEC.has(st.state) || st.state === ExecutionState.CREATED) continue;
      this.failed(st, teId, `TaskExecutor ${teId} lost: ${why}`);
    }
    this.schedule();
  }

  private setState(st: Subtask, s: ExecutionState): void {
    st.state = s;
    st.stateTime = timestampNow();
  }

  // ---- failures and restarts -----------------------------------------------------

  /**
   * A task failure (RestartStrategy): an attempt that ended FAILED, or
   * CANCELED without this JobMaster asking (`ended` then CANCELED, the state
   * its TaskExecutor reported). Counted by the strategy, kept in the history.
   */
  private failed(st: Subtask, teId: string, message: string, ended: ExecutionState = ExecutionState.FAILED): void {
    this.setState(st, ended);
    const failure = create(FailureInfoSchema, {
      message,
      time: timestampNow(),
      attempt: { vertexId: st.vertex.id, subtaskIndex: st.index, attemptNumber: st.attempt },
      taskExecutorId: teId,
    });
    st.failure = failure;
    if (this.canceling || this.ending) return this.progress();
    if (this.restarting.has(st.region)) return this.progress();
    this.restartRegions(new Set([st.region]), failure);
  }

  /**
   * CheckpointConfig.tolerable_failures was passed: the running subtasks
   * fail, as one task failure counted by the restart strategy; their
   * regions restart from the latest completed checkpoint.
   */
  private failRunning(message: string): void {
    if (!this.active() || this.canceling || this.ending) return;
    const regions = new Set(
      this.subtasks.filter((s) => s.state === ExecutionState.RUNNING && !this.restarting.has(s.region)).map((s) => s.region),
    );
    if (regions.size === 0) return;
    this.restartRegions(regions, create(FailureInfoSchema, { message, time: timestampNow() }));
  }

  /** One task failure: kept in the history, counted by the strategy, which restarts `failed` (and what they feed) or fails the job. */
  private restartRegions(failed: Set<number>, failure: FailureInfo): void {
    const message = failure.message;
    this.history.push(failure);
    this.lastFailure = failure;
    const delay = this.restartDelay();
    if (delay === undefined) {
      this.log(`failing: ${message}`);
      void this.finish(JobStatus.FAILED, failure);
      return;
    }
    this.restarts++;
    // The failed regions and every region downstream of them restart.
    const set = new Set(failed);
    for (let grew = true; grew; ) {
      grew = false;
      this.regions.forEach((reg, r) => {
        if (set.has(r)) return;
        if ([...reg.producers].some((p) => set.has(p)) && reg.subtasks.some((s) => s.state !== ExecutionState.CREATED)) {
          set.add(r);
          grew = true;
        }
      });
    }
    this.log(`restart ${this.restarts} of regions ${[...set].join(",")} in ${delay} ms: ${message}`);
    this.hooks.restarted(failure);
    for (const r of set) this.restarting.add(r);
    void this.restart(set, delay);
  }

  /** The wait before a restart, or undefined when the strategy gives up (RestartStrategy). */
  private restartDelay(): number | undefined {
    const s: RestartStrategy["strategy"] | undefined = this.graph.config?.restartStrategy?.strategy;
    const now = performance.now();
    this.restartTimes.push(now);
    switch (s?.case) {
      case "fixedDelay": {
        // attempts 0 in a stored plan keeps its 1.1 meaning: unlimited.
        const bounded = !s.value.unlimited && s.value.attempts > 0;
        if (bounded && this.restarts >= s.value.attempts) return undefined;
        return ms(s.value.delay);
      }
      case "exponentialDelay": {
        const v = s.value;
        if (!v.unlimited && v.attempts > 0 && this.restarts >= v.attempts) return undefined;
        const mult = v.multiplier || 2;
        const reset = ms(v.resetAfter);
        const times = this.restartTimes;
        // Consecutive failures since the last quiet spell of reset_after.
        let n = 0;
        for (let i = times.length - 1; i > 0 && (reset === 0 || times[i]! - times[i - 1]! < reset); i--) n++;
        let d = Math.min(ms(v.initialDelay) * Math.pow(mult, n), ms(v.maxDelay) || Infinity);
        if (v.jitter > 0) d *= 1 + (Math.random() * 2 - 1) * v.jitter;
        return Math.max(0, d);
      }
      case "failureRate": {
        const v = s.value;
        const window = ms(v.interval);
        const recent = this.restartTimes.filter((t) => now - t <= window).length;
        if (recent > v.maxFailures) return undefined;
        return ms(v.delay);
      }
      default:
        return undefined;
    }
  }

  /** Cancels the regions' running attempts, waits for them to stop and the delay, then makes them new attempts. */
  private async restart(regions: Set<number>, delay: number): Promise<void> {
    const subs = this.subtasks.filter((s) => regions.has(s.region));
    await this.cancelAll(subs);
    await sleep(delay);
    if (!this.active() || this.ending || this.canceling) return;
    // Their slots are idle now: the old attempts stopped.
    for (const slot of this.slots.values()) if (slot.subtask && regions.has(slot.subtask.region)) slot.subtask = undefined;
    for (const st of subs) {
      st.attempt++;
      st.failure = undefined;
      st.teId = "";
      st.allocationId = "";
      this.setState(st, ExecutionState.CREATED);
    }
    for (const r of regions) this.restarting.delete(r);
    this.schedule();
  }

  /** CancelTask for every attempt of `subs` that runs, then waits until each reported a terminal state (or STOP_WAIT_MS). */
  private async cancelAll(subs: Subtask[]): Promise<void> {
    const running = subs.filter((s) => !TERMINAL_EXEC.has(s.state) && s.state !== ExecutionState.CREATED);
    for (const s of subs) if (s.state === ExecutionState.CREATED) this.setState(s, ExecutionState.CANCELED);
    await Promise.all(
      running.map(async (st) => {
        const address = this.env.teAddress(st.teId);
        if (!address || !this.env.leading()) return;
        this.setState(st, ExecutionState.CANCELING);
        try {
          await teClient(address).cancelTask(
            { jobId: this.jobId, jobMasterToken: this.token, attempt: { vertexId: st.vertex.id, subtaskIndex: st.index, attemptNumber: st.attempt } },
            { timeoutMs: TE_CALL_MS },
          );
        } catch (e) {
          this.log(`CancelTask ${st.vertex.id}[${st.index}]: ${String(e)}`);
        }
      }),
    );
    const until = performance.now() + STOP_WAIT_MS;
    while (performance.now() < until && running.some((s) => !TERMINAL_EXEC.has(s.state))) await sleep(50);
    for (const s of running) if (!TERMINAL_EXEC.has(s.state)) this.setState(s, ExecutionState.CANCELED);
  }

  /** After a state change: the job's end, or the next regions. */
  private progress(): void {
    if (this.ending || this.canceling) return;
    if (this.subtasks.every((s) => s.state === ExecutionState.FINISHED)) {
      void this.finish(JobStatus.FINISHED, undefined);
      return;
    }
    this.schedule();
  }

  // ---- the end ----------------------------------------------------------------

  /** CancelJob was recorded: cancel every attempt, then end CANCELED. */
  cancel(): void {
    if (this.canceling || this.ending) return;
    this.canceling = true;
    void (async () => {
      await this.cancelAll(this.subtasks);
      await this.finish(JobStatus.CANCELED, undefined, true);
    })();
  }

  /**
   * Ends the job: stop what runs, free the slots (so they are free when the
   * result is written), disconnect, and hand the end to the Dispatcher.
   */
  private async finish(status: JobStatus, failure: FailureInfo | undefined, already = false): Promise<void> {
    if (this.ending && !already) return;
    this.ending = true;
    if (!this.active()) return;
    if (status === JobStatus.FAILED) {
      this.hooks.status(JobStatus.FAILING);
      await this.cancelAll(this.subtasks);
    }
    const freed = await this.freeSlots();
    this.stopped = true;
    try {
      await this.env.rm.local.disconnect({
        jobId: this.jobId, jobMasterToken: this.token, resourceManagerToken: this.rmToken,
        reason: `job ended`, freedAllocationIds: freed,
      });
    } catch (e) {
      this.log(`DisconnectJobMaster: ${String(e)}`);
    }
    if (!this.env.leading()) return;
    this.hooks.ended(status, failure ?? this.lastFailure, this.history, this.placements(), this.outputs());
  }

  private async freeSlots(): Promise<string[]> {
    const freed: string[] = [];
    await Promise.all(
      [...this.slots.values()].map(async (s) => {
        const address = this.env.teAddress(s.teId);
        if (!address) return;
        try {
          await teClient(address).freeSlot({ jobId: this.jobId, jobMasterToken: this.token, allocationId: s.allocationId, reason: "job ended" }, { timeoutMs: TE_CALL_MS });
          freed.push(s.allocationId);
        } catch (e) {
          this.log(`FreeSlot ${s.allocationId}: ${String(e)}`);
        }
      }),
    );
    this.slots.clear();
    return freed;
  }

  // ---- what the Dispatcher shows ----------------------------------------------------

  /** Every subtask's latest placements, in vertex order, then subtask index, then attempt number. */
  placements(): Placement[] {
    return this.subtasks.flatMap((s) => s.placements);
  }

  taskCounts(subs: Subtask[] = this.subtasks): ExecutionStateCount[] {
    const counts = new Map<ExecutionState, number>();
    for (const s of subs) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
    return [...counts.entries()].sort((a, b) => a[0] - b[0]).map(([state, count]) => ({ state, count }) as ExecutionStateCount);
  }
}
