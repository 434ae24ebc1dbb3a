"""Fixtures: the real service binary on 127.0.0.1 with a temp SQLite file, and a
webhook receiver on 127.0.0.1.

The binary is ``$FAIRSHARE_BIN``, else ``target/debug/fairshare`` of this repository
(``cargo build --bin fairshare``). No Ray cluster: the one configured points at a
closed port, so jobs stay QUEUED (what a client test needs)."""

from __future__ import annotations

import http.server
import os
import queue
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional

import httpx
import pytest

from fairshare_client import Client

ROOT = Path(__file__).resolve().parents[3]
SUBMITTER = "py-submitter-token"
ADMIN = "py-admin-token-1"
WEBHOOK_SECRET = "py-webhook-secret-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """A webhook receiver: records every request and answers 204."""

    def __init__(self) -> None:
        self.requests: "queue.Queue[tuple]" = queue.Queue()
        recorded = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                recorded.put((dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Service:
    """The service binary, restartable on the same port and database.

    ``database_url``: SQLite in ``tmp`` unless given (a PostgreSQL database, several
    replicas sharing it); ``extra``: more configuration (TOML appended); ``name``: the
    replica's id and its files' stem."""

    def __init__(
        self,
        tmp: Path,
        webhook_url: str,
        *,
        database_url: Optional[str] = None,
        extra: str = "",
        name: str = "fairshare",
    ):
        binary = os.environ.get("FAIRSHARE_BIN") or str(ROOT / "target" / "debug" / "fairshare")
        if not Path(binary).exists():
            pytest.fail(f"no service binary at {binary}: run `cargo build --bin fairshare` or set FAIRSHARE_BIN")
        self.binary = binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = tmp / f"{name}.toml"
        database_url = database_url or f"sqlite://{tmp}/fairshare.db?mode=rwc"
        self.config.write_text(
            f"""
[server]
bind = "127.0.0.1:{self.port}"
[database]
url = "{database_url}"
[leadership]
replica_id = "{name}"
[events]
poll_interval = "100ms"
webhook_retry_initial_backoff = "50ms"
webhook_retry_max_backoff = "500ms"
[[clusters]]
name = "local"
address = "http://127.0.0.1:{free_port()}"
[[auth.tokens]]
name = "gateway"
token = "{SUBMITTER}"
role = "submitter"
[[auth.tokens]]
name = "ops"
token = "{ADMIN}"
role = "admin"
[secrets]
runtime_env_keys = ["KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio="]
[[sizes]]
name = "s"
cpu = 1
memory_bytes = "1 GiB"
[[webhooks]]
name = "gateway"
url = "{webhook_url}"
secret = "{WEBHOOK_SECRET}"
{extra}
"""
        )
        self.log = open(tmp / f"{name}.log", "ab")
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        env = dict(os.environ, RUST_LOG="warn,sqlx=warn")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--config", str(self.config)], stdout=self.log, stderr=self.log, env=env
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the service never became ready")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture()
def service(tmp_path: Path, receiver: Receiver) -> Iterator[Service]:
    s = Service(tmp_path, receiver.url)
    yield s
    s.stop()
    s.log.close()


@pytest.fixture()
def fs(service: Service) -> Iterator[Client]:
    with Client(service.url, SUBMITTER, retries=3) as c:
        yield c


@pytest.fixture()
def admin(service: Service) -> Iterator[Client]:
    with Client(service.url, ADMIN) as c:
        yield c


def take(iterator: Iterator[Any], n: int, timeout: float = 10.0) -> List[Any]:
    """The next ``n`` items of a blocking iterator, failing after ``timeout`` seconds."""
    out: "queue.Queue[Any]" = queue.Queue()

    def pump() -> None:
        try:
            for _ in range(n):
                out.put(next(iterator))
        except Exception as e:  # surfaced below
            out.put(e)

    threading.Thread(target=pump, daemon=True).start()
    items = []
    deadline = time.monotonic() + timeout
    while len(items) < n:
        try:
            item = out.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"got {len(items)} of {n} items within {timeout} s: {items}")
        if isinstance(item, Exception):
            raise item
        items.append(item)
    return items
