"""The reference runner (``fairshare_client.runner``) against the real service binary:
issue 30's "Done when". A pool of 2 cluster slots, two users; the runner (a process
of its own, tests/pool_runner.py) starts a subprocess "cluster" per admitted job.

On SQLite, on PostgreSQL, and on PostgreSQL with two replicas where the runner talks
to the follower (its reports, the cancel and the late report go to the replica that
does not schedule)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

import httpx
import pytest

from conftest import ADMIN, SUBMITTER, Receiver, Service
from fairshare_client import Client, FairshareError, Job
from fairshare_client.runner import Outcome, ProcessHandle, StartFailed
from fairshare_client.runner import Runner as RefRunner

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
RUNNER_TOKEN = "py-runner-token-k8s"
#: The admission lease (seconds): short, so a dead runner's jobs come back quickly.
LEASE = 2.0
POOL_CONFIG = f"""
[[pools]]
name = "k8s"
capacity = {{ clusters = 2 }}
[admission]
lease = "{int(LEASE)}s"
[[auth.tokens]]
name = "k8s runner"
token = "{RUNNER_TOKEN}"
role = "submitter"
pool = "k8s"
"""


def until(what: str, fn: Callable[[], Optional[T]], timeout: float = 20.0) -> T:
    """Polls ``fn`` until it returns something other than ``None``/``False``."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database (dropped after), or a skip without one."""
    base = os.environ.get("FAIRSHARE_TEST_POSTGRES_URL")
    if not base:
        if os.environ.get("FAIRSHARE_REQUIRE_POSTGRES") == "1":
            pytest.fail("FAIRSHARE_REQUIRE_POSTGRES=1 but FAIRSHARE_TEST_POSTGRES_URL is not set")
        pytest.skip("no PostgreSQL (FAIRSHARE_TEST_POSTGRES_URL)")
    if shutil.which("psql") is None:
        # A fresh database per test is made with psql (PostgreSQL's client).
        if os.environ.get("FAIRSHARE_REQUIRE_POSTGRES") == "1":
            pytest.fail("FAIRSHARE_REQUIRE_POSTGRES=1 but psql (postgresql-client) is not installed")
        pytest.skip("no psql to make a database with")
    name = f"fs_py_{uuid.uuid4().hex[:12]}"
    subprocess.run(["psql", base, "-qc", f"CREATE DATABASE {name}"], check=True, capture_output=True)
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        subprocess.run(["psql", base, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], capture_output=True)


@pytest.fixture(params=["sqlite", "postgres", "postgres-two-replicas"])
def deployment(request, tmp_path: Path, receiver: Receiver) -> Iterator[Tuple[str, str]]:
    """``(url the gateway submits to, url the runner reports to)``."""
    services: List[Service] = []
    gen: Optional[Iterator[str]] = None
    try:
        if request.param == "sqlite":
            services.append(Service(tmp_path, receiver.url, extra=POOL_CONFIG))
            yield services[0].url, services[0].url
            return
        gen = postgres_database()
        url = next(gen)
        services.append(Service(tmp_path, receiver.url, database_url=url, extra=POOL_CONFIG, name="one"))
        if request.param == "postgres":
            yield services[0].url, services[0].url
            return
        services.append(Service(tmp_path, receiver.url, database_url=url, extra=POOL_CONFIG, name="two"))

        def leader() -> Optional[int]:
            for i, s in enumerate(services):
                view = httpx.get(f"{s.url}/v1/scheduler", headers={"Authorization": f"Bearer {ADMIN}"}).json()
                if (view.get("leadership") or {}).get("is_leader"):
                    return i + 1
            return None

        lead = until("one replica leads", leader) - 1
        yield services[lead].url, services[1 - lead].url
    finally:
        for s in services:
            s.stop()
            s.log.close()
        if gen is not None:
            gen.close()


class Runner:
    """tests/pool_runner.py as a process group of its own (it and its clusters)."""

    def __init__(self, url: str, directory: Path, log: Path):
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "pool_runner.py"), url, RUNNER_TOKEN, "k8s", str(directory)],
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,
        )

    def kill9(self) -> None:
        """kill -9 of the runner and its clusters (a node lost)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill9()
        self.log.close()


def test_the_reference_runner_runs_a_pool_by_fair_share_and_survives_kill_9(deployment, tmp_path: Path):
    submit_url, runner_url = deployment
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    fs = Client(submit_url, SUBMITTER, retries=3)
    # What the runner's token sees and may do, on the replica it talks to.
    runner_client = Client(runner_url, RUNNER_TOKEN, retries=3)
    runners: List[Runner] = []

    def start_runner() -> Runner:
        r = Runner(runner_url, clusters, tmp_path / f"runner{len(runners)}.log")
        runners.append(r)
        return r

    def submit(user: str, i: int) -> Job:
        return fs.submit(user, f"work {user} {i}", external_id=f"{user}-{i}", cpu=0, custom={"clusters": 1}, pool="k8s")

    seen_max = [0]

    def jobs() -> Dict[str, Job]:
        """Every pool job by id; checks the pool is never over its 2 slots."""
        got = {j.id: j for j in runner_client.list(pool="k8s")}
        held = sum(1 for j in got.values() if j.status in ("ADMITTED", "RUNNING"))
        seen_max[0] = max(seen_max[0], held)
        assert held <= 2, f"{held} jobs hold the pool's 2 slots: {got}"
        return got

    def running(job: Job) -> Optional[Job]:
        j = jobs()[job.id]
        up = (clusters / f"{j.id}.{j.attempt}.up").exists()
        return j if j.status == "RUNNING" and up else None

    def status_of(job: Job) -> str:
        return jobs()[job.id].status

    def finish(job: Job, code: int) -> None:
        (clusters / f"{job.id}.done").write_text(str(code))

    try:
        alice = [submit("alice", i) for i in range(4)]
        start_runner()
        for j in alice[:2]:
            until(f"{j.external_id} runs on a cluster", lambda: running(j))
        bob = [submit("bob", i) for i in range(2)]
        assert [status_of(j) for j in alice[2:] + bob] == ["QUEUED"] * 4

        # Fair share, not arrival order: alice holds one slot, bob none, so a slot
        # that frees goes to bob (first in, first out would run alice's third job).
        finish(alice[0], 0)
        until("alice-0 SUCCEEDED", lambda: status_of(alice[0]) == "SUCCEEDED")
        until("bob-0 runs", lambda: running(bob[0]))
        assert [status_of(j) for j in alice[2:] + bob[1:]] == ["QUEUED"] * 3
        # A cluster that fails: the runner reports FAILED with its exit code; the
        # slot goes to bob again (alice 1, bob 0).
        finish(bob[0], 3)
        until("bob-0 FAILED", lambda: status_of(bob[0]) == "FAILED")
        assert fs.get(bob[0].id).message and "exit code 3" in fs.get(bob[0].id).message
        until("bob-1 runs", lambda: running(bob[1]))
        assert [status_of(j) for j in alice[2:]] == ["QUEUED"] * 2

        # kill -9: the runner and its clusters vanish. Their leases lapse and both
        # jobs go back to the queue (attempt 2), within the lease.
        held = [jobs()[alice[1].id], jobs()[bob[1].id]]
        assert [j.attempt for j in held] == [1, 1]
        killed = time.monotonic()
        runners[0].kill9()
        for j in held:
            until(f"{j.external_id}'s lease lapses", lambda: jobs()[j.id].attempt >= 2, timeout=3 * LEASE + 5)
        lapse = time.monotonic() - killed
        assert lapse <= LEASE + LEASE / 4 + 2.0, f"the leases lapsed {lapse:.1f} s after the kill (lease {LEASE} s)"
        for j in held:
            timeline = httpx.get(
                f"{submit_url}/v1/jobs/{j.id}/events", headers={"Authorization": f"Bearer {SUBMITTER}"}
            ).json()["events"]
            assert any("lease lapsed" in (e.get("detail") or "") for e in timeline), timeline
        # The dead runner's late report, for the admission that is over: refused,
        # and nothing changes.
        with pytest.raises(FairshareError) as e:
            runner_client.finished(alice[1].id, "SUCCEEDED", "late", attempt=1)
        assert e.value.status == 409
        after = fs.get(alice[1].id)
        assert after.status != "SUCCEEDED" and after.attempt >= 2 and after.message != "late"

        # A new runner picks up what is admitted, by the list (it missed the events).
        start_runner()
        both = until(
            "two jobs run again",
            lambda: (lambda r: r if len(r) == 2 else None)(
                [j for j in jobs().values() if j.status == "RUNNING" and (clusters / f"{j.id}.{j.attempt}.up").exists()]
            ),
        )
        # A cancel of a started job reaches the runner (job.stop_requested), which
        # stops its cluster and reports; the job ends STOPPED.
        victim = both[0]
        asked = runner_client.cancel(victim.id)
        assert asked.stop_requested and asked.status == "RUNNING"
        until(f"{victim.external_id} STOPPED", lambda: status_of(victim) == "STOPPED")
        assert (clusters / f"{victim.id}.{victim.attempt}.term").exists(), "the runner did not stop the cluster"

        # Everything else runs to the end.
        for j in alice + bob:
            if j.id not in (alice[0].id, bob[0].id, victim.id):
                finish(j, 0)
        until(
            "every job ends",
            lambda: all(j.status in ("SUCCEEDED", "FAILED", "STOPPED") for j in jobs().values()),
            timeout=60,
        )
        final = jobs()
        want = {j.id: "SUCCEEDED" for j in alice + bob}
        want[bob[0].id] = "FAILED"
        want[victim.id] = "STOPPED"
        assert {i: j.status for i, j in final.items()} == want
        assert seen_max[0] == 2
    finally:
        for r in runners:
            r.close()
        fs.close()
        runner_client.close()


class FakeHandle:
    """A job "running" in this process until the test ends it."""

    def __init__(self) -> None:
        self.outcome: Optional[Outcome] = None
        self.stops = 0

    def poll(self) -> Optional[Outcome]:
        return self.outcome

    def stop(self) -> None:
        self.stops += 1
        self.outcome = Outcome("STOPPED", "stopped by the test's handle")


def test_the_runner_fails_retries_releases_and_adopts(tmp_path: Path, receiver: Receiver):
    """``start`` raising ``StartFailed`` fails the job with its message; raising
    anything else tries again after a backoff under the same admission, and after
    ``start_attempts`` tries releases it (QUEUED, attempt + 1, admitted again); a
    runner that restarts adopts its RUNNING jobs through ``adopt`` and keeps their
    admission (same attempt, the lease renewed, its end reported)."""
    service = Service(tmp_path, receiver.url, extra=POOL_CONFIG)
    fs = Client(service.url, SUBMITTER, retries=3)
    rc = Client(service.url, RUNNER_TOKEN, retries=3)
    handles: Dict[str, FakeHandle] = {}
    starts: Dict[str, int] = {}

    def start(job: Job) -> FakeHandle:
        starts[job.external_id] = starts.get(job.external_id, 0) + 1
        if job.external_id == "bad":
            raise StartFailed("image not found: bad:latest")
        if job.external_id == "flaky" and starts["flaky"] == 1:
            raise RuntimeError("the cluster API timed out")
        if job.external_id == "doomed":
            raise RuntimeError("no room in the namespace")
        handles[job.id] = FakeHandle()
        return handles[job.id]

    def run(r: RefRunner) -> threading.Thread:
        t = threading.Thread(target=r.run, daemon=True)
        t.start()
        return t

    first = RefRunner(rc, "k8s", start, heartbeat_every=0.3, tick=0.05, resync_every=0.5, start_attempts=2)
    t1 = run(first)
    try:
        bad = fs.submit("carol", "x", external_id="bad", cpu=0, custom={"clusters": 1}, pool="k8s")
        until("bad FAILED", lambda: fs.get(bad.id).status == "FAILED")
        assert fs.get(bad.id).message == "image not found: bad:latest"
        flaky = fs.submit("carol", "x", external_id="flaky", cpu=0, custom={"clusters": 1}, pool="k8s")
        # One failed start, tried again a second later under the same admission.
        got = until("flaky runs", lambda: (lambda j: j if j.status == "RUNNING" else None)(fs.get(flaky.id)))
        assert got.attempt == 1 and starts["flaky"] == 2
        # Two failed starts (start_attempts): released, admitted again as attempt 2,
        # tried again; a cancel while it waits to try again ends it STOPPED.
        doomed = fs.submit("dave", "x", external_id="doomed", cpu=0, custom={"clusters": 1}, pool="k8s")
        until("doomed released once", lambda: fs.get(doomed.id).attempt >= 2, timeout=30)
        assert starts["doomed"] >= 2
        fs.cancel(doomed.id)
        until("doomed STOPPED", lambda: fs.get(doomed.id).status == "STOPPED")
        # The runner restarts; the new one adopts what runs.
        first.stop()
        t1.join(timeout=10)
        adopted: List[str] = []

        def adopt(job: Job) -> Optional[FakeHandle]:
            adopted.append(job.id)
            return handles.get(job.id)

        second = RefRunner(rc, "k8s", start, heartbeat_every=0.3, tick=0.05, resync_every=0.5, adopt=adopt)
        t2 = run(second)
        until("flaky adopted", lambda: flaky.id in second.held)
        # For twice the lease, the job stays RUNNING as attempt 1: the new runner
        # renews the lease it adopted (without it the lease would lapse).
        deadline = time.monotonic() + 2 * LEASE
        while time.monotonic() < deadline:
            j = fs.get(flaky.id)
            assert (j.status, j.attempt) == ("RUNNING", 1), j
            time.sleep(0.2)
        handles[flaky.id].outcome = Outcome("SUCCEEDED")
        until("flaky SUCCEEDED", lambda: fs.get(flaky.id).status == "SUCCEEDED")
        assert adopted == [flaky.id] and starts["flaky"] == 2
        second.stop()
        t2.join(timeout=10)
    finally:
        first.stop()
        fs.close()
        rc.close()
        service.stop()
        service.log.close()


def test_a_process_handle_stops_what_its_process_started(tmp_path: Path):
    """``ProcessHandle.stop`` signals the process group of a process started with
    ``start_new_session=True``: a child of it stops too (found by a tester: only the
    process itself was signalled, and what it started ran on)."""
    pid_file = tmp_path / "child.pid"
    # The child ignores SIGTERM (found by a second tester): it is killed once the
    # process it belongs to has ended.
    proc = subprocess.Popen(
        ["sh", "-c", f"sh -c 'trap \"\" TERM; sleep 60' & echo $! > {pid_file}; wait"],
        start_new_session=True,
    )
    handle = ProcessHandle(proc, kill_after=5.0)
    until("the child started", lambda: pid_file.exists() and pid_file.read_text().strip())
    child = int(pid_file.read_text())
    assert handle.poll() is None
    handle.stop()
    outcome = until("the process ended", handle.poll)
    assert outcome.status == "STOPPED", outcome

    def child_gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        # A zombie (not reaped: its parent is gone) has ended too.
        stat = Path(f"/proc/{child}/stat")
        return stat.exists() and stat.read_text().split()[2] == "Z"

    until("the child stopped too", child_gone)
