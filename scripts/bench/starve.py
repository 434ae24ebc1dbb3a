#!/usr/bin/env python3
"""Before/after of issue 43 §5-§6's "passed over by backfill" rule on the trace family.

For each trace of scripts/tune-defaults' family (COARE, NASA on 32 cores and eight
seeded synthetic traces; tuning and held-out halves kept apart as there), simulates
fairshare with each binary's own defaults, the BEFORE binary also with
--starvation-runs 1 (the old rule with the short guard), and FIFO once, and prints
fairness error / utilization % / p95 wait (s) / worst user's p95 wait (s) per trace,
then the means per half. Prints Markdown.

    python3 scripts/bench/starve.py BEFORE_BIN AFTER_BIN [OUT_DIR]
"""
import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TRACES = ROOT / "examples" / "traces"
BEFORE, AFTER = sys.argv[1], sys.argv[2]
OUT = Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/starve/family")
SYNTHETIC = dict(jobs=20000, users=100, cores=1024)
# As scripts/tune-defaults: name, shape (None: a real trace), cores, load, seed, half.
FAMILY = [
    ("coare", None, 1728, None, None, "tune"),
    ("heavy", "heavy", 1024, 0.95, 101, "tune"),
    ("wide", "wide", 1024, 0.95, 102, "tune"),
    ("mixed", "mixed", 1024, 0.95, 103, "tune"),
    ("zipf", "zipf", 1024, 0.95, 104, "tune"),
    ("nasa-32", None, 32, None, None, "held-out"),
    ("equal", "equal", 1024, 0.95, 105, "held-out"),
    ("bursty", "bursty", 1024, 0.95, 106, "held-out"),
    ("weighted", "weighted", 1024, 0.95, 107, "held-out"),
    ("zipf-overload", "zipf", 1024, 1.3, 108, "held-out"),
]
REAL = {"coare": TRACES / "coare-saliksik-2020.swf.gz",
        "nasa-32": TRACES / "NASA-iPSC-1993-3.1-cln.swf.gz"}
COLUMNS = [("before", BEFORE, []), ("before, runs 1", BEFORE, ["--starvation-runs", "1"]),
           ("after", AFTER, []), ("after, runs 0", AFTER, ["--starvation-runs", "0"]),
           ("fifo", AFTER, None)]


def trace_files(name, shape, cores, load, seed):
    if shape is None:
        return REAL[name], None
    path = OUT / "traces" / f"{name}.swf.gz"
    weights = OUT / "traces" / f"{name}.weights.json"
    if not path.exists():
        subprocess.run([AFTER, "trace", "--shape", shape, "--jobs", str(SYNTHETIC["jobs"]),
                        "--users", str(SYNTHETIC["users"]), "--cores", str(cores), "--load",
                        str(load), "--seed", str(seed), "--out", str(path), "--weights-out",
                        str(weights)], check=True, stdout=subprocess.DEVNULL)
    return path, (weights if weights.exists() else None)


def simulate(member, column):
    name, shape, cores, load, seed, _ = member
    label, binary, extra = column
    trace, weights = trace_files(name, shape, cores, load, seed)
    report = OUT / f"{name}.{label.replace(' ', '').replace(',', '-')}.json"
    if not report.exists():
        cmd = [binary, "simulate", "--trace", str(trace), "--cpus", str(cores)]
        cmd += ["--policy", "fifo"] if extra is None else ["--policy", "fairshare"] + extra
        if weights:
            cmd += ["--weights", str(weights)]
        subprocess.run(cmd + ["--report", str(report)], check=True, stdout=subprocess.DEVNULL)
    return json.loads(report.read_text())["runs"][0]["overall"]


def main():
    (OUT / "traces").mkdir(parents=True, exist_ok=True)
    for m in FAMILY:
        trace_files(*m[:5])
    jobs = {(m[0], c[0]): (m, c) for m in FAMILY for c in COLUMNS}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(lambda k: simulate(*jobs[k]), jobs)))
    cell = lambda o: (f"{o['fairness_error']:.4f} / {100 * o['utilization']:.2f} / "
                      f"{o['p95_wait_s']:.0f} / {o['worst_user_p95_wait_s']:.0f}")
    print("Cells: fairness error / utilization % / p95 wait s / worst user's p95 wait s.\n")
    for half in ("tune", "held-out"):
        print(f"| {half} trace | " + " | ".join(c[0] for c in COLUMNS) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        for m in (m for m in FAMILY if m[5] == half):
            print(f"| {m[0]} | " + " | ".join(cell(results[(m[0], c[0])]) for c in COLUMNS) + " |")
        means = []
        for c in COLUMNS:
            rows = [results[(m[0], c[0])] for m in FAMILY if m[5] == half]
            fe = sum(r["fairness_error"] for r in rows) / len(rows)
            ut = sum(r["utilization"] for r in rows) / len(rows)
            means.append(f"{fe:.4f} / {100 * ut:.2f}")
        print(f"| mean FE / util | " + " | ".join(means) + " |\n")


main()
