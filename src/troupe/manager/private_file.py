"""Files only the server's account may read (the admin's API key, the registries' secrets,
saved logs, the database): one way to make them. A file's text is written whole to a new file
that is mode 0600 from the start, then renamed over the old one, so that neither a crash (half
a file) nor a reader in between (a wider mode) ever sees it."""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path) -> None:
    """``path`` made if missing and mode 0700, whatever the umask or its mode before."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)


def touch_private(path: Path) -> None:
    """``path`` made empty if missing (its content kept otherwise), mode 0600 (SQLite gives
    the database's -wal and -shm the mode of the database)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
    path.chmod(0o600)


def write_private(path: Path, text: str) -> None:
    """Replaces ``path`` with ``text`` (UTF-8; a lone surrogate written as '?'), mode 0600,
    its directory made 0700 if missing."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:  # (closes fd on errors)
        os.fchmod(fd, 0o600)  # a file left there by a crash keeps its own mode through O_TRUNC
        f.write(text)
    os.replace(tmp, path)
