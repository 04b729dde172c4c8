"""A supervised kernel's command failure reported on its report FIFO (agent/reports.py), its
container left running and held in place (agent/events.py, agent/hold.py): what a report is,
bounded reads, which reports are old news."""

from __future__ import annotations

import asyncio
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_agent_hold import CID, NAME
from tests.unit.test_kernel_specs import specs

from troupe.agent import events, files, hold, reports
from troupe.api.agent import LABEL_KERNEL, LABEL_SESSION, KernelExit
from troupe.api.policies import SUPERVISED_VAR


def test_a_report_is_exit_status_attempt() -> None:
    assert reports.parse(b"exit 5 0") == (5, 0)
    assert reports.parse(b"exit 255 12\r") == (255, 12)
    for bad in (b"exit 0 0", b"exit 256 0", b"exit 5", b"exit 5 0 x", b"exit -1 0", b"peers"):
        assert reports.parse(bad) is None, bad
    assert reports.parse(b"exit 5 " + b"9" * 11) is None


def _fifo(tmp_path: Path, name: str = NAME) -> Path:
    path = tmp_path / f"{name}{files.REPORTS_SUFFIX}"
    os.mkfifo(path, 0o600)
    return path


def _read(tmp_path: Path, writes: list[bytes]) -> list[tuple[str, int, int]]:
    """Reports handed on after these writes to a watched FIFO."""
    got: list[tuple[str, int, int]] = []

    async def on_report(name: str, status: int, attempt: int) -> None:
        got.append((name, status, attempt))

    async def go() -> None:
        r = reports.Reports(on_report, tmp_path)
        r.watch(NAME)
        fd = os.open(tmp_path / f"{NAME}{files.REPORTS_SUFFIX}", os.O_WRONLY | os.O_NONBLOCK)
        try:
            for data in writes:
                os.write(fd, data)
                for _ in range(50):  # (the reader takes 4 KiB a turn)
                    await asyncio.sleep(0)
        finally:
            os.close(fd)
            r.close()

    asyncio.run(go())
    return got


def test_reports_are_read_line_by_line_across_writes(tmp_path: Path) -> None:
    _fifo(tmp_path)
    got = _read(tmp_path, [b"ex", b"it 3 1\nexit 4", b" 2\ngarbage\n"])
    assert got == [(NAME, 3, 1), (NAME, 4, 2)]


def test_reads_stay_bounded_whatever_a_kernel_writes(tmp_path: Path) -> None:
    _fifo(tmp_path)
    got = _read(tmp_path, [b"x" * 30000, b"y" * 30000, b"exit 8 0\nexit 9 0\n"])
    assert got == [(NAME, 9, 0)]


async def _ignored(name: str, status: int, attempt: int) -> None:
    """A Reports' handler for tests of what it watches, not of what it reads."""


def test_sync_reads_the_engines_containers_fifos_only(tmp_path: Path) -> None:
    """Another agent's FIFOs in the same directory (the test bed's hosts) are not read."""

    async def go() -> None:
        r = reports.Reports(_ignored, tmp_path)
        one = _fifo(tmp_path, "troupe-a-main1")
        _fifo(tmp_path, "troupe-a-sub1")
        _fifo(tmp_path, "troupe-a-sub3")  # (another engine's)
        (tmp_path / f"troupe-a-sub2{files.REPORTS_SUFFIX}").write_text("")  # (no FIFO)
        r.sync({"troupe-a-main1", "troupe-a-sub1", "troupe-a-sub2", "troupe-b-main1"})
        assert set(r._fds) == {"troupe-a-main1", "troupe-a-sub1"}
        one.unlink()
        r.sync({"troupe-a-sub1"})
        assert set(r._fds) == {"troupe-a-sub1"}
        r.unwatch("troupe-a-sub1")
        r.watch("../escape")
        assert not r._fds
        r.close()

    asyncio.run(go())


def test_only_a_supervised_kernel_gets_a_report_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "FILES_DIR", tmp_path)
    plain = specs()[1]
    made = files.kernel_files(plain)
    assert made is not None and made.events is not None and made.reports is None
    sup = plain.model_copy(update={"env": {**plain.env, SUPERVISED_VAR: "1"}, "hostname": "sub9"})
    made = files.kernel_files(sup)
    assert made is not None and made.reports == files.reports_path(sup.container_name)
    files.remove_files(sup.session_id)
    assert not list(tmp_path.iterdir())


def running(oom: bool = False) -> dict[str, Any]:
    return {
        "Id": CID,
        "Name": f"/{NAME}",
        "Config": {
            "Env": [f"{SUPERVISED_VAR}=1"],
            "Labels": {LABEL_SESSION: "s1", LABEL_KERNEL: "k1"},
        },
        "State": {"Running": True, "OOMKilled": oom},
    }


class _Engine:
    """One container, as the fake engine's inspection and kill see it."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.info, self.killed = info, False
        self.containers = types.SimpleNamespace(container=lambda _: self)

    async def show(self) -> dict[str, Any]:
        return self.info

    async def kill(self, signal: str) -> None:
        self.killed = True


def _report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    info: dict[str, Any],
    attempt: int = 0,
    before: Callable[[hold.Holds], None] = lambda h: None,
    meanwhile: Callable[[hold.Holds], None] = lambda h: None,
    removing: set[str] | None = None,
) -> tuple[list[KernelExit], hold.Holds, _Engine]:
    """Hands one report of the container to an ExitWatcher; ``meanwhile`` runs during the
    read of its last lines. The exits it reported, its holds and its engine."""
    monkeypatch.setattr(hold, "FILES_DIR", tmp_path)
    monkeypatch.setattr(files, "FILES_DIR", tmp_path)
    os.mkfifo(files.events_path(NAME), 0o600)
    engine = _Engine(info)
    holds = hold.Holds(lambda: engine)  # type: ignore[arg-type,return-value]
    reported: list[KernelExit] = []

    async def last_lines(docker: Any, cid: str, n: int) -> list[str]:
        meanwhile(holds)
        return ["boom"]

    async def on_exit(e: KernelExit) -> None:
        reported.append(e)

    monkeypatch.setattr(events, "last_lines", last_lines)
    removing = set() if removing is None else removing

    async def go() -> None:
        before(holds)
        watcher = events.ExitWatcher(engine, on_exit, removing.__contains__, holds)  # type: ignore[arg-type]
        await watcher._report(NAME, 5, attempt)
        holds.close()

    asyncio.run(go())
    return reported, holds, engine


def test_a_report_is_the_kernels_exit_and_holds_it_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported, holds, engine = _report(tmp_path, monkeypatch, running())
    assert reported == [
        KernelExit(session_id="s1", kernel_id="k1", exit_code=5, last_logs=["boom"])
    ]
    assert holds.is_held(CID, NAME) and hold.held_path(NAME).exists() and not engine.killed

    async def settled() -> bool:
        return await holds.settle(CID)

    assert asyncio.run(settled())  # (its start is done: there is none to make)


@pytest.mark.parametrize(
    "case",
    ["stopped", "older attempt", "restart during reads", "removal during reads", "held already"],
)
def test_a_report_that_is_old_news_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    info = running()
    removing: set[str] = set()

    def before(h: hold.Holds) -> None:
        if case == "older attempt":  # (its restart to attempt 1 began before it was read)
            h.starting(CID, 1)
        elif case == "held already":
            h.hold_in_place(running())

    def meanwhile(h: hold.Holds) -> None:
        if case == "restart during reads":
            h.starting(CID)
        elif case == "removal during reads":
            removing.add(CID)

    if case == "stopped":  # (its death is the engine's to report)
        info["State"]["Running"] = False
    reported, holds, _ = _report(
        tmp_path, monkeypatch, info, 0, before, meanwhile, removing=removing
    )
    assert reported == []
    assert holds.is_held(CID, NAME) == (case == "held already")


def test_a_report_of_the_current_attempt_after_a_restart_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported, _, _ = _report(
        tmp_path, monkeypatch, running(), attempt=1, before=lambda h: h.starting(CID, 1)
    )
    assert [e.exit_code for e in reported] == [5]


def test_a_kernel_killed_for_memory_goes_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its container is killed: the engine's death reports the OOM, and its restart makes the
    kernel anew (a kept container would report every later death as for memory)."""
    reported, holds, engine = _report(tmp_path, monkeypatch, running(oom=True))
    assert reported == [] and engine.killed and not holds.is_held(CID, NAME)


def test_one_report_at_a_time_per_kernel(tmp_path: Path) -> None:
    """The supervisor writes its report again every few seconds while it waits: copies that
    come while one is handled go."""
    _fifo(tmp_path)
    got: list[int] = []
    gate = asyncio.Event()

    async def on_report(name: str, status: int, attempt: int) -> None:
        got.append(status)
        await gate.wait()

    async def go() -> None:
        r = reports.Reports(on_report, tmp_path)
        r.watch(NAME)
        fd = os.open(tmp_path / f"{NAME}{files.REPORTS_SUFFIX}", os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, b"exit 3 0\n" * 500)
            for _ in range(20):
                await asyncio.sleep(0)
            assert got == [3] and len(r._pending) == 1
            gate.set()
            for _ in range(5):
                await asyncio.sleep(0)
            assert not r._pending
            os.write(fd, b"exit 4 0\n")
            for _ in range(20):
                await asyncio.sleep(0)
        finally:
            os.close(fd)
            r.close()

    asyncio.run(go())
    assert got == [3, 4]


def test_a_fifo_made_anew_under_the_same_name_is_opened_again(tmp_path: Path) -> None:
    """A kernel made anew (its container removed and created under its name) has a new FIFO:
    the old one's end would never hear from it."""

    async def go() -> None:
        r = reports.Reports(_ignored, tmp_path)
        path = _fifo(tmp_path)
        r.watch(NAME)
        old = os.fstat(r._fds[NAME]).st_ino
        r.watch(NAME)
        assert os.fstat(r._fds[NAME]).st_ino == old
        path.unlink()
        _fifo(tmp_path)
        r.sync({NAME})
        assert os.fstat(r._fds[NAME]).st_ino == path.stat().st_ino != old
        r.close()

    asyncio.run(go())


def test_a_copy_of_a_report_held_already_asks_nothing_of_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hold, "FILES_DIR", tmp_path)
    hold.held_path(NAME).touch()

    def no_engine() -> Any:
        raise AssertionError("no engine call for a copy")

    holds = hold.Holds(no_engine)

    async def on_exit(e: KernelExit) -> None:
        raise AssertionError("no exit for a copy")

    watcher = events.ExitWatcher(None, on_exit, lambda _: False, holds)  # type: ignore[arg-type]
    asyncio.run(watcher._report(NAME, 5, 0))


def test_a_kernel_held_in_place_that_stopped_is_started_again_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its container died while held (before its word): the restart starts it again as any
    stopped kernel's (restart.py's ``_held`` gives up), and the word left in its FIFO goes
    with the agent's end (it would wake the next start's supervisor early)."""
    from troupe.agent import restart

    monkeypatch.setattr(hold, "FILES_DIR", tmp_path)
    monkeypatch.setattr(files, "FILES_DIR", tmp_path)
    os.mkfifo(files.events_path(NAME), 0o600)
    engine = _Engine({**running(), "State": {"Running": False, "StartedAt": ""}})
    holds = hold.Holds(lambda: engine)  # type: ignore[arg-type,return-value]
    agent = types.SimpleNamespace(docker=engine, holds=holds)
    update = {"hostname": "sub1", "session_id": "0123456789abcdef", "files": []}
    spec = specs()[1].model_copy(update=update)
    assert spec.container_name == NAME

    async def go() -> object:
        holds.hold_in_place(running())
        assert holds.word_ready(CID)
        return await restart._held(agent, spec, CID)  # type: ignore[arg-type]

    assert asyncio.run(go()) is None
    assert CID not in holds._fifos and not holds.is_held(CID, NAME)
