// Checkpoints and savepoints of one JobMaster (checkpoint.proto;
// TaskExecutorService.TriggerCheckpoint; HAStoreService.AddCheckpoint,
// AddSavepoint; conformance README "Checkpoints").
//
// Order: trigger the running attempts, collect every acknowledgement, write
// the checkpoint fenced by the job's grant, and only once that write
// succeeded count it completed. A JobMaster taking a job over reads the
// latest checkpoint and numbers its own above the job's last id; subtasks
// (re)deployed start from the latest completed checkpoint, or, on the job's
// first run, from the savepoint it names.
import { create, toBinary } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { timestampNow, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import { performance } from "node:perf_hooks";
import { CompletedCheckpointSchema, SavepointSchema, type CompletedCheckpoint } from "./gen/jobplane/hastore/v1/ha_store_service_pb.js";
import {
  CheckpointCountsSchema,
  CheckpointInfoSchema,
  CheckpointStatsSchema,
  type CheckpointConfig,
  type CheckpointInfo,
  type CheckpointStats,
  type SubtaskState,
} from "./gen/jobplane/v1/checkpoint_pb.js";
import type { ExecutionAttemptId } from "./gen/jobplane/v1/execution_pb.js";
import type { Fence } from "./gen/jobplane/v1/leadership_pb.js";
import type { HAClient } from "./leadership.js";
import { reasonOf } from "./errors.js";
import { teClient } from "./teclient.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function ms(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

/** What the Checkpointer needs of its JobMaster. */
export interface CheckpointHost {
  jobId: string;
  /** The run's id (ExecutionPlan.run_id), named by savepoint ids. */
  runId: string;
  /** The largest encoded checkpoint or savepoint (ServerLimits.max_checkpoint_bytes). */
  maxCheckpointBytes: number;
  /** tolerable_failures was passed: fail the running subtasks (restarted by the restart strategy). */
  failRunning(message: string): void;
  fence: Fence;
  store: HAClient;
  /** Whether the JobMaster may act (leads, not ended). */
  active(): boolean;
  /** The attempts running now with their TaskExecutors' addresses; undefined while not every subtask runs or finished. */
  runningAttempts(): { attempt: ExecutionAttemptId; address: string }[] | undefined;
  log(msg: string): void;
}

export class SavepointFailed extends Error {}

/** ServerLimits.max_inline_state_bytes: a larger inline state in an acknowledgement fails the checkpoint (QUESTIONS.md 24). */
export const MAX_INLINE_STATE_BYTES = 64 * 1024;

/**
 * A savepoint's id (TriggerSavepoint): it names the run, since a new run of
 * the job id counts checkpoint ids from 1 again. `sp-<job_id>-<the first 16
 * hex digits of the SHA-256 of the run_id>-<checkpoint id>`: at most 105
 * bytes for a job id of 64 (QUESTIONS.md 25).
 */
export function savepointId(jobId: string, runId: string, checkpointId: bigint): string {
  const run = createHash("sha256").update(runId, "utf8").digest("hex").slice(0, 16);
  return `sp-${jobId}-${run}-${checkpointId}`;
}

/** Why a checkpoint's collection failed: `declined` and `timeout` count against tolerable_failures; `store` does not. */
export class CheckpointFailed extends Error {
  constructor(
    message: string,
    readonly kind: "declined" | "timeout" | "store",
  ) {
    super(message);
  }
}

function stateBytes(states: SubtaskState[]): bigint {
  let n = 0n;
  for (const s of states) if (s.state.case === "inline") n += BigInt(s.state.value.length);
  return n;
}

function info(id: bigint, trigger: Timestamp | undefined, ack: Timestamp | undefined, states: SubtaskState[]): CheckpointInfo {
  return create(CheckpointInfoSchema, {
    checkpointId: id,
    triggerTime: trigger,
    ackTime: ack,
    stateBytes: stateBytes(states),
    subtaskStates: states.filter((s) => s.state.case !== undefined).length,
  });
}

export class Checkpointer {
  private lastId = 0n;
  private latest: CompletedCheckpoint | undefined;
  /** The states subtasks start from on their first deployment when no checkpoint exists: the savepoint's. */
  private savepointStates: SubtaskState[] | undefined;
  private restoredFrom = "";
  private counts = create(CheckpointCountsSchema, {});
  private inProgress = 0n;
  /** Checkpoints failed in a row (timed out or declined), for tolerable_failures. */
  private failuresInARow = 0;
  /** One trigger at a time (periodic checkpoints and savepoints share the ids). */
  private busy: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly host: CheckpointHost,
    private readonly config: CheckpointConfig | undefined,
    private readonly restoreFromSavepoint: string,
  ) {}

  /** Reads the job's latest checkpoint (or its savepoint); throws if the store cannot be read or the savepoint is gone. */
  async init(): Promise<void> {
    const r = await this.host.store.getLatestCheckpoint({ jobId: this.host.jobId }, { timeoutMs: 3000 });
    this.lastId = r.lastCheckpointId;
    if (r.checkpoint) {
      this.latest = r.checkpoint;
      if (r.checkpoint.counts) this.counts = r.checkpoint.counts;
      return;
    }
    if (this.restoreFromSavepoint) {
      const sp = await this.host.store.getSavepoint({ savepointId: this.restoreFromSavepoint }, { timeoutMs: 3000 });
      this.savepointStates = sp.savepoint?.states ?? [];
    }
  }

  get enabled(): boolean {
    return ms(this.config?.interval) > 0;
  }

  /** The state a subtask starts from, and where it comes from. */
  restoreFor(vertexId: string, index: number): { state: SubtaskState | undefined; from: string } {
    const states = this.latest ? this.latest.states : this.savepointStates;
    if (!states) return { state: undefined, from: "" };
    const from = this.latest ? String(this.latest.checkpointId) : this.restoreFromSavepoint;
    this.restoredFrom = from;
    return { state: states.find((s) => s.vertexId === vertexId && s.subtaskIndex === index), from };
  }

  stats(): CheckpointStats | undefined {
    if (!this.enabled && !this.latest && !this.restoredFrom) return undefined;
    const l = this.latest;
    return create(CheckpointStatsSchema, {
      counts: this.counts,
      inProgressId: this.inProgress,
      latest: l ? info(l.checkpointId, l.triggerTime, l.ackTime, l.states) : undefined,
      restoredFrom: this.restoredFrom,
    });
  }

  /** Periodic checkpoints while the JobMaster acts (CheckpointConfig). */
  async run(): Promise<void> {
    const interval = ms(this.config?.interval);
    if (interval <= 0) return;
    const minPause = ms(this.config?.minPause);
    while (this.host.active()) {
      await sleep(interval);
      if (!this.host.active()) return;
      const started = performance.now();
      try {
        await this.exclusive(() => this.checkpoint());
      } catch (e) {
        this.host.log(`checkpoint failed: ${e instanceof Error ? e.message : String(e)}`);
      }
      const pause = minPause - (performance.now() - started);
      if (pause > 0) await sleep(pause);
    }
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.busy.then(fn, fn);
    this.busy = next.catch(() => undefined);
    return next;
  }

  /**
   * Asks every running attempt for its state under `id`; throws
   * CheckpointFailed when some declined, did not answer, or acknowledged
   * with an inline state over ServerLimits.max_inline_state_bytes (the
   * checkpoint is then discarded: nothing of it is stored).
   */
  private async collect(id: bigint, savepoint: boolean, timeoutMs: number): Promise<SubtaskState[]> {
    const running = this.host.runningAttempts();
    if (!running || running.length === 0) throw new CheckpointFailed(`checkpoint ${id}: no running subtasks to ask`, "store");
    const byTe = new Map<string, ExecutionAttemptId[]>();
    for (const r of running) byTe.set(r.address, [...(byTe.get(r.address) ?? []), r.attempt]);
    const states: SubtaskState[] = [];
    let failure: CheckpointFailed | undefined;
    const deadline = performance.now() + timeoutMs;
    await Promise.all(
      [...byTe].map(async ([address, attempts]) => {
        try {
          const r = await teClient(address).triggerCheckpoint(
            { jobId: this.host.jobId, jobMasterToken: this.host.fence.token, checkpointId: id, attempts, savepoint },
            { timeoutMs },
          );
          for (const a of r.acks) {
            const who = a.attempt ? `${a.attempt.vertexId}[${a.attempt.subtaskIndex}]` : "a subtask";
            if (a.declined) {
              failure ??= new CheckpointFailed(`checkpoint ${id}: ${who} declined`, "declined");
            } else if (a.state?.state.case === "inline" && a.state.state.value.length > MAX_INLINE_STATE_BYTES) {
              failure ??= new CheckpointFailed(
                `checkpoint ${id}: ${who} gave ${a.state.state.value.length} bytes of inline state, over the limit of ${MAX_INLINE_STATE_BYTES}`,
                "declined",
              );
            } else if (a.state) {
              states.push(a.state);
            }
          }
        } catch (e) {
          this.host.log(`TriggerCheckpoint ${id} at ${address}: ${String(e)}`);
          failure ??= new CheckpointFailed(`checkpoint ${id}: ${address} did not answer: ${String(e)}`, performance.now() >= deadline - 50 ? "timeout" : "declined");
        }
      }),
    );
    if (failure) throw failure;
    return states;
  }

  private timeoutMs(): number {
    return ms(this.config?.timeout) || 600_000;
  }

  private async checkpoint(): Promise<void> {
    if (!this.host.active() || !this.host.runningAttempts()) return;
    const id = ++this.lastId;
    const trigger = timestampNow();
    this.inProgress = id;
    this.counts = create(CheckpointCountsSchema, { ...this.counts, triggered: this.counts.triggered + 1n });
    try {
      const states = await this.collect(id, false, this.timeoutMs());
      const counts = create(CheckpointCountsSchema, { ...this.counts, completed: this.counts.completed + 1n });
      const cp = create(CompletedCheckpointSchema, {
        jobId: this.host.jobId,
        checkpointId: id,
        triggerTime: trigger,
        ackTime: timestampNow(),
        states,
        counts,
        restoredFrom: this.restoredFrom,
      });
      this.checkSize(id, toBinary(CompletedCheckpointSchema, cp).length);
      if (!this.host.active()) return;
      // Completed only once durable: a failed write discards it.
      try {
        await this.host.store.addCheckpoint({ fence: this.host.fence, checkpoint: cp, retain: this.config?.retained ?? 0 }, { timeoutMs: this.timeoutMs() });
      } catch (e) {
        if (reasonOf(e).reason === "CHECKPOINT_ID_NOT_INCREASING") await this.resync();
        throw new CheckpointFailed(`checkpoint ${id} was not stored: ${String(e)}`, "store");
      }
      this.latest = cp;
      this.counts = counts;
      this.failuresInARow = 0;
    } catch (e) {
      this.counts = create(CheckpointCountsSchema, { ...this.counts, failed: this.counts.failed + 1n });
      if (e instanceof CheckpointFailed && e.kind !== "store") this.tolerate(e.message);
      throw e;
    } finally {
      if (this.inProgress === id) this.inProgress = 0n;
    }
  }

  /** ServerLimits.max_checkpoint_bytes: a larger checkpoint or savepoint fails. */
  private checkSize(id: bigint, bytes: number): void {
    if (bytes > this.host.maxCheckpointBytes) {
      throw new CheckpointFailed(`checkpoint ${id} takes ${bytes} bytes encoded, over the limit of ${this.host.maxCheckpointBytes}`, "store");
    }
  }

  /**
   * CheckpointConfig.tolerable_failures: checkpoints that timed out or were
   * declined, in a row; past the tolerated number the running subtasks are
   * failed (the restart strategy restarts them from the latest checkpoint).
   * Unset tolerates any number.
   */
  private tolerate(message: string): void {
    this.failuresInARow++;
    const tolerable = this.config?.tolerableFailures;
    if (tolerable === undefined || this.failuresInARow <= tolerable) return;
    const n = this.failuresInARow;
    this.failuresInARow = 0;
    this.host.failRunning(`${n} checkpoints in a row failed, over tolerable_failures ${tolerable}; the last: ${message}`);
  }

  /** After an id was refused: take the store's last id. */
  private async resync(): Promise<void> {
    try {
      const r = await this.host.store.getLatestCheckpoint({ jobId: this.host.jobId }, { timeoutMs: 3000 });
      if (r.lastCheckpointId > this.lastId) this.lastId = r.lastCheckpointId;
    } catch {
      /* the next attempt tries again */
    }
  }

  /** TriggerSavepoint: the savepoint, durable, or SavepointFailed. */
  async savepoint(): Promise<{ savepointId: string; info: CheckpointInfo }> {
    return this.exclusive(async () => {
      if (!this.host.active()) throw new SavepointFailed("the job's JobMaster does not run here");
      const id = ++this.lastId;
      const trigger = timestampNow();
      let states: SubtaskState[];
      try {
        states = await this.collect(id, true, this.timeoutMs());
      } catch (e) {
        throw new SavepointFailed(`savepoint ${id}: ${e instanceof Error ? e.message : String(e)}`);
      }
      const spId = savepointId(this.host.jobId, this.host.runId, id);
      const sp = create(SavepointSchema, { savepointId: spId, jobId: this.host.jobId, checkpointId: id, triggerTime: trigger, ackTime: timestampNow(), states });
      try {
        this.checkSize(id, toBinary(SavepointSchema, sp).length);
      } catch (e) {
        throw new SavepointFailed(`savepoint ${id}: ${e instanceof Error ? e.message : String(e)}`);
      }
      try {
        await this.host.store.addSavepoint({ fence: this.host.fence, savepoint: sp }, { timeoutMs: this.timeoutMs() });
      } catch (e) {
        if (reasonOf(e).reason === "CHECKPOINT_ID_NOT_INCREASING") await this.resync();
        throw new SavepointFailed(`savepoint ${id} was not stored: ${String(e)}`);
      }
      return { savepointId: spId, info: info(id, sp.triggerTime, sp.ackTime, states) };
    });
  }
}
