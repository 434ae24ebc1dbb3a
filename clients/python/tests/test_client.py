"""The client against the real service binary (see conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import httpx
import pytest

from conftest import SUBMITTER, WEBHOOK_SECRET, take
from fairshare_client import (
    Client,
    FairshareError,
    InvalidSignature,
    ResourceLimit,
    parse_webhook,
    sign,
    verify_signature,
)
from fairshare_client.models import SCHEMAS


def test_every_model_has_exactly_the_fields_of_its_openapi_schema(service):
    doc = httpx.get(f"{service.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for model, (name, renamed) in SCHEMAS.items():
        assert name in schemas, f"{name} is not in /openapi.json"
        wanted = set(schemas[name]["properties"])
        have = {renamed.get(f.name, f.name) for f in dataclasses.fields(model)} - {None}
        assert have == wanted, f"{model.__name__} vs {name}: missing {wanted - have}, extra {have - wanted}"


def test_submit_is_idempotent_by_external_id_and_get_shows_the_job(fs, admin):
    job = fs.submit("alice", "python train.py", external_id="order-1", cpu=2, metadata={"order": "1"})
    again = fs.submit("alice", "python train.py", external_id="order-1", cpu=2, metadata={"order": "1"})
    assert again.id == job.id
    got = fs.get(job.id)
    assert (got.user, got.status, got.external_id, got.resources.cpu) == ("alice", "QUEUED", "order-1", 2.0)
    assert got.queue_position == 1 and not got.finished
    # No cluster: nothing can start, so no estimate (the fields are there, null).
    assert (got.estimated_start, got.position) == (None, None)
    with pytest.raises(FairshareError) as e:
        fs.submit("alice", "python other.py", external_id="order-1")
    assert (e.value.status, e.value.code) == (422, "idempotency_key_reused")
    with pytest.raises(FairshareError) as e:
        fs.submit("alice", "python train.py", cpu=-1)
    assert (e.value.status, e.value.details.get("field")) == (422, "resources.cpu")
    # Preemption is opt-in: per job, else the user's default.
    assert (got.preemptible, got.attempt, got.preemptions) == (False, 1, 0)
    assert fs.submit("alice", "python train.py", preemptible=True).preemptible is True
    assert admin.update_user("alice", preemptible=True).preemptible is True
    assert fs.submit("alice", "python train.py").preemptible is True
    # Custom resources go with the job (no cluster has reported yet, so none is
    # refused); a user goes into a group and back to the root.
    assert fs.submit("alice", "python train.py", custom={"QPU": 1}).resources.custom == {"QPU": 1.0}
    assert admin._request("PUT", "/v1/groups/lab", json={}).status_code == 200
    assert admin.update_user("alice", group="lab").group == "lab"
    assert admin.update_user("alice", group=None).group is None


def test_a_named_size_stands_for_resources_and_usage_is_reported(fs):
    job = fs.submit("sally", "python s.py", size="s")
    assert (job.resources.cpu, job.resources.memory_bytes) == (1.0, 1 << 30)
    assert job.metadata == {"fairshare.size": "s"}
    with pytest.raises(FairshareError) as e:
        fs.submit("sally", "python s.py", size="s", cpu=2)
    assert (e.value.status, e.value.details.get("field")) == (422, "size")
    with pytest.raises(FairshareError) as e:
        fs.submit("sally", "python s.py", size="nosuch")
    assert (e.value.status, e.value.details.get("field")) == (422, "size")
    # Cancelled while queued: one job ended STOPPED, nothing held.
    fs.cancel(job.id)
    report = fs.usage(by="size", step="day")
    assert (report["by"], report["step"]) == ("size", "day")
    rows = [r for r in report["rows"] if r["key"] == "s"]
    assert sum(r["jobs"]["stopped"] for r in rows) == 1, report
    assert sum(r["core_seconds"] for r in rows) == 0
    with pytest.raises(FairshareError) as e:
        fs.usage(by="week")
    assert (e.value.status, e.value.details.get("field")) == (422, "by")


def test_list_iterates_every_page_newest_first(fs):
    ids = [fs.submit("pager", f"echo {i}").id for i in range(5)]
    listed = [j.id for j in fs.list(user="pager", page_size=2)]
    assert listed == list(reversed(ids))
    assert [j.id for j in fs.list(user="pager", status="STOPPED")] == []


def test_cancel_stops_a_queued_job_and_logs_of_it_are_a_conflict(fs):
    job = fs.submit("bob", "sleep 100")
    assert fs.cancel(job.id).status == "STOPPED"
    assert fs.get(job.id).finished
    with pytest.raises(FairshareError) as e:
        fs.logs(job.id)
    assert e.value.status == 409
    with pytest.raises(FairshareError) as e:
        fs.get("00000000-0000-0000-0000-000000000000")
    assert e.value.status == 404


def test_users_are_paused_resumed_weighted_and_limited_by_an_admin(fs, admin):
    fs.submit("carol", "echo")
    with pytest.raises(FairshareError) as e:
        fs.pause("carol")
    assert e.value.status == 403
    assert admin.pause("carol").paused
    assert not admin.resume("carol").paused
    assert admin.set_weight("carol", 2.5).weight == 2.5
    u = admin.set_limits("carol", max_running_jobs=3, max_resources=ResourceLimit(cpu=8))
    assert (u.max_running_jobs, u.effective_max_running_jobs, u.max_resources) == (3, 3, ResourceLimit(cpu=8.0))
    u = admin.set_limits("carol", max_running_jobs=None, max_resources=None)
    assert u.max_running_jobs is None and u.max_resources is None and u.weight == 2.5
    assert "carol" in {x.id for x in fs.users()}
    assert fs.user("carol").queued == 1


def test_a_full_queue_is_retried_after_its_retry_after(fs, admin, service):
    admin.set_limits("dave", max_queued_jobs=1)
    first = fs.submit("dave", "echo 1")
    threading.Timer(0.3, lambda: fs.cancel(first.id)).start()
    started = time.monotonic()
    second = fs.submit("dave", "echo 2")  # 429 first, then accepted once a slot is free
    assert second.status == "QUEUED"
    assert time.monotonic() - started >= 0.9, "Retry-After: 1 was not honoured"
    no_retries = Client(service.url, SUBMITTER, retries=0)
    with pytest.raises(FairshareError) as e:
        no_retries.submit("dave", "echo 3")
    assert e.value.status == 429


def test_events_are_iterated_and_resumed_from_the_last_one_seen(fs):
    a = fs.submit("erin", "echo a", external_id="a")
    b = fs.submit("erin", "echo b")
    first = take(fs.events(user="erin", last_event_id=0), 2)
    assert [(e.job_id, e.from_, e.to) for e in first] == [(a.id, None, "QUEUED"), (b.id, None, "QUEUED")]
    assert first[0].external_id == "a" and first[0].user == "erin"
    fs.cancel(a.id)
    fs.submit("someone-else", "echo")
    c = fs.submit("erin", "echo c")
    gap = take(fs.events(user="erin", last_event_id=first[-1].id), 2)
    assert [(e.job_id, e.to) for e in gap] == [(a.id, "STOPPED"), (c.id, "QUEUED")]


def test_the_event_iterator_reconnects_across_a_restart_without_missing_or_repeating(fs, service):
    stream = fs.events(user="frank", last_event_id=0)
    seen = []
    done = threading.Event()

    def pump():
        for e in stream:
            seen.append(e)
            if len(seen) == 3:
                done.set()
                return

    threading.Thread(target=pump, daemon=True).start()
    j1 = fs.submit("frank", "echo 1")
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert seen, "the live event did not arrive"
    service.restart()
    j2 = fs.submit("frank", "echo 2")
    fs.cancel(j1.id)
    assert done.wait(20), f"only {seen}"
    assert [(e.job_id, e.to) for e in seen] == [(j1.id, "QUEUED"), (j2.id, "QUEUED"), (j1.id, "STOPPED")]


def test_a_webhook_request_verifies_with_the_secret_and_parses_to_the_event(fs, receiver):
    job = fs.submit("gina", "echo", external_id="w-1")
    raw_headers, body = receiver.requests.get(timeout=10)
    headers = httpx.Headers(raw_headers)  # case-insensitive, as Django's request.headers
    event = parse_webhook(WEBHOOK_SECRET, headers, body)
    assert (event.job_id, event.to, event.external_id) == (job.id, "QUEUED", "w-1")
    assert headers["X-Fairshare-Delivery"] == str(event.id)
    with pytest.raises(InvalidSignature):
        parse_webhook("another-secret-0123456789", headers, body)
    with pytest.raises(InvalidSignature):
        parse_webhook(WEBHOOK_SECRET, headers, body.replace(b"gina", b"mallory"))
    stale = sign(WEBHOOK_SECRET, body, int(time.time()) - 3600)
    assert not verify_signature(WEBHOOK_SECRET, stale, body)
    assert verify_signature(WEBHOOK_SECRET, stale, body, tolerance=7200)
    assert json.loads(body)["id"] == event.id
