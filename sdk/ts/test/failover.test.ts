// A JobManager failover with the node Worker: the leader is killed while
// a job's function runs on the worker; the standby recovers the job under
// a newer JobMaster token, the worker follows it (canceling the attempt
// of the dead JobMaster, never running the subtask twice at once), the
// job finishes, and the dead JobMaster's token is refused from then on.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { TaskExecutorService } from "../gen/jobplane/cluster/v1/task_executor_service_pb.js";
import type { FencingToken } from "../gen/jobplane/v1/leadership_pb.js";
import { Client, JobStatus, StaleTokenError, Worker, toJobplaneError, type Task } from "../src/index.js";
import { startJobManager, startStore, waitFor, type JobManager } from "./cluster.js";

describe("failover with the node worker", { timeout: 150_000 }, () => {
  const procs: JobManager[] = [];
  let worker: Worker;
  let client: Client;
  let store: JobManager;
  let jm1: JobManager;
  let jm2: JobManager;
  const runs: { task: Task; token: FencingToken | undefined; ended: boolean }[] = [];
  let running = 0;
  let maxRunning = 0;
  let release = false;

  before(async () => {
    store = await startStore();
    procs.push(store);
    // Without a task lease: this test checks the deployment anew under the
    // new leader (with the default lease, the worker's attempt is adopted).
    const flags = ["--hastore", store.url, "--session-ttl", "2s", "--task-lease", "0"];
    jm1 = await startJobManager(flags);
    procs.push(jm1);
    worker = new Worker({ hastore: store.url, slots: 2 });
    worker.register("hold", async (task) => {
      const run = { task, token: worker.jobMasterToken(task.jobId), ended: false };
      runs.push(run);
      running++;
      maxRunning = Math.max(maxRunning, running);
      try {
        await waitFor("release or cancel", () => release || task.signal.aborted, 100_000);
      } finally {
        running--;
        run.ended = true;
      }
    });
    await worker.start();
  });

  after(async () => {
    client?.close();
    await worker?.stop();
    for (const p of procs.reverse()) await p.stop();
  });

  test("the job finishes under the new leader's JobMaster, and the old token is refused", { timeout: 120_000 }, async () => {
    const signal = AbortSignal.timeout(110_000);
    // jm1 leads (it started alone); jm2 stands by.
    client = new Client(jm1.url);
    const { jobId } = await client.submit({ name: "failover", vertices: [{ id: "v", name: "v", invokable: "hold", parallelism: 1 }] }, { signal });
    await waitFor("the first attempt to run", () => runs.length === 1);
    const first = runs[0];
    assert.ok(first.token && first.token.epoch > 0n);
    jm2 = await startJobManager(["--hastore", store.url, "--session-ttl", "2s", "--task-lease", "0"]);
    procs.push(jm2);
    client.close();
    client = new Client([jm1.url, jm2.url]);

    await jm1.kill();
    await waitFor("the attempt under the new JobMaster", () => runs.length >= 2, 60_000);
    const second = runs[runs.length - 1];
    assert.ok(second.token && first.token && second.token.epoch > first.token.epoch, `tokens ${first.token?.epoch} then ${second.token?.epoch}`);
    assert.equal(first.task.signal.aborted, true, "the dead JobMaster's attempt was not canceled");
    assert.equal(first.ended, true);
    assert.equal(maxRunning, 1, "the subtask ran twice at once");

    // The dead JobMaster's token is stale now.
    const sm = new Http2SessionManager(worker.address);
    try {
      const te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: worker.address, httpVersion: "2", sessionManager: sm }));
      await assert.rejects(
        te.submitTask(
          { jobId, jobMasterToken: first.token, allocationId: "any", attempt: { vertexId: "v" }, invokable: "hold", heartbeatTimeout: durationFromMs(5000) },
          { signal },
        ),
        (e: unknown) => {
          const typed = toJobplaneError(e);
          assert.ok(typed instanceof StaleTokenError, `got ${String(e)}`);
          assert.equal(typed.current?.epoch, second.token?.epoch);
          return true;
        },
      );
    } finally {
      sm.abort();
    }

    release = true;
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.FINISHED);
    assert.equal(client.leader, jm2.url);
    assert.equal(runs.length, 2, `runs: ${runs.length}`);
  });
});
