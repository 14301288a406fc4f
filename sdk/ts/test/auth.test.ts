// A cluster that authenticates its clients: the Client sends its token,
// static or asked of a function before each call, and a call without a
// right one is refused UNAUTHENTICATED.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { Client, JobplaneError, newJobId } from "../src/index.js";
import { startJobManager, type JobManager } from "./cluster.js";

const token = "ts-client-token-0123456789abcdef";

describe("a cluster with token authentication", { timeout: 120_000 }, () => {
  let jm: JobManager;
  let dir: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "jobplane-ts-auth-"));
    const tokens = join(dir, "tokens");
    writeFileSync(tokens, `ts-client ${token}\n`, { mode: 0o600 });
    jm = await startJobManager(["--auth-token-file", tokens]);
  });
  after(async () => {
    await jm?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const graph = { name: "auth", vertices: [{ id: "v", invokable: "noop", parallelism: 1 }] };

  for (const [what, opts] of [
    ["no token", {}],
    ["a wrong token", { token: "not-the-token-0123456789abcdef" }],
  ] as const) {
    test(`a client with ${what} is refused UNAUTHENTICATED`, async () => {
      const c = new Client(jm.url, { ...opts, retryMaxElapsedMs: 0 });
      await assert.rejects(c.submit(graph, { jobId: newJobId() }), (e: unknown) => {
        assert.ok(e instanceof JobplaneError, `want a JobplaneError, got ${e}`);
        assert.equal(e.code, Code.Unauthenticated);
        return true;
      });
    });
  }

  test("a client with the token submits, static or asked of a function", async () => {
    let asked = 0;
    const id = newJobId();
    const first = await new Client(jm.url, { token }).submit(graph, { jobId: id });
    assert.equal(first.created, true);
    // The same principal's retry, with the token from a function.
    const again = await new Client(jm.url, { token: () => (asked++, token) }).submit(graph, { jobId: id });
    assert.equal(again.created, false);
    assert.ok(asked > 0, "the token function was never asked");
  });
});
