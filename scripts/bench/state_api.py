#!/usr/bin/env python3
"""The cost of Ray's State API readings the monitor takes each poll (issue 32).

    python3 scripts/bench/state_api.py DASHBOARD [N ...]     default N: 100 1000

For each N: one job on the head whose driver keeps N actor tasks RUNNING (an async
actor with N concurrent calls: one worker process, so that 1,000 running tasks fit on a
2-CPU head); then the two requests `ray::state` sends (`/api/v0/tasks` and
`/api/v0/actors`, state RUNNING/ALIVE, detail, limit 10,000) timed 20 times each, with
the body size. Run inside the loopback-only namespace (scripts/bench-state).
"""
import json, statistics, sys, time, urllib.parse, urllib.request

DRIVER = """
import asyncio, ray, time
ray.init()
@ray.remote(num_cpus=0.5, max_concurrency=20000)
class Hold:
    async def hold(self):
        await asyncio.sleep(3600)
h = Hold.remote()
refs = [h.hold.remote() for _ in range({n})]
time.sleep(3600)
"""


def call(url, body=None, method=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def state_url(dash, what, state):
    q = urllib.parse.urlencode({"filter_keys": "state", "filter_predicates": "=",
                                "filter_values": state, "detail": "1", "limit": "10000"})
    return f"{dash}/api/v0/{what}?{q}"


def running_tasks(dash):
    raw = call(state_url(dash, "tasks", "RUNNING"))
    return json.loads(raw)["data"]["result"]["total"]


def main():
    dash = sys.argv[1].rstrip("/")
    ns = [int(a) for a in sys.argv[2:]] or [100, 1000]
    print("| running tasks | request | median ms | p95 ms | body bytes |")
    print("|---|---|---|---|---|")
    for n in ns:
        sid = f"state-bench-{n}-{int(time.time())}"
        call(f"{dash}/api/jobs/", {"entrypoint": f"python -c '{DRIVER.format(n=n)}'",
                                    "submission_id": sid})
        deadline = time.time() + 300
        while running_tasks(dash) < n:
            if time.time() > deadline:
                raise SystemExit(f"{n} tasks not RUNNING within 300 s")
            time.sleep(1)
        for what, state in (("tasks", "RUNNING"), ("actors", "ALIVE")):
            times, size = [], 0
            for _ in range(20):
                t0 = time.perf_counter()
                size = len(call(state_url(dash, what, state)))
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            print(f"| {n} | `GET /api/v0/{what}` | {statistics.median(times):.1f} | "
                  f"{times[int(len(times) * 0.95) - 1]:.1f} | {size:,} |", flush=True)
        call(f"{dash}/api/jobs/{sid}/stop", {}, method="POST")
        deadline = time.time() + 120
        while running_tasks(dash) > 0 and time.time() < deadline:
            time.sleep(1)


if __name__ == "__main__":
    main()
