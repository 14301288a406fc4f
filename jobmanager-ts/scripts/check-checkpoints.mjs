// A check of the Checkpointer (dist/checkpoints.js) against a fake
// TaskExecutor and a fake store, for what no conformance case checks:
// an inline state over ServerLimits.max_inline_state_bytes fails the
// checkpoint and nothing is stored; a savepoint's id names the run;
// CheckpointConfig.tolerable_failures fails the running subtasks.
// Run after `npm run build`: node scripts/check-checkpoints.mjs
import http2 from "node:http2";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { TaskExecutorService } from "../dist/gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { CheckpointConfigSchema } from "../dist/gen/jobplane/v1/checkpoint_pb.js";
import { Checkpointer, MAX_INLINE_STATE_BYTES, savepointId } from "../dist/checkpoints.js";

let stateBytes = 10;
let decline = "";
const server = http2.createServer(
  connectNodeAdapter({
    routes(router) {
      router.service(TaskExecutorService, {
        async triggerCheckpoint(req) {
          return {
            acks: req.attempts.map((a) => ({
              attempt: a,
              declined: decline,
              state: decline ? undefined : { vertexId: a.vertexId, subtaskIndex: a.subtaskIndex, state: { case: "inline", value: new Uint8Array(stateBytes) } },
            })),
          };
        },
      });
    },
  }),
);
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const address = `http://127.0.0.1:${server.address().port}`;

const stored = [];
const failedRunning = [];
const store = {
  async getLatestCheckpoint() {
    return { lastCheckpointId: 0n, checkpoint: undefined };
  },
  async addCheckpoint(r) {
    stored.push(["checkpoint", r.checkpoint.checkpointId]);
    return {};
  },
  async addSavepoint(r) {
    stored.push(["savepoint", r.savepoint.savepointId]);
    return {};
  },
};
const host = {
  jobId: "job-1",
  runId: "run-abc",
  maxCheckpointBytes: 1024 * 1024 - 4096,
  fence: { election: "job/job-1", token: { sessionId: "s", epoch: 1n } },
  store,
  active: () => true,
  runningAttempts: () => [{ attempt: { vertexId: "v", subtaskIndex: 0, attemptNumber: 0 }, address }],
  failRunning: (m) => failedRunning.push(m),
  log: () => {},
};
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
};

const cfg = create(CheckpointConfigSchema, { interval: { seconds: 1n, nanos: 0 }, tolerableFailures: 1 });
const cp = new Checkpointer(host, cfg, "");
await cp.init();
const run = (fn) => cp["exclusive"](fn);

// 1. Within the limit: stored.
stateBytes = MAX_INLINE_STATE_BYTES;
await run(() => cp["checkpoint"]());
check(stored.length === 1 && stored[0][0] === "checkpoint", "a state of exactly the limit is stored");

// 2. Over the limit: failed, nothing stored, counted failed.
stateBytes = MAX_INLINE_STATE_BYTES + 1;
let err;
await run(() => cp["checkpoint"]()).catch((e) => (err = e));
check(err && /over the limit/.test(err.message) && stored.length === 1, `a state over the limit fails the checkpoint, nothing stored (${err?.message})`);
check(cp.stats().counts.failed === 1n, "counted failed");
check(failedRunning.length === 0, "one failure in a row is tolerated (tolerable_failures 1)");

// 3. A second failure in a row (declined): over tolerable_failures 1.
stateBytes = 10;
decline = "not running";
await run(() => cp["checkpoint"]()).catch(() => {});
check(failedRunning.length === 1, `two in a row fail the running subtasks (${failedRunning[0]})`);

// 4. A savepoint over the limit fails; nothing stored.
decline = "";
stateBytes = MAX_INLINE_STATE_BYTES + 1;
err = undefined;
await cp.savepoint().catch((e) => (err = e));
check(err && err.constructor.name === "SavepointFailed" && stored.length === 1, `a savepoint over the limit fails (${err?.message})`);

// 5. A savepoint's id names the run.
stateBytes = 10;
const sp = await cp.savepoint();
check(sp.savepointId === savepointId("job-1", "run-abc", sp.info.checkpointId) && /^sp-job-1-[0-9a-f]{16}-\d+$/.test(sp.savepointId), `savepoint id ${sp.savepointId}`);
check(savepointId("job-1", "run-abc", 5n) !== savepointId("job-1", "run-abd", 5n), "another run, another id");
check(savepointId("j".repeat(64), "r".repeat(128), 18446744073709551615n).length <= 128, "at most 128 bytes");

server.close();
process.exit(failures ? 1 : 0);
