"""The agent's exit watcher skips the deaths of containers it removes itself."""

from __future__ import annotations

from typing import Any

from troupe.agent.events import ExitWatcher
from troupe.api.agent import LABEL_KERNEL, LABEL_SESSION, KernelExit


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
