"""Room on the data disk: new sessions are refused while it is nearly full (finding N9,
docs/reliability.md), since each one adds saved logs, database rows and folder writes."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from troupe.api.errors import InsufficientStorage
from troupe.manager.config import ServerConfig


def free_bytes(path: Path) -> int:
    """Free bytes on the disk holding ``path`` (tests replace this)."""
    return shutil.disk_usage(path).free


async def check_room(config: ServerConfig) -> None:
    """:class:`InsufficientStorage` (507) when the data dir's disk has less than
    ``config.min_free_disk`` bytes free (0: no check; a disk that cannot be asked: no
    refusal)."""
    if config.min_free_disk <= 0:
        return
    try:
        free = await asyncio.to_thread(free_bytes, config.data_dir)
    except OSError:
        return
    if free < config.min_free_disk:
        raise InsufficientStorage(
            f"the data disk is nearly full: {free} bytes free in {config.data_dir}, and new"
            f" sessions need at least {config.min_free_disk} (troupe server --min-free-disk);"
            " ask an admin to free space"
        )
