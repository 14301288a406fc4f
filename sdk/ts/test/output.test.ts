// Task output on the node Worker. The first part checks the output's
// bounds in process, as the Go TaskExecutor's output_test.go does: the
// tail kept, offsets that count every byte, the ended attempts kept for a
// bounded time and count in memory, and on disk for a bounded time and
// size, loaded back by a worker started on the same directory. The
// second part runs jobs on a real jobmanager and reads the output back
// through the Dispatcher's GetTaskOutput and `jobplane logs`: what a task
// writes with task.log and task.output, with offsets and the tail, and on
// disk across a restart of the worker with the same directory and id.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { Client, ErrorReason, JobStatus, JobplaneError, Worker, reasonOf, toJobplaneError, type Task } from "../src/index.js";
import { Outputs, logLine, outputName, parseOutputName, type OutputKey } from "../src/output.js";
import { jobplaneBinary, startJobManager, startTaskExecutor, type JobManager } from "./cluster.js";

const enc = new TextEncoder();
const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");
const key = (attempt = 0, jobId = "job"): OutputKey => ({ jobId, vertexId: "v", subtask: 0, attempt });
const noRestart = { restartStrategy: { strategy: { case: "none" as const, value: {} } } };

function tempDir(t: { after(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), "jobplane-ts-output-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe("task output, in process", () => {
  for (const onDisk of [false, true]) {
    test(`the tail is kept and offsets count every byte (${onDisk ? "on disk" : "in memory"})`, (t) => {
      const outs = new Outputs({ outputBytes: 10, outputDir: onDisk ? tempDir(t) : undefined });
      const o = outs.start(key());
      o.write(enc.encode("0123456"));
      assert.deepEqual(
        (({ data, offset, end }) => [text(data), offset, end])(o.read(0, 100)),
        ["0123456", 0, 7],
      );
      o.write(enc.encode("789abcdef")); // 16 bytes in all: the first 6 dropped
      const cases: [from: number, n: number, data: string, offset: number][] = [
        [0, 100, "6789abcdef", 6], // dropped: from the first kept
        [8, 100, "89abcdef", 8],
        [8, 3, "89a", 8],
        [16, 100, "", 16],
        [17, 100, "6789abcdef", 6], // past the end: from the first kept
      ];
      for (const [from, n, want, wantOffset] of cases) {
        const r = o.read(from, n);
        assert.deepEqual([text(r.data), r.offset, r.end], [want, wantOffset, 16], `read(${from}, ${n})`);
      }
      o.write(enc.encode("a write longer than the limit"));
      assert.deepEqual((({ data, offset, end }) => [text(data), offset, end])(o.read(0, 100)), [" the limit", 35, 45]);
      assert.equal(outs.get(key())?.ended, false);
      outs.finish(key(), o);
      o.write(enc.encode("after the end"));
      const r = outs.get(key());
      assert.equal(r?.ended, true);
      assert.equal(r?.o.read(0, 100).end, 45, "a write after the attempt ended is dropped");
      assert.equal(outs.get(key(1)), undefined);
    });
  }

  test("ended attempts are kept for the retention, and the last outputAttempts of them", () => {
    let now = 1_000;
    const outs = new Outputs({ outputRetentionMs: 100, outputAttempts: 2, now: () => now });
    for (const a of [0, 1, 2]) {
      const o = outs.start(key(a));
      o.write(enc.encode(`attempt ${a}`));
      outs.finish(key(a), o);
      now += 10;
    }
    assert.equal(outs.get(key(0)), undefined, "the oldest beyond outputAttempts is forgotten");
    assert.equal(text(outs.get(key(1))!.o.read(0, 100).data), "attempt 1");
    const running = outs.start(key(3));
    now += 85; // attempt 1 ended 105 ms ago, attempt 2 95 ms ago
    assert.equal(outs.get(key(1)), undefined, "past the retention");
    assert.notEqual(outs.get(key(2)), undefined);
    now += 1_000;
    assert.equal(outs.get(key(2)), undefined);
    assert.notEqual(outs.get(key(3)), undefined, "a running attempt's output is never forgotten");
    outs.finish(key(3), running);
  });

  test("on disk, file names stay in the directory and the oldest ended attempts go first beyond outputMaxBytes", (t) => {
    const dir = tempDir(t);
    const evil: OutputKey = { jobId: "../../etc/passwd", vertexId: "a/b.c", subtask: 1, attempt: 2 };
    // The Go TaskExecutor's cases (outputdisk_test.go): each a plain name that parses back.
    for (const k of [
      evil,
      { jobId: "../../escape", vertexId: "v", subtask: 0, attempt: 0 },
      { jobId: "/abs/path", vertexId: "/", subtask: 0, attempt: 0 },
      { jobId: "..", vertexId: "..", subtask: 0, attempt: 0 },
      { jobId: ".", vertexId: "", subtask: 0, attempt: 0 },
      { jobId: "j.1.2", vertexId: "v.out", subtask: 3, attempt: 4 },
      { jobId: "naïve\u0000nul", vertexId: "\\back\\slash", subtask: 0, attempt: 0 },
    ]) {
      const name = outputName(k, 12);
      assert.match(name, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.\d+\.\d+\.12\.out$/, JSON.stringify(k));
      assert.deepEqual(parseOutputName(name), { key: k, start: 12 });
    }
    assert.equal(outputName({ jobId: "a", vertexId: "v", subtask: 1, attempt: 2 }, 3), "YQ.dg.1.2.3.out", "the Go TaskExecutor's name");
    assert.equal(outputName({ jobId: "j".repeat(200), vertexId: "v", subtask: 0, attempt: 0 }, 0), "", "too long a name");
    for (const bad of ["x.out", "a.b.c.d.e.out", "YQ.dg.1.2.-3.out", "YQ.dg.01.2.3.out", "YQ==.dg.1.2.3.out"]) {
      assert.equal(parseOutputName(bad), undefined, bad);
    }
    let now = 1_000;
    // Each attempt's file counts one 4 KiB block: three fit in 12 KiB.
    const outs = new Outputs({ outputDir: dir, outputMaxBytes: 3 * 4096, now: () => now });
    for (const [i, k] of [key(0), key(1), evil, key(3)].entries()) {
      const o = outs.start(k);
      o.write(enc.encode(`output ${i}`));
      outs.finish(k, o);
      now += 10;
    }
    assert.equal(outs.get(key(0)), undefined, "the oldest is removed beyond outputMaxBytes");
    assert.equal(text(outs.get(evil)!.o.read(0, 100).data), "output 2");
    assert.deepEqual(readdirSync(dir).sort(), [outputName(key(1), 0), outputName(evil, 0), outputName(key(3), 0)].sort());
    assert.equal(outs.diskUsed, 3 * 4096);
  });

  test("on disk, a worker started on the directory serves the attempts that ended before, as ended", (t) => {
    const dir = tempDir(t);
    const first = new Outputs({ outputDir: dir, outputBytes: 8 });
    const o = first.start(key());
    o.write(enc.encode("0123456789abcdefghij")); // segments of 8 bytes: the tail spans the last two
    first.finish(key(), o);
    const running = first.start(key(1));
    running.write(enc.encode("still running")); // buffered: a restart finds what was flushed, if anything
    const again = new Outputs({ outputDir: dir, outputBytes: 8 });
    const r = again.get(key());
    assert.equal(r?.ended, true);
    assert.deepEqual((({ data, offset, end }) => [text(data), offset, end])(r!.o.read(0, 100)), ["cdefghij", 12, 20]);
    assert.equal(again.get(key(1))?.ended, true, "an attempt that ran when the worker stopped counts as ended");
    const old = new Outputs({ outputDir: dir, outputRetentionMs: 1, now: () => Date.now() + 60_000 });
    assert.equal(old.get(key()), undefined, "past the retention, loaded outputs are removed");
    assert.deepEqual(readdirSync(dir), []);
    first.finish(key(1), running);
  });

  test("task.log lines are those of the Go task logger", () => {
    const at = new Date("2026-01-02T03:04:05.678Z");
    assert.equal(logLine("hello", { n: 3, who: "a b", eq: "x=y" }, at), 'time=2026-01-02T03:04:05.678Z level=INFO msg=hello n=3 who="a b" eq="x=y"\n');
  });
});

describe("task output of the node Worker, read through the Dispatcher", { timeout: 180_000 }, () => {
  let jm: JobManager;
  let client: Client;
  const workers: Worker[] = [];

  const writer = async (task: Task) => {
    task.log("starting", { subtask: task.subtaskIndex });
    console.log("console.log is not captured");
    const chunk = "x".repeat(1023) + "\n";
    for (let i = 0; i < 100; i++) task.output.write(i % 2 === 0 ? chunk : enc.encode(chunk));
    task.output.write(`the end of attempt ${task.attempt}\n`);
  };

  function newWorker(opts: { id?: string; outputDir?: string } = {}): Worker {
    const w = new Worker({ hastore: jm.url, slots: 2, ...opts });
    w.register("writer", writer);
    workers.push(w);
    return w;
  }

  async function run(name: string): Promise<string> {
    const signal = AbortSignal.timeout(60_000);
    const { jobId } = await client.submit({ name, vertices: [{ id: "w", name: "w", invokable: "writer", parallelism: 1 }], config: noRestart }, { signal });
    const result = await client.wait(jobId, { signal });
    assert.equal(result.status, JobStatus.FINISHED, `${JobStatus[result.status]}: ${result.failure?.message ?? ""}`);
    return jobId;
  }

  before(async () => {
    jm = await startJobManager();
    client = new Client(jm.url);
  });

  after(async () => {
    client?.close();
    for (const w of workers) await w.stop();
    await jm?.stop();
  });

  test("task.log and task.output, with offsets and the tail", { timeout: 90_000 }, async () => {
    const w = newWorker();
    await w.start();
    try {
      const jobId = await run("output");
      const d = client.dispatcher();
      const total = 100 * 1024 + "the end of attempt 0\n".length;
      const first = await d.getTaskOutput({ jobId, vertexId: "w", subtaskIndex: 0 });
      const logBytes = Number(first.endOffset) - total;
      assert.ok(logBytes > 0, "the log line counts");
      assert.equal(first.ended, true);
      assert.equal(first.attemptNumber, 0);
      assert.equal(first.taskExecutorId, w.id);
      assert.equal(first.data.length, 64 << 10, "the last 64 KiB are kept");
      assert.equal(first.offset, first.endOffset - BigInt(64 << 10));
      assert.equal(first.droppedBytes, first.offset);
      assert.equal(first.nextOffset, first.endOffset);
      assert.match(text(first.data), /x\nthe end of attempt 0\n$/);
      assert.doesNotMatch(text(first.data), /console\.log|starting/);

      const mid = first.endOffset - 30n;
      const part = await d.getTaskOutput({ jobId, vertexId: "w", subtaskIndex: 0, attemptNumber: 0, offset: mid, maxBytes: 5 });
      assert.deepEqual([text(part.data), part.offset, part.nextOffset, part.droppedBytes], ["xxxxx", mid, mid + 5n, 0n]);

      const cli = await promisify(execFile)(jobplaneBinary(), ["logs", jobId, "--vertex", "w", "--subtask", "0", "--server", jm.url]);
      assert.match(cli.stdout, /the end of attempt 0/);

      await assert.rejects(d.getTaskOutput({ jobId, vertexId: "w", subtaskIndex: 0, offset: -1n }), (e: unknown) => {
        assert.equal(ConnectError.from(e).code, Code.InvalidArgument);
        return true;
      });
      await assert.rejects(d.getTaskOutput({ jobId, vertexId: "w", subtaskIndex: 0, attemptNumber: 7 }), (e: unknown) => {
        assert.notEqual(reasonOf(e), ErrorReason.UNIMPLEMENTED);
        return true;
      });
    } finally {
      await w.stop();
    }
  });

  test("the TaskExecutor answers as the Go one: the start dropped, EXECUTION_NOT_FOUND with its metadata, INVALID_ARGUMENT", { timeout: 90_000 }, async () => {
    const w = newWorker({ id: "ts-output-direct" });
    await w.start();
    try {
      const jobId = await run("direct");
      const { createClient } = await import("@connectrpc/connect");
      const { createConnectTransport } = await import("@connectrpc/connect-node");
      const { TaskExecutorService } = await import("../gen/jobplane/cluster/v1/task_executor_service_pb.js");
      const te = createClient(TaskExecutorService, createConnectTransport({ baseUrl: w.address, httpVersion: "2" }));
      const attempt = { vertexId: "w", subtaskIndex: 0, attemptNumber: 0 };
      const head = await te.getTaskOutput({ jobId, attempt, offset: 0n, maxBytes: 200 });
      assert.equal(head.offset > 0n, true, "the start was dropped");
      const all = await te.getTaskOutput({ jobId, attempt, maxBytes: 2 << 20 });
      assert.equal(all.data.length, 64 << 10, "max_bytes over 1 MiB reads what is kept");
      try {
        await te.getTaskOutput({ jobId, attempt: { ...attempt, attemptNumber: 3 } });
        assert.fail("want EXECUTION_NOT_FOUND");
      } catch (e) {
        assert.equal(reasonOf(e), ErrorReason.EXECUTION_NOT_FOUND);
        assert.equal(ConnectError.from(e).code, Code.NotFound);
        assert.match(String(e), /TaskExecutor ts-output-direct keeps no output of attempt 3 of subtask 0 of vertex w of job/);
        assert.deepEqual((toJobplaneError(e) as JobplaneError).metadata, {
          job_id: jobId,
          vertex_id: "w",
          subtask_index: "0",
          attempt_number: "3",
          task_executor_id: "ts-output-direct",
        });
      }
      for (const req of [{ jobId, attempt, offset: -1n }, { jobId, attempt, maxBytes: -1 }, { jobId }]) {
        await assert.rejects(te.getTaskOutput(req), (e: unknown) => reasonOf(e) === ErrorReason.INVALID_ARGUMENT);
      }
    } finally {
      await w.stop();
    }
  });

  test("the files a Go TaskExecutor keeps in its --output-dir are read by the node Worker's outputs", { timeout: 90_000 }, async (t) => {
    const dir = tempDir(t);
    const te = await startTaskExecutor(jm.url, ["--output-dir", dir]);
    let jobId: string;
    try {
      const signal = AbortSignal.timeout(60_000);
      // Only the Go TaskExecutor offers "count": until it has registered
      // (its address file comes first), the submission is refused
      // INVOKABLE_NOT_OFFERED, which asks to submit again.
      for (;;) {
        try {
          ({ jobId } = await client.submit(
            { name: "go-output", vertices: [{ id: "c", name: "c", invokable: "count", parallelism: 1, config: { to: "3", every: "1ms" } }], config: noRestart },
            { signal },
          ));
          break;
        } catch (e) {
          if (reasonOf(e) !== ErrorReason.INVOKABLE_NOT_OFFERED || signal.aborted) throw e;
          await new Promise((res) => setTimeout(res, 50));
        }
      }
      const result = await client.wait(jobId, { signal });
      assert.equal(result.status, JobStatus.FINISHED, `${JobStatus[result.status]}: ${result.failure?.message ?? ""}`);
    } finally {
      await te.stop();
    }
    const r = new Outputs({ outputDir: dir }).get({ jobId, vertexId: "c", subtask: 0, attempt: 0 });
    assert.equal(r?.ended, true, `files: ${readdirSync(dir).join(", ")}`);
    assert.match(text(r!.o.read(0, 1 << 20).data), /counting from 0 to 3/);
  });

  test("on disk, the output survives a restart of the worker with the same directory and id", { timeout: 120_000 }, async (t) => {
    const dir = tempDir(t);
    const id = "ts-output-disk";
    const w1 = newWorker({ id, outputDir: dir });
    await w1.start();
    const jobId = await run("disk");
    await w1.stop();
    assert.ok(readdirSync(dir).length > 0, "the output is on disk");
    const w2 = newWorker({ id, outputDir: dir });
    await w2.start();
    try {
      const d = client.dispatcher();
      const deadline = Date.now() + 30_000;
      for (;;) {
        try {
          const r = await d.getTaskOutput({ jobId, vertexId: "w", subtaskIndex: 0, offset: 0n });
          assert.equal(r.ended, true);
          assert.equal(r.data.length, 64 << 10);
          assert.equal(r.nextOffset, r.endOffset);
          assert.match(text(r.data), /the end of attempt 0\n$/);
          break;
        } catch (e) {
          // Until the restarted worker registers its new address, the old one does not answer.
          if (e instanceof assert.AssertionError || Date.now() > deadline) throw e;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    } finally {
      await w2.stop();
    }
  });
});
