// End-to-end tests: a real jobmanager process, the node Worker as its only
// TaskExecutor, and the Client, all on 127.0.0.1.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { TaskExecutorService } from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import {
  Client,
  DuplicateJobError,
  ErrorReason,
  InvalidJobError,
  InvokableNotOfferedError,
  JobNotFoundError,
  JobStatus,
  NotLeaderError,
  StaleTokenError,
  Worker,
  newJobId,
  toJobplaneError,
  type Task,
} from "../src/index.js";
import { startJobManager, waitFor, type JobManager } from "./cluster.js";

/** Each test's bound: no wait in these tests outlasts it. */
const testTimeout = 60_000;

describe("jobplane TypeScript client and worker", { timeout: 5 * testTimeout }, () => {
  let jm: JobManager;
  let worker: Worker;
  let client: Client;
  const greeted: { jobId: string; subtask: number; subtasks: number; who: string }[] = [];
  const attempts = new Map<string, number[]>();
  const blocked = new Map<string, Task>();
  const aborted = new Set<string>();
  const gates = new Map<string, () => void>();

  before(async () => {
    jm = await startJobManager();
    worker = new Worker({ hastore: jm.url, slots: 4 });
    worker.register("greet", (task) => {
      greeted.push({ jobId: task.jobId, subtask: task.subtaskIndex, subtasks: task.subtasks, who: task.config["who"] ?? "" });
    });
    worker.register("boom", () => {
      throw new Error("boom: the function failed");
    });
    // Fails its first attempt, finishes the next.
    worker.register("flaky", (task) => {
      attempts.set(task.jobId, [...(attempts.get(task.jobId) ?? []), task.attempt]);
      if (task.attempt === 0) throw new Error("first attempt fails");
    });
    // Runs until canceled.
    worker.register("block", (task) => {
      blocked.set(task.jobId, task);
      return new Promise<void>((resolve) => {
        task.signal.addEventListener("abort", () => {
          aborted.add(task.jobId);
          resolve();
        });
      });
    });
    // Runs until its gate opens (or it is canceled).
    worker.register("gate", (task) => {
      return new Promise<void>((resolve) => {
        gates.set(task.jobId, resolve);
        task.signal.addEventListener("abort", () => resolve());
      });
    });
    await worker.start();
    client = new Client(jm.url);
  });

  after(async () => {
    client?.close();
    await worker?.stop();
    await jm?.stop();
  });

  test("a job whose vertex runs a node function finishes", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const submitted = await client.submit(
      { name: "greet", vertices: [{ id: "hello", name: "hello", invokable: "greet", parallelism: 2, config: { who: "world" } }] },
      { signal },
    );
    assert.equal(submitted.created, true);
    assert.match(submitted.jobId, /^[0-9a-f]{32}$/);
    const seen: JobStatus[] = [];
    for await (const s of client.watch(submitted.jobId, { signal })) seen.push(s.status);
    assert.equal(seen.at(-1), JobStatus.FINISHED, `statuses seen: ${seen.map((s) => JobStatus[s])}`);
    const result = await client.wait(submitted.jobId, { signal });
    assert.equal(result.status, JobStatus.FINISHED);
    const mine = greeted.filter((g) => g.jobId === submitted.jobId);
    assert.deepEqual(
      mine.map((g) => g.subtask).sort(),
      [0, 1],
      `subtasks run: ${JSON.stringify(mine)}`,
    );
    assert.ok(mine.every((g) => g.who === "world" && g.subtasks === 2), JSON.stringify(mine));

    // Submitting the same job again is no second job.
    const again = await client.submit(
      { name: "greet", vertices: [{ id: "hello", name: "hello", invokable: "greet", parallelism: 2, config: { who: "world" } }] },
      { jobId: submitted.jobId, signal },
    );
    assert.equal(again.created, false);
    assert.equal(again.status, JobStatus.FINISHED);
  });

  test("a job naming an invokable no worker offers is refused at submission", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const jobId = newJobId();
    await assert.rejects(
      client.submit(
        { name: "typo", vertices: [{ id: "a", name: "a", invokable: "greet", parallelism: 1 }, { id: "b", name: "b", invokable: "greeet", parallelism: 1 }] },
        { jobId, signal },
      ),
      (e: unknown) => {
        assert.ok(e instanceof InvokableNotOfferedError, `got ${String(e)}`);
        assert.equal(e.code, Code.FailedPrecondition);
        assert.equal(e.reason, ErrorReason.INVOKABLE_NOT_OFFERED);
        assert.deepEqual(e.invokables, ["greeet"]);
        assert.deepEqual(e.offered, ["block", "boom", "flaky", "gate", "greet"]);
        assert.deepEqual(e.violations.map((v) => v.field), ["job_graph.vertices[1].invokable"]);
        return true;
      },
    );
    await assert.rejects(client.cancel(jobId, { signal }), JobNotFoundError);
  });

  test("a failing function fails the job", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const { jobId } = await client.submit(
      { name: "boom", vertices: [{ id: "v", name: "v", invokable: "boom", parallelism: 1 }], config: { restartStrategy: { strategy: { case: "none", value: {} } } } },
      { signal },
    );
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.FAILED);
    assert.match(result.failure?.message ?? "", /boom: the function failed/);
    assert.equal(result.failure?.taskExecutorId, worker.id);
  });

  test("a failed attempt restarts per the job's strategy", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const { jobId } = await client.submit(
      {
        name: "flaky",
        vertices: [{ id: "v", name: "v", invokable: "flaky", parallelism: 1 }],
        config: { restartStrategy: { strategy: { case: "fixedDelay", value: { attempts: 2, delay: durationFromMs(10) } } } },
      },
      { signal },
    );
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.FINISHED);
    assert.equal(result.restartCount, 1);
    assert.deepEqual(attempts.get(jobId), [0, 1]);
  });

  test("cancel stops the job's running function", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const { jobId } = await client.submit({ name: "block", vertices: [{ id: "v", name: "v", invokable: "block", parallelism: 1 }] }, { signal });
    await waitFor("the function to run", () => blocked.has(jobId));
    const status = await client.cancel(jobId, { signal });
    assert.ok(status === JobStatus.CANCELLING || status === JobStatus.CANCELED, `status ${JobStatus[status]}`);
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.CANCELED);
    assert.ok(aborted.has(jobId), "the function's signal was not aborted");
    // Cancelling again is no error.
    assert.equal(await client.cancel(jobId, { signal }), JobStatus.CANCELED);
  });

  test("wait keeps an attached job alive; with no client heartbeats it is canceled", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const attached = { clientHeartbeatTimeout: durationFromMs(1000) };
    const vertices = [{ id: "v", name: "v", invokable: "gate", parallelism: 1 }];

    const { jobId } = await client.submit({ name: "attached", vertices, config: attached }, { signal });
    const result = client.wait(jobId, { signal });
    await waitFor("the function to run", () => gates.has(jobId));
    // Two timeouts and more pass while wait sends heartbeats: the job still runs.
    await new Promise((r) => setTimeout(r, 2500));
    assert.equal((await client.dispatcher().getJob({ jobId }, { signal })).job?.summary?.status, JobStatus.RUNNING);
    gates.get(jobId)!();
    assert.equal((await result).status, JobStatus.FINISHED);

    // The same job with nobody attached: canceled by the cluster.
    const lone = await client.submit({ name: "attached", vertices, config: attached }, { signal });
    const r = await client.dispatcher().getJobResult({ jobId: lone.jobId, wait: true }, { signal });
    assert.equal(r.result?.status, JobStatus.CANCELED);
  });

  test("typed errors: invalid graph, duplicate job, unknown job", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    await assert.rejects(
      client.submit({ name: "bad", vertices: [{ id: "v", name: "v", invokable: "greet", parallelism: 1 }, { id: "v", name: "w", invokable: "greet", parallelism: 1 }] }, { signal }),
      (e: unknown) => {
        assert.ok(e instanceof InvalidJobError, `got ${String(e)}`);
        assert.equal(e.code, Code.InvalidArgument);
        assert.equal(e.reason, ErrorReason.INVALID_ARGUMENT);
        assert.ok(
          e.violations.some((v) => v.field === "job_graph.vertices[1].id" && /duplicate/.test(v.description)),
          JSON.stringify(e.violations),
        );
        return true;
      },
    );
    await assert.rejects(client.submit({ name: "bad", vertices: [] }, { signal }), (e: unknown) => {
      assert.ok(e instanceof InvalidJobError, `got ${String(e)}`);
      assert.ok(e.violations.some((v) => v.field === "job_graph.vertices"), JSON.stringify(e.violations));
      return true;
    });
    await assert.rejects(client.submit({ name: "x", vertices: [{ id: "v", invokable: "greet", parallelism: 1 }] }, { jobId: "not a valid id" }), InvalidJobError);

    const jobId = newJobId();
    const first = await client.submit({ name: "one", vertices: [{ id: "v", name: "v", invokable: "greet", parallelism: 1 }] }, { jobId, signal });
    assert.equal(first.created, true);
    await assert.rejects(
      client.submit({ name: "two", vertices: [{ id: "w", name: "w", invokable: "greet", parallelism: 1 }] }, { jobId, signal }),
      (e: unknown) => {
        assert.ok(e instanceof DuplicateJobError, `got ${String(e)}`);
        assert.equal(e.code, Code.AlreadyExists);
        assert.equal(e.jobId, jobId);
        return true;
      },
    );
    await client.wait(jobId, { signal });

    await assert.rejects(client.wait(newJobId(), { signal }), (e: unknown) => {
      assert.ok(e instanceof JobNotFoundError, `got ${String(e)}`);
      assert.equal(e.code, Code.NotFound);
      return true;
    });
  });

  test("the client follows NOT_LEADER to the leader, and skips a URL that does not answer", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const standby = await startJobManager(["--hastore", jm.url]);
    const c = new Client(["http://127.0.0.1:1", standby.url], { httpVersion: "2" });
    try {
      const graph = { name: "follow", vertices: [{ id: "v", name: "v", invokable: "greet", parallelism: 1 }] };
      const { jobId } = await c.submit(graph, { signal });
      assert.equal(c.leader, jm.url);
      assert.equal((await c.wait(jobId, { signal })).status, JobStatus.FINISHED);
      // What the client followed: the standby's answer names the leader.
      await assert.rejects(c.dispatcher(standby.url).getJob({ jobId }, { signal }), (e: unknown) => {
        const typed = toJobplaneError(e);
        assert.ok(typed instanceof NotLeaderError, `got ${String(e)}`);
        assert.equal(typed.code, Code.Unavailable);
        assert.equal(typed.leaderAddress, jm.url);
        return true;
      });
    } finally {
      c.close();
      await standby.stop();
    }
  });

  test("fencing: the worker refuses a JobMaster's calls under a token older than the job's newest", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    const { jobId } = await client.submit({ name: "fenced", vertices: [{ id: "v", name: "v", invokable: "block", parallelism: 1 }] }, { signal });
    await waitFor("the function to run", () => blocked.has(jobId));
    const current = worker.jobMasterToken(jobId);
    assert.ok(current !== undefined && current.epoch > 1n, `token ${String(current?.epoch)}`);
    const stale = { sessionId: current.sessionId, epoch: current.epoch - 1n };
    const running = blocked.get(jobId)!;

    const sessions = new Http2SessionManager(worker.address);
    try {
      const te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: worker.address, httpVersion: "2", sessionManager: sessions }));
      const attempt = { vertexId: "v", subtaskIndex: 0, attemptNumber: 7 };
      const expectStale = (e: unknown) => {
        const typed = toJobplaneError(e);
        assert.ok(typed instanceof StaleTokenError, `got ${String(e)}`);
        assert.equal(typed.code, Code.Aborted);
        assert.equal(typed.reason, ErrorReason.STALE_FENCING_TOKEN);
        assert.equal(typed.election, "job/" + jobId);
        assert.equal(typed.current?.epoch, current.epoch);
        assert.equal(typed.metadata["current_epoch"], current.epoch.toString());
        return true;
      };
      await assert.rejects(
        te.submitTask(
          { jobId, jobMasterToken: stale, allocationId: "a-stale", attempt, invokable: "greet", heartbeatTimeout: durationFromMs(5000) },
          { signal },
        ),
        expectStale,
      );
      await assert.rejects(te.submitTasks({ jobId, jobMasterToken: stale, tasks: [{ allocationId: "a", attempt, invokable: "greet" }] }, { signal }), expectStale);
      await assert.rejects(te.cancelTask({ jobId, jobMasterToken: stale, attempt: { vertexId: "v", subtaskIndex: 0, attemptNumber: 0 } }, { signal }), expectStale);
      await assert.rejects(te.freeSlots({ jobId, jobMasterToken: stale, allocationIds: [] }, { signal }), expectStale);
      await assert.rejects(te.heartbeat({ sender: { case: "jobMaster", value: { jobId, token: stale } } }, { signal }), expectStale);
      assert.equal(running.signal.aborted, false, "a stale CancelTask canceled the attempt");

      // The current token passes the fence; the refusal is then the slot's.
      await assert.rejects(
        te.submitTask({ jobId, jobMasterToken: current, allocationId: "unknown", attempt, invokable: "greet" }, { signal }),
        (e: unknown) => {
          assert.ok(e instanceof ConnectError);
          assert.equal(e.code, Code.FailedPrecondition);
          assert.equal(toJobplaneError(e) instanceof StaleTokenError, false);
          return true;
        },
      );
      // A missing token is invalid input, not a stale one.
      await assert.rejects(te.submitTask({ jobId, allocationId: "a", attempt, invokable: "greet" }, { signal }), (e: unknown) => {
        const typed = toJobplaneError(e);
        assert.ok(typed instanceof InvalidJobError, `got ${String(e)}`);
        assert.ok(typed.violations.some((v) => v.field === "job_master_token"));
        return true;
      });
    } finally {
      sessions.abort();
    }
    await client.cancel(jobId, { signal });
    assert.equal((await client.wait(jobId, { signal })).status, JobStatus.CANCELED);
  });
});
