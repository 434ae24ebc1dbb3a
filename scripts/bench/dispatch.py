#!/usr/bin/env python3
"""Finish -> next dispatch (issue 11): the release service on SQLite (or PostgreSQL)
against the fake Ray of scripts/chaos (6 CPUs; a job is PENDING until CPUs are free,
then RUNNING for the seconds its metadata asks, then SUCCEEDED). JOBS one-CPU jobs of
4 users are queued at once, so every finish the monitor sees frees capacity that the
next cycle hands to a queued job. Prints the histogram `fairshare_finish_to_dispatch_
seconds` from /metrics (from the monitor seeing a finish to the POST to Ray of the job
its capacity went to) as bucket counts and p50/p99 read from the buckets.

    python3 scripts/bench/dispatch.py [JOBS] [sqlite|postgres]

Everything listens on 127.0.0.1.
"""
import importlib.machinery, importlib.util, json, os, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# cargo builds into $CARGO_TARGET_DIR when it is set (relative to the repository root,
# where scripts/bench-dispatch runs cargo), else into target/.
BIN = os.environ.get("FAIRSHARE_BIN") or os.path.join(
    ROOT, os.environ.get("CARGO_TARGET_DIR") or "target", "release", "fairshare")
PG = os.environ.get("FAIRSHARE_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")

loader = importlib.machinery.SourceFileLoader("chaos", os.path.join(ROOT, "scripts/chaos"))
spec = importlib.util.spec_from_loader("chaos", loader)
chaos = importlib.util.module_from_spec(spec)
loader.exec_module(chaos)


def call(base, path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def main():
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    backend = sys.argv[2] if len(sys.argv) > 2 else "sqlite"
    ray = chaos.FakeRay(chaos.free_port())
    ray.up()
    with tempfile.TemporaryDirectory() as d:
        db = f"fairshare_dispatch_{os.getpid()}"
        if backend == "sqlite":
            url = f"sqlite://{d}/d.db?mode=rwc"
        else:
            subprocess.run(["psql", "-q", f"{PG}/postgres", "-c", f"create database {db}"], check=True)
            url = f"{PG}/{db}"
        port = chaos.free_port()
        cfg = os.path.join(d, "c.toml")
        open(cfg, "w").write(f"""[server]
bind = "127.0.0.1:{port}"
[database]
url = "{url}"
[scheduler]
default_max_running_jobs = 100
[monitor]
poll_interval = "100ms"
usage_report_lag = "0s"
pending_timeout = "600s"
[[clusters]]
name = "fake"
address = "http://127.0.0.1:{ray.port}"
# The fake Ray runs no entrypoint, so no watcher reports a job's end: poll for it.
[notify]
enabled = false
[telemetry]
level = "warn"
""")
        proc = subprocess.Popen([BIN, "serve", "--config", cfg],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    call(base, "/readyz"); break
                except Exception:
                    time.sleep(0.05)
            for i in range(jobs):
                u = f"u{i % 4}"
                call(base, "/v1/jobs", {"user": u, "entrypoint": "sleep 0.2",
                                        "metadata": {"u": u, "secs": "0.2"}})
            deadline = time.time() + 30 + jobs * 0.2
            while time.time() < deadline:
                with ray.lock:
                    done = sum(1 for j in ray.jobs.values() if j["status"] == "SUCCEEDED")
                if done >= jobs:
                    break
                time.sleep(0.2)
            metrics = call(base, "/metrics")
        finally:
            proc.terminate(); proc.wait()
            ray.down()
            if backend != "sqlite":
                subprocess.run(["psql", "-q", f"{PG}/postgres", "-c", f"drop database if exists {db}"])
    buckets = []
    for line in metrics.splitlines():
        if line.startswith("fairshare_finish_to_dispatch_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0
    def quantile(q):
        for le, n in buckets:
            if n >= q * total:
                return le
        return float("nan")
    print(f"{backend}: {done} of {jobs} jobs succeeded; finish -> next dispatch, {total:.0f} observations")
    prev = 0
    for le, n in buckets:
        print(f"  <= {le * 1000:g} ms: {n - prev:.0f}")
        prev = n
    print(f"  p50 <= {quantile(0.5) * 1000:g} ms, p99 <= {quantile(0.99) * 1000:g} ms (bucket bounds)")


if __name__ == "__main__":
    main()
