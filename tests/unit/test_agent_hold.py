"""A failed kernel's container started again on its death, held (agent/hold.py): which deaths
start one, where its address comes from, what marks it held (across an agent's restart) and its
word on the FIFO."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from troupe.agent import files, hold
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
