// Row 12 of `make bench`: how soon the dashboard draws its first page with
// DASHBOARD_JOBS jobs in the cluster (default 10,000), in Debian's
// chromium, headless, on a real standalone. Each of DASHBOARD_RUNS runs
// (default 5) opens a new browser context (nothing cached) and measures,
// from the navigation's start (performance.now() in the page):
//   - jobs: the jobs page (#/jobs) showing its first row;
//   - cluster: the cluster page (#/cluster) showing the leader;
//   - floor: beside them, the same page with its script blocked (the
//     document's DOMContentLoaded), plus one ListJobs of the page's size
//     fetched from it: what any page that shows those jobs must wait for.
// It prints one line per run in the form of `go test -bench`, which
// jobplane-bench turns into the row.
import { call, launch, startStandalone } from "../test/harness.mjs";

const jobs = Number(process.env.DASHBOARD_JOBS || 10_000);
const runs = Number(process.env.DASHBOARD_RUNS || 5);

const server = await startStandalone(["--submit-rate", "0"]);
const browser = await launch();
try {
  // The jobs wait for slots (the standalone has a few): they cost the
  // cluster nothing and are all listed.
  let next = 0;
  const submitter = async () => {
    for (let i = next++; i < jobs; i = next++) {
      await call(server.url, "SubmitJob", {
        jobId: `bench-${String(i).padStart(6, "0")}`,
        jobGraph: { name: "waiting", vertices: [{ id: "v", invokable: "sleep", parallelism: 1, config: { duration: "1h" } }] },
      });
    }
  };
  await Promise.all(Array.from({ length: 16 }, submitter));
  const listed = await call(server.url, "ListJobs", { pageSize: 1 });
  if (!listed.jobs?.length) throw new Error("no job listed after the submissions");

  for (let r = 0; r < runs; r++) {
    const measure = async (hash, selector, block = false) => {
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const page = await ctx.newPage();
      if (block) await page.route("**/app.js", (route) => route.abort());
      await page.goto(`${server.url}/ui/${hash}`, { waitUntil: block ? "domcontentloaded" : "commit" });
      let ms;
      if (block) {
        const loaded = await page.evaluate(() => performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd);
        const listMs = await page.evaluate(async () => {
          const t = performance.now();
          const r = await fetch("/jobplane.v1.DispatcherService/ListJobs", {
            method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ pageSize: 50 }),
          });
          await r.json();
          return performance.now() - t;
        });
        ms = loaded + listMs;
      } else {
        await page.waitForSelector(selector, { timeout: 30_000 });
        ms = await page.evaluate(() => performance.now());
      }
      await ctx.close();
      return ms;
    };
    const jobsMs = await measure("#/jobs", "table tbody tr a");
    const clusterMs = await measure("#/cluster", "[data-testid=leader]");
    const floorMs = await measure("#/jobs", "", true);
    console.log(
      `BenchmarkDashboardFirstPage 1 ${jobsMs.toFixed(1)} ui-jobs-ms ${clusterMs.toFixed(1)} ui-cluster-ms ${floorMs.toFixed(1)} ui-floor-ms ${jobs} ui-jobs`,
    );
  }
} finally {
  await browser.close();
  await server.stop();
}
