// The dashboard in a real browser, against a real standalone.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { launch, screenshot, startStandalone, submit, waitFor } from "./harness.mjs";

let server, browser;

before(async () => {
  server = await startStandalone(["--allow-exec"]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

async function open(path = "/") {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(server.url + path);
  return { page, errors };
}

test("the root leads to the dashboard, whose cluster page names the leader and its TaskExecutors", async () => {
  const { page, errors } = await open("/");
  assert.equal(new URL(page.url()).pathname, "/ui/");
  await page.getByTestId("leader").filter({ hasText: server.url }).waitFor();
  await waitFor("a TaskExecutor on the cluster page", async () => Number(await page.getByTestId("te-count").textContent()) >= 1);
  const rows = page.getByRole("table").first().locator("tbody tr");
  assert.match(await rows.first().textContent(), /noop/, "the TaskExecutor's row lists its invokables");
  assert.equal(await page.getByText("Loading the dashboard").count(), 0, "the page's loading line is gone once it is drawn");
  assert.deepEqual(errors, []);
  await screenshot(page, "cluster");
  await page.close();
});

test("a job's page follows it live to FINISHED, from the jobs list", async () => {
  const { page, errors } = await open("/ui/#/jobs");
  // The job runs until the test lets it end.
  const release = join(server.dir, "release-ui-finishes");
  const id = await submit(server.url, "ui-finishes", "exec", { argv: JSON.stringify(["sh", "-c", `until [ -e '${release}' ]; do sleep 0.05; done`]) });
  // The list is read again on its own: the job appears without a reload.
  const link = page.getByRole("link", { name: id, exact: true });
  await link.waitFor();
  await screenshot(page, "jobs");
  await link.click();
  assert.equal(new URL(page.url()).hash, `#/jobs/${id}`);
  const status = page.getByTestId("job-status");
  await status.filter({ hasText: "RUNNING" }).waitFor();
  writeFileSync(release, "");
  // No reload: the watch brings the end.
  await status.filter({ hasText: "FINISHED" }).waitFor();
  const subtasks = page.getByRole("table", { name: "Subtasks" });
  assert.match(await subtasks.textContent(), /FINISHED/);
  assert.deepEqual(errors, []);
  await screenshot(page, "job");
  await page.close();
});

test("cancel asks first, then cancels the job", async () => {
  const id = await submit(server.url, "ui-cancel", "sleep", { duration: "10m" });
  const { page } = await open(`/ui/#/jobs/${id}`);
  const status = page.getByTestId("job-status");
  await status.filter({ hasText: "RUNNING" }).waitFor();
  const cancel = page.getByRole("button", { name: "Cancel job" });
  let cancels = 0;
  page.on("request", (r) => r.url().endsWith("/CancelJob") && cancels++);
  // Dismissed first: no call. Then accepted: one.
  page.once("dialog", (d) => d.dismiss());
  await cancel.click();
  page.once("dialog", (d) => {
    assert.match(d.message(), new RegExp(id));
    d.accept();
  });
  await cancel.click();
  await status.filter({ hasText: "CANCELED" }).waitFor();
  assert.equal(cancels, 1, "CancelJob calls: the dismissed confirmation must make none");
  await page.close();
});

test("a failed job shows its exception", async () => {
  const id = await submit(server.url, "ui-fails", "fail", { message: "the input was bad" });
  const { page } = await open(`/ui/#/jobs/${id}`);
  await page.getByTestId("job-status").filter({ hasText: "FAILED" }).waitFor();
  await page.getByRole("list", { name: "Exceptions" }).filter({ hasText: "the input was bad" }).waitFor();
  await screenshot(page, "job-failed");
  await page.close();
});

test("a subtask's output is shown and followed as it grows, to its end", async () => {
  const release = join(server.dir, "release-ui-output");
  const id = await submit(server.url, "ui-output", "exec", {
    argv: JSON.stringify(["sh", "-c", `echo 'first line'; until [ -e '${release}' ]; do sleep 0.05; done; echo 'last line'`]),
  });
  const { page, errors } = await open(`/ui/#/jobs/${id}`);
  await page.getByTestId("job-status").filter({ hasText: "RUNNING" }).waitFor();
  await page.getByRole("button", { name: "Output of exec #0" }).click();
  const output = page.getByTestId("task-output");
  await output.filter({ hasText: "first line" }).waitFor();
  assert.doesNotMatch(await output.textContent(), /last line/);
  await page.getByRole("heading", { name: /following/ }).waitFor();
  writeFileSync(release, "");
  await output.filter({ hasText: "last line" }).waitFor();
  await page.getByRole("heading", { name: /ended/ }).waitFor();
  assert.equal(await output.textContent(), "first line\nlast line\n");
  assert.deepEqual(errors, []);
  await screenshot(page, "job-output");
  await page.close();
});
