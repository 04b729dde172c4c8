"""A failed kernel's container started again on its death, held (agent/hold.py): which deaths
start one, where its address comes from, what marks it held (across an agent's restart) and its
word on the FIFO."""

from __future__ import annotations

import asyncio
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from troupe.agent import events, files, hold, restart
from troupe.api.agent import KernelExit
from troupe.api.policies import SUPERVISED_VAR

CID = "c0ffee"
NAME = "troupe-0123456789ab-sub1"


def dead(supervised: bool = True, pinned: str | None = None, cid: str = CID) -> dict[str, Any]:
    """A container's inspection after its death (the engine has let go of its address)."""
    net: dict[str, Any] = {"IPAddress": "", "IPAMConfig": None}
    if pinned:
        net["IPAMConfig"] = {"IPv4Address": pinned}
    return {
        "Id": cid,
        "Name": f"/{NAME}",
        "Config": {"Env": [f"{SUPERVISED_VAR}=1"] if supervised else ["A=1"], "Labels": {}},
        "HostConfig": {"NetworkMode": "troupe-net"},
        "NetworkSettings": {"Networks": {"troupe-net": net}},
        "State": {"Running": False, "ExitCode": 137},
    }


@pytest.fixture
def holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> hold.Holds:
    monkeypatch.setattr(hold, "FILES_DIR", tmp_path)
    monkeypatch.setattr(files, "FILES_DIR", tmp_path)

    def no_docker() -> Any:
        raise AssertionError("no engine in this test")

    return hold.Holds(no_docker)


def test_only_a_supervised_failure_with_a_known_address_is_held(holds: hold.Holds) -> None:
    assert not holds.holds(dead(), 137, oom=False)  # (address unknown: its restart starts it)
    holds.ran(CID, "troupe-net", "10.1.0.3")
    assert holds.holds(dead(), 137, oom=False)
    assert holds.holds(dead(), 1, oom=False)
    assert not holds.holds(dead(), 0, oom=False)  # (a batch success, a command done)
    assert not holds.holds(dead(), 137, oom=True)  # (made anew by its restart)
    assert not holds.holds(dead(supervised=False), 137, oom=False)  # (a fail-fast session)
    # an address pinned by an earlier restart is known without the agent's memory
    assert holds.holds(dead(pinned="10.1.0.9", cid="other"), 2, oom=False)


def test_the_address_pinned_wins_over_the_one_remembered() -> None:
    known = {CID: ("troupe-net", "10.1.0.3")}
    assert hold.address_of(dead(), known) == ("troupe-net", "10.1.0.3")
    assert hold.address_of(dead(pinned="10.1.0.9"), known) == ("troupe-net", "10.1.0.9")
    assert hold.address_of(dead(), {}) is None


def test_held_until_its_word_and_marked_for_a_restarted_agent(
    holds: hold.Holds, tmp_path: Path
) -> None:
    async def go() -> None:
        started = asyncio.Event()

        async def start(info: dict[str, Any]) -> bool:
            started.set()
            return True

        holds._start = start  # type: ignore[method-assign]  # (no engine)
        holds.ran(CID, "troupe-net", "10.1.0.3")
        os.mkfifo(files.events_path(NAME), 0o600)
        holds.start(dead())
        assert holds.is_held(CID) and holds.word_ready(CID)
        assert not holds.holds(dead(), 137, oom=False)  # (held already: no second start)
        # an agent restarted meanwhile knows it by its marker, by name
        assert hold.Holds(lambda: None).is_held("?", f"/{NAME}")  # type: ignore[arg-type,return-value]
        # the word: a line on the FIFO, kept there until the kernel reads it
        reader = os.open(files.events_path(NAME), os.O_RDONLY | os.O_NONBLOCK)
        holds.word(CID, NAME)
        assert os.read(reader, 100) == hold.WORD_LINE
        os.close(reader)
        assert not holds.is_held(CID, NAME) and not (tmp_path / f"{NAME}.held").exists()
        assert await holds.settle(CID) and started.is_set()
        assert not await holds.settle(CID)  # (once)
        holds.forget(CID)
        assert CID not in holds.addresses

    asyncio.run(go())


def test_a_held_containers_marker_goes_with_its_files(tmp_path: Path, holds: hold.Holds) -> None:
    hold.held_path(NAME).touch()
    files.remove_files("0123456789abcdef")
    assert not hold.held_path(NAME).exists()


class _Container:
    """A container of a fake engine: its state now, and a start that fails as told."""

    def __init__(self, state: dict[str, Any], fail: Exception | None = None) -> None:
        self.state, self.fail, self.started = state, fail, False

    async def show(self) -> dict[str, Any]:
        return {"State": self.state}

    async def start(self) -> None:
        if self.fail is not None:
            raise self.fail
        self.started = True


def _engine(container: _Container) -> Any:
    return types.SimpleNamespace(containers=types.SimpleNamespace(container=lambda cid: container))


def _watch_one_death(
    holds: hold.Holds,
    monkeypatch: pytest.MonkeyPatch,
    meanwhile: Callable[[], None],
    removing: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Hands one death of the container to an ExitWatcher whose reads of it let ``meanwhile``
    run (a restart or a removal landing then); the holds it started."""
    started: list[dict[str, Any]] = []
    reported: list[KernelExit] = []
    exit_ = KernelExit(session_id="s", kernel_id="k", exit_code=1)

    async def reads(docker: Any, event: dict[str, Any]) -> tuple[KernelExit, dict[str, Any]]:
        await asyncio.sleep(0)
        meanwhile()
        await asyncio.sleep(0)
        return exit_, dead(pinned="10.1.0.3")

    async def on_exit(e: KernelExit) -> None:
        reported.append(e)

    monkeypatch.setattr(events, "kernel_exit", reads)
    monkeypatch.setattr(holds, "start", started.append)
    removing = set() if removing is None else removing
    watcher = events.ExitWatcher(None, on_exit, removing.__contains__, holds)  # type: ignore[arg-type]
    asyncio.run(watcher._handle({"Action": "die", "Actor": {"ID": CID}}))
    assert reported == [exit_]  # (the exit is reported either way)
    return started


def test_a_death_is_held_when_nothing_happened_during_its_reads(
    holds: hold.Holds, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(_watch_one_death(holds, monkeypatch, lambda: None)) == 1


def test_a_restart_during_a_deaths_reads_is_not_held(
    holds: hold.Holds, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another kernel's failure restarted the session while this death was read: the restart
    starts this container itself; a hold then would list a live kernel as held."""
    assert _watch_one_death(holds, monkeypatch, lambda: holds.starting(CID)) == []


def test_a_removal_during_a_deaths_reads_starts_nothing(
    holds: hold.Holds, monkeypatch: pytest.MonkeyPatch
) -> None:
    removing: set[str] = set()
    assert _watch_one_death(holds, monkeypatch, lambda: removing.add(CID), removing) == []


def _held_start(holds: hold.Holds, container: _Container) -> bool:
    holds._docker = lambda: _engine(container)
    holds.ran(CID, "troupe-net", "10.1.0.3")
    os.mkfifo(files.events_path(NAME), 0o600)

    async def go() -> bool:
        info = dead(pinned="10.1.0.3")  # (pinned already: no network calls)
        holds.start(info)
        assert holds.is_held(CID, NAME) and holds.word_ready(CID)
        return await holds.settle(CID)

    return asyncio.run(go())


@pytest.mark.parametrize("error", [aiohttp.ClientError("gone"), TimeoutError()])
def test_a_held_start_failing_otherwise_than_dockers_way_is_cleaned_up(
    holds: hold.Holds, error: Exception
) -> None:
    assert not _held_start(holds, _Container({"Running": False}, fail=error))
    assert not holds.is_held(CID, NAME) and not hold.held_path(NAME).exists()
    assert not holds._fifos and not holds._starts


def test_a_held_start_skips_a_container_started_since_its_death(holds: hold.Holds) -> None:
    for state in ({"Running": True}, {"Running": False, "StartedAt": "2026-01-01T00:00:01Z"}):
        container = _Container(state)
        assert not _held_start(holds, container) and not container.started
        assert not holds.is_held(CID, NAME) and not holds._fifos
        os.unlink(files.events_path(NAME))


def test_a_word_not_written_falls_back_to_restart_sh(holds: hold.Holds, tmp_path: Path) -> None:
    """The FIFO cannot be written: the restart gives the word with restart.sh (``_held`` says
    it could not), without waiting for a readiness that cannot come."""
    plain = tmp_path / "plain"
    plain.touch()
    holds._held.add(CID)
    holds._fifos[CID] = os.open(plain, os.O_RDONLY)  # (a write fails)
    settled: list[str] = []

    async def settle(cid: str) -> bool:
        settled.append(cid)
        return True

    holds.settle = settle  # type: ignore[method-assign]
    agent = types.SimpleNamespace(holds=holds)
    spec = types.SimpleNamespace(files=None, container_name=NAME)
    assert asyncio.run(restart._held(agent, spec, CID)) is None  # type: ignore[arg-type]
    assert settled == [] and not holds.is_held(CID, NAME)
    assert not holds.word("other", NAME)  # (no FIFO here)
    holds.close()
    assert not holds._fifos


def test_the_fifos_end_is_closed_once_the_kernel_is_ready(holds: hold.Holds) -> None:
    os.mkfifo(files.events_path(NAME), 0o600)
    holds._fifos[CID] = fd = os.open(files.events_path(NAME), os.O_RDWR | os.O_NONBLOCK)
    holds._held.add(CID)
    with holds.worded([CID]):
        pass
    assert holds._fifos == {CID: fd}  # (still held: no word yet)
    assert holds.word(CID, NAME)
    with holds.worded([CID]):
        assert CID in holds._fifos  # (until the readiness wait is over)
    assert not holds._fifos
    with pytest.raises(OSError):
        os.fstat(fd)
