#!/usr/bin/env python3
"""One pass of the scheduler fairshare replaces (issue 11), timed on a filled database.

The gateway's `schedule_queued_jobs` command calls `get_jobs_to_schedule_fair_share`
once a second (Qiskit/qiskit-serverless, gateway/api/schedule.py). One pass is:

1. count each author's running jobs (`Job.objects.filter(status__in=RUNNING)
   .values("author").annotate(Count("id"))`);
2. the oldest QUEUED job date of each author not at its limit, 100 authors at most
   (`.filter(status=QUEUED).exclude(author__in=at_max).values("author")
   .annotate(job_date=Min("created"))[:100]`);
3. sorted by that date, one query per free slot for the author's job of that date.

This script sends the SQL those ORM calls produce, written for fairshare's `jobs`
table (`user_id` for `author`, `submitted_at` for `created`, fairshare's statuses
and indexes), and prints the time of N passes. It changes nothing.

    python3 scripts/bench/old_loop.py sqlite PATH [PASSES=3] [SLOTS=10]
    python3 scripts/bench/old_loop.py postgres URL [PASSES=3] [SLOTS=10]
"""
import sqlite3
import subprocess
import sys
import time

RUNNING = ("DISPATCHING", "PENDING", "RUNNING")
LIMIT_PER_USER = 2  # settings.LIMITS_JOBS_PER_USER's default in the gateway


def statements(at_max, dates, slots):
    running = ", ".join(f"'{s}'" for s in RUNNING)
    yield (f"SELECT user_id, COUNT(id) FROM jobs WHERE status IN ({running}) "
           f"GROUP BY user_id")
    exclude = " AND user_id NOT IN (" + ", ".join(f"'{u}'" for u in at_max) + ")" if at_max else ""
    yield (f"SELECT user_id, MIN(submitted_at) AS job_date FROM jobs "
           f"WHERE status = 'QUEUED'{exclude} GROUP BY user_id LIMIT 100")
    for user, date in sorted(dates, key=lambda d: d[1])[:slots]:
        yield (f"SELECT * FROM jobs WHERE user_id = '{user}' AND submitted_at = '{date}' "
               f"AND status = 'QUEUED' LIMIT 1")


def sqlite_pass(path, slots):
    db = sqlite3.connect(path)
    t = time.perf_counter()
    running, grouped = list(statements([], [], 0))[:2]
    counts = db.execute(running).fetchall()
    at_max = [u for u, n in counts if n >= LIMIT_PER_USER]
    _, grouped = list(statements(at_max, [], 0))[:2]
    dates = db.execute(grouped).fetchall()
    for q in list(statements(at_max, dates, slots))[2:]:
        db.execute(q).fetchall()
    took = time.perf_counter() - t
    db.close()
    return took


def psql(url, sql):
    out = subprocess.run(["psql", "-qAtX", url, "-F", "\t", "-c", sql],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def postgres_pass(url, slots):
    # Each query through psql costs a process start (~10 ms here): timed inside
    # PostgreSQL instead, with EXPLAIN ANALYZE's execution time.
    def timed(sql):
        plan = psql(url, "EXPLAIN (ANALYZE, FORMAT TEXT) " + sql)
        ms = next(float(l[0].split(":")[1].split()[0]) for l in plan
                  if l[0].startswith("Execution Time"))
        return psql(url, sql), ms / 1000
    counts, t1 = timed(next(statements([], [], 0)))
    at_max = [u for u, n in counts if int(n) >= LIMIT_PER_USER]
    dates, t2 = timed(list(statements(at_max, [], 0))[1])
    took = t1 + t2
    for q in list(statements(at_max, dates, slots))[2:]:
        took += timed(q)[1]
    return took


def main():
    backend, target = sys.argv[1], sys.argv[2]
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    slots = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    one = sqlite_pass if backend == "sqlite" else postgres_pass
    times = [one(target, slots) for _ in range(passes)]
    print(f"old scheduler pass ({backend}, {slots} slots): "
          + ", ".join(f"{t * 1000:.0f} ms" for t in times)
          + f"; best {min(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
