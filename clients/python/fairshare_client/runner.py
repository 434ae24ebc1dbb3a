"""A reference runner for a pool (issue 30; DESIGN §3 "Admission"; docs/admission.md).

A *pool* is capacity fairshare admits jobs to but does not run: something outside it
(the qiskit-serverless gateway creating one KubeRay cluster per job, a Code Engine
fleet) starts each admitted job and reports back. ``Runner`` is that loop, with the
start and the watch left to a function of yours::

    from fairshare_client import Client
    from fairshare_client.runner import Runner, ProcessHandle

    def start(job):                       # called for each ADMITTED job
        return ProcessHandle(subprocess.Popen(["./run-on-my-cluster", job.id]))

    Runner(Client(url, token), pool="k8s", start=start).run()

What it does, and why:

- **Learns admissions** from ``GET /v1/events?pool=`` (an ``ADMITTED`` transition; a
  background thread reads the stream) and, as a safety net for anything the stream
  missed (started before the runner, a dropped connection), lists
  ``GET /v1/jobs?status=ADMITTED&pool=`` at start and every ``resync_every`` seconds.
- **Starts** each admitted job with ``start(job)`` on a thread of its own (creating a
  cluster can take minutes; leases keep being renewed meanwhile), then reports
  ``started``. If ``start`` raises ``StartFailed``, it reports ``finished`` FAILED with
  its message (the job cannot run: a bad image, a quota refused); if it raises anything
  else, it tries again after a backoff (1 s, doubling, at most 60 s) while it keeps the
  lease, and after ``start_attempts`` tries reports ``release``: the job goes back to
  the queue. (Releasing at once would only loop: the job is first in line, so it is
  admitted again at once; a tester saw 26 admissions in 10 s.)
- **Adopts** after its own restart: with an ``adopt(job)`` function, each RUNNING job of
  the pool it does not hold is offered to it (at start and every ``resync_every``); a
  handle back means "this is still running here" and the runner watches it again,
  ``None`` leaves it (its lease lapses). Without one, such jobs go back to the queue
  when their leases lapse.
- **Renews the lease** of every job it holds with ``heartbeat`` every
  ``heartbeat_every`` seconds (keep it under a third of the service's
  ``admission.lease``, 60 s by default). A runner that dies stops renewing, and its
  jobs go back to the queue when their leases lapse.
- **Watches** each started job with ``handle.poll()`` every ``tick`` seconds and reports
  ``finished`` with the ``Outcome`` it returns.
- **Stops** a job when the service asks (a cancel, ``event: job.stop_requested``, or a
  preemption, ``event: job.preempted``, on the stream; or ``stop_requested`` on a
  heartbeat's answer) with ``handle.stop()``; the job ends when ``poll`` then gives its
  outcome (the service records STOPPED for a cancel, and puts a preempted job back in
  the queue).
- **Every report names its admission** (``attempt``): when a lease lapsed and the job
  was admitted again (perhaps to another runner), the service refuses this runner's
  late reports with 409, and the runner stops and forgets the job rather than touch
  the next admission.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Protocol

import httpx

from .client import Client, FairshareError
from .models import Job, JobEvent

log = logging.getLogger("fairshare_client.runner")

#: How a runner may end a job.
OUTCOMES = ("SUCCEEDED", "FAILED", "STOPPED")


class StartFailed(Exception):
    """Raised by ``start`` when the job cannot run at all: the runner reports it
    ``finished`` FAILED with this message (any other exception releases it)."""


@dataclass(frozen=True)
class Outcome:
    """How a job ended: ``status`` SUCCEEDED, FAILED or STOPPED, and why (at most 4096
    characters, shown as the job's message)."""

    status: str
    message: Optional[str] = None

    def __post_init__(self) -> None:
        if self.status not in OUTCOMES:
            raise ValueError(f"status must be one of {OUTCOMES}, not {self.status!r}")


class Handle(Protocol):
    """What ``start`` returns for one job: how to watch and stop what it started."""

    def poll(self) -> Optional[Outcome]:
        """``None`` while the job runs; its ``Outcome`` once it has ended. Called every
        ``tick`` from the runner's loop: return quickly."""

    def stop(self) -> None:
        """Ask the job to stop (a cancel). Return quickly; ``poll`` reports the end."""


class ProcessHandle:
    """A ``Handle`` for a local process (``subprocess.Popen``): exit 0 is SUCCEEDED,
    any other exit FAILED, and an exit after ``stop`` (SIGTERM, then SIGKILL after
    ``kill_after`` seconds) STOPPED. Start it with ``start_new_session=True`` so that
    a stop reaches what it started too: SIGTERM goes to its process group, and once
    the process has ended after a stop, SIGKILL to what is left of the group (without
    a group of its own only the process itself is signalled)."""

    def __init__(self, proc: "subprocess.Popen[bytes]", *, kill_after: float = 10.0):
        self.proc = proc
        self.kill_after = kill_after
        self._stop_at: Optional[float] = None
        # A process group of its own (``start_new_session=True``): signals go to it.
        try:
            self._group = os.getpgid(proc.pid) == proc.pid
        except ProcessLookupError:
            self._group = False

    def _signal(self, sig: int) -> None:
        try:
            if self._group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def _kill_group(self) -> None:
        if self._group:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def poll(self) -> Optional[Outcome]:
        code = self.proc.poll()
        if code is None:
            if self._stop_at is not None and time.monotonic() - self._stop_at > self.kill_after:
                self._signal(signal.SIGKILL)
            return None
        if self._stop_at is not None:
            # What the process started may outlive it (a child that ignores SIGTERM):
            # the rest of its group is killed now that the job counts as stopped.
            self._kill_group()
            return Outcome("STOPPED", f"stopped (exit code {code})")
        if code == 0:
            return Outcome("SUCCEEDED")
        return Outcome("FAILED", f"exit code {code}")

    def stop(self) -> None:
        if self._stop_at is None and self.proc.poll() is None:
            self._stop_at = time.monotonic()
            self._signal(signal.SIGTERM)


@dataclass
class _Held:
    """A job this runner holds: its admission (``attempt``), and the start in flight
    or the handle."""

    job_id: str
    attempt: int
    starting: Optional[Future] = None
    handle: Optional[Handle] = None
    #: Failed starts so far, and when the next try may begin (``time.monotonic``).
    start_failures: int = 0
    retry_at: Optional[float] = None
    stop_wanted: bool = False
    stopped: bool = False
    last_beat: float = field(default_factory=time.monotonic)


class Runner:
    """Runs the jobs fairshare admits to ``pool`` (see the module's doc).

    ``client``: a ``Client`` with a submitter token (best: one confined to the pool,
    ``[[auth.tokens]] pool = "..."``). ``start(job) -> Handle``: starts an ADMITTED
    ``Job`` (its ``entrypoint``, ``resources``, ``metadata``) and returns its handle;
    ``StartFailed`` fails the job, any other exception is tried again after a backoff
    and, after ``start_attempts`` tries, releases it. ``adopt(job) ->
    Optional[Handle]``: a RUNNING job of the pool this runner does not hold (after its
    restart), or ``None``. ``heartbeat_every``, ``tick``, ``resync_every``: seconds.
    ``max_starting``: starts in flight at once."""

    def __init__(
        self,
        client: Client,
        pool: str,
        start: Callable[[Job], Handle],
        *,
        heartbeat_every: float = 10.0,
        tick: float = 0.2,
        resync_every: float = 30.0,
        max_starting: int = 8,
        adopt: Optional[Callable[[Job], Optional[Handle]]] = None,
        start_attempts: int = 5,
    ):
        self.client = client
        self.pool = pool
        self.start_fn = start
        self.adopt_fn = adopt
        self.start_attempts = max(1, start_attempts)
        self._jobs: Dict[str, Job] = {}
        self.heartbeat_every = heartbeat_every
        self.tick = tick
        self.resync_every = resync_every
        self._held: Dict[str, _Held] = {}
        self._events: "queue.Queue[JobEvent]" = queue.Queue()
        self._starter = ThreadPoolExecutor(max_workers=max_starting, thread_name_prefix="fairshare-start")
        self._done = threading.Event()

    @property
    def held(self) -> Dict[str, int]:
        """The jobs this runner holds: job id → the attempt it was admitted as."""
        return {h.job_id: h.attempt for h in self._held.values()}

    def stop(self) -> None:
        """Makes ``run`` return after its current step. What the jobs it holds
        started is left running and no longer renewed: their leases lapse and the
        service puts them back in the queue (or fails them, ``admission.on_lease_lapse``).
        Stop them first if they must not run on."""
        self._done.set()

    def run(self) -> None:
        """The loop, until ``stop``. Network errors are logged and retried (the
        client retries 429/503 and connection errors itself)."""
        threading.Thread(target=self._read_events, name="fairshare-events", daemon=True).start()
        next_resync = 0.0
        while not self._done.is_set():
            try:
                if time.monotonic() >= next_resync:
                    self._resync()
                    next_resync = time.monotonic() + self.resync_every
                self._drain_events()
                self._step()
            except (FairshareError, httpx.HTTPError) as e:
                log.warning("runner step failed, retrying: %s", e)
            self._done.wait(self.tick)
        self._starter.shutdown(wait=False)

    # -- learning admissions ------------------------------------------------------

    def _read_events(self) -> None:
        while not self._done.is_set():
            try:
                for ev in self.client.events(pool=self.pool):
                    self._events.put(ev)
                    if self._done.is_set():
                        return
            except Exception as e:  # the stream is the fast path only: resync covers it
                log.warning("event stream failed, reconnecting: %s", e)
                time.sleep(1.0)

    def _resync(self) -> None:
        for job in self.client.list(status="ADMITTED", pool=self.pool):
            if job.id not in self._held:
                self._admitted(job)
        if self.adopt_fn is None:
            return
        for job in self.client.list(status="RUNNING", pool=self.pool):
            if job.id in self._held or job.attempt is None:
                continue
            handle = self.adopt_fn(job)
            if handle is not None:
                log.info("adopted job %s (attempt %s)", job.id, job.attempt)
                held = _Held(job.id, job.attempt, handle=handle)
                held.last_beat = 0.0  # renew the lease at once
                self._held[job.id] = held
                if job.stop_requested:
                    self._ask_stop(held)

    def _drain_events(self) -> None:
        while True:
            try:
                ev = self._events.get_nowait()
            except queue.Empty:
                return
            held = self._held.get(ev.job_id)
            if ev.stop_requested or ev.kind == "job.preempted":
                if held is not None:
                    self._ask_stop(held)
            elif ev.to == "ADMITTED":
                if held is None:
                    self._admitted(self.client.get(ev.job_id))
            elif held is not None and ev.to in ("QUEUED", "SUCCEEDED", "FAILED", "STOPPED"):
                # An admission ended without this runner's report (its lease lapsed):
                # if it is the one held (events carry no attempt, so ask), what it
                # started must not run on.
                job = self.client.get(ev.job_id)
                if job.attempt != held.attempt or job.status not in ("ADMITTED", "RUNNING"):
                    log.warning("job %s (attempt %s) is no longer ours (%s): stopping it", ev.job_id, held.attempt, job.status)
                    self._forget(held, stop=True)

    def _admitted(self, job: Job) -> None:
        if job.status != "ADMITTED" or job.pool != self.pool or job.attempt is None:
            return
        held = _Held(job.id, job.attempt)
        self._held[job.id] = held
        if job.stop_requested:
            # Cancelled before it started: end it without starting it.
            self._finish(held, Outcome("STOPPED", "cancelled before it started"))
            return
        log.info("starting job %s (attempt %s)", job.id, job.attempt)
        self._jobs[job.id] = job
        held.starting = self._starter.submit(self.start_fn, job)

    # -- the held jobs --------------------------------------------------------------

    def _step(self) -> None:
        now = time.monotonic()
        for held in list(self._held.values()):
            if held.retry_at is not None:
                # A start failed: try again once its backoff is over (the lease kept).
                if held.stop_wanted:
                    self._finish(held, Outcome("STOPPED", "stopped before it could start"))
                elif now >= held.retry_at:
                    held.retry_at = None
                    held.starting = self._starter.submit(self.start_fn, self._jobs[held.job_id])
                else:
                    self._beat_if_due(held, now)
                continue
            if held.starting is not None:
                if not held.starting.done():
                    self._beat_if_due(held, now)
                    continue
                self._started(held)
                continue
            if held.handle is None:
                continue
            outcome = held.handle.poll()
            if outcome is not None:
                self._finish(held, outcome)
            else:
                self._beat_if_due(held, now)

    def _started(self, held: _Held) -> None:
        fut, held.starting = held.starting, None
        assert fut is not None
        try:
            held.handle = fut.result()
        except StartFailed as e:
            log.warning("job %s cannot run: %s", held.job_id, e)
            self._finish(held, Outcome("FAILED", str(e) or "its start failed"))
            return
        except Exception as e:
            held.start_failures += 1
            if held.start_failures < self.start_attempts:
                backoff = min(60.0, 2.0 ** (held.start_failures - 1))
                log.warning("start of job %s failed (%s of %s), again in %.0f s: %s",
                            held.job_id, held.start_failures, self.start_attempts, backoff, e)
                held.retry_at = time.monotonic() + backoff
                return
            log.warning("start of job %s failed %s times, releasing it: %s", held.job_id, held.start_failures, e)
            self._report(held, lambda: self.client.release(held.job_id, attempt=held.attempt))
            self._forget(held, stop=False)
            return
        if not self._report(held, lambda: self.client.started(held.job_id, attempt=held.attempt)):
            self._forget(held, stop=True)
            return
        held.last_beat = time.monotonic()
        if held.stop_wanted:
            self._ask_stop(held)

    def _beat_if_due(self, held: _Held, now: float) -> None:
        if now - held.last_beat < self.heartbeat_every:
            return
        job: Optional[Job] = None

        def beat() -> None:
            nonlocal job
            job = self.client.heartbeat(held.job_id, attempt=held.attempt)

        if not self._report(held, beat):
            self._forget(held, stop=True)
            return
        held.last_beat = now
        if job is not None and job.stop_requested:
            self._ask_stop(held)

    def _ask_stop(self, held: _Held) -> None:
        held.stop_wanted = True
        if held.handle is not None and not held.stopped:
            held.stopped = True
            log.info("stopping job %s (asked by the service)", held.job_id)
            held.handle.stop()

    def _finish(self, held: _Held, outcome: Outcome) -> None:
        self._report(
            held,
            lambda: self.client.finished(held.job_id, outcome.status, outcome.message, attempt=held.attempt),
        )
        self._forget(held, stop=False)

    def _report(self, held: _Held, call: Callable[[], object]) -> bool:
        """Makes one report; ``False`` when the admission is no longer this runner's
        (409: the lease lapsed and the job moved on; 404: gone)."""
        try:
            call()
            return True
        except FairshareError as e:
            if e.status in (404, 409):
                log.warning("job %s (attempt %s) is no longer ours: %s", held.job_id, held.attempt, e)
                return False
            raise

    def _forget(self, held: _Held, *, stop: bool) -> None:
        self._held.pop(held.job_id, None)
        self._jobs.pop(held.job_id, None)
        if stop and held.handle is not None and not held.stopped:
            held.stopped = True
            held.handle.stop()
        if stop and held.starting is not None:
            # Stop what the start makes once it is made.
            held.starting.add_done_callback(lambda f: f.exception() is None and f.result().stop())
