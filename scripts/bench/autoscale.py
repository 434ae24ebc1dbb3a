#!/usr/bin/env python3
"""Autoscaling Ray clusters (issue 44), measured with Ray's own autoscaler and its fake
multi-node provider (scripts/ray-autoscaling-head).

    python3 scripts/bench/autoscale.py bench [ROUNDS] [--head-cpus N]   (scripts/bench-autoscale)
    python3 scripts/bench/autoscale.py probe OUTDIR [--head-cpus N] [--v2]
    python3 scripts/bench/autoscale.py probe-stop [--head-cpus N]

The scenario: a head of --head-cpus CPUs (default 1), one worker type `cpu-2` of 2 CPUs,
min 0, max 2, idle_timeout_minutes 0.2, AUTOSCALER_UPDATE_INTERVAL_S=1; JOBS (4) jobs
of `sleep SECS` (20) at 1 CPU each, all submitted at once.

`bench`: each round starts a fresh cluster (so that every run starts with no worker),
runs the scenario once per mode and stops it; the modes are
  ray        straight into Ray's own queue (POST DASHBOARD/api/jobs/)
  fairshare  through the fairshare service pointed at the cluster (POST /v1/jobs, one
             user), when its binary exists (FAIRSHARE_BIN, else target/release/fairshare)
and prints per mode the makespan (first submit to Ray's last end_time), the node
timeline (when the autoscaler asked for a worker, when each was ALIVE, when each
was removed after the queue emptied), when each job was seen RUNNING (polled every
0.5 s) and Ray's end times, all in seconds from the first submit, then the ratio
fairshare / ray. Modes are alternated between rounds; each mode gets its own cluster.
BENCH_MODES=ray limits the modes; BENCH_JOBS / BENCH_SECS change the scenario; a run
not done after BENCH_TIMEOUT s (300) is reported with where each job is (Ray's status,
fairshare's status and pending_reason), e.g. a 0-CPU head through fairshare today.

`probe`: one cluster; records what Ray reports (GET /api/cluster_status, its ?format=1
text = `ray status`, /api/v0/nodes, the jobs) at every change of the autoscaler's view
into OUTDIR/NN-<phase>.json: idle, jobs pending with nodes launching, nodes up, nodes
idle-terminated, then a job whose entrypoint resources no node type has (infeasible;
the head runs with RAY_JOB_START_TIMEOUT_SECONDS=30 to show how it ends), and at the
end GET /api/v0/cluster_events into OUTDIR/cluster_events.json. --v2: Ray's autoscaler
v2 (KubeRay's default) instead of v1 (`ray start`'s default).

`probe-stop`: POST /api/jobs/{id}/stop to a job Ray holds PENDING while a node it
needs is being added, and to one no node type can hold; prints what follows.

Must run inside the loopback-only namespace (scripts/bench-autoscale does that).
"""
import json, os, shutil, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request
from common import free_port, call

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER = os.path.join(ROOT, "scripts", "ray-autoscaling-head")
STOP_DRIVERS = os.path.join(ROOT, "scripts", "stop-ray-drivers")
BIN = os.environ.get("FAIRSHARE_BIN") or os.path.join(
    ROOT, os.environ.get("CARGO_TARGET_DIR") or "target", "release", "fairshare")
JOBS = int(os.environ.get("BENCH_JOBS", "4"))
SECS = int(os.environ.get("BENCH_SECS", "20"))
TIMEOUT = int(os.environ.get("BENCH_TIMEOUT", "300"))  # a run not done by then is reported
WORKERS = {"cpu-2": {"resources": {"CPU": 2}, "min_workers": 0, "max_workers": 2}}
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class Cluster:
    """One autoscaling head (scripts/ray-autoscaling-head), stopped by process group."""

    def __init__(self, head_cpus, job_start_timeout=120, v2=False):
        self.dir = tempfile.mkdtemp(prefix="as-", dir="/tmp")
        self.log = open(os.path.join(self.dir, "launcher.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, LAUNCHER, self.dir, "--head-cpus", str(head_cpus),
             "--worker-types", json.dumps(WORKERS), "--idle-timeout-minutes", "0.2",
             "--job-start-timeout", str(job_start_timeout)] + (["--v2"] if v2 else []),
            stdout=self.log, stderr=self.log)
        self.t_spawn = time.time()
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(self.dir, "dashboard")):
            time.sleep(0.1)
        self.dashboard = open(os.path.join(self.dir, "dashboard")).read().strip()
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"Ray exited while starting; see {self.dir}/launcher.log")
            try:
                cs = self.status()["data"]["clusterStatus"]
                if v2:  # clusterStatus is null with v2: only ?format=1 text
                    cs = self.status(fmt=True)["data"]["clusterStatus"]
                    ok = "ALIVE" in json.dumps(self.nodes()) and (head_cpus == 0 or " CPU\n" in cs)
                else:
                    ok = cs and ("CPU" in cs["loadMetricsReport"]["usage"] or (
                        head_cpus == 0 and cs["loadMetricsReport"]["usage"]))
                if ok:
                    self.ready_after = time.time() - self.t_spawn
                    return
            except Exception:
                pass
            time.sleep(0.25)
        self.stop()
        raise SystemExit("the autoscaling head was not ready in 120 s")

    def status(self, fmt=False):
        return call(self.dashboard + "/api/cluster_status" + ("?format=1" if fmt else ""))

    def nodes(self):
        return call(self.dashboard + "/api/v0/nodes?detail=1")["data"]["result"]["result"]

    def jobs(self):
        return {j["submission_id"]: j for j in call(self.dashboard + "/api/jobs/")
                if j.get("submission_id")}

    def stop(self):
        # The job drivers Ray leaves (scripts/stop-ray-drivers says why), found while
        # the head runs, ended once it has stopped.
        drivers, gcs = [], None
        try:
            gcs = open(os.path.join(self.dir, "gcs")).read().strip()
            drivers = subprocess.run([STOP_DRIVERS, "--find", gcs], capture_output=True,
                                     text=True).stdout.split()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, 15)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        # Whatever the group left (the worker raylets are in it too).
        t = time.time()
        while time.time() - t < 20 and group_alive(self.proc.pid):
            time.sleep(0.2)
        if group_alive(self.proc.pid):
            os.killpg(self.proc.pid, 9)
        if gcs:
            subprocess.run([STOP_DRIVERS, gcs] + drivers)
        shutil.rmtree(self.dir, ignore_errors=True)


def group_alive(pgid):
    out = subprocess.run(["ps", "-e", "-o", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(l.split()[0] == str(pgid) and not l.split()[1].startswith("Z")
               for l in out.splitlines() if l.strip())


def view(cs_reply, nodes):
    """The autoscaler's view, as a comparable summary."""
    cs = cs_reply["data"]["clusterStatus"] or {}
    if isinstance(cs, str):  # v2: the ?format=1 text, as `ray status` prints it
        alive = sorted(n["node_id"][-5:] for n in nodes if n["state"] == "ALIVE" and not n["is_head_node"])
        body = cs.split("\n", 1)[1] if "\n" in cs else cs  # without its timestamp line
        return {"text": body, "alive_workers": alive}
    rep = cs.get("autoscalerReport") or {}
    lm = cs.get("loadMetricsReport") or {}
    alive = sorted(n["node_id"][-5:] for n in nodes if n["state"] == "ALIVE" and not n["is_head_node"])
    return {
        "active": rep.get("activeNodes"),
        "idle": rep.get("idleNodes"),
        "pendingLaunches": rep.get("pendingLaunches"),
        "pendingNodes": [tuple(p[1:]) for p in rep.get("pendingNodes") or []],
        "failedNodes": rep.get("failedNodes"),
        "resourceDemand": lm.get("resourceDemand"),
        "cpu": (lm.get("usage") or {}).get("CPU"),
        "alive_workers": alive,
    }


class Watcher(threading.Thread):
    """Polls the cluster every `period` s and keeps the changes of its view."""

    def __init__(self, cluster, t0, record=None, period=0.5):
        super().__init__(daemon=True)
        self.c, self.t0, self.record, self.period = cluster, t0, record, period
        self.changes, self.job_states, self.stopped = [], {}, False
        self.phase, self.n = "start", 0

    def run(self):
        last = None
        while not self.stopped:
            try:
                cs, nodes, jobs = self.c.status(), self.c.nodes(), self.c.jobs()
                if cs["data"]["clusterStatus"] is None:  # autoscaler v2
                    cs = self.c.status(fmt=True)
            except Exception as e:  # a poll during start/stop
                time.sleep(self.period)
                continue
            t = time.time() - self.t0
            v = view(cs, nodes)
            for sid, j in jobs.items():
                key = (j["status"], j.get("message"))
                if self.job_states.get(sid, (None, None))[0:2] != key:
                    self.job_states[sid] = key
                    self.changes.append((t, "job", sid, j["status"], j.get("message")))
            if v != last:
                self.changes.append((t, "view", v))
                if self.record:
                    self.save(t, cs, nodes, jobs)
                last = v
            time.sleep(self.period)

    def save(self, t, cs, nodes, jobs):
        self.n += 1
        try:
            text = self.c.status(fmt=True)["data"]["clusterStatus"]
        except Exception as e:
            text = repr(e)
        path = os.path.join(self.record, f"{self.n:02d}-{self.phase}.json")
        with open(path, "w") as f:
            json.dump({"t": round(t, 2), "phase": self.phase, "cluster_status": cs,
                       "ray_status": text, "nodes": nodes, "jobs": list(jobs.values())},
                      f, indent=1)

    def stop(self):
        self.stopped = True
        self.join()


def submit_ray(c, tag, n, secs):
    ids = []
    for i in range(n):
        sid = f"{tag}-{i}"
        call(c.dashboard + "/api/jobs/", {"entrypoint": f"sleep {secs}", "submission_id": sid,
                                           "entrypoint_num_cpus": 1})
        ids.append(sid)
    return ids


class Service:
    """The fairshare service pointed at the cluster (one user, no limits)."""

    def __init__(self, dashboard, d, head_cpus):
        self.port = free_port()
        # The cluster's potential, declared as an operator would (docs/ray.md,
        # "Pointing fairshare at an autoscaling cluster"): Ray does not report it.
        head = f"head = {{ cpu = {head_cpus} }}\n" if head_cpus else ""
        types = "".join(
            f"""[[clusters.node_types]]
name = "{name}"
resources = {{ cpu = {t['resources']['CPU']} }}
min_count = {t['min_workers']}
max_count = {t['max_workers']}
""" for name, t in WORKERS.items())
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(d, "fairshare.toml")
        with open(cfg, "w") as f:
            f.write(f"""[server]
bind = "127.0.0.1:{self.port}"
[database]
url = "sqlite://{d}/fairshare.db?mode=rwc"
[scheduler]
default_max_running_jobs = 1000
usage_half_life = "0s"
[[clusters]]
name = "ray"
address = "{dashboard}"
{head}{types}[telemetry]
level = "warn"
""")
        self.log = open(os.path.join(d, "fairshare.log"), "w")
        self.proc = subprocess.Popen([BIN, "serve", "--config", cfg],
                                     stdout=self.log, stderr=self.log)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/readyz", timeout=2)
                return
            except Exception:
                time.sleep(0.2)
        self.stop()
        raise SystemExit("fairshare: not ready in 120 s (see its log)")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def submit_fairshare(svc, n, secs):
    return [call(svc.url + "/v1/jobs", {"user": "alice", "entrypoint": f"sleep {secs}",
                                        "resources": {"cpu": 1}})["id"] for _ in range(n)]


def run_mode(mode, head_cpus):
    """One fresh cluster, the scenario once in `mode`; returns the result."""
    c = Cluster(head_cpus)
    svc = None
    d = tempfile.mkdtemp(prefix="bench-as-")
    try:
        if mode == "fairshare":
            svc = Service(c.dashboard, d, head_cpus)
        t0 = time.time()
        w = Watcher(c, t0)
        w.start()
        ids = submit_fairshare(svc, JOBS, SECS) if svc else submit_ray(c, "direct", JOBS, SECS)
        deadline = t0 + TIMEOUT
        while time.time() < deadline:
            jobs = c.jobs()
            if all(i in jobs and jobs[i]["status"] in TERMINAL for i in ids):
                break
            time.sleep(0.5)
        else:
            # Not done: say where each job is (e.g. QUEUED in fairshare, never sent).
            w.stop()
            where = []
            for i in ids:
                state = jobs[i]["status"] if i in jobs else "not in Ray"
                if svc:
                    fj = call(svc.url + f"/v1/jobs/{i}")
                    state += f" / fairshare {fj.get('status')}: {fj.get('pending_reason')}"
                where.append(state)
            return {"mode": mode, "makespan": None, "timeout": TIMEOUT, "where": where,
                    "changes": w.changes}
        bad = [i for i in ids if jobs[i]["status"] != "SUCCEEDED"]
        end = max(jobs[i]["end_time"] for i in ids) / 1000.0
        # The workers go after the idle timeout: wait (at most 60 s) to time it.
        while time.time() < end + 60:
            if not view(c.status(), c.nodes())["alive_workers"]:
                break
            time.sleep(0.5)
        time.sleep(1)  # one more poll for the watcher
        w.stop()
        running = {}
        for ch in w.changes:
            if ch[1] == "job" and ch[3] == "RUNNING" and ch[2] in ids:
                running.setdefault(ch[2], ch[0])
        return {
            "mode": mode, "makespan": end - t0, "failed": bad, "ready_after": c.ready_after,
            # Ray's start_time is the submission's; RUNNING as the watcher saw it (0.5 s).
            "starts": sorted(running.values()),
            "ends": sorted(jobs[i]["end_time"] / 1000.0 - t0 for i in ids),
            "last_end": end - t0, "changes": w.changes,
        }
    finally:
        if svc:
            svc.stop()
        c.stop()
        shutil.rmtree(d, ignore_errors=True)


def node_timeline(changes):
    """(t, text) for the node changes: launches asked, workers ALIVE, workers gone."""
    out, prev_alive, prev_launch = [], [], {}
    for ch in changes:
        if ch[1] != "view":
            continue
        t, v = ch[0], ch[2]
        launch = v["pendingLaunches"] or {}
        if launch != prev_launch and launch:
            out.append((t, f"launching {launch}"))
        prev_launch = launch
        alive = v["alive_workers"]
        for n in alive:
            if n not in prev_alive:
                out.append((t, f"worker {n} ALIVE"))
        for n in prev_alive:
            if n not in alive:
                out.append((t, f"worker {n} gone"))
        prev_alive = alive
    return out


def show(r):
    if r["makespan"] is None:
        print(f"== {r['mode']}: NOT DONE after {r['timeout']} s")
        for w in sorted(set(r["where"])):
            print(f"   {r['where'].count(w)} x {w}")
        nodes = node_timeline(r["changes"])
        print("   nodes: " + ("; ".join(f"{t:.1f} s {what}" for t, what in nodes) or "none started"))
        return
    print(f"== {r['mode']}: makespan {r['makespan']:.1f} s"
          + (f"  FAILED {r['failed']}" if r["failed"] else ""))
    print("   RUNNING at: " + ", ".join(f"{s:.1f}" for s in r["starts"])
          + "   ends: " + ", ".join(f"{s:.1f}" for s in r["ends"]))
    nodes = node_timeline(r["changes"])
    print("   nodes: " + ("; ".join(f"{t:.1f} s {what}" for t, what in nodes) or "none started"))
    gone = [t for t, what in nodes if what.endswith("gone")]
    if gone:
        print(f"   last worker gone {max(gone) - r['last_end']:.1f} s after the last job ended")
    demand = sorted({json.dumps(ch[2]["resourceDemand"]) for ch in r["changes"] if ch[1] == "view"})
    print(f"   resourceDemand seen: {', '.join(demand)}")
    sys.stdout.flush()


def bench(rounds, head_cpus):
    modes = os.environ.get("BENCH_MODES", "ray,fairshare").split(",")
    if "fairshare" in modes and not os.access(BIN, os.X_OK):
        print(f"(no fairshare binary at {BIN}: mode fairshare skipped)")
        modes.remove("fairshare")
    print(f"scenario: head {head_cpus} CPU, worker type cpu-2 (2 CPU, max 2, idle 0.2 min), "
          f"{JOBS} x sleep {SECS} at 1 CPU; {rounds} round(s), a fresh cluster per run")
    results = {m: [] for m in modes}
    for r in range(rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for m in order:
            res = run_mode(m, head_cpus)
            show(res)
            results[m].append(res["makespan"])
    print("== summary")
    fmt = lambda x: "not done" if x is None else f"{x:.1f} s"
    for m in modes:
        print(f"   {m}: makespan " + ", ".join(fmt(x) for x in results[m]))
    if "ray" in results and "fairshare" in results:
        ratios = [None if f is None or r is None else f / r
                  for f, r in zip(results["fairshare"], results["ray"])]
        print("   ratio fairshare / ray: "
              + ", ".join("n/a" if x is None else f"{x:.2f}" for x in ratios))


def probe(out, head_cpus, v2):
    os.makedirs(out, exist_ok=True)
    c = Cluster(head_cpus, job_start_timeout=30, v2=v2)
    try:
        t0 = time.time()
        print(f"ready {c.ready_after:.1f} s after spawn")
        w = Watcher(c, t0, record=out)
        w.phase = "idle"
        w.start()
        time.sleep(3)
        w.phase = "scenario"
        ids = submit_ray(c, "job", JOBS, SECS)
        while True:
            jobs = c.jobs()
            if all(jobs[i]["status"] in TERMINAL for i in ids):
                break
            time.sleep(0.5)
        w.phase = "drain"
        end = max(jobs[i]["end_time"] for i in ids) / 1000.0
        while view(c.status(), c.nodes())["alive_workers"] and time.time() < end + 90:
            time.sleep(0.5)
        time.sleep(2)
        w.phase = "infeasible"
        call(c.dashboard + "/api/jobs/", {"entrypoint": "sleep 1", "submission_id": "too-big",
                                           "entrypoint_num_cpus": 4})
        call(c.dashboard + "/api/jobs/", {"entrypoint": "sleep 1", "submission_id": "no-such-resource",
                                           "entrypoint_resources": {"TPU": 1}})
        deadline = time.time() + 45
        while time.time() < deadline:
            jobs = c.jobs()
            if all(jobs[i]["status"] in TERMINAL for i in ("too-big", "no-such-resource")):
                break
            time.sleep(0.5)
        time.sleep(2)
        w.phase = "end"
        time.sleep(1)
        w.stop()
        with open(os.path.join(out, "cluster_events.json"), "w") as f:
            json.dump(call(c.dashboard + "/api/v0/cluster_events?limit=100"), f, indent=1)
        with open(os.path.join(out, "timeline.json"), "w") as f:
            json.dump(w.changes, f, indent=1)
        for ch in w.changes:
            print(f"{ch[0]:7.2f} " + " ".join(json.dumps(x) for x in ch[1:]))
    finally:
        c.stop()


def probe_stop(head_cpus):
    """A stop sent to jobs Ray holds PENDING: one waiting for a node the autoscaler is
    adding, one no node type can hold. Prints what Ray says and whether the demand and
    the launch go away."""
    c = Cluster(head_cpus, job_start_timeout=120)
    try:
        t0 = time.time()
        w = Watcher(c, t0)
        w.start()
        call(c.dashboard + "/api/jobs/", {"entrypoint": "sleep 30", "submission_id": "waits-for-node",
                                           "entrypoint_num_cpus": head_cpus + 1})
        call(c.dashboard + "/api/jobs/", {"entrypoint": "sleep 1", "submission_id": "infeasible",
                                           "entrypoint_num_cpus": 8})
        # Stop both once the autoscaler has asked for a node.
        while not (view(c.status(), c.nodes())["pendingLaunches"] or {}):
            time.sleep(0.2)
        for sid in ("waits-for-node", "infeasible"):
            t = time.time() - t0
            print(f"{t:6.2f} stop {sid}: {call(c.dashboard + f'/api/jobs/{sid}/stop', {}, method='POST')}")
        time.sleep(40)
        w.stop()
        for ch in w.changes:
            print(f"{ch[0]:6.2f} " + " ".join(json.dumps(x) for x in ch[1:]))
        for sid, j in c.jobs().items():
            print(sid, j["status"], j.get("error_type"), j.get("message"))
    finally:
        c.stop()


def main():
    args = sys.argv[1:]
    head_cpus = 1
    if "--head-cpus" in args:
        i = args.index("--head-cpus")
        head_cpus = int(args[i + 1])
        del args[i:i + 2]
    v2 = "--v2" in args
    if v2:
        args.remove("--v2")
    if args and args[0] == "probe-stop":
        return probe_stop(head_cpus)
    if not args or args[0] not in ("bench", "probe"):
        print(__doc__)
        sys.exit(2)
    if args[0] == "bench":
        bench(int(args[1]) if len(args) > 1 else 1, head_cpus)
    else:
        probe(args[1], head_cpus, v2)


if __name__ == "__main__":
    main()
