#!/usr/bin/env python3
"""One client's POST /v1/jobs latency (issue 11): starts the service on a database that
is already filled (scripts/bench/scale.py's fill, or any), waits until it is ready and
leads (on PostgreSQL a follower hands each new job to the leader with a NOTIFY, which
is not the figure), then sends N submits for user u2 one after the other on one
kept-alive connection and prints the p50, p90 and minimum as the client saw them, and
the service's own mean time per submit (fairshare_http_request_duration_seconds) and
per intake commit (fairshare_intake_commit_seconds).

    python3 scripts/bench/one_client.py BIN DATABASE_URL [N=500]

Runs builds one after the other on the same database to compare them (each run adds
N jobs). Everything listens on 127.0.0.1; the service is stopped however this ends.
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from common import free_port


def metrics(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def value(text, prefix):
    return float(next(l.split()[-1] for l in text.splitlines() if l.startswith(prefix)))


def main():
    binary, url = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    d = tempfile.mkdtemp()
    port, dead = free_port(), free_port()
    cfg = os.path.join(d, "c.toml")
    with open(cfg, "w") as f:
        f.write(f"""[server]
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
    proc = subprocess.Popen([binary, "serve", "--config", cfg],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while True:
            try:
                text = metrics(port)
                if any(l.startswith("fairshare_leader{") and l.endswith(" 1") for l in text.splitlines()) \
                        and urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10).status == 200:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.time() > deadline:
                sys.exit("the service did not become ready and the leader within 300 s")
            time.sleep(0.1)
        time.sleep(2)  # the first cycles after the start
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        run = uuid.uuid4().hex[:8]  # keys new to this database: not idempotent retries
        took = []
        for i in range(n):
            body = json.dumps({"user": "u2", "entrypoint": "sleep 1", "external_id": f"one-{run}-{i}"})
            t = time.perf_counter()
            conn.request("POST", "/v1/jobs", body, {"content-type": "application/json"})
            r = conn.getresponse()
            r.read()
            took.append(time.perf_counter() - t)
            if r.status != 201:
                sys.exit(f"POST /v1/jobs answered {r.status}, not 201 (a new job)")
        text = metrics(port)
    finally:
        proc.terminate()
        proc.wait()
    http_lines = [l for l in text.splitlines()
                  if l.startswith("fairshare_http_request_duration_seconds_")
                  and 'method="POST"' in l and 'route="/v1/jobs"' in l]
    http_mean = float("nan")
    if http_lines:
        s = value("\n".join(http_lines), "fairshare_http_request_duration_seconds_sum")
        c = value("\n".join(http_lines), "fairshare_http_request_duration_seconds_count")
        http_mean = s / c * 1000
    commit = value(text, "fairshare_intake_commit_seconds_sum") / value(text, "fairshare_intake_commit_seconds_count") * 1000
    took.sort()
    print(f"{os.path.basename(binary)}: one client, {n} submits: p50 {took[n // 2] * 1000:.3f} ms, "
          f"p90 {took[n * 9 // 10] * 1000:.3f} ms, min {took[0] * 1000:.3f} ms; "
          f"in the service {http_mean:.3f} ms per submit, {commit:.3f} ms per intake commit")


if __name__ == "__main__":
    main()
