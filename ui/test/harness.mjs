// Test harness of the dashboard's browser tests: a real `jobplane
// standalone` on 127.0.0.1 (bin/jobplane, or $JOBPLANE_BIN), Debian's
// chromium driven headless by playwright-core (no browser download;
// $JOBPLANE_CHROMIUM names another binary), and calls to the public API
// in the Connect protocol's JSON form.
import { spawn } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The chromium the tests drive. */
export function chromiumPath() {
  const p = process.env.JOBPLANE_CHROMIUM || "/usr/bin/chromium";
  if (!existsSync(p)) throw new Error(`no chromium at ${p}: make chromium installs Debian's package (or set JOBPLANE_CHROMIUM)`);
  return p;
}

/**
 * launch starts a headless chromium. A browser that dies as it starts
 * (chromium has exited with SIGSEGV before its first page, now and then)
 * is started again, three tries in all: the browser is the tests' tool,
 * not what they check.
 */
export async function launch() {
  const executablePath = chromiumPath();
  for (let tries = 1; ; tries++) {
    try {
      return await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
    } catch (err) {
      if (tries === 3) throw err;
      console.error(`chromium did not start (try ${tries} of 3): ${String(err).split("\n")[0]}; starting it again`);
    }
  }
}

/** waitFor polls cond every 20 ms until it holds, failing after timeoutMs with what. */
export async function waitFor(what, cond, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * startStandalone starts `jobplane standalone` with extra flags on its own
 * embedded member in a new directory, and waits for its address.
 */
export function startStandalone(extra = []) {
  return startJobplane((dir) => ["standalone", "--data-dir", join(dir, "data"), "--log-level", "warn", ...extra]);
}

/** startStore starts an HA store process (`jobplane hastore`) on its own embedded member. */
export function startStore() {
  return startJobplane((dir) => ["hastore", "--data-dir", join(dir, "data"), "--log-level", "warn"]);
}

/** startJobManager starts a jobmanager on the store at hastore, with no TaskExecutor. */
export function startJobManager(hastore) {
  return startJobplane(() => ["jobmanager", "--hastore", hastore, "--log-level", "warn"]);
}

/**
 * startJobplane starts `jobplane ARGS --listen 127.0.0.1:0
 * --listen-addr-file F` in a new directory, and waits for its address.
 */
async function startJobplane(args) {
  const bin = process.env.JOBPLANE_BIN || join(repoRoot, "bin", "jobplane");
  if (!existsSync(bin)) throw new Error(`no ${bin}: make bins builds it`);
  const dir = mkdtempSync(join(tmpdir(), "jobplane-ui-"));
  const addrFile = join(dir, "addr");
  const logFile = join(dir, "log");
  const fd = openSync(logFile, "w");
  const proc = spawn(bin, [...args(dir), "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile], { stdio: ["ignore", fd, fd] });
  closeSync(fd);
  const exited = new Promise((r) => proc.once("exit", r));
  const log = () => (existsSync(logFile) ? readFileSync(logFile, "utf8") : "");
  try {
    await waitFor("the standalone's address", () => proc.exitCode === null && existsSync(addrFile) && readFileSync(addrFile, "utf8").trim() !== "", 30_000);
  } catch (e) {
    proc.kill("SIGKILL");
    throw new Error(`${e.message}\n${log()}`);
  }
  const url = "http://" + readFileSync(addrFile, "utf8").trim();
  return {
    url,
    dir,
    log,
    /** kill ends the process with SIGKILL, as a crash, and waits for it. */
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGKILL");
        await exited;
      }
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 5000);
        await exited;
        clearTimeout(t);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** call makes one unary call of the public DispatcherService in Connect's JSON form. */
export async function call(url, method, body, token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(`${url}/jobplane.v1.DispatcherService/${method}`, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method}: HTTP ${r.status}: ${text}`);
  return JSON.parse(text);
}

/** submit submits a one-vertex job of invokable with config, and returns its id. */
export async function submit(url, id, invokable, config = {}, token) {
  await call(url, "SubmitJob", {
    jobId: id,
    jobGraph: { name: `${id} (${invokable})`, vertices: [{ id: "v", name: invokable, invokable, parallelism: 1, config }] },
  }, token);
  return id;
}

/**
 * screenshot saves page as NAME.png into $UI_SCREENSHOTS when it is set
 * (docs/screenshots: `make ui-screenshots`), and does nothing otherwise.
 */
export async function screenshot(page, name) {
  const dir = process.env.UI_SCREENSHOTS;
  if (!dir) return;
  await page.screenshot({ path: join(dir, `${name}.png`), fullPage: true });
}
