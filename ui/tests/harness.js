// What the console's browser tests run against: the real service binary on
// 127.0.0.1 with a fresh SQLite file, two tokens (admin, submitter) and a pool `gw`
// of two cluster slots (the tests play its runner), a small fake
// Ray on 127.0.0.1 (the rules of scripts/chaos's fake: a job is PENDING until CPUs are
// free, then RUNNING for metadata.secs seconds, then SUCCEEDED; a stop ends it), and
// headless Chromium from Debian's package driven by playwright-core.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync, existsSync, openSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ADMIN = "console-admin-token";
export const SUBMITTER = "console-submitter-token";

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "../..");

/** Polls `f` until it returns a truthy value (returned) or `ms` pass (throws). */
export async function until(what, f, ms = 15000, every = 100) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const TERMINAL = new Set(["SUCCEEDED", "FAILED", "STOPPED"]);

/** A fake Ray dashboard (Jobs REST API and cluster_status) on 127.0.0.1. */
export class FakeRay {
  constructor(cpus = 4) {
    this.cpus = cpus;
    this.jobs = new Map(); // submission_id -> {status, stop, cpu, secs, endsAt}
    this.order = [];
    this.server = null;
    this.ticker = null;
  }

  used() {
    let u = 0;
    for (const j of this.jobs.values()) if (j.status === "RUNNING") u += j.cpu;
    return u;
  }

  tick() {
    const now = Date.now();
    for (const j of this.jobs.values()) {
      if (j.status === "RUNNING" && (j.stop || now >= j.endsAt)) j.status = j.stop ? "STOPPED" : "SUCCEEDED";
    }
    let used = this.used();
    for (const sid of this.order) {
      const j = this.jobs.get(sid);
      if (j.status !== "PENDING") continue;
      if (j.stop) j.status = "STOPPED";
      else if (used + j.cpu <= this.cpus + 1e-9) {
        j.status = "RUNNING";
        j.endsAt = now + j.secs * 1000;
        used += j.cpu;
      }
    }
  }

  async start() {
    this.server = http.createServer((req, res) => {
      let raw = "";
      req.on("data", (c) => (raw += c));
      req.on("end", () => this.handle(req, raw, res));
    });
    await new Promise((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = this.server.address().port;
    this.ticker = setInterval(() => this.tick(), 50);
    return this;
  }

  handle(req, raw, res) {
    const reply = (code, body) => {
      const data = typeof body === "string" ? body : JSON.stringify(body);
      res.writeHead(code, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
      res.end(data);
    };
    const p = req.url.split("?")[0];
    if (req.method === "GET") {
      if (p === "/api/cluster_status")
        return reply(200, {
          result: true,
          data: { clusterStatus: { loadMetricsReport: { usage: { CPU: [this.used(), this.cpus], memory: [0, 64e9] } } } },
        });
      if (p === "/api/jobs/")
        return reply(200, [...this.jobs.entries()].map(([s, j]) => ({ submission_id: s, status: j.status, message: "" })));
      if (p.startsWith("/api/jobs/")) {
        let sid = p.slice("/api/jobs/".length);
        const logs = sid.endsWith("/logs");
        if (logs) sid = sid.slice(0, -"/logs".length);
        const j = this.jobs.get(sid);
        if (!j) return reply(404, `Job ${sid} does not exist`);
        if (logs) return reply(200, { logs: `hello from ${sid}\nstatus ${j.status}\n` });
        return reply(200, { submission_id: sid, status: j.status });
      }
      return reply(404, "not found");
    }
    if (req.method === "POST") {
      if (p === "/api/jobs/") {
        let body;
        try {
          body = JSON.parse(raw || "{}");
        } catch {
          return reply(400, "bad json");
        }
        const sid = body.submission_id || "";
        if (this.jobs.has(sid))
          return reply(500, `ValueError: Job with submission_id ${sid} already exists. Please use a different submission_id.`);
        const meta = body.metadata || {};
        // How long it runs: metadata.secs, else the N of a `sleep N` entrypoint (as
        // `fairshare replay` sends), else an hour.
        const sleep = /^sleep ([0-9.]+)$/.exec(body.entrypoint || "");
        this.jobs.set(sid, {
          status: "PENDING",
          stop: false,
          cpu: Number(body.entrypoint_num_cpus || 0),
          secs: meta.secs !== undefined ? Number(meta.secs) : sleep ? Number(sleep[1]) : 3600,
          endsAt: 0,
        });
        this.order.push(sid);
        return reply(200, { job_id: sid, submission_id: sid });
      }
      if (p.endsWith("/stop")) {
        const sid = p.slice("/api/jobs/".length, -"/stop".length);
        const j = this.jobs.get(sid);
        if (!j) return reply(404, `Job ${sid} does not exist`);
        const live = !TERMINAL.has(j.status);
        j.stop = true;
        return reply(200, { stopped: live });
      }
    }
    return reply(404, "not found");
  }

  async stop() {
    clearInterval(this.ticker);
    this.server.closeAllConnections?.();
    await new Promise((r) => this.server.close(r));
  }
}

/** The service binary (FAIRSHARE_BIN, else target/debug/fairshare) on a free port. */
export class Service {
  constructor(rayPort) {
    this.rayPort = rayPort;
    this.dir = mkdtempSync(path.join(os.tmpdir(), "fairshare-console-"));
  }

  async start() {
    this.port = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    const config = path.join(this.dir, "fairshare.toml");
    writeFileSync(
      config,
      `[server]
bind = "127.0.0.1:${this.port}"
[database]
url = "sqlite://${this.dir}/fairshare.db?mode=rwc"
[scheduler]
tick = "1s"
[monitor]
pending_timeout = "600s"
# The fake runs no entrypoint, so no watcher tells the service a job started or
# ended: notifications are left on, as with a Ray whose job processes cannot reach
# the service, and the monitor polls every poll_interval (500 ms) because none
# arrives (DESIGN §5; the clusters view says so).
[[clusters]]
name = "fake"
address = "http://127.0.0.1:${this.rayPort}"
# A pool of two cluster slots that a runner outside the service runs (DESIGN §3
# "Admission"); the tests play the runner. A long lease: no admission lapses while
# the suite runs.
[[pools]]
name = "gw"
capacity = { clusters = 2 }
[admission]
lease = "600s"
# Estimated starts refreshed every second (DESIGN §2 "Estimates").
[estimates]
refresh = "1s"
[telemetry]
log_format = "json"
[[auth.tokens]]
name = "console-admin"
token = "${ADMIN}"
role = "admin"
[[auth.tokens]]
name = "console-viewer"
token = "${SUBMITTER}"
role = "submitter"
[secrets]
runtime_env_keys = ["KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio="]
`,
    );
    const bin = process.env.FAIRSHARE_BIN || path.join(root, "target/debug/fairshare");
    if (!existsSync(bin)) throw new Error(`no service binary at ${bin}: run cargo build first (or set FAIRSHARE_BIN)`);
    this.logPath = path.join(this.dir, "service.log");
    const log = openSync(this.logPath, "a");
    this.proc = spawn(bin, ["serve", "--config", config], { stdio: ["ignore", log, log], cwd: this.dir });
    this.exited = new Promise((r) => this.proc.on("exit", r));
    await until("the service to be ready", async () => (await fetch(this.url + "/readyz")).ok, 30000, 100);
    return this;
  }

  /** A call to the API as `token`: {status, body}. */
  async call(method, p, body, token = ADMIN) {
    const res = await fetch(this.url + p, {
      method,
      headers: { authorization: "Bearer " + token, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
  }

  async json(method, p, body, token = ADMIN) {
    const r = await this.call(method, p, body, token);
    if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  /** Submits a job of `user` that runs `secs` seconds in the fake Ray. */
  submit(user, { cpu = 1, secs = 3600, external_id } = {}) {
    return this.json("POST", "/v1/jobs", {
      user,
      entrypoint: `sleep ${secs}`,
      resources: { cpu },
      metadata: { secs: String(secs) },
      ...(external_id ? { external_id } : {}),
    });
  }

  /** Submits a job of `user` for pool `pool`: one cluster slot, no cores. */
  submitPool(user, pool = "gw") {
    return this.json("POST", "/v1/jobs", {
      user,
      entrypoint: "run on a cluster of its own",
      pool,
      resources: { cpu: 0, custom: { clusters: 1 } },
    });
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null) {
      this.proc.kill("SIGTERM");
      const killer = setTimeout(() => this.proc.kill("SIGKILL"), 10000);
      await this.exited;
      clearTimeout(killer);
    }
    if (!process.env.KEEP) rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Headless Chromium from Debian (CHROMIUM, else /usr/bin/chromium). */
export async function launchBrowser() {
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    // Root in CI: Chromium's sandbox needs an unprivileged user.
    args: ["--no-sandbox"],
  });
}

/** A new 1280x800 page that records console errors and page errors in `errors`. */
export async function openPage(browser, errors) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`${page.url()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => errors.push(`${page.url()}: ${e.message}`));
  return page;
}
