// Writes docs/console.md's screenshots of the console (docs/console.png, the users table,
// and docs/console-shares.png, shares over time) with the quickstart's data: the
// service and a fake Ray with 2 CPUs (the quickstart's head), fed by `fairshare
// replay` with the quickstart's settings (first 120 jobs of the COARE trace), captured
// while the users' queues are full. Run by `scripts/test-console --screenshot`.
import { spawn } from "node:child_process";
import path from "node:path";
import { ADMIN, FakeRay, Service, launchBrowser, openPage, root, until } from "./harness.js";

const out = process.argv[2] || path.join(root, "docs/console.png");
const ray = await new FakeRay(2).start();
const svc = await new Service(ray.port).start();
const browser = await launchBrowser();
let replay;
try {
  await until("the fake Ray's capacity", async () => (await svc.json("GET", "/v1/scheduler")).clusters.find((c) => c.name === "fake")?.healthy);
  replay = spawn(
    process.env.FAIRSHARE_BIN || path.join(root, "target/debug/fairshare"),
    ["replay", "--trace", path.join(root, "examples/traces/coare-saliksik-2020.swf.gz"), "--server", svc.url,
      "--token", ADMIN, "--limit", "120", "--time-scale", "10000", "--cpu-scale", "0.004",
      "--min-cpu", "0.25", "--max-cpu", "2"],
    { stdio: "ignore" },
  );
  const errors = [];
  const page = await openPage(browser, errors);
  await page.goto(svc.url + "/ui/");
  await page.fill("#token", ADMIN);
  await page.click("#token-save");
  // Wait until most of the trace's users are in and several wait.
  await until("several users with queued jobs", async () => {
    const users = await svc.json("GET", "/v1/users");
    return users.length >= 10 && users.filter((u) => u.queued > 0).length >= 4;
  }, 60000, 250);
  // Let shares history gather a few samples (one every 5 s).
  await new Promise((r) => setTimeout(r, 6000));
  await page.reload();
  await page.locator("#status").filter({ hasText: "Updated" }).waitFor();
  await page.screenshot({ path: out });
  await until("a minute of samples", async () => (await svc.json("GET", "/v1/shares")).samples.length >= 8, 90000, 1000);
  await page.click('a[href="#shares"]');
  await page.locator("#shares-chart svg.panel").first().waitFor();
  await page.screenshot({ path: out.replace(/\.png$/, "-shares.png") });
  if (errors.length) throw new Error("console errors: " + errors.join("; "));
  console.log("wrote " + out);
} finally {
  replay?.kill();
  await browser.close();
  await svc.stop();
  await ray.stop();
}
