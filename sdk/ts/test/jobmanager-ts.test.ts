// The TypeScript JobManager (jobmanager-ts/, a second implementation of
// the JobManager written from the contract alone) runs jobs on the node
// Worker and on the reference (Go) TaskExecutor alike, on an HA store
// process, all on 127.0.0.1.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, JobStatus, Worker } from "../src/index.js";
import { startStore, startTaskExecutor, startTypeScriptJobManager, type JobManager } from "./cluster.js";

/** Each test's bound: no wait in these tests outlasts it. */
const testTimeout = 60_000;

describe("the TypeScript JobManager with the node Worker and the Go TaskExecutor", { timeout: 3 * testTimeout }, () => {
  let store: JobManager;
  let jm: JobManager;
  let te: JobManager;
  let worker: Worker;
  let client: Client;
  const greeted: { jobId: string; subtask: number }[] = [];

  before(async () => {
    store = await startStore();
    jm = await startTypeScriptJobManager(store.url, ["--task-lease", "10s"]);
    te = await startTaskExecutor(store.url, ["--slots", "2"]);
    worker = new Worker({ hastore: store.url, id: "node-worker", slots: 2 });
    worker.register("greet", (task) => {
      greeted.push({ jobId: task.jobId, subtask: task.subtaskIndex });
    });
    await worker.start();
    client = new Client(jm.url);
  });

  after(async () => {
    client?.close();
    await worker?.stop();
    await te?.stop();
    await jm?.stop();
    await store?.stop();
  });

  test("jobs of a node function and of a Go built-in run on the Worker and the Go TaskExecutor", { timeout: testTimeout }, async () => {
    const signal = AbortSignal.timeout(testTimeout - 5000);
    // Both registered first: a vertex no one offers would be refused.
    let goTE = "";
    for (const deadline = Date.now() + 30_000; goTE === ""; ) {
      const listed = await client
        .dispatcher()
        .listTaskExecutors({}, { signal })
        .then((r) => r.taskExecutors.map((t) => t.taskExecutorId))
        .catch(() => [] as string[]);
      if (listed.length === 2 && listed.includes("node-worker")) goTE = listed.find((id) => id !== "node-worker") ?? "";
      assert.ok(goTE !== "" || Date.now() < deadline, `TaskExecutors registered after 30 s: ${JSON.stringify(listed)}`);
      if (goTE === "") await new Promise((r) => setTimeout(r, 50));
    }
    // A job's subtasks go to TaskExecutors that offer all its
    // invokables (JobVertex.invokable): the node function's job to the
    // Worker, the Go built-in's to the Go TaskExecutor; both at once.
    const [node, go] = await Promise.all(
      [
        { name: "node", vertices: [{ id: "node", name: "node", invokable: "greet", parallelism: 2 }] },
        { name: "go", vertices: [{ id: "go", name: "go", invokable: "noop", parallelism: 2 }] },
      ].map((g) => client.submit(g, { signal })),
    );
    const where: Record<string, string> = {};
    for (const [job, submitted] of [["node", node], ["go", go]] as const) {
      assert.equal(submitted.created, true);
      const result = await client.wait(submitted.jobId, { signal });
      assert.equal(result.status, JobStatus.FINISHED, `the ${job} job: ${result.failure?.message}`);
      for (const p of result.placements) where[`${p.attempt?.vertexId}/${p.attempt?.subtaskIndex}`] = p.taskExecutorId;
    }
    assert.deepEqual(
      greeted.filter((g) => g.jobId === node.jobId).map((g) => g.subtask).sort(),
      [0, 1],
      "the node function's subtasks",
    );
    assert.deepEqual(
      where,
      { "go/0": goTE, "go/1": goTE, "node/0": "node-worker", "node/1": "node-worker" },
      "where each subtask ran (JobResult.placements)",
    );
  });
});
