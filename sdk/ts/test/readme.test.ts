// The README's TypeScript snippets run as written (only the cluster's URL
// changed): the client's against a jobmanager with a Worker that has
// "greet", the worker's on its own, the checkpoint one (a worker and a
// client) and the task output one against jobmanagers of their own.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { Worker } from "../src/index.js";
import { repoRoot, startJobManager, type JobManager } from "./cluster.js";

const pkg = join(repoRoot, "sdk", "ts");

/** snippets returns the README's ```ts blocks. */
function snippets(): string[] {
  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  return [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
}

/** run runs a snippet as a module of this package (so that "@jobplane/sdk" resolves to it) and returns its output. */
async function run(name: string, code: string): Promise<string> {
  const file = join(pkg, "dist", `readme-${name}.mjs`);
  writeFileSync(file, code);
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [file], { timeout: 30_000, cwd: pkg });
    return stdout;
  } finally {
    rmSync(file, { force: true });
  }
}

describe("README snippets", { timeout: 120_000 }, () => {
  let jm: JobManager;
  let worker: Worker;

  before(async () => {
    jm = await startJobManager();
    worker = new Worker({ hastore: jm.url });
    worker.register("greet", () => {});
    await worker.start();
  });

  after(async () => {
    await worker?.stop();
    await jm?.stop();
  });

  test("the client snippet submits, watches and waits for a job", { timeout: 60_000 }, async () => {
    const [client] = snippets();
    assert.ok(client?.includes("new Client("), "no client snippet in README.md");
    const out = await run("client", client.replaceAll("http://127.0.0.1:8080", jm.url));
    const lines = out.trim().split("\n");
    // The watch's statuses (as few as one, FINISHED, for a job this
    // quick), then wait's result.
    assert.equal(lines.at(-2), "FINISHED", out);
    assert.equal(lines.at(-1)?.trim(), "FINISHED", out);
  });

  test("the worker snippet starts and stops a worker", { timeout: 60_000 }, async () => {
    const w = snippets()[1];
    assert.ok(w?.includes("new Worker("), "no worker snippet in README.md");
    await run("worker", w.replaceAll("http://127.0.0.1:8080", jm.url));
  });

  test("the checkpoint snippet runs a counting job with checkpoints to its end", { timeout: 60_000 }, async () => {
    const c = snippets()[2];
    assert.ok(c?.includes("onCheckpoint("), "no checkpoint snippet in README.md");
    // A jobmanager of its own: with the Worker above (no "count") among
    // its TaskExecutors, the job could be placed there before the
    // snippet's worker registered.
    const own = await startJobManager();
    try {
      const out = await run("checkpoint", c.replaceAll("http://127.0.0.1:8080", own.url));
      assert.equal(out.trim().split("\n").at(-1), "FINISHED", out);
    } finally {
      await own.stop();
    }
  });

  test("the task output snippet prints what the task logged and wrote", { timeout: 60_000 }, async () => {
    const o = snippets()[3];
    assert.ok(o?.includes("task.output.write("), "no task output snippet in README.md");
    const own = await startJobManager(); // its worker the only one with "report"
    try {
      const out = await run("output", o.replaceAll("http://127.0.0.1:8080", own.url));
      assert.match(out, /^time=\S+ level=INFO msg=starting subtask=0\nline 1\nline 2\nline 3\ntrue\n$/, out);
    } finally {
      await own.stop();
    }
  });
});
