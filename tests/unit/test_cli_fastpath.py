"""The CLI's fast path (troupe.client.cli.fastpath): it parses exactly as Typer does or not at
all, prints what the full command prints, and hands every doubtful case to the full command.
Against a small stdlib HTTP server here; tests/e2e/test_cli.py runs it against troupe's."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from troupe.client.cli import fastpath, table
from troupe.client.settings import PROXY_VARIABLES

# -- parsing ---------------------------------------------------------------------------------

PLAIN = [
    ["s1", "--", "true"],
    ["s1", "--", "sh", "-c", "echo --kernel x"],
    ["-k", "sub1", "s1", "--", "hostname"],
    ["s1", "--kernel", "sub2", "--", "hostname"],
    ["--kernel=sub3", "s1", "-u", "root", "--", "id"],
    ["s1", "--user=root", "--", "id", "--", "x"],
    ["-u", "work", "-u", "root", "s1", "--", "id"],
]
NOT_PLAIN = [
    ["s1", "true"],  # no "--": Typer decides where the options end
    ["s1"],
    ["s1", "--"],  # no command
    ["--", "true"],  # no name
    ["-ksub1", "s1", "--", "true"],
    ["s1", "--help"],
    ["--help"],
    ["s1", "s2", "--", "true"],
    ["s1", "-u", "nobody", "--", "true"],  # Typer's error message
    ["s1", "-k", "main2", "--", "true"],  # the SDK's
    ["s1", "-k"],
    ["s1", "--json", "--", "true"],
]


@pytest.mark.parametrize("args", PLAIN)
def test_plain_exec_forms_parse_as_typer_does(args: list[str]) -> None:
    from typer.main import get_command

    from troupe.main import build

    group = get_command(build(("session",)))
    ctx = group.make_context("troupe", ["session", *args])
    session = group.get_command(ctx, "session")  # type: ignore[attr-defined]
    sub = session.get_command(ctx, "exec")
    typers = sub.make_context("exec", list(args), parent=ctx).params
    ours = fastpath.exec_args(args)
    assert ours is not None
    assert ours == {**typers, "command": list(typers["command"])}


@pytest.mark.parametrize("args", NOT_PLAIN)
def test_other_exec_forms_are_left_to_typer(args: list[str]) -> None:
    assert fastpath.exec_args(args) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["session", "list", "--json"],
        ["session", "list", "-aj"],
        ["session", "info", "x"],
        ["session"],
        ["folder", "list"],
    ],
)
def test_other_commands_are_left_to_typer(argv: list[str]) -> None:
    assert fastpath.run(argv) is None


# -- against a server --------------------------------------------------------------------------

SESSION = {
    "name": "s1",
    "status": "RUNNING",
    "type": "interactive",
    "image": "troupe/base:0.1.0",
    "cluster_size": 2,
    "cluster_mode": "single-node",
    "resources": {"cpu": 0.25, "mem": 256 * 1024**2},
    "created_at": "2026-11-27T07:46:20",
    "id": "99df2cd4f00d",
}


class Api(BaseHTTPRequestHandler):
    """Answers as ``Api.answer`` (method, path -> status, headers, body chunks) says."""

    protocol_version = "HTTP/1.1"
    answer: ClassVar[dict[tuple[str, str], tuple[int, dict[str, str], list[bytes]]]] = {}
    seen: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []

    def _serve(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path, dict(self.headers), body))
        status, headers, chunks = self.answer.get(
            (self.command, self.path.split("?")[0]), (404, {}, [b'{"error": {}}'])
        )
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = _serve

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Api]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("TROUPE_API_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("TROUPE_API_KEY", "k1")
    for var in PROXY_VARIABLES:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    Api.answer, Api.seen = {}, []
    http_client = sys.modules.get("http.client")
    try:
        yield Api
    finally:
        server.shutdown()
        server.server_close()
        # the fast path may have loaded http.client without ssl: later tests get this
        # process's own module back
        if http_client is not None:
            sys.modules["http.client"] = http_client
        elif sys.modules.get("http.client") in fastpath._WITHOUT_TLS:
            del sys.modules["http.client"]
        fastpath._WITHOUT_TLS.clear()


def frames(*items: bytes | int | dict[str, Any]) -> list[bytes]:
    lines = []
    for item in items:
        if isinstance(item, bytes):
            msg: Any = {"data": base64.b64encode(item).decode()}
        elif isinstance(item, int):
            msg = {"exit_code": item}
        else:
            msg = item
        lines.append(json.dumps(msg).encode() + b"\n")
    return lines


def test_list_prints_the_full_commands_table(
    api: type[Api], capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer[("GET", "/v1/sessions")] = (200, {}, [json.dumps([SESSION]).encode()])
    assert fastpath.run(["session", "list", "-a"]) == 0
    method, path, headers, _ = api.seen[0]
    assert (method, path) == ("GET", "/v1/sessions?all=true&limit=500")
    assert headers["Authorization"] == "Bearer k1"
    expected = io.StringIO()
    table.print_table(table.SESSION_COLUMNS, [table.session_row(SESSION)], out=expected)
    printed = capsys.readouterr().out
    assert printed == expected.getvalue()
    header, rule, row = printed.splitlines()
    assert header.split() == list(table.SESSION_COLUMNS) and set(rule) == {"─"}
    assert row.split()[:6] == [
        "s1",
        "RUNNING",
        "interactive",
        "troupe/base:0.1.0",
        "2",
        "single-node",
    ]
    assert row.split()[6:8] == ["0.25", "256m"]


@pytest.mark.parametrize(
    ("status", "headers"),
    [(401, {}), (500, {}), (200, {"Link": '</v1/sessions?before=x>; rel="next"'})],
)
def test_list_leaves_errors_and_long_lists_to_the_full_command(
    api: type[Api], capsys: pytest.CaptureFixture[str], status: int, headers: dict[str, str]
) -> None:
    api.answer[("GET", "/v1/sessions")] = (status, headers, [b"[]"])
    assert fastpath.run(["session", "list"]) is None
    assert capsys.readouterr().out == ""
    assert "http.client" not in sys.modules or sys.modules["http.client"].__dict__.get(
        "HTTPSConnection"
    )  # the full command line gets the whole module back


def test_exec_streams_output_and_passes_the_exit_code(
    api: type[Api], capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    api.answer[("POST", "/v1/sessions/s.1/exec")] = (200, {}, frames(b"a\x00", b"b\n", 7))
    assert fastpath.run(["session", "exec", "-k", "sub1", "s.1", "--", "sh", "-c", "x"]) == 7
    assert capsysbinary.readouterr().out == b"a\x00b\n"
    _, _, headers, body = api.seen[0]
    assert json.loads(body) == {"command": ["sh", "-c", "x"], "kernel": "sub1", "user": "work"}
    assert headers["Content-Type"] == "application/json"


def test_exec_reports_a_failure_after_the_start(
    api: type[Api], capsys: pytest.CaptureFixture[str]
) -> None:
    failure = {"error": {"code": "not_running", "message": "kernel sub1 is not running"}}
    api.answer[("POST", "/v1/sessions/s1/exec")] = (200, {}, frames(b"x", failure))
    assert fastpath.run(["session", "exec", "s1", "--", "true"]) == 1
    assert "error: kernel sub1 is not running" in capsys.readouterr().err
    api.answer[("POST", "/v1/sessions/s1/exec")] = (200, {}, frames(b"x"))
    assert fastpath.run(["session", "exec", "s1", "--", "true"]) == 1
    assert fastpath.NO_EXIT_CODE in capsys.readouterr().err


def test_exec_leaves_refusals_to_the_full_command(
    api: type[Api], capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Before the answer's status nothing ran, so the full command may ask again."""
    assert fastpath.run(["session", "exec", "nosuch", "--", "true"]) is None  # 404
    assert capsysbinary.readouterr().out == b""


@pytest.mark.parametrize("name", ["s 1", "../folders/f", "m?x=1", "a#b", "50%", "..", "."])
def test_exec_leaves_names_no_session_has_to_the_full_command(api: type[Api], name: str) -> None:
    """The full command refuses them in one line (finding N4); nothing is sent from here."""
    assert fastpath.run(["session", "exec", name, "--", "true"]) is None
    assert api.seen == []


def test_an_interrupt_ends_it_quietly(api: type[Api], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fastpath, "_open", interrupted)
    assert fastpath.run(["session", "list"]) == 130
    assert fastpath.run(["session", "exec", "s1", "--", "true"]) == 130


@pytest.mark.parametrize(
    "env",
    [
        {"TROUPE_API_URL": "https://127.0.0.1:1"},
        {"HTTPS_PROXY": "http://127.0.0.1:1"},
        {"TROUPE_API_KEY": "k\r\nX-Injected: 1"},
        {"TROUPE_API_URL": "http://127.0.0.1:1"},  # nothing listens
    ],
)
def test_what_the_sdk_handles_is_left_to_it(
    api: type[Api], monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    api.answer[("GET", "/v1/sessions")] = (200, {}, [b"[]"])
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert fastpath.run(["session", "list"]) is None
    assert api.seen == []


def test_the_fast_path_loads_no_heavy_modules(api: type[Api]) -> None:
    api.answer[("GET", "/v1/sessions")] = (200, {}, [b"[]"])
    api.answer[("POST", "/v1/sessions/s1/exec")] = (200, {}, frames(0))
    code = (
        "import sys\n"
        "from troupe.client.cli import fastpath\n"
        "codes = [fastpath.run(['session', 'list']),"
        " fastpath.run(['session', 'exec', 's1', '--', 'true'])]\n"
        "heavy = ('typer', 'rich', 'httpx', 'pydantic', 'ssl', 'dataclasses')\n"
        "print(codes, sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.splitlines()[-1] == "[0, 0] []", r.stdout + r.stderr
