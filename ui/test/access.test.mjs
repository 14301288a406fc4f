// The dashboard by keyboard alone, and on a phone-sized screen.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { call, launch, screenshot, startStandalone, submit } from "./harness.mjs";

let server, browser;

before(async () => {
  server = await startStandalone();
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** tabTo presses Tab until the focused element's text is name (at most 60 times) and returns how many it took. */
async function tabTo(page, name) {
  for (let n = 1; n <= 60; n++) {
    await page.keyboard.press("Tab");
    const text = await page.evaluate(() => document.activeElement?.textContent?.trim() ?? "");
    if (text === name) return n;
  }
  throw new Error(`no focusable element "${name}" within 60 Tabs`);
}

test("every page is reached, and a job canceled, by keyboard alone, the focus always shown", async () => {
  const id = await submit(server.url, "ui-keyboard", "sleep", { duration: "10m" });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(server.url + "/ui/");
  await page.getByTestId("leader").waitFor();

  await tabTo(page, "Jobs");
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, "none", "the focused link is outlined");
  await page.keyboard.press("Enter");
  assert.equal(new URL(page.url()).hash, "#/jobs");
  await page.getByRole("link", { name: id, exact: true }).waitFor();
  await tabTo(page, id);
  await page.keyboard.press("Enter");
  assert.equal(new URL(page.url()).hash, `#/jobs/${id}`);
  await page.getByTestId("job-status").filter({ hasText: "RUNNING" }).waitFor();

  // A subtask's output opens from the keyboard too.
  await tabTo(page, "Show");
  await page.keyboard.press("Enter");
  await page.getByTestId("task-output").waitFor();

  let asked = "";
  page.once("dialog", (d) => { asked = d.message(); return d.accept(); });
  await tabTo(page, "Cancel job");
  await page.keyboard.press("Enter");
  await page.getByTestId("job-status").filter({ hasText: "CANCELED" }).waitFor();
  assert.equal(asked, `Cancel job ${id}?`);

  await tabTo(page, "Submit");
  await page.keyboard.press("Enter");
  assert.equal(new URL(page.url()).hash, "#/submit");
  assert.deepEqual(errors, []);
  await page.close();
});

test("on a phone-sized screen no page scrolls sideways, and every control stays in reach", async () => {
  const id = await submit(server.url, "ui-phone", "sleep", { duration: "10m" });
  try {
    const page = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    const sideways = () => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    for (const [hash, ready] of [
      ["#/cluster", () => page.getByTestId("leader").waitFor()],
      ["#/jobs", () => page.getByRole("link", { name: id, exact: true }).waitFor()],
      [`#/jobs/${id}`, () => page.getByTestId("job-status").filter({ hasText: "RUNNING" }).waitFor()],
      ["#/submit", () => page.getByRole("button", { name: "Submit" }).waitFor()],
    ]) {
      await page.goto(`${server.url}/ui/${hash}`);
      await ready();
      assert.equal(await sideways(), 0, `${hash} scrolls sideways`);
      if (hash === `#/jobs/${id}`) {
        // The subtasks' last column, scrolled to in its table, still opens the output.
        const show = page.getByRole("button", { name: "Output of sleep #0" });
        await show.scrollIntoViewIfNeeded();
        assert.ok(await show.isVisible(), "the output button is shown");
        await show.tap();
        await page.getByTestId("task-output").waitFor();
        assert.equal(await sideways(), 0, "the job page scrolls sideways with its output open");
        await screenshot(page, "phone-job");
      }
    }
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await call(server.url, "CancelJob", { jobId: id });
  }
});
