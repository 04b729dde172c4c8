"""Files only the server's account may read (the admin's API key, the registries' secrets):
written whole to a new file that is mode 0600 from the start, then renamed over the old one,
so that neither a crash (half a file) nor a reader in between (a wider mode) ever sees them."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Replaces ``path`` with ``text``, mode 0600, its directory made 0700 if missing."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left there by a crash keeps its own mode through O_TRUNC
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
