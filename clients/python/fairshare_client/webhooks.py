"""Checking and reading the service's webhook requests (DESIGN §4, "Events").

A request carries ``X-Fairshare-Signature: t=<unix seconds>,v1=<hex>``, the hex being
HMAC-SHA256 with the webhook's secret of ``"<t>.<raw body>"``, and
``X-Fairshare-Delivery: <event id>``, the same on every retry of that event.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Mapping, Optional, Union

from .models import JobEvent

#: The signature header.
SIGNATURE_HEADER = "X-Fairshare-Signature"
#: The delivery id header (the event id: deduplicate by it).
DELIVERY_HEADER = "X-Fairshare-Delivery"
#: The event header: the new status, or ``job.preempted`` / ``job.stop_requested``.
EVENT_HEADER = "X-Fairshare-Event"


class InvalidSignature(ValueError):
    """The request is not signed with the secret, or its timestamp is too old."""


def sign(secret: Union[str, bytes], body: bytes, timestamp: Optional[int] = None) -> str:
    """The header value the service would send for ``body`` at ``timestamp``."""
    key = secret.encode() if isinstance(secret, str) else secret
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(key, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify_signature(
    secret: Union[str, bytes],
    header: Optional[str],
    body: bytes,
    *,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """Whether ``header`` signs the raw ``body`` with ``secret`` and its timestamp is
    within ``tolerance`` seconds of ``now`` (a replayed old request fails)."""
    if not header:
        return False
    parts = {}
    for item in header.split(","):
        k, _, v = item.strip().partition("=")
        parts.setdefault(k, []).append(v)
    try:
        t = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance:
        return False
    want = sign(secret, body, t).split("v1=", 1)[1]
    return any(hmac.compare_digest(want, v) for v in parts.get("v1", []))


def parse_webhook(
    secret: Union[str, bytes],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = 300.0,
) -> JobEvent:
    """The event of a webhook request, after checking its signature.

    ``headers`` may be any case-insensitive mapping (Django's ``request.headers``,
    httpx's, ...). Raises ``InvalidSignature``; answer 400 then, and 2xx only once the
    event is stored (the service retries anything else)."""
    header = headers.get(SIGNATURE_HEADER) or headers.get(SIGNATURE_HEADER.lower())
    if not verify_signature(secret, header, body, tolerance=tolerance):
        raise InvalidSignature("bad or missing X-Fairshare-Signature")
    name = headers.get(EVENT_HEADER) or headers.get(EVENT_HEADER.lower()) or ""
    kind = name if name in ("job.preempted", "job.stop_requested") else "job"
    return JobEvent.from_dict(json.loads(body), kind=kind)
