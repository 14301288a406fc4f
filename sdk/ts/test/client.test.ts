// Client behaviour that needs no cluster: arguments, ids, and a bounded
// retry budget when nothing answers.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Code } from "@connectrpc/connect";
import { Client, InvalidJobError, JobplaneError, isGloballyTerminal, newJobId, JobStatus, ErrorReason } from "../src/index.js";

test("newJobId makes distinct 128-bit hex ids", () => {
  const ids = new Set(Array.from({ length: 100 }, () => newJobId()));
  assert.equal(ids.size, 100);
  for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
});

test("the constructor wants base URLs", () => {
  assert.throws(() => new Client([]), TypeError);
  assert.throws(() => new Client("127.0.0.1:8080"), TypeError);
  assert.throws(() => new Client("http://127.0.0.1:8080/path"), TypeError);
  assert.equal(new Client("http://127.0.0.1:8080/").leader, "http://127.0.0.1:8080");
});

test("an invalid job id is refused before anything is sent", async () => {
  const c = new Client("http://127.0.0.1:1", { retryMaxElapsedMs: 0 });
  await assert.rejects(c.submit({ name: "x", vertices: [] }, { jobId: "a/b" }), (e: unknown) => {
    assert.ok(e instanceof InvalidJobError);
    assert.equal(e.code, Code.InvalidArgument);
    assert.deepEqual(e.violations.map((v) => v.field), ["job_id"]);
    return true;
  });
});

test("when no URL answers, a call gives up once its retry budget is spent", async () => {
  const c = new Client(["http://127.0.0.1:1", "http://127.0.0.2:1"], { retryMaxElapsedMs: 300, retryInitialBackoffMs: 20 });
  const began = Date.now();
  await assert.rejects(c.cancel(newJobId()), (e: unknown) => {
    assert.ok(e instanceof JobplaneError, `got ${String(e)}`);
    assert.equal(e.code, Code.Unavailable);
    assert.equal(e.reason, ErrorReason.UNSPECIFIED);
    return true;
  });
  assert.ok(Date.now() - began < 10_000, `took ${Date.now() - began} ms`);
});

test("a call stops retrying when its signal aborts", async () => {
  const c = new Client("http://127.0.0.1:1", { retryMaxElapsedMs: 60_000 });
  const began = Date.now();
  await assert.rejects(c.wait(newJobId(), { signal: AbortSignal.timeout(200) }));
  assert.ok(Date.now() - began < 10_000, `took ${Date.now() - began} ms`);
});

test("globally terminal statuses", () => {
  assert.deepEqual(
    [JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.RUNNING, JobStatus.SUSPENDED, JobStatus.CANCELLING].map(isGloballyTerminal),
    [true, true, true, false, false, false],
  );
});
