// The Client's checkpoint and savepoint calls: a counting job on a real
// jobmanager (the node Worker its TaskExecutor) through its checkpoints, a
// savepoint, a stop with savepoint, a job restored from it and the
// savepoint's deletion; and, against a scripted DispatcherService, which
// failures triggerSavepoint (not idempotent) is tried again after.

import assert from "node:assert/strict";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { DispatcherService } from "../gen/jobplane/v1/dispatcher_service_pb.js";
import {
  CheckpointsUnsupportedError,
  Client,
  ErrorReason,
  JobNotFoundError,
  JobStatus,
  JobTerminalError,
  JobplaneError,
  NotLeaderError,
  SavepointFailedError,
  SavepointNotFoundError,
  Worker,
  type SavepointInfo,
} from "../src/index.js";
import { startJobManager, type JobManager } from "./cluster.js";

/** countGraph is a job of one vertex of "count" on two subtasks, counting to `to`. */
function countGraph(name: string, to: string, extra: { checkpointEveryMs?: number; restoreFromSavepoint?: string } = {}) {
  return {
    name,
    vertices: [{ id: "count", name: "count", invokable: "count", parallelism: 2, config: { to } }],
    config: {
      checkpoints: extra.checkpointEveryMs ? { interval: durationFromMs(extra.checkpointEveryMs), retained: 3 } : undefined,
      restoreFromSavepoint: extra.restoreFromSavepoint ?? "",
    },
  };
}

const ids = (sps: SavepointInfo[]) => sps.map((s) => s.savepointId);

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

describe("checkpoints and savepoints of a counting job", { timeout: 120_000 }, () => {
  let jm: JobManager;
  let worker: Worker;
  let client: Client;
  /** Each attempt's start (restored count, where from) and the counts it gave by checkpoint id, by job and subtask. */
  const attempts: { jobId: string; subtask: number; from: number; restoredFrom: string; given: Map<bigint, number> }[] = [];

  before(async () => {
    jm = await startJobManager();
    worker = new Worker({ hastore: jm.url, slots: 4 });
    // Counts from its restored count to config.to, a step every 10 ms,
    // keeping the count in checkpoints and savepoints.
    worker.register("count", async (task) => {
      let n = task.restored?.data ? Number(new TextDecoder().decode(task.restored.data)) : 0;
      const given = new Map<bigint, number>();
      attempts.push({ jobId: task.jobId, subtask: task.subtaskIndex, from: n, restoredFrom: task.restoredFrom, given });
      task.onCheckpoint((id) => {
        given.set(id, n);
        return { data: new TextEncoder().encode(String(n)) };
      });
      for (const to = Number(task.config["to"]); n < to && !task.signal.aborted; n++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    });
    await worker.start();
    client = new Client(jm.url);
  });

  after(async () => {
    client?.close();
    await worker?.stop();
    await jm?.stop();
  });

  test("checkpoints, a savepoint, a stop with savepoint, a restore, a deletion", { timeout: 100_000 }, async () => {
    const signal = AbortSignal.timeout(90_000);
    const { jobId } = await client.submit(countGraph("counting", "1000000000", { checkpointEveryMs: 100 }), { signal });

    // Its checkpoints, once one completed.
    let cps = await client.checkpoints(jobId, { signal });
    while (cps.checkpoints.length === 0 || cps.stats?.latest === undefined) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      cps = await client.checkpoints(jobId, { signal });
    }
    let last = 0n;
    for (const cp of cps.checkpoints) {
      assert.ok(cp.checkpointId > last, `checkpoint ids not increasing: ${cps.checkpoints.map((c) => c.checkpointId).join(", ")}`);
      last = cp.checkpointId;
      assert.equal(cp.subtaskStates, 2, `checkpoint ${cp.checkpointId}: subtask states`);
      assert.ok(cp.stateBytes > 0n, `checkpoint ${cp.checkpointId}: ${cp.stateBytes} state bytes`);
      assert.ok(timestampDate(cp.ackTime!) >= timestampDate(cp.triggerTime!), `checkpoint ${cp.checkpointId} acknowledged before its trigger`);
    }
    const counts = cps.stats!.counts!;
    assert.ok(counts.completed >= 1n && counts.triggered >= counts.completed, `counts ${counts.triggered} triggered, ${counts.completed} completed`);
    assert.equal(cps.stats!.latest!.checkpointId, last, "the latest completed checkpoint is not the last listed");

    // A savepoint: the job runs on.
    const sp = await client.triggerSavepoint(jobId, { signal });
    assert.ok(sp.savepointId !== "", "a savepoint without an id");
    assert.equal(sp.jobId, jobId);
    assert.equal(sp.checkpoint?.subtaskStates, 2);
    const status = (await client.dispatcher().getJob({ jobId }, { signal })).job?.summary?.status;
    assert.equal(status, JobStatus.RUNNING, `after a savepoint without stop the job is ${JobStatus[status ?? 0]}`);

    // A stop with savepoint: the job ends CANCELED.
    const stopped = await client.triggerSavepoint(jobId, { stop: true, signal });
    assert.ok(stopped.checkpoint!.checkpointId > sp.checkpoint!.checkpointId, "the second savepoint's checkpoint id is not after the first's");
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.CANCELED, `after a stop with savepoint the job ended ${JobStatus[result.status]}`);
    await assert.rejects(client.triggerSavepoint(jobId, { signal }), JobTerminalError);

    // Listed, a page of one at a time, in id order; among all the cluster's.
    const want = [sp.savepointId, stopped.savepointId].sort();
    assert.deepEqual(ids(await collect(client.savepoints(jobId, { pageSize: 1, signal }))), want);
    assert.deepEqual(ids(await collect(client.savepoints(undefined, { signal }))), want);

    // A job restored from the stop's savepoint: each subtask starts from
    // the count it gave that savepoint.
    const restored = await client.submit(countGraph("restored", "1", { restoreFromSavepoint: stopped.savepointId }), { signal });
    assert.equal((await client.wait(restored.jobId, { signal })).status, JobStatus.FINISHED);
    const starts = attempts
      .filter((a) => a.jobId === restored.jobId)
      .sort((a, b) => a.subtask - b.subtask)
      .map((a) => ({ subtask: a.subtask, from: a.from, restoredFrom: a.restoredFrom }));
    const gave = [0, 1].map((subtask) => ({
      subtask,
      from: attempts.find((a) => a.jobId === jobId && a.subtask === subtask)?.given.get(stopped.checkpoint!.checkpointId),
      restoredFrom: stopped.savepointId,
    }));
    assert.deepEqual(starts, gave, "the restored job's subtasks did not start from the savepoint's counts");

    // Deleted (twice: deleting an absent savepoint is no error), no longer
    // listed, and no job restores from it.
    for (const id of [sp.savepointId, stopped.savepointId, sp.savepointId]) await client.deleteSavepoint(id, { signal });
    assert.deepEqual(ids(await collect(client.savepoints(jobId, { signal }))), []);
    await assert.rejects(client.submit(countGraph("restored-again", "1", { restoreFromSavepoint: stopped.savepointId }), { signal }), (e) => {
      assert.ok(e instanceof SavepointNotFoundError, `got ${String(e)}`);
      assert.equal(e.code, Code.NotFound);
      assert.equal(e.savepointId, stopped.savepointId);
      return true;
    });

    await assert.rejects(client.checkpoints("no-such-job", { signal }), JobNotFoundError);
    await assert.rejects(client.triggerSavepoint("no-such-job", { signal }), JobNotFoundError);
  });
});

/** answer is a jobplane server's error: a code, its ErrorInfo reason and metadata. */
function answer(code: Code, reason: string, metadata: Record<string, string> = {}): ConnectError {
  return new ConnectError(reason.toLowerCase(), code, undefined, [{ desc: ErrorInfoSchema, value: { domain: "jobplane", reason, metadata } }]);
}

/** Scripted answers the call with the n-th attempt's answer (n from 1); "cut" closes the connection unanswered. */
type Scripted = (n: number) => ConnectError | "cut" | "ok";

/**
 * startDispatcher serves DispatcherService over HTTP/1.1 with
 * TriggerSavepoint and DeleteSavepoint scripted, and ListSavepoints
 * paging through `listed` (which it records the requests of) when given;
 * the other calls are UNIMPLEMENTED.
 */
async function startDispatcher(script: Scripted, listed?: string[]) {
  const calls = { trigger: 0, delete: 0 };
  const lists: { jobId: string; pageSize: number; pageToken: string }[] = [];
  const sp = { savepointId: "sp-1", jobId: "j" };
  const step = (n: number): void => {
    const a = script(n);
    if (a instanceof ConnectError) throw a;
  };
  const impl: Partial<ServiceImpl<typeof DispatcherService>> = {
    triggerSavepoint: () => {
      step(calls.trigger);
      return { savepoint: sp };
    },
    deleteSavepoint: () => {
      step(calls.delete);
      return {};
    },
  };
  if (listed !== undefined) {
    impl.listSavepoints = ({ jobId, pageSize, pageToken }) => {
      lists.push({ jobId, pageSize, pageToken });
      const from = Number(pageToken || "0");
      const to = Math.min(from + (pageSize || 100), listed.length);
      return { savepoints: listed.slice(from, to).map((savepointId) => ({ savepointId, jobId })), nextPageToken: to < listed.length ? String(to) : "" };
    };
  }
  const adapter = connectNodeAdapter({ routes: (router: ConnectRouter) => router.service(DispatcherService, impl) });
  const server = http.createServer((req, res) => {
    const n = req.url?.endsWith("/TriggerSavepoint") ? ++calls.trigger : req.url?.endsWith("/DeleteSavepoint") ? ++calls.delete : 0;
    if (n > 0 && script(n) === "cut") {
      req.socket.destroy();
      return;
    }
    adapter(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    lists,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

describe("triggerSavepoint is tried again only where the cluster certainly did nothing", () => {
  const storeUnavailable = answer(Code.Unavailable, "STORE_UNAVAILABLE");
  const cases: { name: string; script: Scripted; before?: "refused" | "redirect"; calls: number; err?: (e: unknown) => boolean }[] = [
    { name: "NOT_LEADER without a leader, then the savepoint", script: (n) => (n === 1 ? answer(Code.Unavailable, "NOT_LEADER") : "ok"), calls: 2 },
    { name: "NOT_LEADER naming the leader, followed there", script: () => "ok", before: "redirect", calls: 1 },
    { name: "a connection refused, then the next URL", script: () => "ok", before: "refused", calls: 1 },
    { name: "the leader's own UNAVAILABLE", script: () => storeUnavailable, calls: 1, err: (e) => e instanceof JobplaneError && e.reason === ErrorReason.STORE_UNAVAILABLE },
    { name: "UNAVAILABLE without a reason (a proxy's)", script: () => new ConnectError("bad gateway", Code.Unavailable), calls: 1, err: (e) => e instanceof JobplaneError && e.code === Code.Unavailable },
    { name: "DEADLINE_EXCEEDED without a reason (a proxy's timeout)", script: () => new ConnectError("timeout", Code.DeadlineExceeded), calls: 1, err: (e) => e instanceof JobplaneError && e.code === Code.DeadlineExceeded },
    { name: "INTERNAL without a reason (an answer cut short)", script: () => new ConnectError("cut short", Code.Internal), calls: 1, err: (e) => e instanceof JobplaneError && e.code === Code.Internal },
    { name: "no answer: the connection closed", script: () => "cut", calls: 1, err: (e) => e instanceof JobplaneError },
    {
      name: "SAVEPOINT_FAILED",
      script: () => answer(Code.Aborted, "SAVEPOINT_FAILED", { job_id: "j" }),
      calls: 1,
      err: (e) => e instanceof SavepointFailedError && e.jobId === "j" && e.code === Code.Aborted,
    },
  ];
  for (const tc of cases) {
    test(tc.name, { timeout: 30_000 }, async () => {
      const fake = await startDispatcher(tc.script);
      // A standby that names the fake as the leader.
      const standby = tc.before === "redirect" ? await startDispatcher(() => answer(Code.Unavailable, "NOT_LEADER", { leader_address: fake.url })) : undefined;
      const urls = tc.before === "refused" ? ["http://127.0.0.1:1", fake.url] : standby ? [standby.url] : [fake.url];
      const client = new Client(urls, { retryInitialBackoffMs: 1, retryMaxElapsedMs: 5_000 });
      try {
        const got = client.triggerSavepoint("j", { stop: true, signal: AbortSignal.timeout(20_000) });
        if (tc.err) await assert.rejects(got, (e) => tc.err!(e) || assert.fail(`got ${String(e)}`));
        else assert.equal((await got).savepointId, "sp-1");
        assert.equal(fake.calls.trigger, tc.calls, `TriggerSavepoint reached the leader ${fake.calls.trigger} times`);
        if (standby) assert.equal(standby.calls.trigger, 1);
      } finally {
        client.close();
        await standby?.close();
        await fake.close();
      }
    });
  }

  test("deleteSavepoint, idempotent, is tried again after the leader's own UNAVAILABLE", { timeout: 30_000 }, async () => {
    const fake = await startDispatcher((n) => (n === 1 ? storeUnavailable : "ok"));
    const client = new Client(fake.url, { retryInitialBackoffMs: 1, retryMaxElapsedMs: 5_000 });
    try {
      await client.deleteSavepoint("sp-1", { signal: AbortSignal.timeout(20_000) });
      assert.equal(fake.calls.delete, 2);
    } finally {
      client.close();
      await fake.close();
    }
  });

  test("deleteSavepoint, idempotent, is tried again after a connection closed unanswered", { timeout: 30_000 }, async () => {
    const fake = await startDispatcher((n) => (n === 1 ? "cut" : "ok"));
    const client = new Client(fake.url, { retryInitialBackoffMs: 1, retryMaxElapsedMs: 5_000 });
    try {
      await client.deleteSavepoint("sp-1", { signal: AbortSignal.timeout(20_000) });
      assert.equal(fake.calls.delete, 2);
    } finally {
      client.close();
      await fake.close();
    }
  });

  test("savepoints reads the pages as the loop goes", { timeout: 30_000 }, async () => {
    const fake = await startDispatcher(() => "ok", ["a", "b", "c"]);
    const client = new Client(fake.url, { retryInitialBackoffMs: 1, retryMaxElapsedMs: 5_000 });
    try {
      const it = client.savepoints("j", { pageSize: 2, signal: AbortSignal.timeout(20_000) });
      assert.equal((await it.next()).value?.savepointId, "a");
      assert.equal(fake.lists.length, 1, "a page read before the loop needed it");
      assert.deepEqual([...ids(await collect(it))], ["b", "c"]);
      assert.deepEqual(fake.lists, [
        { jobId: "j", pageSize: 2, pageToken: "" },
        { jobId: "j", pageSize: 2, pageToken: "2" },
      ]);
    } finally {
      client.close();
      await fake.close();
    }
  });

  test("a server that keeps no checkpoints: CheckpointsUnsupportedError, at once", { timeout: 30_000 }, async () => {
    // The scripted calls answer UNIMPLEMENTED as a jobplane handler does; the others as the framework does.
    const fake = await startDispatcher(() => answer(Code.Unimplemented, "UNIMPLEMENTED"));
    const client = new Client(fake.url, { retryInitialBackoffMs: 1, retryMaxElapsedMs: 5_000 });
    const signal = AbortSignal.timeout(20_000);
    const unsupported = (e: unknown) => (e instanceof CheckpointsUnsupportedError && e.code === Code.Unimplemented) || assert.fail(`got ${String(e)}`);
    try {
      await assert.rejects(client.checkpoints("j", { signal }), unsupported);
      await assert.rejects(collect(client.savepoints("", { signal })), unsupported);
      await assert.rejects(client.triggerSavepoint("j", { signal }), unsupported);
      await assert.rejects(client.deleteSavepoint("sp-1", { signal }), unsupported);
      assert.deepEqual(fake.calls, { trigger: 1, delete: 1 });
      // Elsewhere UNIMPLEMENTED is no more than a JobplaneError.
      await assert.rejects(client.wait("j", { signal }), (e) => (e instanceof JobplaneError && !(e instanceof CheckpointsUnsupportedError)) || assert.fail(`got ${String(e)}`));
    } finally {
      client.close();
      await fake.close();
    }
  });

  test("NotLeaderError is what a standby that knows no leader answers once the budget is spent", { timeout: 30_000 }, async () => {
    const fake = await startDispatcher(() => answer(Code.Unavailable, "NOT_LEADER"));
    const client = new Client(fake.url, { retryInitialBackoffMs: 5, retryMaxElapsedMs: 200 });
    try {
      await assert.rejects(client.triggerSavepoint("j", { signal: AbortSignal.timeout(20_000) }), NotLeaderError);
      assert.ok(fake.calls.trigger > 1, `${fake.calls.trigger} calls: NOT_LEADER was not tried again`);
    } finally {
      client.close();
      await fake.close();
    }
  });
});
