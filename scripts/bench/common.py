"""Helpers shared by the bench scripts (run as `python3 scripts/bench/NAME.py`, so this
folder is on the import path): a free loopback port, and a JSON call."""
import json
import socket
import urllib.request


def free_port():
    """A free TCP port on 127.0.0.1 (every server the benches start listens there)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def call(url, body=None, method=None, timeout=30):
    """`method` (GET, or POST with a body) on `url` with `body` as JSON; the answer as
    JSON when it is an object or a list, else as text. HTTP errors raise."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read().decode()
        return json.loads(raw) if raw.startswith(("{", "[")) else raw
