"""A real ``troupe server`` process (no local agent: no engine is used) at its HTTP edge:
secrets stay out of its log (finding N6) and an oversized body sent before the client reads
still gets a readable 413 (finding N11); docs/reliability.md."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker
KEY = "trp_" + "Zq9" * 14  # shaped like a key; not anyone's
BIG = 16 * 1024**2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp: Path = tmp_path_factory.mktemp("edges")
    s = start_server(tmp, "--no-local-agent", "--agent-token", "test-edges-token")
    try:
        yield s
    finally:
        stop_server(s)


def test_refused_keys_and_secret_parameters_are_not_logged(server: Server) -> None:
    for query in (
        f"api_key={KEY}",
        f"x=1&token=hunter2-{KEY[4:20]}&password=pw-{KEY[4:20]}",
        f"q=trp%5F{KEY[4:]}",
    ):
        r = httpx.get(f"{server.url}/v1/sessions?{query}")
        assert r.status_code == 401, r.text
    r = httpx.get(f"{server.url}/v1/health?secret=s3cr3t-{KEY[4:20]}")
    assert r.status_code == 200
    log = server.log_path.read_text()
    assert "GET /v1/sessions?api_key=[redacted]" in log, log[-2000:]
    assert "x=1&token=[redacted]&password=[redacted]" in log, log[-2000:]
    assert KEY[4:20] not in log and "s3cr3t" not in log and "hunter2" not in log, log[-2000:]


def test_a_client_that_sends_all_before_reading_gets_the_413(server: Server) -> None:
    req = urllib.request.Request(
        f"{server.url}/v1/sessions",
        data=b"x" * BIG,
        headers={"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == 413
    assert json.loads(e.value.read())["error"]["code"] == "too_large"

    # the same with a raw socket: the whole body first, then the answer
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.key}\r\nContent-Length: {BIG}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head + b"x" * BIG)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"too_large"' in answer
