"""The agent's exit watcher skips the deaths of containers it removes itself."""

from __future__ import annotations

from typing import Any

from troupe.agent.events import ExitWatcher
from troupe.api.agent import LABEL_AGENT, LABEL_KERNEL, LABEL_SESSION, KernelExit


def _die(cid: str) -> dict[str, Any]:
    attrs = {LABEL_SESSION: "s", LABEL_KERNEL: "k", "exitCode": "137"}
    return {"Action": "die", "Actor": {"ID": cid, "Attributes": attrs}}


async def test_deaths_of_containers_being_removed_are_no_news() -> None:
    """No inspection, no log read, nothing for the manager: every teardown kills N kernels."""
    reported: list[KernelExit] = []

    async def on_exit(e: KernelExit) -> None:
        reported.append(e)

    removing = {"c-removed"}
    # no engine: a skipped event must not reach it
    watcher = ExitWatcher(None, on_exit, removing.__contains__)  # type: ignore[arg-type]
    await watcher._handle(_die("c-removed"))
    assert reported == []


async def test_another_agents_containers_are_left_to_it() -> None:
    """Two agents on one engine (two managers, a test's next to a developer's): a death or a
    start of a container the other made is not this one's news (no inspection: no engine
    here), nor its report FIFO this one's to read; a container without the label is anyone's."""
    reported: list[KernelExit] = []

    async def on_exit(e: KernelExit) -> None:
        reported.append(e)

    watched: list[str] = []
    watcher = ExitWatcher(None, on_exit, owner="mine")  # type: ignore[arg-type]
    watcher._reports.watch = watched.append  # type: ignore[method-assign,assignment]
    other = _die("c-other")
    other["Actor"]["Attributes"][LABEL_AGENT] = "theirs"
    await watcher._handle(other)
    theirs = {LABEL_AGENT: "theirs", "name": "troupe-theirs-main1"}
    await watcher._handle({"Action": "start", "Actor": {"ID": "c", "Attributes": theirs}})
    assert reported == [] and watched == []
    for labels in ({LABEL_AGENT: "mine"}, {}):
        start = {"Action": "start", "Actor": {"ID": "c", "Attributes": {**labels, "name": "n"}}}
        await watcher._handle(start)
    assert watched == ["n", "n"]


async def test_only_this_agents_containers_have_their_report_fifos_read() -> None:
    class Engine:
        async def _query_json(self, path: str, params: dict[str, str]) -> list[dict[str, object]]:
            return [
                {"Names": ["/mine"], "Labels": {LABEL_SESSION: "s", LABEL_AGENT: "me"}},
                {"Names": ["/old"], "Labels": {LABEL_SESSION: "s"}},
                {"Names": ["/theirs"], "Labels": {LABEL_SESSION: "s", LABEL_AGENT: "them"}},
            ]

    async def on_exit(e: KernelExit) -> None:
        raise AssertionError(e)

    watcher = ExitWatcher(Engine(), on_exit, owner="me")  # type: ignore[arg-type]
    assert await watcher._names() == {"mine", "old"}
