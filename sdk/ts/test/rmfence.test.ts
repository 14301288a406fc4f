// The node Worker takes a newer ResourceManager token only once the HA
// store shows it as the grant of "jobmanager", and counts the grant it
// observes as seen (contract 1.2, TaskExecutorService): a caller that
// makes up a newer token cannot lock the ResourceManager out, and a
// deposed ResourceManager is refused as soon as the new grant is observed.
// The store is leaders.ts, whose grants the test makes.

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { Code, ConnectError, createClient, type Client as ConnectClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { TaskExecutorService } from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { StaleTokenDetailsSchema } from "../gen/jobplane/v1/error_pb.js";
import { Worker } from "../src/index.js";
import { startLeaders, type Leaders, type Token } from "./leaders.js";

type TE = ConnectClient<typeof TaskExecutorService>;

const nowhere = "http://127.0.0.1:1";
const rm1 = { sessionId: "rm", epoch: 1n };
const rm2 = { sessionId: "rm", epoch: 2n };
const jm = { sessionId: "jm", epoch: 1n };

const cleanups: (() => Promise<void>)[] = [];

/** start runs a Worker of three slots on a store that grants "jobmanager" to rm1, and a client of it. */
async function start(): Promise<{ leaders: Leaders; te: TE }> {
  const leaders = await startLeaders(rm1);
  const worker = new Worker({ hastore: leaders.url, slots: 3 });
  await worker.start();
  const sm = new Http2SessionManager(worker.address);
  const te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: worker.address, httpVersion: "2", sessionManager: sm }));
  cleanups.push(async () => {
    sm.abort();
    await worker.stop();
    await leaders.close();
  });
  return { leaders, te };
}

function requestSlot(te: TE, rm: Token, slotIndex: number, allocationId: string, signal: AbortSignal) {
  return te.requestSlot({ resourceManagerToken: rm, slotIndex, allocationId, jobId: "j", jobMasterAddress: nowhere, jobMasterToken: jm }, { signal });
}

/** slots probes the worker as the ResourceManager of rm: its slots' allocations. */
async function slots(te: TE, rm: Token, signal: AbortSignal): Promise<string[]> {
  const r = await te.heartbeat({ sender: { case: "resourceManagerToken", value: rm } }, { signal });
  return r.slotReport?.slots.map((s) => s.allocationId) ?? [];
}

/** refusal is the code, reason and StaleTokenDetails of what call threw. */
async function refusal(call: () => Promise<unknown>): Promise<{ code: Code | "ok"; reason?: string; current?: string }> {
  try {
    await call();
    return { code: "ok" };
  } catch (e) {
    assert.ok(e instanceof ConnectError, `not a ConnectError: ${String(e)}`);
    const stale = e.findDetails(StaleTokenDetailsSchema)[0];
    return {
      code: e.code,
      reason: e.findDetails(ErrorInfoSchema)[0]?.reason,
      ...(stale ? { current: `${stale.election} ${stale.current?.sessionId ?? ""}@${stale.current?.epoch ?? 0n}` } : {}),
    };
  }
}

const staleNaming = (current: Token) => ({ code: Code.Aborted, reason: "STALE_FENCING_TOKEN", current: `jobmanager ${current.sessionId}@${current.epoch}` });

describe("the ResourceManager's token on the node Worker", { timeout: 60_000 }, () => {
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  test("a forged newer token is refused and changes nothing; the real ResourceManager is still served", { timeout: 30_000 }, async () => {
    const { te } = await start();
    const signal = AbortSignal.timeout(20_000);
    await requestSlot(te, rm1, 0, "real", signal);
    const forged = { sessionId: "forger", epoch: 1000n };
    const began = Date.now();
    const answers = await Promise.all([
      refusal(() => requestSlot(te, forged, 1, "forged", signal)),
      refusal(() => te.requestSlots({ resourceManagerToken: forged, slots: [{ slotIndex: 2, allocationId: "forged-batch", jobId: "j", jobMasterAddress: nowhere, jobMasterToken: jm }] }, { signal })),
      refusal(() => slots(te, forged, signal)),
      // Another session's token of the granted epoch was never granted.
      refusal(() => requestSlot(te, { sessionId: "forger", epoch: 1n }, 1, "forged-same", signal)),
    ]);
    for (const [i, a] of answers.entries()) {
      assert.deepEqual(a, staleNaming(rm1), `forged call ${i}`);
    }
    console.log(`# the forged calls were refused within ${Date.now() - began} ms`);
    await requestSlot(te, rm1, 1, "real-after", signal);
    // Slot 0's allocation may have lapsed meanwhile (its JobMaster is
    // nowhere): what matters is that no forged call allocated anything.
    const held = await slots(te, rm1, signal);
    assert.equal(held[1], "real-after", `slots ${JSON.stringify(held)}`);
    assert.deepEqual(held.filter((a) => a.startsWith("forged")), [], `slots ${JSON.stringify(held)}: only the real ResourceManager's allocations`);
  });

  test("a newer token granted while its call waits is taken", { timeout: 30_000 }, async () => {
    const { leaders, te } = await start();
    const signal = AbortSignal.timeout(20_000);
    await slots(te, rm1, signal);
    const call = requestSlot(te, rm2, 0, "early", signal);
    await new Promise((r) => setTimeout(r, 100));
    leaders.grant(rm2);
    await call;
    assert.deepEqual(await refusal(() => slots(te, rm1, signal)), staleNaming(rm2), "the older token, once the newer was taken");
  });

  test("the grant observed counts as seen: the deposed ResourceManager is refused before any call under the new one", { timeout: 30_000 }, async () => {
    const { leaders, te } = await start();
    const signal = AbortSignal.timeout(20_000);
    await requestSlot(te, rm1, 0, "before", signal);
    leaders.grant(rm2);
    // The probe changes nothing; it is refused once the grant is observed.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const a = await refusal(() => slots(te, rm1, signal));
      if (a.code === Code.Aborted) break;
      assert.ok(Date.now() < deadline, `the deposed ResourceManager's probe 10 s after a new grant answered ${JSON.stringify(a)}; want STALE_FENCING_TOKEN`);
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(await refusal(() => requestSlot(te, rm1, 1, "stale", signal)), staleNaming(rm2));
    assert.deepEqual(await slots(te, rm2, signal), ["before", "", ""], "the stale call allocated nothing");
  });

  test("with the store unobservable a newer token is UNAVAILABLE (STORE_UNAVAILABLE); the current one is served", { timeout: 30_000 }, async () => {
    const { leaders, te } = await start();
    const signal = AbortSignal.timeout(20_000);
    await slots(te, rm1, signal);
    leaders.fail();
    assert.deepEqual(await refusal(() => requestSlot(te, rm2, 0, "unchecked", signal)), { code: Code.Unavailable, reason: "STORE_UNAVAILABLE" });
    assert.deepEqual(await slots(te, rm1, signal), ["", "", ""], "the unchecked call allocated nothing");
    leaders.heal();
  });
});
