// Task values and accumulators on the node Worker, with a real
// jobmanager: a finished attempt's value and accumulators go into the
// job's result (one finished attempt per subtask: a failed attempt's
// count for nothing), the client reads them with result(), and values or
// names over the limits fail the attempt with a message that says why.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Client, JobNotFoundError, JobStatus, Worker, DEFAULT_MAX_TASK_VALUE_BYTES } from "../src/index.js";
import { startJobManager, type JobManager } from "./cluster.js";

const noRestart = { restartStrategy: { strategy: { case: "none" as const, value: {} } } };

describe("task values and accumulators on the node Worker", { timeout: 120_000 }, () => {
  let jm: JobManager;
  let worker: Worker;
  let client: Client;

  before(async () => {
    jm = await startJobManager();
    worker = new Worker({ hastore: jm.url, slots: 3 });
    worker.register("ret", async (task) => {
      task.add("attempts");
      if (task.subtaskIndex === 1 && task.attempt === 0) {
        task.add("failed.only", 5);
        task.setValue("never kept");
        throw new Error("the first attempt of subtask 1 fails");
      }
      task.add("rows", BigInt(10 * (task.subtaskIndex + 1)));
      task.setValue(task.subtaskIndex === 2 ? new Uint8Array([0xff, 0x00]) : `v${task.subtaskIndex}@${task.attempt}`);
    });
    worker.register("big", (task) => task.setValue(new Uint8Array(DEFAULT_MAX_TASK_VALUE_BYTES + 1)));
    worker.register("badname", (task) => task.add("no spaces"));
    await worker.start();
    client = new Client(jm.url);
  });

  after(async () => {
    client?.close();
    await worker?.stop();
    await jm?.stop();
  });

  test("the result carries one finished attempt per subtask", { timeout: 90_000 }, async () => {
    const signal = AbortSignal.timeout(80_000);
    const { jobId } = await client.submit(
      {
        name: "ret",
        vertices: [{ id: "ret", name: "ret", invokable: "ret", parallelism: 3 }],
        config: { restartStrategy: { strategy: { case: "fixedDelay", value: { attempts: 3, delay: durationFromMs(10) } } } },
      },
      { signal },
    );
    const waited = await client.wait(jobId, { signal });
    assert.equal(waited.status, JobStatus.FINISHED, `${JobStatus[waited.status]}: ${waited.failure?.message ?? ""}`);
    const result = await client.result(jobId, { signal });
    assert.deepEqual(
      result.values.map((v) => [v.attempt?.subtaskIndex, v.attempt?.attemptNumber, Buffer.from(v.value).toString("hex")]),
      [
        [0, 0, Buffer.from("v0@0").toString("hex")],
        [1, 1, Buffer.from("v1@1").toString("hex")],
        [2, 0, "ff00"],
      ],
    );
    assert.deepEqual(result.accumulators, { attempts: 3n, rows: 60n });
    await assert.rejects(client.result("no-such-job", { signal }), JobNotFoundError);
  });

  test("a value or a name over the limits fails the attempt", { timeout: 90_000 }, async () => {
    const signal = AbortSignal.timeout(80_000);
    for (const [invokable, want] of [
      ["big", /max_task_value_bytes/],
      ["badname", /invalid accumulator name "no spaces"/],
    ] as const) {
      const { jobId } = await client.submit({ name: invokable, vertices: [{ id: "v", name: "v", invokable, parallelism: 1 }], config: noRestart }, { signal });
      const result = await client.wait(jobId, { signal });
      assert.equal(result.status, JobStatus.FAILED, invokable);
      assert.match(result.failure?.message ?? "", want, invokable);
      assert.equal(result.values.length, 0, invokable);
    }
  });
});
