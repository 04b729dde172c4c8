"""Every failure of the command line is one line on stderr and a non-zero exit, never a
traceback: session references that are no name or id (finding N4), answers the SDK cannot
read, local files that are not there, and errors no command expected (finding N10,
docs/reliability.md). Against a stand-in server on loopback that records what reaches it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from troupe.api.models import NAME_PATTERN
from troupe.client import paths
from troupe.client.settings import PROXY_VARIABLES
from troupe.main import app


class Server(BaseHTTPRequestHandler):
    """Answers every request with ``Server.answer`` (status, content type, body)."""

    answer: ClassVar[tuple[int, str, bytes]] = (404, "application/json", b"{}")
    seen: ClassVar[list[tuple[str, str]]] = []

    def _serve(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path))
        status, kind, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[type[Server]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("TROUPE_API_URL", f"http://127.0.0.1:{httpd.server_port}")
    monkeypatch.setenv("TROUPE_API_KEY", "k1")
    monkeypatch.setenv("TROUPE_CONFIG_DIR", str(tmp_path / "config"))
    for var in PROXY_VARIABLES:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    Server.answer, Server.seen = (404, "application/json", b"{}"), []
    try:
        yield Server
    finally:
        httpd.shutdown()
        httpd.server_close()


def troupe(*args: str, stdin: str | None = None) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, input=stdin)
    return r.exit_code, r.output


def one_error_line(code: int, output: str) -> str:
    assert code != 0, output
    assert "Traceback" not in output, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def test_the_reference_pattern_is_the_models() -> None:
    assert f"^{paths.REF_PATTERN}$" == NAME_PATTERN


def test_paths_escape_each_segment_whole() -> None:
    assert paths.api_path("folders", "a b/c?d#e%f") == "/folders/a%20b%2Fc%3Fd%23e%25f"
    assert paths.session_path("s.1", "exec") == "/sessions/s.1/exec"
    for seg in ("", ".", ".."):
        with pytest.raises(paths.Invalid):
            paths.api_path("folders", seg)


COMMANDS = [
    ["session", "info"],
    ["session", "destroy"],
    ["session", "logs"],
    ["session", "logs", "--follow"],
    ["session", "exec", "--", "true"],
    ["session", "run", "--", "true"],
    ["session", "shell"],
    ["session", "tunnel"],
    ["session", "ssh-config"],
    ["session", "forward", "8888"],
]


@pytest.mark.parametrize("ref", ["../folders/tmpf", "m?x=1", "a#b", "50%", ".."])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_references_no_session_can_have_are_refused_in_one_line(
    server: type[Server], command: list[str], ref: str
) -> None:
    """``troupe session destroy ../folders/tmpf`` once sent ``DELETE /v1/folders/tmpf``."""
    line = one_error_line(*troupe(*command[:2], ref, *command[2:]))
    assert "is not a session name or id" in line, line
    assert server.seen == []


@pytest.mark.parametrize(
    ("answer", "command", "said"),
    [
        ((200, "application/json", b'{"error": "x"}'), ["session", "info", "s1"], "SessionInfo"),
        ((200, "text/html", b"<html>proxy</html>"), ["session", "info", "s1"], "not JSON"),
        ((200, "application/json", b"{}"), ["session", "destroy", "s1"], "SessionInfo"),
        ((200, "application/json", b"[1]"), ["user", "limits"], "UserDetail"),
        ((200, "application/json", b'{"a": 1}'), ["session", "list", "--json"], "sessions"),
        ((200, "application/json", b"{}"), ["folder", "list"], "FolderInfo"),
        ((200, "application/json", b"[{}]"), ["image", "list"], "ImageInfo"),
        ((204, "application/json", b""), ["agent", "list"], "AgentInfo"),
    ],
)
def test_an_answer_the_cli_cannot_read_is_one_line(
    server: type[Server], answer: tuple[int, str, bytes], command: list[str], said: str
) -> None:
    server.answer = answer
    line = one_error_line(*troupe(*command))
    assert "unexpected answer from the server" in line and said in line, line


def test_a_missing_local_file_is_one_line(server: type[Server], tmp_path: Path) -> None:
    line = one_error_line(*troupe("session", "cp", str(tmp_path / "nothing"), "s1:x"))
    assert line == f"error: no such file or directory: {tmp_path / 'nothing'}"
    line = one_error_line(*troupe("session", "cp", "s1:x", str(tmp_path / "no" / "dir")))
    assert line == f"error: no such directory: {tmp_path / 'no'}"


def test_an_error_no_command_expected_is_one_line(
    server: type[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    from troupe.client import sdk

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(sdk.Client, "get_session", broken)
    line = one_error_line(*troupe("session", "info", "s1"))
    assert line == "error: unexpected error (RuntimeError): something broke"

    def gone(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", "/some/file")

    monkeypatch.setattr(sdk.Client, "get_session", gone)
    line = one_error_line(*troupe("session", "info", "s1"))
    assert line == "error: Permission denied: /some/file"


# -- the user commands read the typed answers (one Limits shape, troupe.api.users) -----------

DETAIL = {
    "id": "u1",
    "name": "bob",
    "admin": False,
    "created_at": "2026-11-27T07:46:20",
    "api_key": None,
    "revoked": False,
    "limits": {
        "sessions": 4, "kernels": None, "cpu": 2.5, "mem": 2 * 1024**3, "gpu": 0,
        "streams": 32, "max_priority": 0, "groups": ["default"],
        "max_time_limit": 7200, "max_idle_timeout": None,
    },
    "overrides": {"mem": 2 * 1024**3},
    "usage": {"sessions": 1, "kernels": 2, "cpu": 1.0, "mem": 1024**3, "gpu": 0},
}  # fmt: skip


def test_user_limits_shows_the_typed_answer(server: type[Server]) -> None:
    server.answer = (200, "application/json", json.dumps(DETAIL).encode())
    code, output = troupe("user", "limits", "bob")
    assert code == 0, output
    rows = {line.split()[0]: line.split()[1:] for line in output.splitlines() if line.strip()}
    assert rows["mem"] == ["2g", "1g", "user"] and rows["cpu"] == ["2.5", "1", "default"]
    assert rows["kernels"] == ["unlimited", "2", "default"]
    assert rows["groups"] == ["default", "-", "default"] and rows["user:"] == ["bob"]
    assert rows["max_time_limit"] == ["2", "h", "-", "default"]
    assert rows["max_idle_timeout"] == ["unlimited", "-", "default"]
    code, output = troupe("user", "limits", "bob", "--mem", "2g", "--json")
    assert code == 0 and json.loads(output) == DETAIL, output
    assert server.seen[-1] == ("PUT", "/v1/users/bob/limits")


def test_user_list_and_revoke_show_the_typed_answers(server: type[Server]) -> None:
    listed = {k: DETAIL[k] for k in ("id", "name", "admin", "created_at", "api_key", "revoked")}
    server.answer = (200, "application/json", json.dumps([listed]).encode())
    code, output = troupe("user", "list")
    assert code == 0 and "bob" in output and "valid" in output and "u1" in output, output
    server.answer = (200, "application/json", json.dumps({**listed, "revoked": True}).encode())
    code, output = troupe("user", "revoke", "bob")
    assert code == 0 and output.strip() == "user bob: API key revoked", output


def test_usage_errors_and_exit_codes_stay_typers(server: type[Server]) -> None:
    code, output = troupe("session", "info")
    assert code == 2 and "Missing argument" in output
    code, output = troupe("session", "exec", "s1", "-u", "nobody", "--", "true")
    assert code == 2 and "nobody" in output
