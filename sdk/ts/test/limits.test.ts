// A cluster that limits each client's submission rate: the Client waits
// the delay the refusal's RetryInfo asks and submits again, within its
// retry budget; past the budget it throws the refusal with its delay.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { Client, ErrorReason, JobplaneError, newJobId, retryDelayMs } from "../src/index.js";
import { startJobManager, type JobManager } from "./cluster.js";

describe("a cluster with a submission rate limit", { timeout: 120_000 }, () => {
  let jm: JobManager;

  before(async () => {
    // One submission a second per client, no burst above it.
    jm = await startJobManager(["--submit-rate", "1", "--submit-burst", "1"]);
  });
  after(async () => {
    await jm?.stop();
  });

  const graph = { name: "rate", vertices: [{ id: "v", invokable: "noop", parallelism: 1 }] };

  test("a refused submission is made again after the delay the cluster asks", async () => {
    const c = new Client(jm.url);
    try {
      assert.equal((await c.submit(graph, { jobId: newJobId() })).created, true);
      // The bucket is empty now: this one is refused, waits, and goes through.
      assert.equal((await c.submit(graph, { jobId: newJobId() })).created, true);
    } finally {
      c.close();
    }
  });

  test("without the budget for the delay, the refusal is thrown with it", async () => {
    const c = new Client(jm.url, { retryMaxElapsedMs: 0 });
    try {
      await c.submit(graph, { jobId: newJobId() }).catch(() => undefined); // empties the bucket, if it was not
      await assert.rejects(c.submit(graph, { jobId: newJobId() }), (e: unknown) => {
        assert.ok(e instanceof JobplaneError, `want a JobplaneError, got ${e}`);
        assert.equal(e.code, Code.ResourceExhausted);
        assert.equal(e.reason, ErrorReason.SUBMIT_RATE_EXCEEDED);
        const d = retryDelayMs(e);
        assert.ok(d !== undefined && d > 0 && d <= 1000, `retry delay ${d} ms, want (0, 1000]`);
        return true;
      });
    } finally {
      c.close();
    }
  });
});
