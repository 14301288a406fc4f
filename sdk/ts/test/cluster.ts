// Test harness: a real `jobplane jobmanager` process on 127.0.0.1 with
// its own embedded etcd member in a temporary directory, built from this
// repository (or taken from $JOBPLANE_BIN).

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root (this file runs as sdk/ts/dist/test/cluster.js). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

/** jobplaneBinary returns $JOBPLANE_BIN, or bin/jobplane, built with go if missing. */
export function jobplaneBinary(): string {
  const fromEnv = process.env["JOBPLANE_BIN"];
  if (fromEnv) return fromEnv;
  const bin = join(repoRoot, "bin", "jobplane");
  if (!existsSync(bin)) {
    execFileSync("go", ["build", "-o", bin, "./server/cmd/jobplane"], { cwd: repoRoot, stdio: "inherit" });
  }
  return bin;
}

/** JobManager is a running jobplane process (a jobmanager, or a taskexecutor). */
export interface JobManager {
  /** Its base URL, e.g. http://127.0.0.1:41234. */
  url: string;
  /** Its process. */
  proc: ChildProcess;
  /** What it logged so far. */
  log(): string;
  /** stop kills it (SIGTERM, SIGKILL after 5 s), waits for it and removes its directory. */
  stop(): Promise<void>;
  /** kill kills it with SIGKILL, as a crash, and waits for it; stop still removes its directory. */
  kill(): Promise<void>;
}

/** waitFor polls cond every 20 ms until it holds, failing after timeoutMs with what. */
export async function waitFor(what: string, cond: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * startJobManager starts a jobmanager with no TaskExecutors of its own
 * and waits for its address: on its own embedded etcd member, or with
 * extra flags such as ["--hastore", url] on another process's store.
 */
export function startJobManager(extra: string[] = []): Promise<JobManager> {
  return startJobplane((dir) => ["jobmanager", "--data-dir", join(dir, "data"), "--log-level", "warn", ...extra]);
}

/** startStore starts an HA store process (`jobplane hastore`) on its own embedded etcd member. */
export function startStore(): Promise<JobManager> {
  return startJobplane((dir) => ["hastore", "--data-dir", join(dir, "data"), "--log-level", "warn"]);
}

/**
 * startTaskExecutor starts the reference (Go) TaskExecutor, following the
 * leader through the HAStoreService at hastore, with extra flags such as
 * ["--output-dir", dir], and waits for its address.
 */
export function startTaskExecutor(hastore: string, extra: string[] = []): Promise<JobManager> {
  return startJobplane(() => ["taskexecutor", "--hastore", hastore, "--log-level", "error", ...extra]);
}

/** The TypeScript JobManager's entry point (jobmanager-ts/, built by `make jobmanager-ts`). */
export const tsJobManagerMain = join(repoRoot, "jobmanager-ts", "dist", "main.js");

/**
 * startTypeScriptJobManager starts the TypeScript JobManager (a second
 * implementation of the JobManager, written from the contract alone) on
 * the HA store at hastore, with extra flags, and waits for its address.
 */
export function startTypeScriptJobManager(hastore: string, extra: string[] = []): Promise<JobManager> {
  if (!existsSync(tsJobManagerMain)) {
    return Promise.reject(new Error(`${tsJobManagerMain} is not built: run make jobmanager-ts`));
  }
  return startProcess(process.execPath, () => [tsJobManagerMain, "--hastore", hastore, ...extra]);
}

/** startJobplane starts `jobplane ARGS --listen 127.0.0.1:0 --listen-addr-file F` in a new directory and waits for its address. */
function startJobplane(args: (dir: string) => string[]): Promise<JobManager> {
  return startProcess(jobplaneBinary(), args);
}

/** startProcess starts `COMMAND ARGS --listen 127.0.0.1:0 --listen-addr-file F` in a new directory and waits for its address. */
async function startProcess(command: string, args: (dir: string) => string[]): Promise<JobManager> {
  const dir = mkdtempSync(join(tmpdir(), "jobplane-ts-"));
  const addrFile = join(dir, "addr");
  const logFile = join(dir, "log");
  const logFd = openSync(logFile, "w");
  const proc = spawn(command, [...args(dir), "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile], {
    stdio: ["ignore", logFd, logFd],
  });
  closeSync(logFd);
  let exited = false;
  // Should this test process end without stopping it, the jobmanager ends too.
  const killOnExit = () => proc.kill("SIGKILL");
  process.once("exit", killOnExit);
  const exit = new Promise<void>((res) =>
    proc.once("exit", () => {
      exited = true;
      process.removeListener("exit", killOnExit);
      res();
    }),
  );
  const log = () => (existsSync(logFile) ? readFileSync(logFile, "utf8") : "");
  const stop = async () => {
    if (!exited) {
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
      await exit;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor("the process's address", () => {
      if (exited) throw new Error(`${command} ${args(dir)[0]} exited:\n` + log());
      return existsSync(addrFile) && readFileSync(addrFile, "utf8").trim() !== "";
    });
  } catch (e) {
    await stop();
    throw e;
  }
  const kill = async () => {
    if (!exited) proc.kill("SIGKILL");
    await exit;
  };
  const addr = readFileSync(addrFile, "utf8").trim();
  return { url: addr.includes("://") ? addr : "http://" + addr, proc, log, stop, kill };
}
