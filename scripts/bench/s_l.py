#!/usr/bin/env python3
"""Issue 10's / issue 43 §5's S/L scenario on the real binary and a wall-clock fake Ray.

A 4-CPU fake Ray (the failure suite's, scripts/chaos: jobs run for their metadata
`secs` in real time), the service with SQLite, `starvation_guard = "4s"`,
`usage_half_life = "0s"`. User S queues 40 jobs of 1 CPU (1.5 s), 1 s later user L one
job of 4 CPU (1 s). Prints when L was reserved and started (seconds after its submit)
and the dispatches after L's submit: S's jobs must go on being dispatched until the
guard trips (work-conserving), and L must start soon after.

    python3 scripts/bench/s_l.py [BINARY]   # default target/debug/fairshare
Everything listens on 127.0.0.1.
"""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from common import call, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
loader = importlib.machinery.SourceFileLoader("chaos", os.path.join(ROOT, "scripts", "chaos"))
spec = importlib.util.spec_from_loader("chaos", loader)
chaos = importlib.util.module_from_spec(spec)
loader.exec_module(chaos)
chaos.RAY_CPUS = 4.0


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "fairshare")
    ray = chaos.FakeRay(free_port())
    ray.up()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    d = tempfile.mkdtemp(prefix="fairshare-s-l-")
    cfg = os.path.join(d, "fairshare.toml")
    with open(cfg, "w") as f:
        f.write(f"""
[server]
bind = "127.0.0.1:{port}"
[database]
url = "sqlite://{d}/fairshare.db?mode=rwc"
[scheduler]
starvation_guard = "4s"
usage_half_life = "0s"
[[clusters]]
name = "fake"
address = "http://127.0.0.1:{ray.port}"
""")
    svc = subprocess.Popen([binary, "serve", "--config", cfg], stdout=open(os.path.join(d, "log"), "w"),
                           stderr=subprocess.STDOUT)

    try:
        deadline = time.time() + 30
        while True:
            try:
                v = call(base + "/v1/scheduler", timeout=5)
                if v["clusters"] and v["clusters"][0]["healthy"]:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit(f"the service was not ready; see {d}/log")
            time.sleep(0.1)
        for _ in range(40):
            call(base + "/v1/jobs", {"user": "s", "entrypoint": "sleep 1.5", "resources": {"cpu": 1},
                                      "metadata": {"u": "s", "secs": "1.5"}})
        time.sleep(1)
        submitted = time.time()
        lid = call(base + "/v1/jobs", {"user": "l", "entrypoint": "sleep 1", "resources": {"cpu": 4},
                                        "metadata": {"u": "l", "secs": "1"}})["id"]
        reserved = None
        while time.time() - submitted < 60:
            j = call(f"{base}/v1/jobs/{lid}", timeout=5)
            if j["status"] in ("RUNNING", "SUCCEEDED", "PENDING"):
                break
            if reserved is None and "reserved for this job" in (j.get("pending_reason") or ""):
                reserved = time.time() - submitted
            time.sleep(0.02)
        started = time.time() - submitted
        with ray.lock:
            after = sorted(t - submitted for t, _ in ray.accepted if t > submitted)
        sch = call(base + "/v1/scheduler", timeout=5)
        print(f"L reserved after {reserved:.2f} s, dispatched after {started:.2f} s (guard 4 s); "
              f"typical run time {sch.get('typical_runtime_seconds')}, guard in force "
              f"{sch.get('guard_in_force_seconds')} s")
        print("dispatches after L's submit (s):", " ".join(f"{t:.2f}" for t in after))
    finally:
        svc.terminate()
        svc.wait()
        ray.down()


if __name__ == "__main__":
    main()
