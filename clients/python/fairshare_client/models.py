"""Typed views of the service's JSON, one dataclass per schema of ``/openapi.json``.

Field names are the schema's property names (``tests/test_models.py`` checks them
against the live document), so a field the service adds or renames fails the tests
instead of surprising the gateway. Unknown keys in an answer are ignored, so a newer
service does not break an older client.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")

#: Every job status, in lifecycle order; the last three are final.
STATUSES = ("QUEUED", "DISPATCHING", "ADMITTED", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def _time(v: Optional[str]) -> Optional[datetime]:
    if v is None:
        return None
    # RFC 3339 with a Z; fromisoformat takes +00:00 on every Python 3.
    return datetime.fromisoformat(v.replace("Z", "+00:00"))


def _build(cls: Type[T], data: Dict[str, Any], **converted: Any) -> T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in data.items() if k in names}
    values.update(converted)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        values.setdefault(f.name, None)
    return cls(**values)


@dataclass(frozen=True)
class Resources:
    """``Amounts``: cores, GPUs and bytes, and custom resources by name (``QPU``, a
    license; ``None`` when there are none)."""

    cpu: float
    gpu: float
    memory_bytes: int
    custom: Optional[Dict[str, float]] = None

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Resources":
        return _build(cls, d)


@dataclass(frozen=True)
class Job:
    """``JobView``: a job as ``GET /v1/jobs/{id}`` shows it."""

    id: str
    user: str
    external_id: Optional[str]
    status: str
    priority: int
    entrypoint: str
    resources: Resources
    metadata: Optional[Dict[str, Any]]
    group: Optional[str]
    max_runtime_s: Optional[int]
    submitted_at: datetime
    dispatched_at: Optional[datetime]
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    cluster: Optional[str]
    message: Optional[str]
    pending_reason: Optional[str]
    queue_position: Optional[int]
    actual_resources: Optional[Resources]
    #: QUEUED job: when it is expected to start (the policy run forward from the
    #: live state; DESIGN §2 "Estimates"); None when not estimated.
    estimated_start: Optional[datetime] = None
    #: Its place among all waiting jobs for the same capacity, by estimated start.
    position: Optional[int] = None
    #: Where its expected run time comes from: "max_runtime", "learned", "default".
    estimate_basis: Optional[str] = None
    #: QUEUED job the estimates stopped before reaching (past their horizon): from
    #: when on it could start; None otherwise.
    estimated_after: Optional[datetime] = None
    attempt: Optional[int] = None
    preemptible: Optional[bool] = None
    preemptions: Optional[int] = None
    preempting: Optional[bool] = None
    #: The pool a runner outside the service runs it in (issue 30), if any.
    pool: Optional[str] = None
    #: ADMITTED/RUNNING pool job: when its runner's lease lapses.
    lease_expires_at: Optional[datetime] = None
    #: A cancel asked the pool's runner to stop it.
    stop_requested: Optional[bool] = None

    @property
    def finished(self) -> bool:
        """Whether the job is SUCCEEDED, FAILED or STOPPED (it never changes again)."""
        return self.status in TERMINAL

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Job":
        return _build(
            cls,
            d,
            resources=Resources.from_dict(d.get("resources") or {}),
            actual_resources=(
                Resources.from_dict(d["actual_resources"])
                if d.get("actual_resources") is not None
                else None
            ),
            submitted_at=_time(d.get("submitted_at")),
            dispatched_at=_time(d.get("dispatched_at")),
            started_at=_time(d.get("started_at")),
            finished_at=_time(d.get("finished_at")),
            lease_expires_at=_time(d.get("lease_expires_at")),
            estimated_start=_time(d.get("estimated_start")),
            estimated_after=_time(d.get("estimated_after")),
        )


@dataclass(frozen=True)
class JobPage:
    """``JobPage``: one page of ``GET /v1/jobs``."""

    jobs: List[Job]
    next_after: Optional[str]

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "JobPage":
        return cls(jobs=[Job.from_dict(j) for j in d.get("jobs", [])], next_after=d.get("next_after"))


@dataclass(frozen=True)
class ResourceLimit:
    """``ResourceLimit``: a cap on a user's allocation; ``None`` = not capped."""

    cpu: Optional[float] = None
    gpu: Optional[float] = None
    memory_bytes: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ResourceLimit":
        return _build(cls, d)


@dataclass(frozen=True)
class User:
    """``UserView``: a user's settings, counts and fair-share state."""

    id: str
    display_name: Optional[str]
    weight: float
    paused: bool
    max_running_jobs: Optional[int]
    max_queued_jobs: Optional[int]
    max_resources: Optional[ResourceLimit]
    effective_max_running_jobs: int
    effective_max_queued_jobs: int
    queued: int
    running: int
    allocation: Resources
    declared_allocation: Resources
    share: float
    usage: float
    key: float
    created_at: datetime
    updated_at: datetime
    preemptible: Optional[bool] = None
    #: The path of its group (``None``: the root).
    group: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "User":
        limit = d.get("max_resources")
        return _build(
            cls,
            d,
            max_resources=ResourceLimit.from_dict(limit) if limit is not None else None,
            allocation=Resources.from_dict(d.get("allocation") or {}),
            declared_allocation=Resources.from_dict(d.get("declared_allocation") or {}),
            created_at=_time(d.get("created_at")),
            updated_at=_time(d.get("updated_at")),
        )


@dataclass(frozen=True)
class JobEvent:
    """``JobEvent``: one job transition, from ``GET /v1/events`` or a webhook.

    ``id`` is increasing; it is the SSE event id (``Last-Event-ID``) and the webhook's
    ``X-Fairshare-Delivery``, so a receiver deduplicates by it.
    """

    id: int
    job_id: str
    user: str
    external_id: Optional[str]
    from_: Optional[str]
    to: str
    at: datetime
    message: Optional[str]
    #: The pool the job must run in (issue 30), ``None`` for a job run on Ray.
    pool: Optional[str] = None
    #: What the row means, as the SSE ``event:`` line and the webhook's
    #: ``X-Fairshare-Event`` name it: ``"job"`` (a transition), ``"job.preempted"``
    #: (a preemption's stop) or ``"job.stop_requested"`` (a pool job's runner is
    #: asked to stop it). Not in the schema: the client sets it.
    kind: str = "job"

    @property
    def stop_requested(self) -> bool:
        """Whether this event asks the job's runner to stop it (a cancel of an
        admitted or started pool job)."""
        return self.kind == "job.stop_requested"

    @classmethod
    def from_dict(cls, d: Dict[str, Any], kind: str = "job") -> "JobEvent":
        # `from` is a Python keyword: the field is `from_`.
        return _build(cls, d, from_=d.get("from"), at=_time(d.get("at")), kind=kind)


#: Each model and the OpenAPI schema it mirrors, with the Python names of fields that
#: differ (checked by the tests).
SCHEMAS = {
    Job: ("JobView", {}),
    JobPage: ("JobPage", {}),
    Resources: ("Amounts", {}),
    ResourceLimit: ("ResourceLimit", {}),
    User: ("UserView", {}),
    # ``None``: set by the client, not a schema field.
    JobEvent: ("JobEvent", {"from_": "from", "kind": None}),
}
