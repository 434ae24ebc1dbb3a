#!/usr/bin/env python3
"""The Ray edge (issue 32), measured on a real Ray head.

    python3 scripts/bench/edge.py ray [JOBS] [SECONDS] [ROUNDS]
    python3 scripts/bench/edge.py idle [JOBS] [SECONDS]

`ray`: a 2-CPU Ray head (scripts/ray-head, the quickstart's set-up), and in each round
JOBS jobs of `sleep SECONDS` at 1 CPU each, once straight into Ray's own queue (all
POSTed at once; Ray starts PENDING jobs as CPUs free) and once through fairshare
(3 users, POSTed to /v1/jobs at once), in alternating order; the makespan of each
(first submit to Ray's last end_time), their ratio, and from fairshare's /metrics the
finish -> next POST latency (fairshare_finish_to_dispatch_seconds) and the dashboard
requests per second. With FAIRSHARE_BASE set (another binary), it runs too, in turn.

`idle`: JOBS long jobs running on a counting fake dashboard (no Ray needed), and the
dashboard requests per second each binary sends while nothing changes, over SECONDS.

Must run inside the loopback-only namespace (scripts/bench-edge does that). Everything
listens on 127.0.0.1.
"""
import json, os, re, shutil, subprocess, sys, tempfile, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from common import free_port, call

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("FAIRSHARE_BIN") or os.path.join(
    ROOT, os.environ.get("CARGO_TARGET_DIR") or "target", "release", "fairshare")
BASE = os.environ.get("FAIRSHARE_BASE")


class Service:
    def __init__(self, binary, dashboard, name, d):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(d, f"{name}.toml")
        open(cfg, "w").write(f"""[server]
bind = "127.0.0.1:{self.port}"
[database]
url = "sqlite://{d}/{name}.db?mode=rwc"
[scheduler]
default_max_running_jobs = 1000
usage_half_life = "0s"
[[clusters]]
name = "ray"
address = "{dashboard}"
[telemetry]
level = "{os.environ.get('EDGE_LOG_LEVEL', 'warn')}"
""")
        self.log = open(os.path.join(d, f"{name}.log"), "w")
        self.proc = subprocess.Popen([binary, "serve", "--config", cfg],
                                     stdout=self.log, stderr=self.log)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/readyz", timeout=2)
                return
            except Exception:
                time.sleep(0.1)
        raise SystemExit(f"{name}: not ready")

    def metrics(self):
        text = call(self.url + "/metrics")
        out = {}
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
        return out

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def ray_jobs(dashboard):
    return {j["submission_id"]: j for j in call(dashboard + "/api/jobs/") if j.get("submission_id")}


def wait_all(dashboard, ids, timeout=1200):
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = ray_jobs(dashboard)
        done = [jobs[i] for i in ids if i in jobs and jobs[i]["status"] in ("SUCCEEDED", "FAILED", "STOPPED")]
        if len(done) == len(ids):
            bad = [j["submission_id"] for j in done if j["status"] != "SUCCEEDED"]
            if bad:
                raise SystemExit(f"jobs did not succeed: {bad[:5]}")
            return max(j["end_time"] for j in done) / 1000.0
        time.sleep(0.1)
    raise SystemExit("timed out")


def straight(dashboard, n, secs, tag):
    ids = [f"direct-{tag}-{i}" for i in range(n)]
    t0 = time.time()
    for sid in ids:
        call(dashboard + "/api/jobs/", {"entrypoint": f"sleep {secs}", "submission_id": sid,
                                         "entrypoint_num_cpus": 1})
    return wait_all(dashboard, ids) - t0


def through(svc, dashboard, n, secs):
    before = svc.metrics()
    t0 = time.time()
    ids = []
    for i in range(n):
        j = call(svc.url + "/v1/jobs", {"user": f"u{i % 3}", "entrypoint": f"sleep {secs}",
                                         "resources": {"cpu": 1}})
        ids.append(j["id"])
    makespan = wait_all(dashboard, ids) - t0
    after = svc.metrics()
    return makespan, before, after


def histogram_deltas(before, after, name):
    """Histogram `name`'s cumulative bucket counts over the interval, as sorted
    (upper bound, count) pairs."""
    buckets = []
    for k, v in after.items():
        m = re.match(re.escape(name) + r'_bucket\{le="([^"]+)"\}', k)
        if m:
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            buckets.append((le, v - before.get(k, 0.0)))
    return sorted(buckets)


def histogram_p(before, after, name, q):
    """The q-quantile (upper bucket bound) of histogram `name` over the interval."""
    buckets = histogram_deltas(before, after, name)
    total = buckets[-1][1] if buckets else 0
    if total == 0:
        return None, 0
    for le, c in buckets:
        if c >= q * total:
            return le, int(total)
    return float("inf"), int(total)


def histogram_counts(before, after, name):
    """Each bucket's own count of histogram `name` over the interval, as
    "<=bound: count" pairs for the buckets that have any."""
    out, prev = [], 0.0
    for le, c in histogram_deltas(before, after, name):
        if c - prev > 0:
            bound = "inf" if le == float("inf") else f"{le * 1000:g} ms"
            out.append(f"<={bound}: {int(c - prev)}")
        prev = c
    return ", ".join(out)


def ray_mode(n, secs, rounds):
    d = tempfile.mkdtemp(prefix="bench-edge-")
    head = os.path.join(d, "ray")
    subprocess.run([os.path.join(ROOT, "scripts/ray-head"), "start", head, "--cpus", "2"], check=True,
                   stdout=subprocess.DEVNULL)
    dashboard = open(os.path.join(head, "dashboard")).read().strip()
    services = {"fairshare": Service(BIN, dashboard, "new", d)}
    if BASE:
        services["base"] = Service(BASE, dashboard, "base", d)
    rows = []
    try:
        for r in range(rounds):
            order = ["ray"] + list(services)
            if r % 2:
                order.reverse()
            row = {}
            for what in order:
                if what == "ray":
                    row["ray"] = straight(dashboard, n, secs, r)
                else:
                    svc = services[what]
                    makespan, before, after = through(svc, dashboard, n, secs)
                    p99, count = histogram_p(before, after, "fairshare_finish_to_dispatch_seconds", 0.99)
                    reqs = after.get("fairshare_ray_dashboard_requests_total", 0) - before.get(
                        "fairshare_ray_dashboard_requests_total", 0)
                    row[what] = makespan
                    row[what + "_p99"] = p99
                    row[what + "_n"] = count
                    row[what + "_rps"] = reqs / makespan if reqs else None
                    row[what + "_hist"] = histogram_counts(
                        before, after, "fairshare_finish_to_dispatch_seconds")
                print(f"round {r + 1} {what}: {row[what]:.1f} s", flush=True)
            rows.append(row)
    finally:
        for s in services.values():
            s.stop()
        subprocess.run([os.path.join(ROOT, "scripts/ray-head"), "stop", head], stdout=subprocess.DEVNULL)
        if os.environ.get("EDGE_KEEP"):
            print(f"kept: {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    print(f"\n{n} x sleep {secs}, 1 CPU each, 2-CPU head; makespan in s (ratio to Ray's own queue)")
    for i, row in enumerate(rows):
        parts = [f"round {i + 1}: Ray {row['ray']:.1f}"]
        for what in services:
            p99 = row[what + "_p99"]
            extra = f", finish->POST p99 <= {p99 * 1000:.0f} ms of {row[what + '_n']}" if p99 is not None else ""
            rps = row[what + "_rps"]
            extra += f", {rps:.2f} dashboard req/s" if rps is not None else ""
            parts.append(f"{what} {row[what]:.1f} ({row[what] / row['ray']:.3f}{extra})")
        print("; ".join(parts))
        for what in services:
            print(f"  {what} finish->POST by bucket: {row[what + '_hist']}")
    for what in services:
        ratios = sorted(row[what] / row["ray"] for row in rows)
        print(f"{what}: median ratio {ratios[len(ratios) // 2]:.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f})")


def notify(url):
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=10).read()
    except Exception as e:  # the bench says so instead of counting a silent fallback
        print(f"watcher hint failed: {e}", file=sys.stderr)


class CountingRay:
    """A dashboard that keeps every submitted job RUNNING and counts requests."""

    def __init__(self):
        self.port = free_port()
        self.count = 0
        self.paths = {}
        self.jobs = {}
        self.lock = threading.Lock()
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, body, status=200):
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                with fake.lock:
                    fake.count += 1
                    fake.paths[self.path.split("?")[0].rstrip("/").rsplit("/", 1)[0] if self.path.startswith("/api/jobs/") and len(self.path) > 11 else self.path.split("?")[0]] = fake.paths.get(self.path.split("?")[0], 0) + 1
                    jobs = list(fake.jobs)
                p = self.path.split("?")[0]
                if p == "/api/cluster_status":
                    used = 0.01 * len(jobs)
                    return self.reply({"result": True, "data": {"clusterStatus": {"loadMetricsReport": {
                        "usage": {"CPU": [used, 1000.0], "memory": [0, 8e9]}}}}})
                if p == "/api/jobs/":
                    return self.reply([{"submission_id": s, "status": "RUNNING", "job_id": None} for s in jobs])
                if p.startswith("/api/v0/"):
                    rows = [{"name": f"_ray_internal_job_actor_{s}", "job_id": "01000000", "state": "ALIVE",
                             "required_resources": {"CPU": 0.01}} for s in jobs] if "actors" in p else []
                    return self.reply({"result": True, "data": {"result": {"total": len(rows), "result": rows}}})
                if p.startswith("/api/jobs/"):
                    sid = p[len("/api/jobs/"):]
                    if sid in jobs:
                        return self.reply({"submission_id": sid, "status": "RUNNING"})
                    return self.reply({}, 404)
                return self.reply({}, 404)

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with fake.lock:
                    fake.count += 1
                    if self.path.startswith("/api/jobs/") and self.path.endswith("/stop"):
                        return self.reply({"stopped": True})
                    sid = body.get("submission_id")
                    fake.jobs[sid] = True
                self.reply({"job_id": sid, "submission_id": sid})
                # As the job's watcher does once Ray starts it (ray::notify): POST the
                # signed `started` URL its wrapped entrypoint carries.
                m = re.search(r"'(http://[^']*/started\?sig=[^']*)'", body.get("entrypoint") or "")
                if m:
                    threading.Thread(target=notify, args=(m.group(1),), daemon=True).start()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def idle_mode(n, secs):
    binaries = [("fairshare", BIN)] + ([("base", BASE)] if BASE else [])
    for name, binary in binaries:
        fake = CountingRay()
        d = tempfile.mkdtemp(prefix="bench-edge-idle-")
        svc = Service(binary, f"http://127.0.0.1:{fake.port}", name, d)
        try:
            for i in range(n):
                call(svc.url + "/v1/jobs", {"user": f"u{i % 3}", "entrypoint": "sleep 3600",
                                             "resources": {"cpu": 0.01}})
            deadline = time.time() + 60
            while len(fake.jobs) < n and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(6)  # past the first polls after the last start
            c0, t0 = fake.count, time.time()
            time.sleep(secs)
            rate = (fake.count - c0) / (time.time() - t0)
            print(f"{name}: {len(fake.jobs)} jobs running, {rate:.2f} dashboard requests/s over {secs} s")
            if os.environ.get("BENCH_EDGE_PATHS"):
                print(fake.paths)
        finally:
            svc.stop()
            fake.server.shutdown()
            shutil.rmtree(d, ignore_errors=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "ray"
    args = [int(a) for a in sys.argv[2:]]
    if mode == "ray":
        n, secs, rounds = (args + [30, 1, 3][len(args):])[:3]
        ray_mode(n, secs, rounds)
    elif mode == "idle":
        n, secs = (args + [100, 30][len(args):])[:2]
        idle_mode(n, secs)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
