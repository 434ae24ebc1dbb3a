"""The reference runner as a gateway would run it, for test_runner.py: a process of its
own (so a test can kill -9 it), whose "clusters" are subprocesses.

    python pool_runner.py URL TOKEN POOL DIR

A cluster for job J, admission A writes ``DIR/J.A.up`` when it is up, exits with the
code written to ``DIR/J.done`` once that file appears, and on SIGTERM (a stop) writes
``DIR/J.A.term`` and exits 143.
"""

from __future__ import annotations

import logging
import subprocess
import sys

from fairshare_client import Client
from fairshare_client.runner import ProcessHandle, Runner

CLUSTER = r"""
import os, signal, sys, time
d, job, attempt = sys.argv[1], sys.argv[2], sys.argv[3]
def term(*_):
    open(os.path.join(d, f"{job}.{attempt}.term"), "w").close()
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
open(os.path.join(d, f"{job}.{attempt}.up"), "w").close()
done = os.path.join(d, f"{job}.done")
while not os.path.exists(done):
    time.sleep(0.02)
time.sleep(0.02)
sys.exit(int(open(done).read().strip() or "0"))
"""


def main() -> None:
    url, token, pool, directory = sys.argv[1:5]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s runner %(levelname)s %(message)s")

    def start(job):  # one "cluster" per admitted job
        proc = subprocess.Popen([sys.executable, "-c", CLUSTER, directory, job.id, str(job.attempt)])
        return ProcessHandle(proc, kill_after=5.0)

    client = Client(url, token, retries=3)
    Runner(client, pool, start, heartbeat_every=0.3, tick=0.05, resync_every=1.0).run()


if __name__ == "__main__":
    main()
