#!/usr/bin/env python3
"""Scale benchmark (issue 11): a database holding N QUEUED jobs of U users, then the
release service started on it. Prints time to /healthz, to /readyz, resident memory
against an empty service, scheduling cycle time, and API latencies (p50 of repeated
calls). Everything listens on 127.0.0.1.

The cluster is a stand-in for Ray that reports 64 CPUs, all used by another tenant, and
no jobs: it is healthy, so every cycle runs the policy, and full, so nothing
dispatches. SCALE_CLUSTER=none uses a closed port instead (no healthy cluster: the
cycle only says so). After the service, one pass of the scheduler fairshare replaces
(scripts/bench/old_loop.py: the gateway's queries) runs on the same database, for the
ratio.

    scripts/bench-scale 1000000 1000            # SQLite (the default)
    scripts/bench-scale 1000000 1000 postgres   # PostgreSQL at 127.0.0.1:5432
"""
import http.client, json, os, sqlite3, statistics, subprocess, sys, tempfile, threading, time, urllib.request, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import datetime, timedelta, timezone
from common import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# cargo builds into $CARGO_TARGET_DIR when it is set (relative to the repository root,
# where scripts/bench-scale runs cargo), else into target/.
BIN = os.environ.get("FAIRSHARE_BIN") or os.path.join(
    ROOT, os.environ.get("CARGO_TARGET_DIR") or "target", "release", "fairshare")
PG = os.environ.get("FAIRSHARE_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")


class FullRay(BaseHTTPRequestHandler):
    """Ray's two polled routes: 64 CPUs all in use, no jobs of ours."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        p = self.path.split("?")[0]
        if p == "/api/cluster_status":
            body = {"result": True, "data": {"clusterStatus": {"loadMetricsReport": {
                "usage": {"CPU": [64.0, 64.0], "memory": [0, 64e9]}}}}}
        elif p == "/api/jobs/":
            body = []
        else:
            self.send_response(404); self.send_header("content-length", "0"); self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def ray_port():
    if os.environ.get("SCALE_CLUSTER", "full") == "none":
        return free_port()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FullRay)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def migrate(url, d):
    cfg = os.path.join(d, "m.toml")
    open(cfg, "w").write(f'[database]\nurl = "{url}"\n')
    subprocess.run([BIN, "migrate", "--config", cfg], check=True, capture_output=True)


def fill_sqlite(path, n, users):
    db = sqlite3.connect(path)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ts = lambda i: (t0 + timedelta(microseconds=i)).isoformat(timespec="microseconds")
    db.executemany(
        "insert into users (id, weight, paused, usage, usage_at, created_at, updated_at) values (?,1,0,0,?,?,?)",
        [(f"u{u}", ts(0), ts(0), ts(0)) for u in range(users)])
    batch = []
    for i in range(n):
        batch.append((uuid.uuid4().bytes, f"u{i % users}", "QUEUED", 0, "sleep 1", 1.0, 0.0, 0, ts(i), 1))
        if len(batch) == 100_000:
            db.executemany("insert into jobs (id, user_id, status, priority, entrypoint, cpu, gpu, memory_bytes, submitted_at, attempt) values (?,?,?,?,?,?,?,?,?,?)", batch)
            batch.clear()
    if batch:
        db.executemany("insert into jobs (id, user_id, status, priority, entrypoint, cpu, gpu, memory_bytes, submitted_at, attempt) values (?,?,?,?,?,?,?,?,?,?)", batch)
    db.commit(); db.close()


def fill_postgres(url, n, users):
    sql = f"""
insert into users (id, weight, paused, usage, usage_at, created_at, updated_at)
  select 'u' || u, 1, false, 0, now(), now(), now() from generate_series(0, {users} - 1) u;
insert into jobs (id, user_id, status, priority, entrypoint, cpu, gpu, memory_bytes, submitted_at, attempt)
  select gen_random_uuid(), 'u' || (i % {users}), 'QUEUED', 0, 'sleep 1', 1, 0, 0,
         timestamptz '2026-01-01' + i * interval '1 microsecond', 1
  from generate_series(0, {n} - 1) i;
analyze;"""
    subprocess.run(["psql", "-q", url, "-c", sql], check=True, capture_output=True)


def get(url, method="GET", body=None):
    req = urllib.request.Request(url, method=method, data=body,
                                 headers={"content-type": "application/json"} if body else {})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read(); code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    except (urllib.error.URLError, ConnectionError):
        code = None
    return code, time.perf_counter() - t


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start(url, d):
    port, dead = free_port(), ray_port()
    cfg = os.path.join(d, f"c{port}.toml")
    open(cfg, "w").write(f"""[server]
bind = "127.0.0.1:{port}"
[database]
url = "{url}"
[scheduler]
default_max_queued_jobs = 10000000
[[clusters]]
name = "none"
address = "http://127.0.0.1:{dead}"
[telemetry]
level = "warn"
""")
    t0 = time.perf_counter()
    proc = subprocess.Popen([BIN, "serve", "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    healthz = readyz = None
    while readyz is None and time.perf_counter() - t0 < 300:
        if healthz is None and get(base + "/healthz")[0] == 200:
            healthz = time.perf_counter() - t0
        if healthz is not None and get(base + "/readyz")[0] == 200:
            readyz = time.perf_counter() - t0
        time.sleep(0.005)
    return proc, base, healthz, readyz


def p50(f, n=21):
    return statistics.median(f() for _ in range(n)) * 1000


def main():
    n, users = int(sys.argv[1]), int(sys.argv[2])
    backend = sys.argv[3] if len(sys.argv) > 3 else "sqlite"
    with tempfile.TemporaryDirectory() as d:
        dbname = f"fairshare_scale_{os.getpid()}"
        keep = os.environ.get("SCALE_DB")  # SQLite: fill this file once, reuse it after
        if backend == "sqlite":
            path = keep or f"{d}/scale.db"
            url = f"sqlite://{path}?mode=rwc"
            empty_url = f"sqlite://{d}/empty.db?mode=rwc"
        else:
            subprocess.run(["psql", "-q", f"{PG}/postgres", "-c", f"create database {dbname}"], check=True)
            subprocess.run(["psql", "-q", f"{PG}/postgres", "-c", f"create database {dbname}_e"], check=True)
            url, empty_url = f"{PG}/{dbname}", f"{PG}/{dbname}_e"
        try:
            reuse = backend == "sqlite" and keep and os.path.exists(keep)
            migrate(url, d); migrate(empty_url, d)
            t = time.perf_counter()
            if reuse:
                print(f"reusing {keep}", flush=True)
            elif backend == "sqlite":
                fill_sqlite(path, n, users)
            else:
                fill_postgres(url, n, users)
            print(f"filled {n} queued jobs of {users} users in {time.perf_counter() - t:.1f} s ({backend})", flush=True)
            proc, base, _, _ = start(empty_url, d)
            time.sleep(1)
            empty_rss = rss_kib(proc.pid); proc.terminate(); proc.wait()
            proc, base, healthz, readyz = start(url, d)
            t_ready = time.perf_counter()
            try:
                time.sleep(1)  # let the first cycles run
                rss = rss_kib(proc.pid)
                users_ms = p50(lambda: get(base + "/v1/users")[1])
                pause_ms = p50(lambda: get(base + "/v1/users/u1/pause", "POST", b"{}")[1])
                get(base + "/v1/users/u1/resume", "POST", b"{}")
                i = [0]
                # Keys new to this database: a reused SCALE_DB holds the previous run's,
                # and a repeated key is an idempotent retry (200 with the stored job and
                # its queue position counted), not the new job this row measures.
                run = uuid.uuid4().hex[:8]
                def submit():
                    i[0] += 1
                    body = json.dumps({"user": "u2", "entrypoint": "sleep 1", "external_id": f"{run}-{i[0]}"}).encode()
                    code, took = get(base + "/v1/jobs", "POST", body)
                    assert code == 201, f"POST /v1/jobs answered {code}, not 201 (a new job)"
                    return took
                submit_ms = p50(submit, 101)
                # The same on one kept-alive connection, as a gateway's HTTP client
                # (connection pool) sends them: no TCP handshake per request.
                host, port = base.split("//")[1].split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                def submit_keepalive():
                    i[0] += 1
                    body = json.dumps({"user": "u2", "entrypoint": "sleep 1", "external_id": f"{run}-{i[0]}"})
                    t = time.perf_counter()
                    conn.request("POST", "/v1/jobs", body, {"content-type": "application/json"})
                    r = conn.getresponse(); r.read()
                    took = time.perf_counter() - t
                    assert r.status == 201, f"POST /v1/jobs answered {r.status}, not 201 (a new job)"
                    return took
                keepalive_ms = p50(submit_keepalive, 101)
                conn.close()
                sched = json.loads(urllib.request.urlopen(base + "/v1/scheduler").read())
                metrics = urllib.request.urlopen(base + "/metrics").read().decode()
                val = lambda name: float(next(l.split()[-1] for l in metrics.splitlines() if l.startswith(name)))
                cycles = val("fairshare_cycle_duration_seconds_count")
                cycle_ms = val("fairshare_cycle_duration_seconds_sum") / max(cycles, 1) * 1000
                # Resident memory once start-up's transient allocations are returned
                # (the allocator gives freed pages back after a delay): the lowest of
                # samples over a few seconds, at least 10 s after /readyz.
                while time.perf_counter() - t_ready < 10:
                    time.sleep(0.2)
                samples = []
                for _ in range(10):
                    time.sleep(0.3)
                    samples.append(rss_kib(proc.pid))
                settled = min(samples)
            finally:
                proc.terminate(); proc.wait()
            old_loop = os.path.join(os.path.dirname(os.path.abspath(__file__)), "old_loop.py")
            subprocess.run([sys.executable, old_loop, backend,
                            path if backend == "sqlite" else url, "3"], check=False)
            per_user = n // users
            print(f"/healthz after {healthz:.3f} s; /readyz after {readyz:.3f} s; queued {sched['queued_jobs']}")
            print(f"RSS {rss / 1024:.0f} MiB 1 s after /readyz, empty service {empty_rss / 1024:.0f} MiB: "
                  f"{(rss - empty_rss) / 1024:.0f} MiB above, {(rss - empty_rss) * 1024 / max(n, 1):.0f} B per queued job; "
                  f"settled (10 s on) {settled / 1024:.0f} MiB: {(settled - empty_rss) / 1024:.0f} MiB above, "
                  f"{(settled - empty_rss) * 1024 / max(n, 1):.0f} B per queued job")
            print(f"cycle (mean of {cycles:.0f}): {cycle_ms:.2f} ms; last {sched['last_cycle']['duration_seconds'] * 1000 if sched['last_cycle'] else float('nan'):.2f} ms")
            print(f"GET /v1/users p50 {users_ms:.2f} ms; POST pause p50 {pause_ms:.2f} ms; "
                  f"POST /v1/jobs p50 (one client, {per_user} queued for the user) {submit_ms:.2f} ms "
                  f"(a new connection each), {keepalive_ms:.2f} ms (one kept-alive connection)")
        finally:
            if backend != "sqlite":
                for db in (dbname, dbname + "_e"):
                    subprocess.run(["psql", "-q", f"{PG}/postgres", "-c", f"drop database if exists {db}"])


if __name__ == "__main__":
    main()
