// Browser tests of the console (/ui/): real service binary, fake Ray, Debian's
// headless Chromium through playwright-core, at 1280x800. Run: `npm test` here (after
// `npm ci` and `cargo build`), or scripts/test-console from the repository root.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { ADMIN, SUBMITTER, FakeRay, Service, launchBrowser, openPage, until } from "./harness.js";

let ray;
let svc;
let browser;
// Console errors and uncaught page errors of every page the tests open (a CSP
// violation is one): the last test asserts there are none.
const errors = [];

before(async () => {
  ray = await new FakeRay(4).start();
  svc = await new Service(ray.port).start();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await svc?.stop();
  await ray?.stop();
});

/** A page on the console with `token` typed into the token field. */
async function consoleAs(token, hash = "", errs = errors) {
  const page = await openPage(browser, errs);
  await page.goto(`${svc.url}/ui/${hash}`);
  await page.fill("#token", token);
  await page.click("#token-save");
  await page.locator("#role").filter({ hasText: token === ADMIN ? "admin" : "submitter" }).waitFor();
  return page;
}

async function tableRows(page) {
  return page.$$eval("#users-table tbody tr[data-user]", (trs) =>
    trs.map((tr) => ({
      id: tr.dataset.user,
      weight: Number(tr.querySelector(".weight").textContent),
      paused: tr.querySelector(".paused-cell").textContent === "paused",
      queued: Number(tr.querySelector(".queued").textContent),
      running: Number(tr.querySelector(".running").textContent),
    })),
  );
}

test("the console is served at /ui/ with a strict Content-Security-Policy", async () => {
  const r = await fetch(svc.url + "/ui/");
  assert.equal(r.status, 200);
  const csp = r.headers.get("content-security-policy");
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/);
  const redirect = await fetch(svc.url + "/ui", { redirect: "manual" });
  assert.equal(redirect.status, 308);
  assert.equal(redirect.headers.get("location"), "/ui/");
  assert.equal((await fetch(svc.url + "/ui/nope.js")).status, 404);
});

test("the users table matches GET /v1/users, heaviest first", async () => {
  // alice holds 3 of the 4 cores, bob 1; carol waits behind them; dora is weighted.
  const counts = async () => Object.fromEntries((await svc.json("GET", "/v1/users")).map((x) => [x.id, x]));
  await until("the fake Ray's capacity to be known", async () => (await svc.json("GET", "/v1/scheduler")).clusters.find((c) => c.name === "fake")?.healthy);
  for (let i = 0; i < 3; i++) await svc.submit("alice");
  await until("alice's jobs to run", async () => (await counts()).alice?.running === 3);
  await svc.submit("bob");
  await until("bob's job to run", async () => (await counts()).bob?.running === 1);
  await svc.submit("carol");
  await svc.json("PUT", "/v1/users/dora", { weight: 2.5 });
  await until("carol's job to wait", async () => (await counts()).carol?.queued === 1);
  const page = await consoleAs(ADMIN);
  const api = await svc.json("GET", "/v1/users");
  const expected = api
    .map((u) => ({ id: u.id, weight: u.weight, paused: u.paused, queued: u.queued, running: u.running }))
    .sort((a, b) => a.id.localeCompare(b.id));
  await until("the table to show every user as the API does", async () => {
    const rows = await tableRows(page);
    return JSON.stringify([...rows].sort((a, b) => a.id.localeCompare(b.id))) === JSON.stringify(expected);
  });
  const rows = await tableRows(page);
  assert.equal(rows[0].id, "alice", "the heaviest user (largest share) comes first");
  // Every share cell draws a bar and says the share against the fair share.
  const alice = page.locator('tr[data-user="alice"] .share-text');
  const text = await alice.textContent();
  const share = api.find((u) => u.id === "alice").share;
  assert.ok(text.startsWith((share * 100).toFixed(1) + "%"), text);
  // Sorting by user puts them in id order.
  await page.click('button[data-sort="id"]');
  const sorted = (await tableRows(page)).map((r) => r.id);
  assert.deepEqual(sorted, [...sorted].sort());
  // Live: a weight changed elsewhere shows without a reload.
  await svc.json("PUT", "/v1/users/bob", { weight: 3 });
  await page.locator('tr[data-user="bob"] .weight').filter({ hasText: /^3$/ }).waitFor({ timeout: 5000 });
  await page.context().close();
});

test("pausing a user from the page pauses it and the next cycle skips it", async () => {
  // erin has a job waiting for a free core; ray has none free until we stop one.
  const page = await consoleAs(ADMIN);
  await svc.submit("erin", { secs: 3600 });
  await page.locator('tr[data-user="erin"]').waitFor();
  await page.click('tr[data-user="erin"] button.pause');
  const dialog = page.locator("#confirm");
  await dialog.waitFor({ state: "visible" });
  assert.match(await page.textContent("#confirm-text"), /Pause erin\?/);
  await page.click("#confirm-yes");
  await dialog.waitFor({ state: "hidden" });
  assert.equal((await svc.json("GET", "/v1/users/erin")).paused, true);
  await page.locator('tr[data-user="erin"] .paused-cell').filter({ hasText: "paused" }).waitFor({ timeout: 5000 });
  await page.locator('tr[data-user="erin"] button.pause').filter({ hasText: "Resume" }).waitFor();

  // Free capacity: stop alice's jobs; the next cycles run carol's job, never erin's.
  const frank = await svc.submit("frank", { secs: 3600 });
  const { jobs } = await svc.json("GET", "/v1/jobs?user=alice&status=RUNNING");
  for (const j of jobs) await svc.json("POST", `/v1/jobs/${j.id}/cancel`);
  const cycles = (await svc.json("GET", "/v1/scheduler")).cycles;
  await until("frank's job to be dispatched", async () => (await svc.json("GET", `/v1/jobs/${frank.id}`)).status !== "QUEUED");
  await until("two more cycles", async () => (await svc.json("GET", "/v1/scheduler")).cycles >= cycles + 2);
  const { jobs: erins } = await svc.json("GET", "/v1/jobs?user=erin");
  assert.equal(erins.length, 1);
  assert.equal(erins[0].status, "QUEUED", "a paused user's job is not dispatched");
  assert.equal(await page.textContent('tr[data-user="erin"] .next'), "–", "a paused user has no place in the order");

  // Resume from the page: the job runs.
  await page.click('tr[data-user="erin"] button.pause');
  await dialog.waitFor({ state: "visible" });
  await page.click("#confirm-yes");
  await dialog.waitFor({ state: "hidden" });
  await until("erin's job to be dispatched", async () => (await svc.json("GET", `/v1/jobs/${erins[0].id}`)).status !== "QUEUED");
  await page.context().close();
});

test("weight and limits are changed from the page with a confirmation", async () => {
  // This test provokes a 422, which Chromium logs: its page keeps its own errors.
  const mine = [];
  const page = await consoleAs(ADMIN, "", mine);
  await page.click('tr[data-user="carol"] button.edit');
  await page.locator("#confirm").waitFor({ state: "visible" });
  await page.fill("#f-weight", "4");
  await page.fill("#f-max-running", "7");
  await page.fill("#f-cap-gpu", "1");
  await page.click("#confirm-yes");
  await page.locator("#confirm").waitFor({ state: "hidden" });
  const carol = await svc.json("GET", "/v1/users/carol");
  assert.equal(carol.weight, 4);
  assert.equal(carol.max_running_jobs, 7);
  assert.deepEqual(carol.max_resources, { gpu: 1 });
  // A bad value is refused by the API and the dialog says which field.
  await page.click('tr[data-user="carol"] button.edit');
  await page.fill("#f-weight", "0");
  await page.click("#confirm-yes");
  await page.locator("#confirm-error").filter({ hasText: "weight" }).waitFor();
  assert.ok(await page.locator("#confirm").isVisible(), "the dialog stays open on an error");
  await page.click("#confirm-no");
  assert.equal((await svc.json("GET", "/v1/users/carol")).weight, 4);
  assert.equal(mine.length, 1, mine.join("\n"));
  assert.match(mine[0], /status of 422/);
  await page.context().close();
});

test("a submitter token sees the console but cannot pause", async () => {
  const page = await consoleAs(SUBMITTER);
  await page.locator('tr[data-user="alice"]').waitFor();
  const buttons = page.locator("#users-table tbody button.pause, #users-table tbody button.edit");
  const n = await buttons.count();
  assert.ok(n >= 2);
  for (let i = 0; i < n; i++) assert.equal(await buttons.nth(i).isDisabled(), true);
  // And the API refuses anyway, whatever a page sends.
  const r = await svc.call("POST", "/v1/users/alice/pause", undefined, SUBMITTER);
  assert.equal(r.status, 403);
  assert.equal((await svc.json("GET", "/v1/users/alice")).paused, false);
  await page.context().close();
});

test("a job's page shows its status timeline, resources, cluster and logs", async () => {
  // Room for it: stop every job the earlier tests left running.
  for (const status of ["RUNNING", "PENDING"]) {
    const { jobs } = await svc.json("GET", `/v1/jobs?status=${status}`);
    for (const j of jobs) await svc.json("POST", `/v1/jobs/${j.id}/cancel`);
  }
  // It runs 1.5 s: the monitor polls the fake Ray every 500 ms (no watcher hints
  // here, harness.js) and sees it RUNNING.
  const job = await svc.submit("gina", { cpu: 0.5, secs: 1.5, external_id: "console-timeline-1" });
  await until("the job to succeed", async () => (await svc.json("GET", `/v1/jobs/${job.id}`)).status === "SUCCEEDED");
  const page = await consoleAs(ADMIN, "#jobs");
  // Found by its external id.
  await page.fill("#q-external", "console-timeline-1");
  await page.press("#q-external", "Enter");
  await until("the search to show only that job", async () => {
    const ids = await page.$$eval("#jobs-table tbody tr[data-job]", (trs) => trs.map((tr) => tr.dataset.job));
    return ids.length === 1 && ids[0] === job.id;
  });
  await page.click(`#jobs-table tr[data-job="${job.id}"] a`);
  await page.locator("#job-timeline li").first().waitFor();
  const shown = await page.$$eval("#job-timeline li", (lis) => lis.map((li) => li.dataset.to));
  const events = (await svc.json("GET", `/v1/jobs/${job.id}/events`)).events.map((e) => e.to);
  assert.deepEqual(shown, events);
  assert.deepEqual(events.slice(0, 2), ["QUEUED", "DISPATCHING"]);
  assert.equal(events.at(-1), "SUCCEEDED");
  assert.ok(events.includes("RUNNING"), events.join(" "));
  assert.equal(await page.textContent("#job-status"), "SUCCEEDED");
  const fields = await page.textContent("#job-fields");
  assert.match(fields, /0\.5 cpu/);
  assert.match(fields, /fake/);
  await page.locator("#job-logs").filter({ hasText: `hello from ${job.id}` }).waitFor();
  assert.equal(await page.isDisabled("#job-cancel"), true, "an ended job cannot be cancelled");
  await page.context().close();
});

test("a waiting job's expected start shows in the jobs table and ends its timeline", async () => {
  for (const status of ["RUNNING", "PENDING", "QUEUED"]) {
    const { jobs } = await svc.json("GET", `/v1/jobs?status=${status}`);
    for (const j of jobs) await svc.json("POST", `/v1/jobs/${j.id}/cancel`);
  }
  // The 4 cores full for an hour, then one more job waits for one of them.
  const running = [];
  for (let i = 0; i < 4; i++) running.push(await svc.submit("hana", { cpu: 1, secs: 3600 }));
  await until("hana's jobs running", async () => {
    for (const r of running) if ((await svc.json("GET", `/v1/jobs/${r.id}`)).status !== "RUNNING") return false;
    return true;
  });
  const job = await svc.submit("ivan", { cpu: 1 });
  const v = await until("an estimate", async () => {
    const v = await svc.json("GET", `/v1/jobs/${job.id}`);
    return v.estimated_start ? v : null;
  });
  assert.equal(v.status, "QUEUED");
  assert.equal(v.position, 1);
  assert.equal(v.estimate_basis, "default");
  const page = await consoleAs(SUBMITTER, "#jobs?user=ivan");
  const cell = page.locator(`#jobs-table tr[data-job="${job.id}"] td.estimate`);
  await cell.filter({ hasText: "(#1)" }).waitFor();
  await page.click(`#jobs-table tr[data-job="${job.id}"] a`);
  await page.locator("#job-expected").waitFor();
  const last = await page.$$eval("#job-timeline li", (lis) => lis.map((li) => li.dataset.to));
  assert.deepEqual(last, ["QUEUED", "expected"]);
  assert.match(await page.textContent("#job-expected"), /expected to start.*position 1 among the waiting jobs/);
  assert.match(await page.textContent("#job-fields"), /the configured default/);
  await page.context().close();
  for (const j of [...running, job]) await svc.json("POST", `/v1/jobs/${j.id}/cancel`);
});

test("a queued job is cancelled from its page with a confirmation", async () => {
  await svc.json("PUT", "/v1/users/hana", {});
  await svc.json("POST", "/v1/users/hana/pause");
  const job = await svc.submit("hana");
  const page = await consoleAs(ADMIN, `#job/${job.id}`);
  await page.locator("#job-status").filter({ hasText: "QUEUED" }).waitFor();
  assert.match(await page.textContent("#job-fields"), /paused/i, "the pending reason says why it waits");
  await page.click("#job-cancel");
  await page.click("#confirm-yes");
  await page.locator("#job-status").filter({ hasText: "STOPPED" }).waitFor({ timeout: 5000 });
  assert.equal((await svc.json("GET", `/v1/jobs/${job.id}`)).status, "STOPPED");
  await page.context().close();
});

test("clusters show health, capacity, this service's use, others' use and free", async () => {
  const page = await consoleAs(ADMIN, "#clusters");
  const card = page.locator('article.cluster[data-cluster="fake"]');
  await card.waitFor();
  assert.match(await card.locator("h3").textContent(), /healthy/);
  const cpu = await card.locator('tr[data-resource="cpu"] td').allTextContents();
  assert.equal(cpu[0], "4");
  // The fake runs no watcher: the card says notifications are not known to arrive
  // and how often the cluster is polled instead (issue 49), as the API does.
  const n = card.locator("p.notifications");
  await n.waitFor();
  const api = (await svc.json("GET", "/v1/scheduler")).clusters.find((c) => c.name === "fake").notifications;
  assert.ok(["unproven", "missing"].includes(api.state), JSON.stringify(api));
  assert.match(await n.getAttribute("data-state"), /^(unproven|missing)$/);
  assert.match(await n.textContent(), /polled every 500 ms|polling every 500 ms/);
  await page.context().close();
});

test("a pool shows apart from the Ray clusters, and its admitted jobs with their pool, lease and stop", async () => {
  // Three jobs for the pool's two slots: two ADMITTED, one waits; the runner (this
  // test) reports one started.
  const jobs = [];
  for (const user of ["pam", "quin", "pam"]) jobs.push(await svc.submitPool(user));
  const inPool = async (status) => (await svc.json("GET", `/v1/jobs?status=${status}&pool=gw`)).jobs.map((j) => j.id);
  const admitted = await until("two pool jobs admitted", async () => {
    const ids = await inPool("ADMITTED");
    return ids.length === 2 && ids;
  });
  await svc.json("POST", `/v1/jobs/${admitted[0]}/started`, {});
  const waiting = admitted[1];

  // The clusters view: the pool in its own section, marked, with only the resource it
  // has and no "used by others"; its jobs counted.
  const page = await consoleAs(ADMIN, "#clusters");
  const pool = page.locator('#pools article.cluster[data-cluster="gw"][data-kind="pool"]');
  await pool.waitFor();
  assert.equal(await page.locator('#clusters article.cluster[data-cluster="gw"]').count(), 0, "the pool is not among the Ray clusters");
  assert.equal(await page.locator('#clusters article.cluster[data-cluster="fake"]').getAttribute("data-kind"), "ray");
  assert.match(await pool.locator("h3").textContent(), /gw\s*pool/);
  assert.deepEqual(await pool.locator("thead th").allTextContents(), ["resource", "capacity", "used by this service", "free"]);
  assert.deepEqual(await pool.locator("tbody tr").evaluateAll((trs) => trs.map((tr) => tr.dataset.resource)), ["custom.clusters"]);
  await until("the pool's slots shown all used", async () => JSON.stringify(await pool.locator('tr[data-resource="custom.clusters"] td').allTextContents()) === JSON.stringify(["2", "2", "0"]), 10000);
  await pool.locator(".admitted-count").filter({ hasText: /^1 ADMITTED$/ }).waitFor({ timeout: 10000 });
  await pool.locator(".running-count").filter({ hasText: /^1 RUNNING$/ }).waitFor({ timeout: 10000 });
  const api = (await svc.json("GET", "/v1/scheduler")).clusters.find((c) => c.name === "gw");
  assert.equal(api.kind, "pool");
  assert.deepEqual([api.admitted_jobs, api.running_jobs], [1, 1]);

  // Its ADMITTED count leads to those jobs, each with its pool.
  await pool.locator(".admitted-count").click();
  await until("the jobs view to list the pool's admitted job", async () => {
    const ids = await page.$$eval("#jobs-table tbody tr[data-job]", (trs) => trs.map((tr) => tr.dataset.job));
    return ids.length === 1 && ids[0] === waiting;
  });
  assert.equal(await page.inputValue("#q-pool"), "gw");
  assert.equal(await page.inputValue("#q-status"), "ADMITTED");
  assert.equal(await page.textContent(`#jobs-table tr[data-job="${waiting}"] td.pool`), "gw");
  assert.equal(await page.textContent(`#jobs-table tr[data-job="${waiting}"] .st`), "ADMITTED");
  assert.equal(await page.textContent(`#jobs-table tr[data-job="${waiting}"] td.resources`), "0 cpu · 1 clusters");
  // The search form finds every job of the pool (the waiting one too).
  await page.selectOption("#q-status", "");
  await page.fill("#q-pool", "gw");
  await page.press("#q-pool", "Enter");
  const all = jobs.map((j) => j.id).sort();
  await until("the search by pool to list all three jobs", async () => {
    const ids = await page.$$eval("#jobs-table tbody tr[data-job]", (trs) => trs.map((tr) => tr.dataset.job));
    return JSON.stringify(ids.sort()) === JSON.stringify(all);
  });
  const pools = await page.$$eval("#jobs-table tbody tr[data-job] td.pool", (tds) => tds.map((td) => td.textContent));
  assert.deepEqual(pools, ["gw", "gw", "gw"]);

  // The admitted job's page: its pool, its runner's lease, no stop asked; no call for
  // logs (Ray never has a pool job's).
  const logCalls = [];
  page.on("request", (r) => {
    if (/\/logs$/.test(new URL(r.url()).pathname)) logCalls.push(r.url());
  });
  await page.click(`#jobs-table tr[data-job="${waiting}"] a.mono`);
  await page.locator("#job-status").filter({ hasText: "ADMITTED" }).waitFor();
  assert.equal(await page.textContent("#job-pool"), "gw");
  const job = await svc.json("GET", `/v1/jobs/${waiting}`);
  assert.ok(job.lease_expires_at, JSON.stringify(job));
  assert.doesNotMatch(await page.textContent("#job-lease"), /^–/);
  assert.equal(await page.textContent("#job-stop-requested"), "no");
  assert.match(await page.textContent("#job-logs"), /runner has its logs/);
  // A cancel asks the runner: the page says a stop is requested while it is ADMITTED.
  const cancelled = await svc.json("POST", `/v1/jobs/${waiting}/cancel`);
  assert.equal(cancelled.stop_requested, true);
  await page.locator("#job-stop-requested").filter({ hasText: /^yes/ }).waitFor({ timeout: 10000 });
  assert.equal(await page.textContent("#job-status"), "ADMITTED");
  // The runner reports it stopped: it ends STOPPED and no runner holds it any more.
  await svc.json("POST", `/v1/jobs/${waiting}/finished`, { status: "STOPPED" });
  await page.locator("#job-status").filter({ hasText: "STOPPED" }).waitFor({ timeout: 10000 });
  assert.equal(await page.textContent("#job-stop-requested"), "no");
  assert.match(await page.textContent("#job-lease"), /^–/);
  assert.deepEqual(logCalls, []);
  await page.context().close();
});

test("shares over time are drawn from the service's samples", async () => {
  await until("a sample with active users", async () => (await svc.json("GET", "/v1/shares")).samples.some((s) => s.users.length > 0), 20000, 500);
  const page = await consoleAs(ADMIN, "#shares");
  await page.locator("#shares-chart svg.panel").first().waitFor();
  const label = await page.locator("#shares-chart svg.panel").first().getAttribute("aria-label");
  assert.match(label, /share now .*fair share/);
  await page.context().close();
});

test("usage is drawn as core-hours per day stacked by group, as GET /v1/usage says", async () => {
  // Earlier tests left jobs running on the fake cluster: they count up to now.
  const sum = (report) => {
    const m = new Map();
    for (const r of report.rows) m.set(r.key, (m.get(r.key) || 0) + r.core_seconds / 3600);
    return m;
  };
  const before = await until("some core-seconds held", async () => {
    const m = sum(await svc.json("GET", "/v1/usage?by=group&step=day"));
    return [...m.values()].some((v) => v > 0) && m;
  }, 20000, 500);
  const page = await consoleAs(SUBMITTER, "#usage");
  await page.locator("#usage-chart svg.usage rect").first().waitFor();
  const rows = await page.$$eval("#usage-table tbody tr[data-group]", (trs) =>
    trs.map((tr) => ({ group: tr.dataset.group, core: Number(tr.querySelector(".core-hours").textContent), ended: tr.querySelector(".ended").textContent })),
  );
  const after = sum(await svc.json("GET", "/v1/usage?by=group&step=day"));
  assert.deepEqual(rows.map((r) => r.group).sort(), [...after.keys()].sort());
  for (const r of rows) {
    // Held time only grows: what the page shows lies between the two readings (shown
    // to 3 significant digits: within 0.5 %).
    assert.ok(r.core >= (before.get(r.group) || 0) * 0.995 - 1e-9, `${r.group}: ${r.core} < ${before.get(r.group)}`);
    assert.ok(r.core <= after.get(r.group) * 1.005 + 1e-9, `${r.group}: ${r.core} > ${after.get(r.group)}`);
    assert.match(r.ended, /^\d+ \/ \d+ \/ \d+$/);
    if (r.core > 0) assert.ok((await page.locator(`#usage-chart rect[data-group="${r.group}"]`).count()) > 0, r.group);
  }
  assert.match(await page.locator("#usage-chart svg.usage").getAttribute("aria-label"), /core-hours per day by group/);
  await page.context().close();
});

test("the console works from the keyboard", async () => {
  const page = await consoleAs(ADMIN);
  await page.locator('tr[data-user="alice"]').waitFor();
  // Tab from the top of a fresh load reaches the navigation; Enter on "Clusters" opens it.
  await page.reload();
  await page.locator('tr[data-user="alice"]').waitFor();
  let guard = 0;
  while ((await page.evaluate(() => document.activeElement?.id)) !== "nav-clusters") {
    await page.keyboard.press("Tab");
    assert.ok(++guard < 20, "Tab never reached the Clusters link");
  }
  await page.keyboard.press("Enter");
  await page.locator("#view-clusters").waitFor({ state: "visible" });
  // Back to users; Tab reaches a Pause button; Enter opens the dialog, Escape closes it.
  await page.goto(`${svc.url}/ui/#users`);
  await page.locator('tr[data-user="alice"] button.pause').waitFor();
  // The 2 s refresh may rebuild the row between focusing and pressing: focus and
  // press again until the dialog opens (with a deadline).
  await until("Enter on a focused Pause to open the dialog", async () => {
    await page.locator('tr[data-user="alice"] button.pause').focus();
    await page.keyboard.press("Enter");
    try {
      await page.locator("#confirm").waitFor({ state: "visible", timeout: 1500 });
      return true;
    } catch {
      return false;
    }
  }, 20000, 0);
  await page.keyboard.press("Escape");
  await page.locator("#confirm").waitFor({ state: "hidden" });
  assert.equal((await svc.json("GET", "/v1/users/alice")).paused, false, "Escape did not pause");
  await page.context().close();
});

test("keyboard focus survives the 2 s refresh and comes back after a dialog", async () => {
  const page = await consoleAs(ADMIN);
  await page.locator('tr[data-user="alice"]').waitFor();
  const ids = await page.$$eval("#users-table tbody tr[data-user]", (trs) => trs.map((tr) => tr.dataset.user));
  assert.ok(ids.length >= 3, ids.join(" "));
  // A lower row's Edit button.
  const id = ids[ids.length - 2];
  const edit = `#users-table tr[data-user="${id}"] button.edit`;
  await page.locator(edit).focus();
  const focused = () =>
    page.evaluate(() => {
      const a = document.activeElement;
      return a ? a.tagName + ":" + (a.dataset.focusKey || "") : "";
    });
  assert.equal(await focused(), "BUTTON:edit\u0000" + id);
  // Wait until two refreshes have replaced the rows (the status line changes each time).
  const stamp = () => page.textContent("#status");
  for (let i = 0; i < 2; i++) {
    const before = await stamp();
    await until("a refresh", async () => (await stamp()) !== before && /Updated/.test(await stamp()), 6000, 50);
  }
  assert.equal(await focused(), "BUTTON:edit\u0000" + id, "focus stayed on the Edit button");
  // Tab goes on to the next control: the next row's user link.
  const next = await page.$eval(edit, (b) => b.closest("tr").nextElementSibling?.dataset.user);
  await page.keyboard.press("Tab");
  assert.equal(await focused(), "A:user\u0000" + next);
  // A dialog gives the focus back to the button that opened it; Cancel has it first.
  const pause = `#users-table tr[data-user="${id}"] button.pause`;
  const wasPaused = (await svc.json("GET", `/v1/users/${encodeURIComponent(id)}`)).paused;
  await page.locator(pause).focus();
  await page.keyboard.press("Enter");
  await page.locator("#confirm").waitFor({ state: "visible" });
  assert.equal(await page.evaluate(() => document.activeElement.id), "confirm-no", "Enter right after opening does not act");
  await page.keyboard.press("Enter");
  await page.locator("#confirm").waitFor({ state: "hidden" });
  assert.equal((await svc.json("GET", `/v1/users/${encodeURIComponent(id)}`)).paused, wasPaused, "Cancel did nothing");
  await until("focus back on the Pause button", async () => (await focused()) === "BUTTON:pause\u0000" + id, 3000, 50);
  await page.context().close();
});

test("long ids are cut to fit 1280 px, whole in the tooltip", async () => {
  const long = "u" + "x".repeat(127);
  const ext = "e".repeat(200);
  await svc.json("PUT", `/v1/users/${long}`, { weight: 1 });
  await svc.json("POST", `/v1/users/${long}/pause`);
  await svc.submit(long, { external_id: ext });
  const page = await consoleAs(ADMIN);
  const cell = page.locator(`#users-table tr[data-user="${long}"] th.user a`);
  await cell.waitFor();
  assert.equal(await cell.getAttribute("title"), long);
  const width = () => page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok((await width()) <= 1280, `users page ${await width()} px wide`);
  await page.goto(`${svc.url}/ui/#jobs?user=${long}`);
  await page.locator("#jobs-table tbody tr[data-job]").first().waitFor();
  assert.equal(await page.locator(`#jobs-table tbody span.id[title="${ext}"]`).count(), 1);
  assert.ok((await width()) <= 1280, `jobs page ${await width()} px wide`);
  const job = await page.getAttribute("#jobs-table tbody tr[data-job]", "data-job");
  await page.goto(`${svc.url}/ui/#job/${job}`);
  await page.locator("#job-status").waitFor();
  assert.ok((await width()) <= 1280, `job page ${await width()} px wide`);
  await page.context().close();
});

test("weights are decimal only: 0x10, 0b11 and 0o7 are refused naming the field", async () => {
  const page = await consoleAs(ADMIN);
  await page.locator('tr[data-user="carol"] button.edit').waitFor();
  const before = (await svc.json("GET", "/v1/users/carol")).weight;
  for (const bad of ["0x10", "0b11", "0o7", "Infinity", "1e"]) {
    await page.click('tr[data-user="carol"] button.edit');
    await page.locator("#confirm").waitFor({ state: "visible" });
    await page.fill("#f-weight", bad);
    await page.click("#confirm-yes");
    await page.locator("#confirm-error").filter({ hasText: "(weight)" }).waitFor();
    await page.click("#confirm-no");
    await page.locator("#confirm").waitFor({ state: "hidden" });
  }
  assert.equal((await svc.json("GET", "/v1/users/carol")).weight, before);
  // Decimal forms still work.
  await page.click('tr[data-user="carol"] button.edit');
  await page.fill("#f-weight", "2.5e0");
  await page.click("#confirm-yes");
  await page.locator("#confirm").waitFor({ state: "hidden" });
  assert.equal((await svc.json("GET", "/v1/users/carol")).weight, 2.5);
  await svc.json("PUT", "/v1/users/carol", { weight: before });
  await page.context().close();
});

test("a token refused while polling drops to no token and stops polling", async () => {
  const mine = [];
  const page = await consoleAs(ADMIN, "", mine);
  await page.locator('tr[data-user="alice"] button.pause:not([disabled])').waitFor();
  // As if the token were revoked: the next poll sends one the service does not know.
  let calls = 0;
  page.on("request", (r) => {
    if (new URL(r.url()).pathname.startsWith("/v1/")) calls++;
  });
  await page.evaluate(() => sessionStorage.setItem("fairshare.token", "revoked-token"));
  await page.locator("#role").filter({ hasText: "no token" }).waitFor({ timeout: 5000 });
  await page.locator('tr[data-user="alice"] button.pause[disabled]').waitFor();
  assert.equal(await page.evaluate(() => document.body.classList.contains("read-only")), true);
  const seen = calls;
  // Three poll periods: nothing more is asked.
  await new Promise((r) => setTimeout(r, 6500));
  assert.equal(calls, seen, "polling stopped");
  assert.ok(mine.length <= 2, mine.join("\n"));
  // A valid token brings it back.
  await page.fill("#token", ADMIN);
  await page.click("#token-save");
  await page.locator("#role").filter({ hasText: "admin" }).waitFor();
  await page.locator('tr[data-user="alice"] button.pause:not([disabled])').waitFor();
  await page.context().close();
});

test("a job page with an id that is not a UUID says no such job and asks nothing", async () => {
  const page = await openPage(browser, errors);
  const paths = [];
  page.on("request", (r) => paths.push(new URL(r.url()).pathname));
  await page.goto(`${svc.url}/ui/`);
  await page.fill("#token", ADMIN);
  await page.click("#token-save");
  await page.locator("#role").filter({ hasText: "admin" }).waitFor();
  await page.goto(`${svc.url}/ui/#job/../users`);
  await page.locator("#h-job").filter({ hasText: "No such job" }).waitFor();
  assert.ok(!paths.some((p) => p.startsWith("/v1/jobs/")), paths.join(" "));
  await page.context().close();
});

test("an unknown status in the URL is not sent to the API", async () => {
  const page = await consoleAs(ADMIN);
  const urls = [];
  page.on("request", (r) => urls.push(r.url()));
  await page.goto(`${svc.url}/ui/#jobs?status=BOGUS`);
  await page.locator("#jobs-table tbody tr").first().waitFor();
  await page.locator("#status").filter({ hasText: "Updated" }).waitFor();
  assert.ok(!urls.some((u) => /status=BOGUS/i.test(u)), urls.join(" "));
  await page.context().close();
});

test("groups show as a tree with share bars against fair shares, and pause from the page", async () => {
  await svc.json("PUT", "/v1/groups/lab", { weight: 1 });
  await svc.json("PUT", "/v1/groups/lab/qc", { weight: 3 });
  await svc.json("PUT", "/v1/groups/ops", {});
  await svc.json("PUT", "/v1/users/grace", { group: "lab/qc" });
  await svc.json("PUT", "/v1/users/ivan", { group: "ops" });
  await svc.submit("grace", { secs: 3600 });
  await svc.submit("ivan", { secs: 3600 });
  const page = await consoleAs(ADMIN, "#groups");
  await page.locator('#groups-tree li[data-group="lab"] li[data-group="lab/qc"]').waitFor();
  // Top-level groups are roots of the tree; a subgroup sits inside its parent.
  const roots = await page.$$eval("#groups-tree > li", (lis) => lis.map((li) => li.dataset.group));
  assert.deepEqual(roots, ["lab", "ops"]);
  const api = await svc.json("GET", "/v1/groups");
  for (const g of api) {
    const label = await page.getAttribute(`li[data-group="${g.path}"] > .group-row svg.bar`, "aria-label");
    assert.match(label, /^share [\d.]+% against fair share [\d.]+%$/);
    const text = await page.textContent(`li[data-group="${g.path}"] > .group-row .group-figures`);
    assert.match(text, new RegExp(`· ${g.running} running · ${g.queued} queued`));
  }
  assert.match(await page.textContent('li[data-group="lab/qc"] > .group-users'), /grace/);
  assert.equal(await page.textContent('li[data-group="lab/qc"] > .group-row .weight'), "w 3");

  // Pause a group from the page, with a confirmation; the API says so, and so does the row.
  await page.click('li[data-group="ops"] > .group-row button.pause');
  const dialog = page.locator("#confirm");
  await dialog.waitFor({ state: "visible" });
  assert.match(await page.textContent("#confirm-text"), /Pause group ops\?/);
  await page.click("#confirm-yes");
  await dialog.waitFor({ state: "hidden" });
  assert.equal((await svc.json("GET", "/v1/groups/ops")).paused, true);
  await page.locator('li[data-group="ops"] > .group-row .paused-cell').filter({ hasText: "paused" }).waitFor();
  await page.click('li[data-group="ops"] > .group-row button.pause');
  await dialog.waitFor({ state: "visible" });
  await page.click("#confirm-yes");
  await dialog.waitFor({ state: "hidden" });
  assert.equal((await svc.json("GET", "/v1/groups/ops")).paused, false);

  // A submitter sees the tree but cannot pause.
  const sub = await consoleAs(SUBMITTER, "#groups");
  await sub.locator('li[data-group="ops"]').waitFor();
  assert.equal(await sub.isDisabled('li[data-group="ops"] > .group-row button.pause'), true);
  await sub.context().close();
  await page.context().close();
});

test("no page of the console logged an error", async () => {
  const page = await consoleAs(ADMIN);
  for (const hash of ["#users", "#groups", "#clusters", "#jobs", "#shares"]) {
    await page.click(`a[href="${hash}"]`);
    await page.locator(`#view-${hash.slice(1)}`).waitFor({ state: "visible" });
    await page.locator("#status").filter({ hasText: "Updated" }).waitFor();
  }
  await page.context().close();
  assert.deepEqual(errors, []);
});
