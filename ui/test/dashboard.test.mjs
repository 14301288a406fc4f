// The dashboard in a real browser, against a real standalone.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { call, launch, screenshot, startStandalone, submit, waitFor } from "./harness.mjs";

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
  assert.equal(await page.getByTestId("standbys").textContent(), "0 standbys", "a standalone has no standby, and knows it");
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
  // The subtasks are read apart from the watch: they follow, without a reload.
  const subtasks = page.getByRole("table", { name: "Subtasks" });
  await subtasks.filter({ hasText: /FINISHED\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/ }).waitFor();
  assert.match(await subtasks.textContent(), /FINISHED\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/, "the subtask FINISHED, since a time");
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
  const exceptions = page.getByRole("list", { name: "Exceptions" });
  await exceptions.filter({ hasText: "the input was bad" }).waitFor();
  assert.match(await exceptions.textContent(), /vertex v, subtask 0, attempt 0/, "the exception names its attempt");
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

test("a job's dataflow is drawn: each vertex with its state and parallelism, each edge with its distribution, blocking ones dashed", async () => {
  const id = "ui-dataflow";
  const noop = (vid, name, parallelism) => ({ id: vid, name, invokable: "noop", parallelism });
  await call(server.url, "SubmitJob", {
    jobId: id,
    jobGraph: {
      name: "three stages",
      vertices: [noop("read", "read input", 2), noop("map", "map", 2), noop("write", "write output", 1)],
      edges: [
        { sourceVertexId: "read", targetVertexId: "map", distribution: "DISTRIBUTION_PATTERN_POINTWISE", resultType: "RESULT_PARTITION_TYPE_PIPELINED" },
        { sourceVertexId: "map", targetVertexId: "write", distribution: "DISTRIBUTION_PATTERN_ALL_TO_ALL", resultType: "RESULT_PARTITION_TYPE_BLOCKING" },
      ],
    },
  });
  const { page, errors } = await open(`/ui/#/jobs/${id}`);
  await page.getByTestId("job-status").filter({ hasText: "FINISHED" }).waitFor();
  const svg = page.getByRole("img", { name: "Dataflow of 3 vertices and 2 edges" });
  await svg.waitFor();
  const vertex = (v) => svg.locator(`g[data-vertex="${v}"]`);
  await vertex("write").filter({ hasText: "FINISHED" }).waitFor();
  assert.match(await vertex("read").textContent(), /read input.*FINISHED · ×2.*2 finished/);
  assert.match(await vertex("write").textContent(), /write output.*FINISHED · ×1.*1 finished/);
  const edge = (from, to) => svg.locator(`g[data-edge="${from}->${to}"]`);
  assert.equal(await edge("read", "map").getAttribute("class"), "edge pipelined");
  assert.match(await edge("read", "map").textContent(), /pointwise/);
  assert.equal(await edge("map", "write").getAttribute("class"), "edge blocking");
  assert.match(await edge("map", "write").textContent(), /all-to-all/);
  // Laid out left to right, in the order of the dataflow.
  const x = async (v) => (await vertex(v).boundingBox()).x;
  assert.ok((await x("read")) < (await x("map")) && (await x("map")) < (await x("write")), "the vertices are laid out in the dataflow's order");
  assert.deepEqual(errors, []);
  await screenshot(page, "job-dataflow");
  await page.close();
});

test("a job submitted from the editor runs; one the cluster refuses shows each refused field at its line", async () => {
  const { page, errors } = await open("/ui/#/submit");
  const editor = page.getByLabel("Job graph (JSON or YAML)");
  const submitButton = page.getByRole("button", { name: "Submit", exact: true });

  await editor.fill("{ not json");
  await submitButton.click();
  await page.getByRole("alert").filter({ hasText: "neither JSON nor YAML: line 1" }).waitFor();

  const refused = [
    "{",
    '  "name": "refused",',
    '  "vertices": [',
    '    { "id": "a", "invokable": "noop", "parallelism": 1 },',
    '    { "id": "b",',
    '      "invokable": "no-such-invokable", "parallelism": 1 }',
    "  ]",
    "}",
  ].join("\n");
  await editor.fill(refused);
  await submitButton.click();
  const item = page.getByRole("list", { name: "Refused fields" }).getByRole("listitem").filter({ hasText: "job_graph.vertices[1].invokable" });
  await item.waitFor();
  await screenshot(page, "submit-refused");
  const line = item.getByRole("button");
  assert.equal(await line.textContent(), "line 6");
  await line.click();
  const selected = await editor.evaluate((t) => t.value.slice(t.selectionStart, t.selectionEnd));
  assert.equal(selected, '"invokable": "no-such-invokable"');

  // INVALID_ARGUMENT too: a duplicate vertex id, at the second vertex.
  await editor.fill(refused.replace('"id": "b"', '"id": "a"'));
  await submitButton.click();
  const duplicate = page.getByRole("list", { name: "Refused fields" }).getByRole("listitem").filter({ hasText: "job_graph.vertices[1].id" });
  await duplicate.waitFor();
  await duplicate.getByRole("button", { name: "line 5" }).click();
  assert.equal(await editor.evaluate((t) => t.value.slice(t.selectionStart, t.selectionEnd)), '"id": "a"');

  // YAML, the form of the CLI's job files, alike.
  await editor.fill(["name: refused", "vertices:", "  - id: a", "    invokable: noop", "    parallelism: 1", "  - id: b", "    parallelism: 1", "    invokable: not-offered", ""].join("\n"));
  await submitButton.click();
  const yamlItem = page.getByRole("list", { name: "Refused fields" }).getByRole("listitem").filter({ hasText: "job_graph.vertices[1].invokable" });
  await yamlItem.getByRole("button", { name: "line 8" }).click();
  assert.equal(await editor.evaluate((t) => t.value.slice(t.selectionStart, t.selectionEnd)), "invokable: not-offered");

  await page.getByLabel(/Job id/).fill("ui-submitted");
  await editor.fill(JSON.stringify({ name: "from the editor", vertices: [{ id: "v", invokable: "noop", parallelism: 1 }] }));
  await submitButton.click();
  await page.waitForURL(/#\/jobs\/ui-submitted$/);
  await page.getByTestId("job-status").filter({ hasText: "FINISHED" }).waitFor();
  assert.deepEqual(errors, []);
  await page.close();
});

test("a checkpointing job's checkpoints are listed; a savepoint is taken, and the job stopped with another, each after a confirmation", async () => {
  const id = "ui-checkpoints";
  await call(server.url, "SubmitJob", {
    jobId: id,
    jobGraph: {
      name: "counter",
      vertices: [{ id: "count", name: "count", invokable: "count", parallelism: 1, config: { to: "1000000", every: "10ms" } }],
      config: { checkpoints: { interval: "0.2s" } },
    },
  });
  const { page, errors } = await open(`/ui/#/jobs/${id}`);
  await page.getByTestId("job-status").filter({ hasText: "RUNNING" }).waitFor();
  // Completed checkpoints appear, read again as they come.
  await page.getByRole("table", { name: "Kept checkpoints" }).waitFor();
  await waitFor("two completed checkpoints", async () => {
    const m = /completed(\d+)/.exec((await page.getByTestId("checkpoint-counts").textContent()) ?? "");
    return m !== null && Number(m[1]) >= 2;
  });

  const savepoints = page.getByRole("table", { name: "Savepoints" }).locator("tbody tr");
  let triggers = 0;
  page.on("request", (r) => r.url().endsWith("/TriggerSavepoint") && triggers++);
  // Dismissed first: no call.
  page.once("dialog", (d) => d.dismiss());
  await page.getByRole("button", { name: "Take savepoint" }).click();
  const asked = [];
  page.on("dialog", (d) => {
    asked.push(d.message());
    d.accept();
  });
  await page.getByRole("button", { name: "Take savepoint" }).click();
  await page.getByRole("status").filter({ hasText: /Savepoint .* taken/ }).waitFor();
  await waitFor("the savepoint listed", async () => (await savepoints.count()) === 1);
  assert.match(await page.getByTestId("job-status").textContent(), /RUNNING/, "a savepoint alone leaves the job running");

  await page.getByRole("button", { name: "Stop with savepoint" }).click();
  await page.getByTestId("job-status").filter({ hasText: "CANCELED" }).waitFor();
  await waitFor("both savepoints listed", async () => (await savepoints.count()) === 2);
  assert.deepEqual(asked, [`Take a savepoint of job ${id}?`, `Stop job ${id} with a savepoint?`]);
  assert.equal(triggers, 2, "TriggerSavepoint calls: the dismissed confirmation must make none");
  assert.deepEqual(errors, []);
  await screenshot(page, "job-checkpoints");
  await page.close();
});

test("an ended job's values and accumulators", async () => {
  const id = "ui-result";
  await call(server.url, "SubmitJob", {
    jobId: id,
    jobGraph: { name: "counting", vertices: [{ id: "count", invokable: "count", parallelism: 2, config: { to: "5", every: "1ms" } }] },
  });
  const { page, errors } = await open(`/ui/#/jobs/${id}`);
  await page.getByTestId("job-status").filter({ hasText: "FINISHED" }).waitFor();
  const values = page.getByRole("table", { name: "Values" });
  await values.waitFor();
  const rows = await values.locator("tbody tr").allTextContents();
  assert.deepEqual(rows, ["count005", "count105"], "each subtask's value, in subtask order");
  const accumulators = await page.getByRole("table", { name: "Accumulators" }).locator("tbody tr").allTextContents();
  assert.deepEqual(accumulators, ["count.steps10"], "the steps of both subtasks, summed");
  assert.deepEqual(errors, []);
  await screenshot(page, "job-result");
  await page.close();
});

test("a job's subtasks are listed a page at a time", async () => {
  const id = "ui-pages";
  // More subtasks than the cluster has slots: most wait, all are listed.
  await call(server.url, "SubmitJob", {
    jobId: id,
    jobGraph: {
      name: "wide",
      vertices: [
        { id: "a", invokable: "sleep", parallelism: 30, config: { duration: "10m" } },
        { id: "b", invokable: "sleep", parallelism: 120, config: { duration: "10m" } },
      ],
    },
  });
  try {
    const { page, errors } = await open(`/ui/#/jobs/${id}`);
    const range = page.getByTestId("subtask-range");
    const rows = page.getByRole("table", { name: "Subtasks" }).locator("tbody tr");
    await range.filter({ hasText: "Subtasks 1–100 of 150" }).waitFor();
    assert.equal(await rows.count(), 100);
    assert.equal(await page.getByRole("button", { name: "Previous subtasks" }).isDisabled(), true);
    await page.getByRole("button", { name: "Next subtasks" }).click();
    await range.filter({ hasText: "Subtasks 101–150 of 150" }).waitFor();
    assert.equal(await rows.count(), 50);
    // The page after the first vertex's 30 and the second's first 70 (a vertex without a name shows its id).
    assert.match(await rows.first().textContent(), /^b70/);
    assert.equal(await page.getByRole("button", { name: "Next subtasks" }).isDisabled(), true);
    await page.getByRole("button", { name: "Previous subtasks" }).click();
    await range.filter({ hasText: "Subtasks 1–100 of 150" }).waitFor();
    assert.match(await rows.first().textContent(), /^a0/);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await call(server.url, "CancelJob", { jobId: id });
  }
});
