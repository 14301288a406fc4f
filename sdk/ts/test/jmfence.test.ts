// The node Worker takes a JobMaster token other than the job's current
// one, on a JobMaster's own call, only once the HA store shows it as the
// grant of "job/<job_id>" (contract 1.2, TaskExecutorService): a caller
// that makes up a newer token cannot cancel a job's attempts or lock its
// JobMaster out. The store is leaders.ts, whose grants the test makes.

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { Code, ConnectError, createClient, type Client as ConnectClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { TaskExecutorService } from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { ExecutionState } from "../gen/jobplane/v1/execution_pb.js";
import { ErrorReason, StaleTokenDetailsSchema } from "../gen/jobplane/v1/error_pb.js";
import { Worker } from "../src/index.js";
import { startLeaders, type Leaders, type Token } from "./leaders.js";

type TE = ConnectClient<typeof TaskExecutorService>;

const nowhere = "http://127.0.0.1:1";
const rm = { sessionId: "s", epoch: 1n };
const jm1 = { sessionId: "s", epoch: 1n };
const jm2 = { sessionId: "s", epoch: 2n };
const attempt = { vertexId: "v", subtaskIndex: 0, attemptNumber: 0 };

const cleanups: (() => Promise<void>)[] = [];

/**
 * start runs a Worker on a store that grants "jobmanager" and job "j" to
 * token 1, where an attempt of "j" runs (its JobMaster's heartbeat
 * timeout, a minute, outlasts the test), and a client of it.
 */
async function start(signal: AbortSignal): Promise<{ leaders: Leaders; te: TE; stopped: () => boolean }> {
  const leaders = await startLeaders(rm);
  leaders.grantJob("j", jm1);
  const worker = new Worker({ hastore: leaders.url, slots: 1 });
  let ended = false;
  worker.register("hold", async (task) => {
    await new Promise<void>((resolve) => task.signal.addEventListener("abort", () => resolve(), { once: true }));
    ended = true;
  });
  await worker.start();
  const sm = new Http2SessionManager(worker.address);
  const te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: worker.address, httpVersion: "2", sessionManager: sm }));
  cleanups.push(async () => {
    sm.abort();
    await worker.stop();
    await leaders.close();
  });
  await te.requestSlot({ resourceManagerToken: rm, slotIndex: 0, allocationId: "a", jobId: "j", jobMasterAddress: nowhere, jobMasterToken: jm1 }, { signal });
  await te.submitTask(
    { jobId: "j", jobMasterToken: jm1, allocationId: "a", attempt, invokable: "hold", heartbeatTimeout: { seconds: 60n, nanos: 0 } },
    { signal },
  );
  return { leaders, te, stopped: () => ended };
}

/** jobMasterCalls are the JobMaster's direct calls for job "j" under tok; AdoptAttempts throws its job's refusal. */
function jobMasterCalls(te: TE, tok: Token, signal: AbortSignal): Record<string, () => Promise<unknown>> {
  const other = { vertexId: "other", subtaskIndex: 0, attemptNumber: 0 };
  return {
    SubmitTask: () => te.submitTask({ jobId: "j", jobMasterToken: tok, allocationId: "a", attempt: { ...attempt, attemptNumber: 9 }, invokable: "hold" }, { signal }),
    SubmitTasks: () =>
      te.submitTasks({ jobId: "j", jobMasterToken: tok, tasks: [{ allocationId: "a", attempt: { ...attempt, attemptNumber: 9 }, invokable: "hold" }] }, { signal }),
    CancelTask: () => te.cancelTask({ jobId: "j", jobMasterToken: tok, attempt }, { signal }),
    FreeSlot: () => te.freeSlot({ jobId: "j", jobMasterToken: tok, allocationId: "a" }, { signal }),
    FreeSlots: () => te.freeSlots({ jobId: "j", jobMasterToken: tok, allocationIds: ["a"] }, { signal }),
    TriggerCheckpoint: () => te.triggerCheckpoint({ jobId: "j", jobMasterToken: tok, checkpointId: 1n, attempts: [other] }, { signal }),
    Heartbeat: () => te.heartbeat({ sender: { case: "jobMaster", value: { jobId: "j", token: tok } } }, { signal }),
    AdoptAttempts: async () => {
      const r = await te.adoptAttempts({ jobs: [{ jobId: "j", jobMasterToken: tok, jobMasterAddress: nowhere }] }, { signal });
      const refused = r.refused[0];
      if (refused) {
        const stale = `${refused.metadata["election"]} ${refused.metadata["current_session_id"] ?? ""}@${refused.metadata["current_epoch"] ?? 0}`;
        return Promise.reject({ itemCode: Code.Aborted, reason: refused.reason, current: stale });
      }
      return r;
    },
  };
}

/** refusal is the code, reason and named grant of what call threw. */
async function refusal(call: () => Promise<unknown>): Promise<{ code: Code | "ok"; reason?: string; current?: string }> {
  try {
    await call();
    return { code: "ok" };
  } catch (e) {
    if (!(e instanceof ConnectError)) {
      const item = e as { itemCode: Code; reason: ErrorReason; current: string };
      return { code: item.itemCode, reason: reasonName(item.reason), current: item.current };
    }
    const stale = e.findDetails(StaleTokenDetailsSchema)[0];
    return {
      code: e.code,
      reason: e.findDetails(ErrorInfoSchema)[0]?.reason,
      ...(stale ? { current: `${stale.election} ${stale.current?.sessionId ?? ""}@${stale.current?.epoch ?? 0n}` } : {}),
    };
  }
}

const reasonName = (r: ErrorReason) => ErrorReason[r].replace(/^ERROR_REASON_/, "");

/** running says whether the JobMaster of tok is served and sees the job's attempt RUNNING. */
async function running(te: TE, tok: Token, signal: AbortSignal): Promise<boolean> {
  const r = await te.heartbeat({ sender: { case: "jobMaster", value: { jobId: "j", token: tok } } }, { signal });
  return r.tasks.length === 1 && r.tasks[0].state === ExecutionState.RUNNING;
}

const staleNaming = (t: Token) => ({ code: Code.Aborted, reason: "STALE_FENCING_TOKEN", current: `job/j ${t.sessionId}@${t.epoch}` });

describe("the JobMaster's token on the node Worker", { timeout: 60_000 }, () => {
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  test("a forged newer token is refused on every direct call and changes nothing; the real JobMaster is still served", { timeout: 30_000 }, async () => {
    const signal = AbortSignal.timeout(20_000);
    const { te, stopped } = await start(signal);
    const forged: Record<string, Token> = {
      "a never-granted epoch": { sessionId: "forger", epoch: 1000n },
      // The session of the "jobmanager" grant is public: it proves nothing.
      "the jobmanager grant's session": { sessionId: "s", epoch: 1000n },
      "another session of the current epoch": { sessionId: "forger", epoch: 1n },
    };
    for (const [what, tok] of Object.entries(forged)) {
      for (const [name, call] of Object.entries(jobMasterCalls(te, tok, signal))) {
        const got = await refusal(call);
        assert.deepEqual(got, staleNaming(jm1), `${name} under ${what}`);
      }
    }
    assert.equal(stopped(), false, "a forged token stopped the job's attempt");
    assert.ok(await running(te, jm1, signal), "the real JobMaster is served and sees its attempt RUNNING");
  });

  test("a newer granted token is taken; a call under the current one reads nothing", { timeout: 30_000 }, async () => {
    const signal = AbortSignal.timeout(20_000);
    const { leaders, te } = await start(signal);
    const reads = leaders.jobReads();
    assert.ok(await running(te, jm1, signal));
    assert.equal(leaders.jobReads(), reads, "a call under the current token read the store");
    leaders.grantJob("j", jm2);
    await te.cancelTask({ jobId: "j", jobMasterToken: jm2, attempt: { vertexId: "other", subtaskIndex: 0, attemptNumber: 0 } }, { signal });
    assert.deepEqual(await refusal(() => running(te, jm1, signal)), staleNaming(jm2), "the older JobMaster, once the newer was taken");
  });

  test("with the store unreadable a newer token is UNAVAILABLE (STORE_UNAVAILABLE) and changes nothing", { timeout: 30_000 }, async () => {
    const signal = AbortSignal.timeout(20_000);
    const { leaders, te, stopped } = await start(signal);
    leaders.fail();
    for (const [name, call] of Object.entries(jobMasterCalls(te, jm2, signal))) {
      assert.deepEqual(await refusal(call), { code: Code.Unavailable, reason: "STORE_UNAVAILABLE" }, name);
    }
    leaders.heal();
    assert.equal(stopped(), false, "an unchecked token stopped the job's attempt");
    assert.ok(await running(te, jm1, signal), "the real JobMaster is served after");
  });

  test("AdoptAttempts of a job held nowhere is answered empty with no read, and takes nothing", { timeout: 30_000 }, async () => {
    const signal = AbortSignal.timeout(20_000);
    const { leaders, te } = await start(signal);
    const entry = (jobId: string, tok: Token) => ({ jobId, jobMasterToken: tok, jobMasterAddress: nowhere });
    const reads = leaders.jobReads();
    leaders.fail();
    const r = await te.adoptAttempts({ jobs: [entry("k", { sessionId: "forger", epoch: 1000n })] }, { signal });
    assert.deepEqual(
      r.jobs.map((j) => [j.jobId, j.attempts.length, j.allocationIds.length]),
      [["k", 0, 0]],
      "job k, held nowhere, answered empty with the store down",
    );
    assert.equal(r.refused.length, 0);
    assert.equal(leaders.jobReads(), reads, "AdoptAttempts of a job held nowhere read the store");
    assert.deepEqual(
      await refusal(() => te.adoptAttempts({ jobs: [entry("k", { sessionId: "forger", epoch: 1000n }), entry("j", jm2)] }, { signal })),
      { code: Code.Unavailable, reason: "STORE_UNAVAILABLE" },
      "a call naming a held job under a newer token still needs the store",
    );
    leaders.heal();
    leaders.grantJob("k", jm2);
    const after = await te.adoptAttempts({ jobs: [entry("k", jm2)] }, { signal });
    assert.equal(after.refused.length, 0, "job k under its granted token after a forged newer one: the forged token was not taken");
  });
});
