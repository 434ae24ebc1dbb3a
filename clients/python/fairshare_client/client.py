"""The client: one ``httpx.Client`` with the bearer token, retries and typed answers."""

from __future__ import annotations

import email.utils
import random
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

import httpx

from .models import Job, JobEvent, JobPage, ResourceLimit, User

#: Statuses after which the same request may succeed: the user's queue is full (429),
#: the database or a dependency is unavailable (503).
RETRY_STATUSES = frozenset({429, 503})

_UNSET: Any = object()


class FairshareError(Exception):
    """An error answer of the service: ``status`` (HTTP), ``code`` (stable, e.g.
    ``invalid_field``, ``idempotency_key_reused``), ``message`` and ``details`` (for a
    422: ``details["field"]`` names the field at fault)."""

    def __init__(self, status: int, code: str, message: str, details: Optional[Dict[str, Any]] = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}

    @classmethod
    def from_response(cls, r: httpx.Response) -> "FairshareError":
        try:
            e = r.json()["error"]
            return cls(r.status_code, e.get("code", ""), e.get("message", ""), e.get("details"))
        except Exception:  # not our JSON (a proxy's page): keep the status
            return cls(r.status_code, "http_error", r.text[:200])


class Client:
    """A client of one fairshare service.

    ``base_url`` e.g. ``"http://fairshare:8080"``; ``token`` a bearer token (role
    submitter, or admin for user changes). Every call is safe to repeat (submissions
    carry an idempotency key), so every call is retried on 429 and 503 (after
    ``Retry-After`` when the answer has one, else exponential backoff from
    ``backoff`` seconds) and on connection errors and timeouts, up to ``retries``
    times; then the last error is raised (``FairshareError`` or ``httpx.HTTPError``).
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.2,
        max_retry_after: float = 60.0,
        transport: Optional[httpx.BaseTransport] = None,
    ):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------

    def _wait(self, attempt: int, r: Optional[httpx.Response]) -> float:
        if r is not None:
            after = r.headers.get("Retry-After")
            if after:
                try:
                    return min(float(after), self.max_retry_after)
                except ValueError:
                    when = email.utils.parsedate_to_datetime(after)
                    if when is not None:
                        return max(0.0, min(when.timestamp() - time.time(), self.max_retry_after))
        return self.backoff * (2**attempt) * (0.5 + random.random() / 2)

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                r = self._http.request(method, path, **kw)
            except (httpx.TransportError, httpx.TimeoutException):
                if attempt >= self.retries:
                    raise
                time.sleep(self._wait(attempt, None))
                attempt += 1
                continue
            if r.status_code in RETRY_STATUSES and attempt < self.retries:
                time.sleep(self._wait(attempt, r))
                attempt += 1
                continue
            if r.status_code >= 400:
                raise FairshareError.from_response(r)
            return r

    # -- jobs -------------------------------------------------------------------

    def submit(
        self,
        user: str,
        entrypoint: str,
        *,
        external_id: Optional[str] = None,
        cpu: Optional[float] = None,
        gpu: Optional[float] = None,
        memory_bytes: Optional[int] = None,
        priority: Optional[int] = None,
        runtime_env: Optional[Dict[str, Any]] = None,
        metadata: Optional[Dict[str, str]] = None,
        max_runtime_s: Optional[int] = None,
        preemptible: Optional[bool] = None,
        custom: Optional[Dict[str, float]] = None,
        pool: Optional[str] = None,
        size: Optional[str] = None,
    ) -> Job:
        """``POST /v1/jobs``. ``preemptible``: the job may be stopped and queued again
        for a user below its fair share (``None``: the user's default). ``external_id`` is the idempotency key (per user): pass
        your own record's id (e.g. ``f"order-{order.pk}"``) so that a retry, even from
        another process, returns the same job; without one a random key is made for
        this call's retries. The same key with another payload raises
        ``FairshareError`` ``idempotency_key_reused`` (422). ``pool``: a ``[[pools]]``
        name: the job is admitted there for a runner outside the service to start
        (issue 30; ask for what the pool counts, e.g. ``cpu=0, custom={"clusters":
        1}``). ``size``: a ``[[sizes]]`` name instead of ``cpu``/``gpu``/
        ``memory_bytes``/``custom`` (both: ``FairshareError`` 422 naming ``size``);
        the job asks for the size's resources and its usage is reported under it."""
        body: Dict[str, Any] = {
            "user": user,
            "entrypoint": entrypoint,
            "external_id": external_id or f"client-{uuid.uuid4()}",
        }
        resources: Dict[str, Any] = {
            k: v for k, v in (("cpu", cpu), ("gpu", gpu), ("memory_bytes", memory_bytes)) if v is not None
        }
        if custom:
            resources["custom"] = dict(custom)
        if resources:
            body["resources"] = resources
        for k, v in (
            ("priority", priority),
            ("runtime_env", runtime_env),
            ("metadata", metadata),
            ("max_runtime_s", max_runtime_s),
            ("preemptible", preemptible),
            ("pool", pool),
            ("size", size),
        ):
            if v is not None:
                body[k] = v
        return Job.from_dict(self._request("POST", "/v1/jobs", json=body).json())

    def get(self, job_id: str) -> Job:
        """``GET /v1/jobs/{id}``."""
        return Job.from_dict(self._request("GET", f"/v1/jobs/{job_id}").json())

    def page(
        self,
        *,
        user: Optional[str] = None,
        status: Optional[str] = None,
        limit: int = 100,
        after: Optional[str] = None,
        pool: Optional[str] = None,
    ) -> JobPage:
        """One page of ``GET /v1/jobs`` (newest first); ``pool``: only jobs that must
        run in that pool."""
        params: Dict[str, Any] = {"limit": limit}
        for k, v in (("user", user), ("status", status), ("after", after), ("pool", pool)):
            if v is not None:
                params[k] = v
        return JobPage.from_dict(self._request("GET", "/v1/jobs", params=params).json())

    def list(
        self,
        *,
        user: Optional[str] = None,
        status: Optional[str] = None,
        pool: Optional[str] = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Every job matching the filters, newest first, fetched page by page."""
        after: Optional[str] = None
        while True:
            p = self.page(user=user, status=status, limit=page_size, after=after, pool=pool)
            yield from p.jobs
            if not p.next_after:
                return
            after = p.next_after

    def cancel(self, job_id: str) -> Job:
        """``POST /v1/jobs/{id}/cancel``: a QUEUED job is STOPPED at once; a running
        one is STOPPED when Ray confirms. A finished job raises ``FairshareError`` 409."""
        return Job.from_dict(self._request("POST", f"/v1/jobs/{job_id}/cancel", json={}).json())

    def logs(self, job_id: str) -> str:
        """``GET /v1/jobs/{id}/logs``: the job's logs from Ray (409 for a job Ray never had)."""
        return str(self._request("GET", f"/v1/jobs/{job_id}/logs").json()["logs"])

    # -- a pool's runner's reports (issue 30, DESIGN §3 "Admission") -------------

    def _report(self, job_id: str, what: str, body: Dict[str, Any], attempt: Optional[int]) -> Job:
        if attempt is not None:
            body["attempt"] = attempt
        return Job.from_dict(self._request("POST", f"/v1/jobs/{job_id}/{what}", json=body).json())

    def started(self, job_id: str, *, attempt: Optional[int] = None) -> Job:
        """``POST /v1/jobs/{id}/started``: the runner started the ADMITTED job (now
        RUNNING); renews the lease. ``attempt``: the admission it is about (the job's
        ``attempt`` when it was ADMITTED); a report of another attempt raises
        ``FairshareError`` 409, so a runner that lost its lease cannot touch the next
        admission. Repeating it is harmless (200)."""
        return self._report(job_id, "started", {}, attempt)

    def heartbeat(self, job_id: str, *, attempt: Optional[int] = None) -> Job:
        """``POST /v1/jobs/{id}/heartbeat``: renews the lease of an ADMITTED or RUNNING
        pool job (``Job.lease_expires_at``)."""
        return self._report(job_id, "heartbeat", {}, attempt)

    def finished(
        self, job_id: str, status: str, message: Optional[str] = None, *, attempt: Optional[int] = None
    ) -> Job:
        """``POST /v1/jobs/{id}/finished``: the job ended ``status`` (SUCCEEDED, FAILED
        or STOPPED; STOPPED is recorded for FAILED when a stop was asked), ``message``
        (≤ 4096 characters) shown as the job's. The same report again is 200; another
        end, or one for a job its lapsed lease put back in the queue, is 409."""
        body: Dict[str, Any] = {"status": status}
        if message is not None:
            body["message"] = message
        return self._report(job_id, "finished", body, attempt)

    def release(self, job_id: str, *, attempt: Optional[int] = None) -> Job:
        """``POST /v1/jobs/{id}/release``: give the admission back without running the
        job (it is QUEUED again, attempt + 1, at its old place)."""
        return self._report(job_id, "release", {}, attempt)

    # -- usage --------------------------------------------------------------------

    def usage(
        self,
        *,
        by: Optional[str] = None,
        step: Optional[str] = None,
        from_: Optional[str] = None,
        to: Optional[str] = None,
    ) -> Dict[str, Any]:
        """``GET /v1/usage``: what was held, per ``by`` (``user``, the default,
        ``group``, ``cluster`` or ``size``) and ``step`` (``hour``, ``day``, the
        default, or ``month``) from ``from_`` to ``to`` (RFC 3339; default the last 30
        days up to now). The report as the service sends it (``UsageReport`` in
        ``/openapi.json``): ``from``, ``to``, ``by``, ``step``, ``now`` and ``rows``,
        each with ``start``, ``key``, ``core_seconds``, ``gpu_seconds``,
        ``memory_byte_seconds``, ``custom_seconds``, ``actual``, ``jobs`` (ended, by
        final status) and ``wait_seconds`` percentiles. A bad parameter raises
        ``FairshareError`` 422 naming it."""
        params = {k: v for k, v in (("by", by), ("step", step), ("from", from_), ("to", to)) if v is not None}
        return self._request("GET", "/v1/usage", params=params).json()

    # -- users (admin token for changes) ----------------------------------------

    def users(self) -> List[User]:
        """``GET /v1/users``."""
        return [User.from_dict(u) for u in self._request("GET", "/v1/users").json()]

    def user(self, user_id: str) -> User:
        """``GET /v1/users/{id}``."""
        return User.from_dict(self._request("GET", f"/v1/users/{user_id}").json())

    def update_user(
        self,
        user_id: str,
        *,
        weight: Optional[float] = None,
        max_running_jobs: Any = _UNSET,
        max_queued_jobs: Any = _UNSET,
        max_resources: Any = _UNSET,
        preemptible: Optional[bool] = None,
        group: Any = _UNSET,
    ) -> User:
        """``PUT /v1/users/{id}`` (creates the user if new). A limit left out stays as
        it is; ``None`` puts it back to the default (no cap for ``max_resources``).
        ``preemptible``: the default of the user's jobs that do not say (left as it
        is when ``None``). ``group``: the path of a group to put the user in, or
        ``None`` for the root (left as it is when not given)."""
        body: Dict[str, Any] = {}
        if preemptible is not None:
            body["preemptible"] = preemptible
        if weight is not None:
            body["weight"] = weight
        if max_running_jobs is not _UNSET:
            body["max_running_jobs"] = max_running_jobs
        if max_queued_jobs is not _UNSET:
            body["max_queued_jobs"] = max_queued_jobs
        if max_resources is not _UNSET:
            body["max_resources"] = (
                max_resources.to_dict() if isinstance(max_resources, ResourceLimit) else max_resources
            )
        if group is not _UNSET:
            body["group"] = group
        return User.from_dict(self._request("PUT", f"/v1/users/{user_id}", json=body).json())

    def set_weight(self, user_id: str, weight: float) -> User:
        """The user's fair-share weight (> 0)."""
        return self.update_user(user_id, weight=weight)

    def set_limits(self, user_id: str, **limits: Any) -> User:
        """Any of ``max_running_jobs``, ``max_queued_jobs``, ``max_resources``."""
        return self.update_user(user_id, **limits)

    def pause(self, user_id: str) -> User:
        """``POST /v1/users/{id}/pause``: nothing new of this user is dispatched."""
        return User.from_dict(self._request("POST", f"/v1/users/{user_id}/pause").json())

    def resume(self, user_id: str) -> User:
        """``POST /v1/users/{id}/resume``."""
        return User.from_dict(self._request("POST", f"/v1/users/{user_id}/resume").json())

    # -- events -----------------------------------------------------------------

    def events(
        self,
        *,
        user: Optional[str] = None,
        job: Optional[str] = None,
        last_event_id: Optional[int] = None,
        reconnect: bool = True,
        idle_timeout: float = 60.0,
        pool: Optional[str] = None,
    ) -> Iterator[JobEvent]:
        """The job events of ``GET /v1/events`` (Server-Sent Events), forever:
        transitions (``kind`` ``"job"``), preemptions (``"job.preempted"``) and a pool
        job's stop requests (``"job.stop_requested"``). ``pool``: only that pool's
        jobs' (a pool's runner).

        Starts after ``last_event_id`` (``0`` = from the first event; ``None`` = from
        now). When the connection drops it reconnects with ``Last-Event-ID`` set to
        the last event it yielded, so nothing is missed or repeated; with
        ``reconnect=False`` it returns instead. ``idle_timeout`` (seconds) must exceed
        the service's ``events.keep_alive`` (15 s). Store ``event.id`` with what you
        did with the event to resume from there after a restart of your own."""
        params = {k: v for k, v in (("user", user), ("job", job), ("pool", pool)) if v is not None}
        last = last_event_id
        delay = 1.0
        attempt = 0
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            try:
                timeout = httpx.Timeout(self._http.timeout.connect, read=idle_timeout)
                with self._http.stream("GET", "/v1/events", params=params, headers=headers, timeout=timeout) as r:
                    if r.status_code in RETRY_STATUSES:
                        raise _Retry(self._wait(attempt, r))
                    if r.status_code >= 400:
                        r.read()
                        raise FairshareError.from_response(r)
                    attempt = 0
                    for ev, retry in _parse_sse(r.iter_lines()):
                        if retry is not None:
                            delay = retry
                        if ev is not None:
                            last = ev.id
                            yield ev
            except _Retry as w:
                if not reconnect:
                    raise FairshareError(503, "unavailable", "the service asked to retry later") from None
                time.sleep(w.seconds)
                attempt += 1
                continue
            except (httpx.TransportError, httpx.TimeoutException):
                if not reconnect:
                    raise
            if not reconnect:
                return
            time.sleep(delay)


class _Retry(Exception):
    def __init__(self, seconds: float):
        self.seconds = seconds


def _parse_sse(lines: Iterator[str]) -> Iterator[Any]:
    """Yields ``(JobEvent or None, retry seconds or None)`` per SSE block."""
    import json

    data: List[str] = []
    event_type = ""
    retry: Optional[float] = None
    for line in lines:
        if line == "":
            if data and (event_type in ("", "job") or event_type.startswith("job.")):
                kind = event_type or "job"
                yield JobEvent.from_dict(json.loads("\n".join(data)), kind=kind), retry
            elif retry is not None:
                yield None, retry
            data, event_type, retry = [], "", None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            event_type = value
        elif field == "retry" and value.isdigit():
            retry = int(value) / 1000.0
