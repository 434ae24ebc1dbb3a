"""Python client of the fairshare scheduler, as an API gateway uses it.

>>> from fairshare_client import Client
>>> fs = Client("http://fairshare:8080", token="...")
>>> job = fs.submit("alice", "python train.py", external_id="order-42", cpu=2)
>>> for event in fs.events(user="alice"): ...

Modules: ``client`` (``Client``, ``FairshareError``), ``models`` (typed answers,
checked against ``/openapi.json``), ``webhooks`` (signature checks).
"""

from .client import Client, FairshareError
from .models import STATUSES, TERMINAL, Job, JobEvent, JobPage, ResourceLimit, Resources, User
from .webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, InvalidSignature, parse_webhook, sign, verify_signature

__all__ = [
    "Client",
    "FairshareError",
    "Job",
    "JobEvent",
    "JobPage",
    "ResourceLimit",
    "Resources",
    "User",
    "STATUSES",
    "TERMINAL",
    "InvalidSignature",
    "parse_webhook",
    "sign",
    "verify_signature",
    "SIGNATURE_HEADER",
    "DELIVERY_HEADER",
]
