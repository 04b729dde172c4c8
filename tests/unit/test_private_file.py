"""Private files of the server (the admin's credentials, the registries' secrets) are written
one way (manager/private_file.py): whole, mode 0600 from the start, even over a left-over
temporary file of a wider mode."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from troupe.api.registries import RegistryAdd
from troupe.manager.auth import write_credentials
from troupe.manager.private_file import write_private
from troupe.manager.registries import RegistryBook


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_left_over_temporary_file_does_not_widen_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "d" / "secret.json"
    path.parent.mkdir()
    left = path.with_name("secret.json.tmp")
    left.write_text("half")
    left.chmod(0o644)
    write_private(path, "whole")
    assert path.read_text() == "whole" and mode(path) == 0o600 and not left.exists()


def test_credentials_and_registries_are_written_so(tmp_path: Path) -> None:
    creds = tmp_path / "config" / "credentials.json"
    write_credentials(creds, "http://127.0.0.1:8090", "k")
    assert json.loads(creds.read_text()) == {"api_url": "http://127.0.0.1:8090", "api_key": "k"}
    assert mode(creds) == 0o600 and mode(creds.parent) == 0o700
    book = RegistryBook(tmp_path / "data" / "registries.json")
    book.add(RegistryAdd(host="reg.test:5000", username="u", password="p"))
    assert mode(book.path) == 0o600 and book.hosts() == ["reg.test:5000"]


def test_a_planted_link_is_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("theirs")
    path = tmp_path / "d" / "secret.json"
    path.parent.mkdir()
    path.with_name("secret.json.tmp").symlink_to(target)
    with pytest.raises(OSError):  # (ELOOP: the link is not followed)
        write_private(path, "mine")
    assert target.read_text() == "theirs"


def test_saved_logs_and_the_database_file_are_private(tmp_path: Path) -> None:
    from troupe.manager.logs import LogStore
    from troupe.manager.private_file import touch_private

    store = LogStore(tmp_path / "logs")
    store.save("s1", {"main1": "line \udcff\n"})
    saved = tmp_path / "logs" / "s1" / "main1.log"
    assert mode(saved) == 0o600 and mode(saved.parent) == 0o700
    assert saved.read_text() == "line ?\n"
    db = tmp_path / "troupe.db"
    db.write_text("kept")
    touch_private(db)
    assert db.read_text() == "kept" and mode(db) == 0o600
