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
import { create } from "@bufbuild/protobuf";
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
  fence: Fence;
  store: HAClient;
  /** Whether the JobMaster may act (leads, not ended). */
  active(): boolean;
  /** The attempts running now with their TaskExecutors' addresses; undefined while not every subtask runs or finished. */
  runningAttempts(): { attempt: ExecutionAttemptId; address: string }[] | undefined;
  log(msg: string): void;
}

export class SavepointFailed extends Error {}

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

  /** Asks every running attempt for its state under `id`; undefined when some declined or did not answer. */
  private async collect(id: bigint, savepoint: boolean, timeoutMs: number): Promise<SubtaskState[] | undefined> {
    const running = this.host.runningAttempts();
    if (!running || running.length === 0) return undefined;
    const byTe = new Map<string, ExecutionAttemptId[]>();
    for (const r of running) byTe.set(r.address, [...(byTe.get(r.address) ?? []), r.attempt]);
    const states: SubtaskState[] = [];
    let ok = true;
    await Promise.all(
      [...byTe].map(async ([address, attempts]) => {
        try {
          const r = await teClient(address).triggerCheckpoint(
            { jobId: this.host.jobId, jobMasterToken: this.host.fence.token, checkpointId: id, attempts, savepoint },
            { timeoutMs },
          );
          for (const a of r.acks) {
            if (a.declined) ok = false;
            else if (a.state) states.push(a.state);
          }
        } catch (e) {
          this.host.log(`TriggerCheckpoint ${id} at ${address}: ${String(e)}`);
          ok = false;
        }
      }),
    );
    return ok ? states : undefined;
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
      if (!states) throw new Error(`checkpoint ${id} declined or not answered`);
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
      if (!this.host.active()) return;
      // Completed only once durable: a failed write discards it.
      await this.host.store.addCheckpoint({ fence: this.host.fence, checkpoint: cp, retain: this.config?.retained ?? 0 }, { timeoutMs: this.timeoutMs() });
      this.latest = cp;
      this.counts = counts;
    } catch (e) {
      this.counts = create(CheckpointCountsSchema, { ...this.counts, failed: this.counts.failed + 1n });
      const { reason } = reasonOf(e);
      if (reason === "CHECKPOINT_ID_NOT_INCREASING") await this.resync();
      throw e;
    } finally {
      if (this.inProgress === id) this.inProgress = 0n;
    }
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
      const states = await this.collect(id, true, this.timeoutMs());
      if (!states) throw new SavepointFailed(`savepoint ${id}: some subtask declined or did not answer`);
      const savepointId = `sp-${this.host.jobId}-${id}`;
      const sp = create(SavepointSchema, { savepointId, jobId: this.host.jobId, checkpointId: id, triggerTime: trigger, ackTime: timestampNow(), states });
      try {
        await this.host.store.addSavepoint({ fence: this.host.fence, savepoint: sp }, { timeoutMs: this.timeoutMs() });
      } catch (e) {
        if (reasonOf(e).reason === "CHECKPOINT_ID_NOT_INCREASING") await this.resync();
        throw new SavepointFailed(`savepoint ${id} was not stored: ${String(e)}`);
      }
      return { savepointId, info: info(id, sp.triggerTime, sp.ackTime, states) };
    });
  }
}
