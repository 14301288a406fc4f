// A node Worker for the conformance runner's TaskExecutor mode
// (jobplane-conformance --taskexecutor-command): it offers the suite's
// invokables, as conformance/README.md ("Checking a TaskExecutor")
// defines them, through the Worker's public API, and runs until SIGTERM or
// SIGINT.
//
//   node sdk/ts/dist/test/conformance-worker.js --hastore URL --listen HOST:PORT [--id ID] [--slots N]

import { parseArgs } from "node:util";
import { Worker, type Task } from "../src/index.js";

const { values } = parseArgs({
  options: {
    hastore: { type: "string" },
    listen: { type: "string", default: "127.0.0.1:0" },
    id: { type: "string" },
    slots: { type: "string", default: "2" },
  },
});
if (!values.hastore) {
  console.error("conformance-worker: --hastore is required");
  process.exit(2);
}
const colon = values.listen!.lastIndexOf(":");
const worker = new Worker({
  hastore: values.hastore.split(","),
  host: values.listen!.slice(0, colon),
  port: Number(values.listen!.slice(colon + 1)),
  slots: Number(values.slots),
  ...(values.id ? { id: values.id } : {}),
  log: (line) => console.error(line),
});

// conformance.gate runs until its attempt is canceled, or for config.ms
// milliseconds if set.
worker.register("conformance.gate", async (task: Task) => {
  await new Promise<void>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const ms = task.config["ms"];
    if (ms !== undefined) {
      if (!/^\d+$/.test(ms)) {
        reject(new Error("conformance.gate: config ms must be a count of milliseconds"));
        return;
      }
      timer = setTimeout(resolve, Number(ms));
    }
    task.signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
});
// conformance.fail fails at once with config.message.
worker.register("conformance.fail", (task: Task) => {
  throw new Error(task.config["message"] || "conformance.fail failed as asked");
});
// conformance.value finishes at once, returning config.value.
worker.register("conformance.value", (task: Task) => {
  task.setValue(task.config["value"] ?? "");
});

const address = await worker.start();
console.error(`conformance-worker ${worker.id} serving at ${address}`);
const stop = () => {
  void worker.stop().then(() => process.exit(0));
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
