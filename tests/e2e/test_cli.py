"""End-to-end tests of the ``troupe`` CLI against a real ``troupe server`` (Docker)."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest
from tests.conftest import ROOT, Server, free_port

pytestmark = pytest.mark.docker

BASE = "troupe/base:0.1.0"
SMALL = ["--cpu", "0.25", "--mem", "256m"]


def unique(what: str) -> str:
    return f"cli-{what}-{uuid.uuid4().hex[:6]}"


def troupe(
    server: Server, *args: str, input: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs the CLI as admin against ``server``; stdin is ``input`` (never the test's)."""
    return subprocess.run(
        [str(ROOT / ".venv/bin/troupe"), *args],
        env={**server.env, **(env or {})},
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(r: subprocess.CompletedProcess[str], code: int = 0) -> str:
    """Asserts the exit code and that no traceback leaked; returns stdout."""
    assert r.returncode == code, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stdout + r.stderr
    return r.stdout


def failed(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Asserts a clean failure: non-zero exit, the needles on stderr, no traceback."""
    assert r.returncode != 0, f"unexpected success\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stdout + r.stderr
    for needle in needles:
        assert needle in r.stderr, f"{needle!r} not in stderr:\n{r.stderr}"
    return r.stderr


def as_json(r: subprocess.CompletedProcess[str], code: int = 0) -> Any:
    return json.loads(ok(r, code))


def test_interactive_session(server: Server) -> None:
    name = unique("int")
    pend = unique("pend")
    try:
        out = ok(
            troupe(
                server,
                "session",
                "create",
                name,
                "--image",
                BASE,
                "--cluster-size",
                "2",
                *SMALL,
                "--wait",
            )
        )
        assert name in out and "RUNNING" in out

        # the same name again: refused by the server, nothing created
        failed(
            troupe(server, "session", "create", name, "--image", BASE, *SMALL),
            "error:",
            "name",
            "already exists",
        )

        # more cores than are free right now: it waits, then max_pending_seconds cancels it
        r = troupe(
            server,
            "session",
            "create",
            pend,
            "--image",
            BASE,
            "--cpu",
            "2",
            "--mem",
            "256m",
            "--max-pending-seconds",
            "1",
            "--wait",
        )
        failed(r, "CANCELLED", "max_pending_seconds", "main1:")
        assert "PENDING" in r.stderr

        table = ok(troupe(server, "session", "list"))
        assert "NAME" in table and "STATUS" in table
        row = next(line for line in table.splitlines() if line.startswith(name))
        assert "RUNNING" in row and BASE in row and "256m" in row
        listed = as_json(troupe(server, "session", "list", "--json"))
        assert name in [s["name"] for s in listed]

        info = as_json(troupe(server, "session", "info", name, "--json"))
        assert info["status"] == "RUNNING"
        assert [k["hostname"] for k in info["kernels"]] == ["main1", "sub1"]
        assert {k["status"] for k in info["kernels"]} == {"RUNNING"}
        text = ok(troupe(server, "session", "info", name))
        assert "HOSTNAME" in text and "main1" in text and "sub1" in text and "256m" in text

        r = troupe(
            server,
            "session",
            "exec",
            name,
            "--",
            "sh",
            "-c",
            "echo $BACKENDAI_CLUSTER_HOSTS; exit 7",
        )
        assert ok(r, 7).strip() == "main1,sub1"
        assert (
            ok(
                troupe(server, "session", "exec", name, "--kernel", "sub1", "--", "hostname")
            ).strip()
            == "sub1"
        )
        # options after -- belong to the command
        assert (
            ok(troupe(server, "session", "exec", name, "--", "echo", "--kernel", "x")).strip()
            == "--kernel x"
        )

        # write to main1's log (PID 1's stdout), then read it back
        ok(
            troupe(
                server,
                "session",
                "exec",
                name,
                "--user",
                "root",
                "--",
                "sh",
                "-c",
                "echo cli-marker > /proc/1/fd/1",
            )
        )
        assert "[main1] cli-marker" in ok(troupe(server, "session", "logs", name))
        single = ok(troupe(server, "session", "logs", name, "--container", "main1"))
        assert "cli-marker" in single and "[main1]" not in single
        failed(troupe(server, "session", "logs", name, "--container", "sub7"), "sub7")

        r = troupe(
            server, "session", "shell", name, input='hostname; echo "<$(hostname)>"; exit 3\n'
        )
        assert "<main1>" in ok(r, 3)
        failed(troupe(server, "session", "shell", name, "--kernel", "sub9"), "kernel", "sub9")

        done = as_json(troupe(server, "session", "destroy", name, "--json"))
        assert done["status"] == "TERMINATED"
        failed(troupe(server, "session", "exec", name, "--", "true"), "not RUNNING")
        assert "cli-marker" in ok(troupe(server, "session", "logs", name))  # kept
    finally:
        troupe(server, "session", "destroy", name)
        troupe(server, "session", "destroy", pend)


def test_batch_session_exit_code_and_logs(server: Server) -> None:
    name = unique("batch")
    try:
        r = troupe(
            server,
            "session",
            "create",
            name,
            "--image",
            BASE,
            *SMALL,
            "--type",
            "batch",
            "--startup-command",
            "echo hi; exit 5",
            "--wait",
            "--json",
        )
        info = as_json(r, 5)
        assert info["status"] == "TERMINATED" and info["exit_code"] == 5
        assert "TERMINATED" in r.stderr  # progress lines go to stderr
        assert "[main1] hi" in ok(troupe(server, "session", "logs", name))
        # a follow (server-sent events) of a finished session prints the same and ends
        assert "[main1] hi" in ok(troupe(server, "session", "logs", name, "--follow"))
        text = ok(troupe(server, "session", "info", name))
        assert "batch command finished" in text
    finally:
        troupe(server, "session", "destroy", name)


def test_session_create_without_wait(server: Server) -> None:
    name = unique("nowait")
    try:
        out = ok(troupe(server, "session", "create", name, "--image", BASE, *SMALL))
        assert name in out
        assert any(s in out for s in ("PENDING", "SCHEDULED", "PREPARING", "RUNNING"))
    finally:
        ok(troupe(server, "session", "destroy", name))


def full_cli(server: Server, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The whole Typer command line, never the fast path (troupe.client.cli.fastpath)."""
    code = "from troupe.main import app; app(prog_name='troupe')"
    return subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-c", code, *args],
        env=server.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )


def rows(table: bytes, name: str) -> list[list[bytes]]:
    """A table's header and the rows of session ``name``, as fields (column widths follow
    every row shown)."""
    lines = table.splitlines()
    return [lines[0].split()] + [line.split() for line in lines if line.startswith(name.encode())]


def test_fast_path_answers_as_the_full_command(server: Server) -> None:
    """``session list`` and ``session exec`` take the fast path from the ``troupe`` script,
    and print, fail and exit as the full command does."""
    name = unique("fast")
    script = [str(ROOT / ".venv/bin/troupe")]
    timed = [str(ROOT / ".venv/bin/python"), "-X", "importtime", *script]
    try:
        ok(troupe(server, "session", "create", name, "--image", BASE, *SMALL, "--wait"))
        cases = [
            (["session", "list"], 0),
            (["session", "list", "--all"], 0),
            (
                ["session", "exec", name, "--", "sh", "-c", r"printf 'a\000b\n'; exit 5"],
                5,
            ),
            (["session", "exec", "-u", "root", name, "--", "id", "-u"], 0),
        ]
        for args, code in cases:
            fast = subprocess.run([*timed, *args], env=server.env, capture_output=True, timeout=120)
            slow = full_cli(server, *args)
            assert (fast.returncode, slow.returncode) == (code, code), args
            if args[1] == "list":  # other tests' sessions may still be ending: ours only
                mine = rows(fast.stdout, name)
                assert len(mine) == 2 and mine == rows(slow.stdout, name), args
            else:
                assert fast.stdout == slow.stdout, args
            loaded = {line.split(b"|")[-1].strip() for line in fast.stderr.splitlines()}
            assert not loaded & {b"typer", b"rich", b"httpx"}, args  # it was the fast path
        # refused before anything ran: the full command reports it, the same way
        fast_r = troupe(server, "session", "exec", "cli-nosuch", "--", "true")
        slow_r = full_cli(server, "session", "exec", "cli-nosuch", "--", "true")
        assert fast_r.returncode == slow_r.returncode == 1
        assert fast_r.stderr.strip() == slow_r.stderr.decode().strip()
        assert "not found" in fast_r.stderr
    finally:
        troupe(server, "session", "destroy", name)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--image", BASE, "--cluster-size", "0"], ["error:", "cluster_size"]),
        (["--image", BASE, "--env", "1BAD=x"], ["error:", "environ", "1BAD"]),
        (["--image", BASE, "--env", "NOEQ"], ["--env", "K=V"]),
        (["--image", BASE, "--mem", "lots"], ["error:", "mem", "512m"]),
        (["--image", BASE, "--type", "batch"], ["error:", "startup_command"]),
        (["--image", BASE, "--mount", "cli-nosuch-folder"], ["error:", "mounts", "not found"]),
        (["--image", "troupe-test/nosuch:0"], ["error:", "image", "not found"]),
    ],
    ids=["size0", "env-name", "env-no-eq", "mem", "batch-no-cmd", "folder", "image"],
)
def test_bad_input_is_refused(server: Server, args: list[str], needles: list[str]) -> None:
    name = unique("bad")
    r = troupe(server, "session", "create", name, "--cpu", "0.25", *args)
    failed(r, *needles)
    with server.client() as c:
        assert name not in [s.name for s in c.list_sessions(all=True)]


def test_errors_are_one_line_messages(server: Server) -> None:
    failed(troupe(server, "session", "info", "cli-nosuch"), "error:", "not found")
    failed(troupe(server, "session", "destroy", "cli-nosuch"), "not found")
    failed(troupe(server, "session", "shell", "cli-nosuch"), "not found")
    failed(troupe(server, "session", "exec", "cli-nosuch"), "command")  # CMD is required
    failed(troupe(server, "session", "list", env={"TROUPE_API_KEY": "wrong"}), "error:")
    gone = {"TROUPE_API_URL": f"http://127.0.0.1:{free_port()}"}
    failed(troupe(server, "session", "list", env=gone), "cannot reach")
    failed(troupe(server, "session", "shell", "x", env=gone), "error:")


def test_folders(server: Server) -> None:
    name = unique("data")
    sess = unique("mnt")
    try:
        assert name in ok(troupe(server, "folder", "create", name))
        failed(troupe(server, "folder", "create", name), "already exists")
        assert name in ok(troupe(server, "folder", "list"))
        assert name in [f["name"] for f in as_json(troupe(server, "folder", "list", "--json"))]
        failed(
            troupe(server, "session", "create", sess, "--image", BASE, "--mount", f"{name}:xx"),
            "mounts",
            "ro or rw",
        )
        ok(
            troupe(
                server,
                "session",
                "create",
                sess,
                "--image",
                BASE,
                *SMALL,
                "--mount",
                f"{name}:ro",
                "--wait",
            )
        )
        assert f"{name} (ro)" in ok(troupe(server, "session", "info", sess))
        failed(troupe(server, "folder", "delete", name), "mounted", sess)
        ok(troupe(server, "session", "destroy", sess))
        ok(troupe(server, "folder", "delete", name))
        assert name not in ok(troupe(server, "folder", "list"))
        failed(troupe(server, "folder", "delete", name), "not found")
    finally:
        troupe(server, "session", "destroy", sess)
        troupe(server, "folder", "delete", name)


def test_user_create_prints_key(server: Server) -> None:
    name = unique("bob")
    key = ok(troupe(server, "user", "create", name, "-q")).strip()
    assert key and len(key.split()) == 1
    assert as_json(troupe(server, "session", "list", "--json", env={"TROUPE_API_KEY": key})) == []
    failed(troupe(server, "user", "create", unique("eve"), env={"TROUPE_API_KEY": key}), "error:")
    failed(troupe(server, "user", "create", name), "already exists")


def test_agent_and_image_lists(server: Server) -> None:
    agents = as_json(troupe(server, "agent", "list", "--json"))
    assert agents and {"name", "cpu", "cpu_free", "mem", "status"} <= set(agents[0])
    assert agents[0]["name"] in ok(troupe(server, "agent", "list"))
    images = as_json(troupe(server, "image", "list", "--json"))
    assert BASE in [i["name"] for i in images]
    table = ok(troupe(server, "image", "list"))
    row = next(line for line in table.splitlines() if line.startswith(BASE + " "))
    base_id = next(i["id"] for i in images if i["name"] == BASE)
    assert base_id.removeprefix("sha256:")[:12] in row


def test_session_run_on_every_kernel(server: Server) -> None:
    name = "cli-run"
    r = server.cli(
        "session",
        "create",
        name,
        "--image",
        "troupe/base:0.1.0",
        "--cluster-size",
        "3",
        "--cpu",
        "0.25",
        "--mem",
        "256m",
        "--wait",
    )
    assert r.returncode == 0, r.stderr
    try:
        r = server.cli(
            "session",
            "run",
            name,
            "--",
            "sh",
            "-c",
            'echo "rank $BACKENDAI_CLUSTER_LOCAL_RANK"; '
            'test "$(hostname)" = sub2 && exit 9; exit 0',
        )
        assert r.returncode == 9, r.stderr
        lines = sorted(r.stdout.splitlines())
        assert lines == ["[main1] rank 0", "[sub1] rank 1", "[sub2] rank 2"], r.stdout
    finally:
        server.cli("session", "destroy", name)
