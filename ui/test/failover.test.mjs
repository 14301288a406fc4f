// The dashboard across a change of leader: two jobmanagers on one HA
// store process.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch, screenshot, startJobManager, startStore, submit, waitFor } from "./harness.mjs";

let store, first, second, browser;

before(async () => {
  store = await startStore();
  first = await startJobManager(store.url);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  for (const p of [second, first, store]) await p?.stop();
});

test("a standby's page names the leader, shows the leader's data, and says so when it takes over", async () => {
  // The first leads before the second starts.
  await waitFor("the first jobmanager to lead", async () => {
    const r = await fetch(`${first.url}/jobplane.v1.DispatcherService/GetClusterOverview`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    return r.ok;
  });
  // A job of the first's (no TaskExecutor runs it: it waits).
  const id = await submit(first.url, "ui-standby", "sleep", { duration: "10m" });
  second = await startJobManager(store.url);
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(second.url + "/");
  const banner = page.getByRole("status");
  await banner.filter({ hasText: "This JobManager is a standby" }).waitFor();
  assert.equal(await banner.getByRole("link").getAttribute("href"), first.url + "/ui/", "the banner links to the leader's dashboard");
  // The leader's data, read through the standby (its own origin).
  await page.getByTestId("leader").filter({ hasText: first.url }).waitFor();
  // Jobmanagers on a remote HA store (HAStoreService) cannot count their standbys.
  assert.match(await page.getByTestId("standbys").textContent(), /not known/);
  await screenshot(page, "standby");
  await page.getByRole("link", { name: "Jobs", exact: true }).click();
  await page.getByRole("link", { name: id, exact: true }).waitFor();
  await page.getByRole("link", { name: "Cluster", exact: true }).click();

  await first.kill();
  try {
    // No reload: the page finds that its own server leads now.
    await page.getByTestId("leader").filter({ hasText: second.url }).waitFor({ timeout: 30_000 });
    await banner.filter({ hasText: `The leader changed: it was ${first.url}, it is now ${second.url}` }).waitFor();
    // The job, recovered by the new leader, read from it directly now.
    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    await page.getByRole("link", { name: id, exact: true }).waitFor();
  } catch (e) {
    // What the page showed, and what the jobmanager said, to tell why.
    const shown = await page.locator("body").innerText();
    throw new Error(`${e.message}\n--- the page:\n${shown}\n--- the second jobmanager's log:\n${second.log()}`);
  }
  assert.deepEqual(errors, []);
  await page.close();
});
