"""The key of the app cookies' MAC (:mod:`.gate`): random, made on first use, kept in the data
dir (``app-secret``, mode 0600 from the start) so app cookies outlive a manager restart."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from starlette.requests import HTTPConnection

SECRET_FILE = "app-secret"


def load(data_dir: Path) -> bytes:
    path = data_dir / SECRET_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another worker made it first
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return bytes.fromhex(value)


def of(conn: HTTPConnection) -> bytes:
    """The server's key, read once."""
    state = conn.app.state
    key: bytes | None = getattr(state, "app_secret", None)
    if key is None:
        key = state.app_secret = load(state.registry.config.data_dir)
    return key
