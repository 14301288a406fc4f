// The dashboard of a cluster that authenticates its clients.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { launch, screenshot, startStandalone } from "./harness.mjs";

const token = "ui-browser-token-0123456789abcdef";
let server, browser, dir;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "jobplane-ui-auth-"));
  const tokens = join(dir, "tokens");
  writeFileSync(tokens, `ui-user ${token}\n`, { mode: 0o600 });
  server = await startStandalone(["--auth-token-file", tokens]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the page asks for a bearer token, says when it is refused, keeps it for the session, and forgets it", async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  await page.goto(server.url + "/");
  const field = page.getByLabel("Bearer token");
  await field.waitFor();
  assert.equal(await page.getByTestId("leader").count(), 0, "no data is shown without a token");
  await screenshot(page, "token");

  await field.fill("not-the-token-0123456789abcdef");
  await page.getByRole("button", { name: "Use this token" }).click();
  await page.getByRole("alert").filter({ hasText: "refused" }).waitFor();

  await page.getByLabel("Bearer token").fill(token);
  await page.getByRole("button", { name: "Use this token" }).click();
  await page.getByTestId("leader").filter({ hasText: server.url }).waitFor();

  // Kept for the tab's session: a reload asks nothing.
  await page.reload();
  await page.getByTestId("leader").filter({ hasText: server.url }).waitFor();
  assert.equal(await page.getByLabel("Bearer token").count(), 0);
  assert.equal(await page.evaluate(() => document.cookie), "", "the token is not a cookie");

  await page.getByRole("button", { name: "Forget token" }).click();
  await page.getByLabel("Bearer token").waitFor();
  await context.close();
});
