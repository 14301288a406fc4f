// Adoption with the node Worker, against a fake JobMaster whose heartbeat
// answers grant a task lease (JobMasterService.HeartbeatFromTaskExecutor
// Response.task_lease): a newer JobMaster of the job does not cancel the
// older one's running attempt but holds it, AdoptAttempts moves it to the
// newer token (the older token is refused for it from then on, and its
// state is reported to the adopter under the newer token), and a held
// attempt that no JobMaster adopts stops when its lease ends. Without a
// task lease a newer JobMaster cancels the attempt, as before. A lease
// that comes with the answer to the worker's offer (the registration) or
// with a deployment holds the attempt from the start: before any heartbeat
// was answered.

import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, afterEach, describe, test } from "node:test";
import { create, toJson } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client as ConnectClient, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { JobMasterService } from "../gen/jobplane/cluster/v1/job_master_service_pb.js";
import {
  AdoptAttemptsResponseSchema,
  AdoptedJobSchema,
  TaskDeploymentSchema,
  TaskExecutorService,
  type TaskDeployment,
} from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { ErrorReason } from "../gen/jobplane/v1/error_pb.js";
import { ExecutionState } from "../gen/jobplane/v1/execution_pb.js";
import { Worker, reasonOf, type Task } from "../src/index.js";
import { apiError } from "../src/fence.js";
import { waitFor } from "./cluster.js";
import { startLeaders, type Leaders } from "./leaders.js";

// No ResourceManager: the test makes the ResourceManager's calls itself.
const nowhere = "http://127.0.0.1:1";
const rm = { sessionId: "rm", epoch: 1n };
const older = { sessionId: "jm-1", epoch: 1n };
const newer = { sessionId: "jm-2", epoch: 2n };
const attempt = { vertexId: "v", subtaskIndex: 0, attemptNumber: 0 };

/** FakeJobMaster serves the JobMasterService calls a TaskExecutor makes, at one address for every token. */
interface FakeJobMaster {
  url: string;
  /** The task lease each heartbeat answer grants; 0 for none. */
  taskLeaseMs: number;
  /** The task lease each OfferSlots answer grants; 0 for none. */
  offerTaskLeaseMs: number;
  /** The deployments each OfferSlots answer carries (under the offer's token). */
  offerDeployments: TaskDeployment[];
  /** While false, heartbeats are answered UNAVAILABLE. */
  answering: boolean;
  /** The heartbeats answered so far. */
  answered: number;
  /** The offers taken so far. */
  offers: number;
  /** The state changes reported, as STATE@epoch. */
  reports: string[];
  /** If set, every state report under epoch 1 is held until it settles, then refused EXECUTION_NOT_FOUND. */
  holdEpoch1?: Promise<void>;
  /** The reports held, and those refused after the hold. */
  held: number;
  refused: number;
  close(): Promise<void>;
}

async function startJobMaster(taskLeaseMs: number): Promise<FakeJobMaster> {
  const sessions = new Set<http2.ServerHttp2Session>();
  const fake: FakeJobMaster = { url: "", taskLeaseMs, offerTaskLeaseMs: 0, offerDeployments: [], answering: true, answered: 0, offers: 0, reports: [], held: 0, refused: 0, close: async () => {} };
  const routes = (router: ConnectRouter) =>
    router.service(JobMasterService, {
      offerSlots: (req) => {
        fake.offers++;
        return {
          accepted: req.offers,
          heartbeatTimeout: durationFromMs(1000),
          heartbeatInterval: durationFromMs(100),
          deployments: fake.offerDeployments,
          taskLease: fake.offerTaskLeaseMs > 0 ? durationFromMs(fake.offerTaskLeaseMs) : undefined,
        };
      },
      heartbeatFromTaskExecutor: () => {
        if (!fake.answering) throw new ConnectError("not answering", Code.Unavailable);
        fake.answered++;
        return fake.taskLeaseMs > 0 ? { taskLease: durationFromMs(fake.taskLeaseMs) } : {};
      },
      updateTaskExecutionState: async (req) => {
        if (fake.holdEpoch1 && req.jobMasterToken?.epoch === 1n) {
          fake.held++;
          await fake.holdEpoch1;
          fake.refused++;
          throw apiError(ErrorReason.EXECUTION_NOT_FOUND, "this JobMaster no longer has the attempt", { job_id: req.jobId });
        }
        fake.reports.push(`${ExecutionState[req.status?.state ?? 0]}@${req.jobMasterToken?.epoch ?? 0n}`);
        return {};
      },
    });
  const server = http2.createServer(connectNodeAdapter({ routes }));
  server.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  fake.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of sessions) s.destroy();
    });
  return fake;
}

type TE = ConnectClient<typeof TaskExecutorService>;

interface Setup {
  fake: FakeJobMaster;
  worker: Worker;
  te: TE;
  /** The attempts the worker ran, in order. */
  runs: Task[];
  /** The worker's log lines. */
  logs: string[];
  /** The worker's HA store. */
  leaders: Leaders;
}

const cleanups: (() => Promise<void>)[] = [];

/**
 * startWorker starts a Worker of two slots whose function "hold" runs until
 * its attempt is canceled, and a client of it; both end with the test.
 */
async function startWorker(fake: FakeJobMaster, logs?: string[]): Promise<{ worker: Worker; te: TE; runs: Task[]; leaders: Leaders }> {
  // The store grants "jobmanager" to the test's ResourceManager token, and
  // job "j" to the newer JobMaster, which comes in by a call of its own
  // (newerJobMaster); the older one comes with RequestSlot.
  const leaders = await startLeaders(rm);
  leaders.grantJob("j", newer);
  const worker = new Worker({ hastore: leaders.url, slots: 2, cancelGraceMs: 1000, ...(logs ? { log: (l: string) => logs.push(l) } : {}) });
  const runs: Task[] = [];
  worker.register("hold", async (task) => {
    runs.push(task);
    await waitFor("the attempt's cancellation", () => task.signal.aborted, 60_000);
  });
  await worker.start();
  const sm = new Http2SessionManager(worker.address);
  const te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: worker.address, httpVersion: "2", sessionManager: sm }));
  cleanups.push(async () => {
    sm.abort();
    await worker.stop();
    await fake.close();
    await leaders.close();
  });
  return { worker, te, runs, leaders };
}

/**
 * setup runs an attempt of job "j" under JobMaster token 1 on a fresh
 * Worker, with a fake JobMaster whose answers grant taskLeaseMs, and waits
 * until two heartbeat answers came after the attempt started.
 */
async function setup(taskLeaseMs: number, signal: AbortSignal): Promise<Setup> {
  const fake = await startJobMaster(taskLeaseMs);
  const logs: string[] = [];
  const { worker, te, runs, leaders } = await startWorker(fake, logs);
  await te.requestSlot({ resourceManagerToken: rm, slotIndex: 0, allocationId: "a", jobId: "j", jobMasterAddress: fake.url, jobMasterToken: older }, { signal });
  await waitFor("the slot's offer", () => fake.offers > 0);
  await te.submitTask({ jobId: "j", jobMasterToken: older, allocationId: "a", attempt, invokable: "hold", heartbeatTimeout: durationFromMs(1000) }, { signal });
  await waitFor("the attempt to run", () => runs.length === 1);
  const base = fake.answered;
  await waitFor("two heartbeat answers since the deployment", () => fake.answered >= base + 2);
  return { fake, worker, te, runs, logs, leaders };
}

/** newerJobMaster makes token 2 the job's by a fenced call of its own. */
async function newerJobMaster(te: TE, signal: AbortSignal): Promise<void> {
  await te.cancelTask({ jobId: "j", jobMasterToken: newer, attempt: { vertexId: "other" } }, { signal });
}

function adopt(te: TE, url: string, token: typeof older, signal: AbortSignal) {
  return te.adoptAttempts({ jobs: [{ jobId: "j", jobMasterToken: token, jobMasterAddress: url }] }, { signal });
}

function slotOf(te: TE, signal: AbortSignal): Promise<string> {
  return te.heartbeat({ sender: { case: "resourceManagerToken", value: rm } }, { signal }).then((r) => r.slotReport?.slots[0]?.allocationId ?? "");
}

const sleep = (msec: number) => new Promise((r) => setTimeout(r, msec));

describe("adoption under a task lease with the node worker", { timeout: 120_000 }, () => {
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });
  after(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  test("a newer JobMaster adopts the running attempt; the older token is refused for it", { timeout: 60_000 }, async () => {
    const signal = AbortSignal.timeout(50_000);
    const { fake, worker, te, runs } = await setup(30_000, signal);
    const task = runs[0];

    // The task lease bounds the attempt, not the heartbeat timeout (1 s):
    // silence past the timeout does not stop it.
    fake.answering = false;
    await sleep(1500);
    assert.equal(task.signal.aborted, false, "the attempt stopped at the heartbeat timeout under a 30 s task lease");
    fake.answering = true;

    await newerJobMaster(te, signal);
    assert.equal(worker.jobMasterToken("j")?.epoch, 2n);
    // Past the heartbeat timeout: held, not stopped.
    await sleep(1500);
    assert.equal(task.signal.aborted, false, "the older JobMaster's attempt was canceled as a newer one appeared, under a task lease");
    assert.equal(await slotOf(te, signal), "a");

    const resp = await adopt(te, fake.url, newer, signal);
    assert.deepEqual(resp.refused, []);
    assert.equal(resp.jobs.length, 1);
    const got = resp.jobs[0];
    assert.equal(got.jobId, "j");
    assert.deepEqual(got.allocationIds, ["a"]);
    assert.equal(got.attempts.length, 1);
    const a = got.attempts[0];
    assert.equal(a.allocationId, "a");
    assert.equal(a.status?.attempt?.vertexId, "v");
    assert.equal(a.status?.state, ExecutionState.RUNNING);
    assert.equal(a.deployedUnder?.epoch, 1n);
    assert.equal(a.deployedUnder?.sessionId, "jm-1");
    // Repeating the call answers the same.
    const again = await adopt(te, fake.url, newer, signal);
    assert.deepEqual(toJson(AdoptAttemptsResponseSchema, again), toJson(AdoptAttemptsResponseSchema, resp));

    // The older token: its adoption refused, and it no longer acts on the attempt.
    const stale = await adopt(te, fake.url, older, signal);
    assert.equal(stale.refused.length, 1);
    assert.equal(stale.refused[0].reason, ErrorReason.STALE_FENCING_TOKEN);
    assert.deepEqual(stale.jobs.map((j) => toJson(AdoptedJobSchema, j)), [{ jobId: "j" }]);
    await assert.rejects(te.cancelTask({ jobId: "j", jobMasterToken: older, attempt }, { signal }), (e: unknown) => {
      assert.equal(reasonOf(e), ErrorReason.STALE_FENCING_TOKEN, String(e));
      return true;
    });
    assert.equal(task.signal.aborted, false, "the adopted attempt stopped");

    // The newer token acts on it, and its end is reported there, under that token.
    await te.cancelTask({ jobId: "j", jobMasterToken: newer, attempt }, { signal });
    await waitFor(`CANCELED@2 among the reports ${JSON.stringify(fake.reports)}`, () => fake.reports.includes("CANCELED@2"), 10_000);
    assert.equal(task.signal.aborted, true);
    assert.ok(fake.reports.includes("RUNNING@1"), `reports: ${fake.reports}`);
    assert.ok(!fake.reports.some((r) => r.endsWith("@1") && r !== "RUNNING@1"), `reports: ${fake.reports}`);
  });

  test("an adopted attempt is held for a yet newer JobMaster before its adopter granted a lease", { timeout: 60_000 }, async () => {
    const signal = AbortSignal.timeout(50_000);
    const { fake, te, runs, leaders } = await setup(30_000, signal);
    const task = runs[0];
    await newerJobMaster(te, signal);
    // Adopted under epoch 2 by a JobMaster that never answers a heartbeat,
    // so it grants no lease of its own.
    const first = await adopt(te, nowhere, newer, signal);
    assert.deepEqual(first.refused, []);
    assert.equal(first.jobs[0]?.attempts.length, 1);
    // A yet newer JobMaster adopts it again: held, not canceled.
    const newest = { sessionId: "jm-3", epoch: 3n };
    leaders.grantJob("j", newest);
    const again = await adopt(te, fake.url, newest, signal);
    assert.deepEqual(again.refused, []);
    assert.equal(again.jobs[0]?.attempts.length, 1, "the attempt adopted under epoch 2 was not held for epoch 3");
    assert.equal(again.jobs[0]?.attempts[0]?.status?.state, ExecutionState.RUNNING);
    assert.equal(task.signal.aborted, false, "the adopted attempt stopped as a newer JobMaster appeared");
  });

  test("a held attempt that no JobMaster adopts stops at its task lease's end, and its slot is freed", { timeout: 60_000 }, async () => {
    const signal = AbortSignal.timeout(50_000);
    // A lease of 1.5 s: the attempt stops by 1 s (the lease less a third) after the last answer.
    const { fake, te, runs, logs } = await setup(1500, signal);
    const task = runs[0];
    await newerJobMaster(te, signal);
    await sleep(200);
    assert.equal(task.signal.aborted, false, "canceled at once, not held");
    await waitFor("the held attempt's cancellation", () => task.signal.aborted, 5000);
    await waitFor("the log of its release", () => logs.some((l) => l.includes("no JobMaster adopted a held attempt")));
    let slot = "a";
    for (let i = 0; i < 50 && slot !== ""; i++) {
      slot = await slotOf(te, signal);
      if (slot !== "") await sleep(20);
    }
    assert.equal(slot, "", "the slot of the unadopted attempt was not freed");
    const resp = await adopt(te, fake.url, newer, signal);
    assert.deepEqual(toJson(AdoptAttemptsResponseSchema, resp), { jobs: [{ jobId: "j" }] });
    assert.ok(!fake.reports.some((r) => r.startsWith("CANCELED")), `reports: ${fake.reports}`);
  });

  test("a report refused by the JobMaster it was sent to, after a newer one adopted the attempt, does not cancel it", { timeout: 60_000 }, async () => {
    const signal = AbortSignal.timeout(50_000);
    const fake = await startJobMaster(30_000);
    let release = () => {};
    fake.holdEpoch1 = new Promise<void>((resolve) => (release = resolve));
    const logs: string[] = [];
    const { te, runs } = await startWorker(fake, logs);
    await te.requestSlot({ resourceManagerToken: rm, slotIndex: 0, allocationId: "a", jobId: "j", jobMasterAddress: fake.url, jobMasterToken: older }, { signal });
    await waitFor("the slot's offer", () => fake.offers > 0);
    await te.submitTask({ jobId: "j", jobMasterToken: older, allocationId: "a", attempt, invokable: "hold", heartbeatTimeout: durationFromMs(1000) }, { signal });
    await waitFor("the attempt to run", () => runs.length === 1);
    const task = runs[0];
    // The RUNNING report is held by the older JobMaster while heartbeat
    // answers grant the task lease, and a newer JobMaster adopts the attempt.
    await waitFor("the RUNNING report held by the older JobMaster", () => fake.held > 0);
    const base = fake.answered;
    await waitFor("two heartbeat answers since the deployment", () => fake.answered >= base + 2);
    await newerJobMaster(te, signal);
    const resp = await adopt(te, fake.url, newer, signal);
    assert.equal(resp.jobs[0]?.attempts.length, 1, "the attempt was not adopted");
    // The older JobMaster answers the held report: it no longer has the attempt.
    release();
    await waitFor("the held report refused", () => fake.refused > 0);
    // The worker settles the answer as the call returns; a cancel would
    // abort the attempt at once. A heartbeat round later it has.
    const after = fake.answered;
    await waitFor("two heartbeat answers since the refusal", () => fake.answered >= after + 2);
    assert.equal(task.signal.aborted, false, `the adopted attempt was canceled on the older JobMaster's refusal of a report it no longer owned; log: ${logs.join("\n")}`);
    assert.equal(await slotOf(te, signal), "a");
  });

  test("without a task lease a newer JobMaster cancels the attempt, and AdoptAttempts lists none", { timeout: 60_000 }, async () => {
    const signal = AbortSignal.timeout(50_000);
    const { fake, te, runs } = await setup(0, signal);
    const task = runs[0];
    await newerJobMaster(te, signal);
    await waitFor("the older JobMaster's attempt's cancellation", () => task.signal.aborted, 5000);
    const resp = await adopt(te, fake.url, newer, signal);
    assert.equal(resp.jobs.length, 1);
    assert.deepEqual(resp.jobs[0].attempts, []);
  });
});

/** Where the lease comes from, in the cases below, and how the attempt is deployed. */
interface LeaseSource {
  name: string;
  /** Sets up the fake JobMaster's OfferSlots answers before the slot is offered. */
  offer(fake: FakeJobMaster): void;
  /** Deploys the attempt under the older token unless the offer's answer did. */
  deploy?(te: TE, signal: AbortSignal): Promise<unknown>;
}

const lease = durationFromMs(30_000);
const deployment = create(TaskDeploymentSchema, { allocationId: "a", attempt, invokable: "hold" });
const sources: LeaseSource[] = [
  {
    name: "the answer to the offer that registered the worker (OfferSlotsResponse.task_lease)",
    offer: (fake) => (fake.offerTaskLeaseMs = 30_000),
    deploy: (te, signal) =>
      te.submitTask({ jobId: "j", jobMasterToken: older, allocationId: "a", attempt, invokable: "hold", heartbeatTimeout: durationFromMs(1000) }, { signal }),
  },
  {
    name: "an offer's answer that carries the deployment",
    offer: (fake) => {
      fake.offerTaskLeaseMs = 30_000;
      fake.offerDeployments = [deployment];
    },
  },
  {
    name: "SubmitTaskRequest.task_lease",
    offer: () => {},
    deploy: (te, signal) =>
      te.submitTask(
        { jobId: "j", jobMasterToken: older, allocationId: "a", attempt, invokable: "hold", heartbeatTimeout: durationFromMs(1000), taskLease: lease },
        { signal },
      ),
  },
  {
    name: "SubmitTasksRequest.task_lease",
    offer: () => {},
    deploy: async (te, signal) => {
      const r = await te.submitTasks({ jobId: "j", jobMasterToken: older, tasks: [deployment], heartbeatTimeout: durationFromMs(1000), taskLease: lease }, { signal });
      assert.deepEqual(r.refused, []);
    },
  },
];

describe("a task lease from the registration or a deployment, before any heartbeat answer", { timeout: 120_000 }, () => {
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  for (const src of sources) {
    test(`the lease of ${src.name} holds the attempt for a newer JobMaster`, { timeout: 60_000 }, async () => {
      const signal = AbortSignal.timeout(50_000);
      // Heartbeats grant no task lease, and none is answered at all: the
      // lease comes only with the offer's answer or the deployment.
      const fake = await startJobMaster(0);
      fake.answering = false;
      src.offer(fake);
      const { worker, te, runs } = await startWorker(fake);
      await te.requestSlot(
        { resourceManagerToken: rm, slotIndex: 0, allocationId: "a", jobId: "j", jobMasterAddress: fake.url, jobMasterToken: older },
        { signal },
      );
      await waitFor("the slot's offer", () => fake.offers > 0);
      await src.deploy?.(te, signal);
      await waitFor("the attempt to run", () => runs.length === 1);
      const task = runs[0];

      await newerJobMaster(te, signal);
      assert.equal(worker.jobMasterToken("j")?.epoch, 2n);
      assert.equal(fake.answered, 0, "a heartbeat was answered");
      // Past the heartbeat timeout (1 s): held under the 30 s lease, not stopped.
      await sleep(1500);
      assert.equal(task.signal.aborted, false, "the older JobMaster's attempt was canceled as a newer one appeared, under the lease of " + src.name);
      assert.equal(await slotOf(te, signal), "a");

      const resp = await adopt(te, fake.url, newer, signal);
      assert.deepEqual(resp.refused, []);
      assert.equal(resp.jobs.length, 1);
      assert.deepEqual(resp.jobs[0].allocationIds, ["a"]);
      assert.equal(resp.jobs[0].attempts.length, 1);
      assert.equal(resp.jobs[0].attempts[0].status?.state, ExecutionState.RUNNING);
      assert.equal(resp.jobs[0].attempts[0].deployedUnder?.epoch, 1n);
      assert.equal(task.signal.aborted, false, "the adopted attempt stopped");
      assert.equal(fake.answered, 0, "a heartbeat was answered");
    });
  }
});
