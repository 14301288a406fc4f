// Checkpoints on the node Worker: TriggerCheckpoint called over the
// network as a JobMaster calls it (a fake JobMaster takes the worker's
// offers), and a job with periodic checkpoints on a real jobmanager whose
// counting task fails once and goes on from its restored count.

import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client as ConnectClient, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { BadRequestSchema } from "../gen/google/rpc/error_details_pb.js";
import { JobMasterService } from "../gen/jobplane/cluster/v1/job_master_service_pb.js";
import {
  TaskDeploymentSchema,
  TaskExecutorService,
  type TriggerCheckpointRequestSchema,
  type TriggerCheckpointResponse,
} from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { Client, ErrorReason, JobStatus, Worker, reasonOf, type State, type Task } from "../src/index.js";
import { startJobManager, waitFor, type JobManager } from "./cluster.js";
import { startLeaders, type Leaders } from "./leaders.js";

const rm = { sessionId: "rm", epoch: 1n };
const jmToken = { sessionId: "jm-2", epoch: 2n };
const olderToken = { sessionId: "jm-1", epoch: 1n };
const jobId = "j";
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));
const bytes = (s: string) => new TextEncoder().encode(s);

/** startJobMaster serves the JobMasterService calls a TaskExecutor makes; its offer answers deploy `deployments` by allocation id. */
async function startJobMaster(deployments: Map<string, ReturnType<typeof create<typeof TaskDeploymentSchema>>>) {
  const sessions = new Set<http2.ServerHttp2Session>();
  const routes = (router: ConnectRouter) =>
    router.service(JobMasterService, {
      offerSlots: (req) => ({
        accepted: req.offers,
        heartbeatTimeout: durationFromMs(60_000),
        heartbeatInterval: durationFromMs(1000),
        deployments: req.offers.flatMap((o) => deployments.get(o.allocationId) ?? []),
      }),
      heartbeatFromTaskExecutor: () => ({}),
      updateTaskExecutionState: () => ({}),
    });
  const server = http2.createServer(connectNodeAdapter({ routes }));
  server.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sessions) s.destroy();
      }),
  };
}

describe("TriggerCheckpoint on the node Worker", { timeout: 120_000 }, () => {
  let fake: Awaited<ReturnType<typeof startJobMaster>>;
  let leaders: Leaders;
  let worker: Worker;
  let sm: Http2SessionManager;
  let te: ConnectClient<typeof TaskExecutorService>;
  /** The tasks each vertex ran, by vertex id. */
  const tasks = new Map<string, Task>();
  /** How often the stateful task was asked for each checkpoint id. */
  const asked = new Map<bigint, number>();

  before(async () => {
    // The attempt of vertex "o" is deployed in the answer to the worker's offer.
    fake = await startJobMaster(
      new Map([
        [
          "alloc-o",
          create(TaskDeploymentSchema, {
            allocationId: "alloc-o",
            attempt: { vertexId: "o" },
            invokable: "blocks",
            restoredState: { vertexId: "o", state: { case: "pointer", value: "s3://bucket/o-5" } },
            restoredFrom: "5",
          }),
        ],
      ]),
    );
    leaders = await startLeaders(rm); // grants "jobmanager" to the test's ResourceManager token
    // The newer JobMaster below comes in by a trigger of its own: the
    // store shows it as the job's grant.
    leaders.grantJob(jobId, { sessionId: "jm-3", epoch: 3n });
    worker = new Worker({ hastore: leaders.url, slots: 4 });
    worker.register("stateful", async (task) => {
      tasks.set(task.vertexId, task);
      task.onCheckpoint((id) => {
        asked.set(id, (asked.get(id) ?? 0) + 1);
        if (id === 13n) throw new Error("not now");
        if (id === 14n) return { data: bytes("both"), pointer: "file:///both" };
        if (id === 20n) return new Promise<State>(() => {}); // never gives its state, whatever the signal says
        return Promise.resolve({ data: bytes(`snap-${id}`) });
      });
      await new Promise((resolve) => task.signal.addEventListener("abort", resolve));
    });
    worker.register("blocks", async (task) => {
      tasks.set(task.vertexId, task);
      await new Promise((resolve) => task.signal.addEventListener("abort", resolve));
    });
    await worker.start();
    sm = new Http2SessionManager(worker.address);
    te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: worker.address, httpVersion: "2", sessionManager: sm }));
  });

  after(async () => {
    sm?.abort();
    await worker?.stop();
    await fake?.close();
    await leaders?.close();
  });

  test("state once per id, restored state, declines and fencing", { timeout: 60_000 }, async () => {
    const signal = AbortSignal.timeout(50_000);
    const heartbeatTimeout = durationFromMs(60_000);
    const inline = (vertexId: string, data: string) => ({ vertexId, state: { case: "inline" as const, value: bytes(data) } });
    for (const [slotIndex, v] of ["s", "b", "o", "n"].entries()) {
      await te.requestSlot(
        { resourceManagerToken: rm, slotIndex, allocationId: "alloc-" + v, jobId, jobMasterAddress: fake.url, jobMasterToken: jmToken },
        { signal },
      );
    }
    // "s" by SubmitTask, "b" and "n" by SubmitTasks, "o" in the offer's answer.
    await te.submitTask(
      {
        jobId,
        jobMasterToken: jmToken,
        allocationId: "alloc-s",
        attempt: { vertexId: "s" },
        invokable: "stateful",
        heartbeatTimeout,
        restoredState: inline("s", "from-5"),
        restoredFrom: "5",
      },
      { signal },
    );
    const { refused } = await te.submitTasks(
      {
        jobId,
        jobMasterToken: jmToken,
        heartbeatTimeout,
        tasks: [
          { allocationId: "alloc-b", attempt: { vertexId: "b" }, invokable: "blocks", restoredState: inline("b", "b-from-5"), restoredFrom: "5" },
          { allocationId: "alloc-n", attempt: { vertexId: "n" }, invokable: "blocks" },
        ],
      },
      { signal },
    );
    assert.deepEqual(refused, []);
    await waitFor("the four attempts to run", () => tasks.size === 4);
    const restored = Object.fromEntries(
      [...tasks].map(([v, t]) => [v, { data: text(t.restored?.data), pointer: t.restored?.pointer, from: t.restoredFrom }]),
    );
    assert.deepEqual(restored, {
      s: { data: "from-5", pointer: undefined, from: "5" },
      b: { data: "b-from-5", pointer: undefined, from: "5" },
      o: { data: undefined, pointer: "s3://bucket/o-5", from: "5" },
      n: { data: undefined, pointer: undefined, from: "" },
    });

    const trigger = (checkpointId: bigint, vertices: string[], opts: { token?: typeof jmToken; timeoutMs?: number } = {}) =>
      te.triggerCheckpoint(
        { jobId, jobMasterToken: opts.token ?? jmToken, checkpointId, attempts: vertices.map((vertexId) => ({ vertexId })) },
        { signal, timeoutMs: opts.timeoutMs },
      );
    const summary = (r: TriggerCheckpointResponse) =>
      r.acks.map((a) => ({
        vertex: a.attempt?.vertexId,
        stateVertex: a.state?.vertexId,
        state: a.state?.state.case === "inline" ? text(a.state.state.value) : a.state?.state.value,
        declined: a.declined !== "",
      }));
    assert.deepEqual(summary(await trigger(7n, ["s", "b", "o", "n", "absent"])), [
      { vertex: "s", stateVertex: "s", state: "snap-7", declined: false },
      // The tasks that registered no function keep the state they were restored from (none for "n").
      { vertex: "b", stateVertex: "b", state: "b-from-5", declined: false },
      { vertex: "o", stateVertex: "o", state: "s3://bucket/o-5", declined: false },
      { vertex: "n", stateVertex: "n", state: undefined, declined: false },
      { vertex: "absent", stateVertex: undefined, state: undefined, declined: true },
    ]);
    assert.deepEqual(summary(await trigger(7n, ["s"])), [{ vertex: "s", stateVertex: "s", state: "snap-7", declined: false }]);
    assert.equal(asked.get(7n), 1, "a repeated trigger of checkpoint 7 asked the task again");

    const d13 = (await trigger(13n, ["s"])).acks[0];
    assert.match(d13.declined, /not now/, "a checkpoint function's error declines");
    assert.equal(d13.state, undefined);
    assert.match((await trigger(14n, ["s"])).acks[0].declined, /both state bytes and a pointer/);

    // A task that never gives its state: the call's deadline ends the wait, a repeat asks the task no more.
    for (let i = 0; i < 2; i++) {
      await assert.rejects(trigger(20n, ["s"], { timeoutMs: 200 }), (e) => ConnectError.from(e).code === Code.DeadlineExceeded);
    }
    assert.equal(asked.get(20n), 1, "a repeated trigger of checkpoint 20 asked the task again");

    await assert.rejects(trigger(21n, ["s"], { token: olderToken }), (e) => reasonOf(e) === ErrorReason.STALE_FENCING_TOKEN);
    assert.equal(asked.get(21n), undefined, "a stale JobMaster's trigger reached the task");
    const invalid: [MessageInitShape<typeof TriggerCheckpointRequestSchema>, string[]][] = [
      [{ jobId, jobMasterToken: jmToken }, ["checkpoint_id", "attempts"]],
      [{ jobId, checkpointId: 22n, attempts: [{ vertexId: "s" }] }, ["job_master_token"]],
      [{ jobId, jobMasterToken: jmToken, checkpointId: 22n, attempts: [{ vertexId: "" }] }, ["attempts[0].vertex_id"]],
    ];
    for (const [req, fields] of invalid) {
      await assert.rejects(te.triggerCheckpoint(req, { signal }), (e) => {
        const err = ConnectError.from(e);
        assert.equal(err.code, Code.InvalidArgument);
        assert.deepEqual(err.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field), fields);
        return true;
      });
    }

    // The attempt's end ends a wait its task does not: checkpoint 20 is
    // declined once the attempt is canceled.
    const pending = trigger(20n, ["s"], { timeoutMs: 30_000 });
    await te.cancelTask({ jobId, jobMasterToken: jmToken, attempt: { vertexId: "s" } }, { signal });
    assert.match((await pending).acks[0].declined, /ended/);
    assert.equal(asked.get(20n), 1);
    await waitFor("the canceled attempt to end", () => tasks.get("s")!.signal.aborted);
    assert.match((await trigger(23n, ["s"])).acks[0].declined, /not running/);

    // A newer JobMaster's trigger cancels the older one's attempts (no
    // task lease here) and asks none of them: they are not its.
    const newer = { sessionId: "jm-3", epoch: 3n };
    assert.deepEqual(summary(await trigger(24n, ["b"], { token: newer })), [{ vertex: "b", stateVertex: undefined, state: undefined, declined: true }]);
    await waitFor("the older JobMaster's attempt to be canceled", () => tasks.get("b")!.signal.aborted);
  });
});

describe("a counting job with checkpoints on the node Worker", { timeout: 120_000 }, () => {
  let jm: JobManager;
  let worker: Worker;
  let client: Client;
  /** Each attempt's start (restored count, where from) and the counts it gave by checkpoint id. */
  const attempts: { attempt: number; from: number; restoredFrom: string; given: Map<bigint, number> }[] = [];

  before(async () => {
    jm = await startJobManager();
    worker = new Worker({ hastore: jm.url, slots: 2 });
    // Counts from its restored count to config.to, a step every 10 ms,
    // keeping the count in checkpoints; attempt 0 fails once it gave its
    // count to three checkpoints (so at least two completed).
    worker.register("count", async (task) => {
      let n = task.restored?.data ? Number(new TextDecoder().decode(task.restored.data)) : 0;
      const given = new Map<bigint, number>();
      attempts.push({ attempt: task.attempt, from: n, restoredFrom: task.restoredFrom, given });
      task.onCheckpoint((id) => {
        given.set(id, n);
        return { data: new TextEncoder().encode(String(n)) };
      });
      const to = Number(task.config["to"]);
      while (n < to && !task.signal.aborted) {
        if (task.attempt === 0 && given.size >= 3) throw new Error(`failing at ${n}, as told`);
        await new Promise((resolve) => setTimeout(resolve, 10));
        n++;
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

  test("attempt 1 goes on from the count of a checkpoint attempt 0 gave", { timeout: 90_000 }, async () => {
    const signal = AbortSignal.timeout(80_000);
    const { jobId } = await client.submit(
      {
        name: "count",
        vertices: [{ id: "count", name: "count", invokable: "count", parallelism: 1, config: { to: "300" } }],
        config: {
          restartStrategy: { strategy: { case: "fixedDelay", value: { attempts: 3, delay: durationFromMs(10) } } },
          checkpoints: { interval: durationFromMs(100) },
        },
      },
      { signal },
    );
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.FINISHED, `${JobStatus[result.status]}: ${result.failure?.message ?? ""}`);
    assert.deepEqual(
      attempts.map((a) => a.attempt),
      [0, 1],
      `attempts run: ${JSON.stringify(attempts.map((a) => ({ ...a, given: [...a.given] })), (_, v) => (typeof v === "bigint" ? String(v) : v))}`,
    );
    const [first, second] = attempts;
    assert.equal(first.from, 0);
    assert.equal(first.restoredFrom, "");
    assert.ok(second.from > 0, `attempt 1 started from ${second.from}; want a count > 0 from a checkpoint`);
    assert.match(second.restoredFrom, /^[1-9][0-9]*$/);
    assert.equal(second.from, first.given.get(BigInt(second.restoredFrom)), `attempt 1 restored from checkpoint ${second.restoredFrom}: not the count attempt 0 gave it`);
  });
});
