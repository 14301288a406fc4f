// The node Worker answers the cluster protocol's fencing cases as the
// reference (Go) TaskExecutor does: the same calls go to a `jobplane
// taskexecutor` process and to a Worker, and their answers must carry the
// same code, ErrorInfo (reason and metadata) and typed details, which
// must also be the ones the contract names (GetTaskOutput's refusals
// too, though it takes no token). For the calls whose answer is
// compared too (AdoptAttempts, TriggerCheckpoint), a success must carry
// the same response.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client as ConnectClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ErrorInfoSchema, BadRequestSchema } from "../gen/google/rpc/error_details_pb.js";
import { AdoptAttemptsResponseSchema, TaskExecutorService, type JobAdoptionSchema } from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { StaleTokenDetailsSchema } from "../gen/jobplane/v1/error_pb.js";
import { ExecutionAttemptIdSchema } from "../gen/jobplane/v1/execution_pb.js";
import { Worker } from "../src/index.js";
import { startTaskExecutor, type JobManager } from "./cluster.js";
import { startLeaders, type Leaders } from "./leaders.js";

// Nothing listens there: neither TaskExecutor reaches the JobMaster, and
// the leader of "jobmanager" that both observe in the test's store
// (leaders.ts) publishes no address, so the only calls they take are the
// test's.
const nowhere = "http://127.0.0.1:1";
// The ResourceManager's token, the grant of "jobmanager" in that store.
const rm = { sessionId: "rm-session", epoch: 50n };

type TE = ConnectClient<typeof TaskExecutorService>;

interface Answer {
  code: Code | "ok";
  reason?: string;
  metadata?: Record<string, string>;
  stale?: { election: string; epoch: string; sessionId: string };
  violations?: string[];
  /** The response, for a call that returns it as Compared. */
  body?: JsonValue;
}

/** Compared is a response to compare beside the code (its JSON, without volatile fields). */
class Compared {
  constructor(readonly body: JsonValue) {}
}

async function answer(call: () => Promise<unknown>): Promise<Answer> {
  try {
    const r = await call();
    return r instanceof Compared ? { code: "ok", body: r.body } : { code: "ok" };
  } catch (e) {
    assert.ok(e instanceof ConnectError, `not a ConnectError: ${String(e)}`);
    const info = e.findDetails(ErrorInfoSchema)[0];
    const stale = e.findDetails(StaleTokenDetailsSchema)[0];
    const br = e.findDetails(BadRequestSchema)[0];
    const metadata = { ...(info?.metadata ?? {}) };
    delete metadata["task_executor_id"]; // each names itself
    return {
      code: e.code,
      reason: info && `${info.domain}/${info.reason}`,
      metadata,
      stale: stale && { election: stale.election, epoch: String(stale.current?.epoch ?? 0n), sessionId: stale.current?.sessionId ?? "" },
      violations: br?.fieldViolations.map((v) => v.field),
    };
  }
}

describe("fencing answers of the node Worker and the reference TaskExecutor", { timeout: 120_000 }, () => {
  let goTE: JobManager;
  let leaders: Leaders;
  let worker: Worker;
  const sessions: Http2SessionManager[] = [];
  const clients: Record<string, TE> = {};

  before(async () => {
    leaders = await startLeaders(rm);
    goTE = await startTaskExecutor(leaders.url);
    worker = new Worker({ hastore: leaders.url, slots: 4 });
    worker.register("greet", () => {});
    await worker.start();
    for (const [name, url] of [["go", goTE.url], ["node", worker.address]] as const) {
      const sm = new Http2SessionManager(url);
      sessions.push(sm);
      clients[name] = createClient(TaskExecutorService, createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: sm }));
    }
  });

  after(async () => {
    for (const s of sessions) s.abort();
    await worker?.stop();
    await goTE?.stop();
    await leaders?.close();
  });

  test("same code, reason, metadata and details for each call", { timeout: 60_000 }, async () => {
    const jobId = "parity-job";
    const jm = { sessionId: "jm-session", epoch: 100n };
    const older = { sessionId: "jm-old", epoch: 99n };
    const newer = { sessionId: "jm-new", epoch: 101n };
    const attempt = { vertexId: "v", subtaskIndex: 0, attemptNumber: 0 };
    const signal = AbortSignal.timeout(30_000);
    // AdoptAttempts, its whole answer compared. (Nothing in it is
    // volatile: the ItemErrors' metadata names no TaskExecutor.)
    const adopt = (jobs: MessageInitShape<typeof JobAdoptionSchema>[]) => async (te: TE) =>
      new Compared(toJson(AdoptAttemptsResponseSchema, await te.adoptAttempts({ jobs }, { signal })));
    const adoptJob = "parity-adopt";
    const adoptToken = { sessionId: "jm-adopt", epoch: 7n };
    // The store shows the JobMasters that the cases bring in by calls of
    // their own (since 1.2 a TaskExecutor takes such a token only as the
    // job's grant); token 100 comes with RequestSlot.
    leaders.grantJob(jobId, newer);
    leaders.grantJob("parity-unknown", { sessionId: "jm-u", epoch: 3n });
    leaders.grantJob("parity-unknown-2", { sessionId: "jm-u2", epoch: 1n });
    leaders.grantJob(adoptJob, { sessionId: "jm-adopt-2", epoch: 8n });
    // Each case, in order, against each TaskExecutor; the first makes the
    // job's JobMaster token 100 (and the ResourceManager's 50) current.
    const cases: [string, (te: TE) => Promise<unknown>, Partial<Answer>][] = [
      [
        "RequestSlot under the current tokens",
        (te) => te.requestSlot({ resourceManagerToken: rm, slotIndex: 0, allocationId: "alloc-0", jobId, jobMasterAddress: nowhere, jobMasterToken: jm }, { signal }),
        { code: "ok" },
      ],
      [
        "RequestSlot under an older ResourceManager token",
        (te) => te.requestSlot({ resourceManagerToken: { sessionId: "rm-old", epoch: 49n }, slotIndex: 1, allocationId: "alloc-1", jobId, jobMasterAddress: nowhere, jobMasterToken: jm }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "jobmanager", epoch: "50", sessionId: "rm-session" } },
      ],
      [
        // An epoch the store never granted (since 1.2): refused after the
        // wait for the grant (2 s), naming the grant.
        "RequestSlot under a forged newer ResourceManager token",
        (te) => te.requestSlot({ resourceManagerToken: { sessionId: "rm-forged", epoch: 1000n }, slotIndex: 1, allocationId: "alloc-1", jobId, jobMasterAddress: nowhere, jobMasterToken: jm }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "jobmanager", epoch: "50", sessionId: "rm-session" } },
      ],
      [
        "RequestSlot under an older JobMaster token",
        (te) => te.requestSlot({ resourceManagerToken: rm, slotIndex: 1, allocationId: "alloc-1", jobId, jobMasterAddress: nowhere, jobMasterToken: older }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "job/" + jobId, epoch: "100", sessionId: "jm-session" } },
      ],
      [
        "SubmitTask under an older JobMaster token",
        (te) => te.submitTask({ jobId, jobMasterToken: older, allocationId: "alloc-0", attempt, invokable: "greet", heartbeatTimeout: durationFromMs(5000) }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "job/" + jobId, epoch: "100", sessionId: "jm-session" } },
      ],
      [
        "SubmitTasks under an older JobMaster token",
        (te) => te.submitTasks({ jobId, jobMasterToken: older, tasks: [{ allocationId: "alloc-0", attempt, invokable: "greet" }], heartbeatTimeout: durationFromMs(5000) }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN" },
      ],
      ["CancelTask under an older JobMaster token", (te) => te.cancelTask({ jobId, jobMasterToken: older, attempt }, { signal }), { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN" }],
      ["FreeSlot under an older JobMaster token", (te) => te.freeSlot({ jobId, jobMasterToken: older, allocationId: "alloc-0" }, { signal }), { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN" }],
      ["FreeSlots under an older JobMaster token", (te) => te.freeSlots({ jobId, jobMasterToken: older, allocationIds: ["alloc-0"] }, { signal }), { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN" }],
      [
        "Heartbeat from a JobMaster under an older token",
        (te) => te.heartbeat({ sender: { case: "jobMaster", value: { jobId, token: older } } }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN" },
      ],
      [
        "SubmitTask under the current token, to an allocation not held",
        (te) => te.submitTask({ jobId, jobMasterToken: jm, allocationId: "alloc-unknown", attempt, invokable: "greet", heartbeatTimeout: durationFromMs(5000) }, { signal }),
        { code: Code.FailedPrecondition, reason: "jobplane/SLOT_NOT_ALLOCATED" },
      ],
      [
        "SubmitTask without a token",
        (te) => te.submitTask({ jobId, allocationId: "alloc-0", attempt, invokable: "greet" }, { signal }),
        { code: Code.InvalidArgument, reason: "jobplane/INVALID_ARGUMENT", violations: ["job_master_token"] },
      ],
      [
        // An epoch the store never granted (since 1.2): refused at once,
        // naming the job's grant; nothing changes.
        "CancelTask under a forged newer JobMaster token",
        (te) => te.cancelTask({ jobId, jobMasterToken: { sessionId: "jm-forged", epoch: 1000n }, attempt }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "job/" + jobId, epoch: "101", sessionId: "jm-new" } },
      ],
      ["CancelTask under a newer token: adopted", (te) => te.cancelTask({ jobId, jobMasterToken: newer, attempt }, { signal }), { code: "ok" }],
      [
        "SubmitTask under the formerly current token, now older",
        (te) => te.submitTask({ jobId, jobMasterToken: jm, allocationId: "alloc-0", attempt, invokable: "greet", heartbeatTimeout: durationFromMs(5000) }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "job/" + jobId, epoch: "101", sessionId: "jm-new" } },
      ],
      ["AdoptAttempts without entries", adopt([]), { code: Code.InvalidArgument, reason: "jobplane/INVALID_ARGUMENT", violations: ["jobs"] }],
      [
        "AdoptAttempts with an entry without address",
        adopt([{ jobId, jobMasterToken: newer }]),
        { code: Code.InvalidArgument, reason: "jobplane/INVALID_ARGUMENT", violations: ["jobs[0].job_master_address"] },
      ],
      [
        "AdoptAttempts with a complete entry and an empty one: the whole call refused",
        adopt([{ jobId, jobMasterToken: newer, jobMasterAddress: nowhere }, {}]),
        {
          code: Code.InvalidArgument,
          reason: "jobplane/INVALID_ARGUMENT",
          violations: ["jobs[1].job_id", "jobs[1].job_master_token", "jobs[1].job_master_address"],
        },
      ],
      [
        "AdoptAttempts under a token older than the job's newest: its entry refused",
        adopt([{ jobId, jobMasterToken: jm, jobMasterAddress: nowhere }]),
        {
          code: "ok",
          body: {
            jobs: [{ jobId }],
            refused: [
              {
                // index 0: the default, left out of the JSON
                reason: "ERROR_REASON_STALE_FENCING_TOKEN",
                message: "stale fencing token for job/" + jobId,
                metadata: { election: "job/" + jobId, current_epoch: "101", current_session_id: "jm-new" },
              },
            ],
          },
        },
      ],
      [
        "AdoptAttempts of a job unknown here, under a fresh token: nothing held",
        adopt([{ jobId: "parity-unknown", jobMasterToken: { sessionId: "jm-u", epoch: 3n }, jobMasterAddress: nowhere }]),
        { code: "ok", body: { jobs: [{ jobId: "parity-unknown" }] } },
      ],
      [
        "AdoptAttempts of two jobs, the second under an older token: refused by its index",
        adopt([
          { jobId: "parity-unknown-2", jobMasterToken: { sessionId: "jm-u2", epoch: 1n }, jobMasterAddress: nowhere },
          { jobId, jobMasterToken: older, jobMasterAddress: nowhere },
        ]),
        {
          code: "ok",
          body: {
            jobs: [{ jobId: "parity-unknown-2" }, { jobId }],
            refused: [
              {
                index: 1,
                reason: "ERROR_REASON_STALE_FENCING_TOKEN",
                message: "stale fencing token for job/" + jobId,
                metadata: { election: "job/" + jobId, current_epoch: "101", current_session_id: "jm-new" },
              },
            ],
          },
        },
      ],
      [
        "RequestSlot for another job",
        (te) => te.requestSlot({ resourceManagerToken: rm, slotIndex: 2, allocationId: "alloc-adopt", jobId: adoptJob, jobMasterAddress: nowhere, jobMasterToken: adoptToken }, { signal }),
        { code: "ok" },
      ],
      [
        "AdoptAttempts of that job under its token: its allocation listed",
        adopt([{ jobId: adoptJob, jobMasterToken: adoptToken, jobMasterAddress: nowhere }]),
        { code: "ok", body: { jobs: [{ jobId: adoptJob, allocationIds: ["alloc-adopt"] }] } },
      ],
      [
        "AdoptAttempts of that job under a newer token: its allocation listed",
        adopt([{ jobId: adoptJob, jobMasterToken: { sessionId: "jm-adopt-2", epoch: 8n }, jobMasterAddress: nowhere }]),
        { code: "ok", body: { jobs: [{ jobId: adoptJob, allocationIds: ["alloc-adopt"] }] } },
      ],
      [
        "AdoptAttempts of that job, repeated: the same answer",
        adopt([{ jobId: adoptJob, jobMasterToken: { sessionId: "jm-adopt-2", epoch: 8n }, jobMasterAddress: nowhere }]),
        { code: "ok", body: { jobs: [{ jobId: adoptJob, allocationIds: ["alloc-adopt"] }] } },
      ],
      [
        "TriggerCheckpoint under an older JobMaster token",
        (te) => te.triggerCheckpoint({ jobId, jobMasterToken: jm, checkpointId: 1n, attempts: [attempt] }, { signal }),
        { code: Code.Aborted, reason: "jobplane/STALE_FENCING_TOKEN", stale: { election: "job/" + jobId, epoch: "101", sessionId: "jm-new" } },
      ],
      [
        "TriggerCheckpoint without a checkpoint id or attempts",
        (te) => te.triggerCheckpoint({ jobId, jobMasterToken: newer }, { signal }),
        { code: Code.InvalidArgument, reason: "jobplane/INVALID_ARGUMENT", violations: ["checkpoint_id", "attempts"] },
      ],
      [
        "TriggerCheckpoint of an attempt not running here: declined in the answer",
        async (te) => {
          const r = await te.triggerCheckpoint({ jobId, jobMasterToken: newer, checkpointId: 1n, attempts: [attempt] }, { signal });
          // The reason names the TaskExecutor: only whether it declined is compared.
          return new Compared(r.acks.map((a) => ({ attempt: toJson(ExecutionAttemptIdSchema, a.attempt!), state: a.state !== undefined, declined: a.declined !== "" })));
        },
        { code: "ok", body: [{ attempt: { vertexId: "v" }, state: false, declined: true }] },
      ],
      [
        "GetTaskOutput of an attempt that never ran here",
        (te) => te.getTaskOutput({ jobId, attempt: { vertexId: "v", subtaskIndex: 2, attemptNumber: 3 } }, { signal }),
        {
          code: Code.NotFound,
          reason: "jobplane/EXECUTION_NOT_FOUND",
          metadata: { job_id: jobId, vertex_id: "v", subtask_index: "2", attempt_number: "3" },
        },
      ],
      [
        "GetTaskOutput without a job or attempt, with a negative offset and max_bytes",
        (te) => te.getTaskOutput({ offset: -1n, maxBytes: -1 }, { signal }),
        { code: Code.InvalidArgument, reason: "jobplane/INVALID_ARGUMENT", violations: ["job_id", "attempt", "offset", "max_bytes"] },
      ],
    ];
    for (const [name, call, want] of cases) {
      const go = await answer(() => call(clients["go"]));
      const node = await answer(() => call(clients["node"]));
      assert.deepEqual(node, go, `${name}: the node Worker answered differently from the reference TaskExecutor`);
      for (const [k, v] of Object.entries(want)) {
        assert.deepEqual(go[k as keyof Answer], v, `${name}: ${k}`);
      }
    }
  });
});
