"""``troupe session cp NAME:PATH LOCAL`` unpacks what the kernel sends without trusting it
(finding N2, docs/reliability.md): each entry is checked by :mod:`troupe.client.tarsafe`, not
by the interpreter's ``data`` filter, and a refused archive leaves nothing anywhere. The
archives are built here with tarfile, among them the chained-symlink one of CVE-2025-4517; they
go through the validator, through the code path ``download`` uses, and through the command
itself against a stand-in manager (a WebSocket server sending the archive and an exit code)."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from troupe.client import tarsafe
from troupe.client.pipe import receive
from troupe.client.tarsafe import Tree, UnsafeArchive

Entry = tuple[str, str, object]  # (name, kind, content / link target / mode)


def archive(*entries: Entry, fmt: int = tarfile.GNU_FORMAT) -> bytes:
    """A tar of ``entries``: ("name", "file", b"data"), ("name", "dir", None),
    ("name", "sym", "target"), ("name", "hard", "target"), ("name", "chr"|"fifo", None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, kind, value in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            data = None
            if kind == "file":
                assert isinstance(value, bytes)
                info.size, info.mode, data = len(value), 0o644, io.BytesIO(value)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(value)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, str(value)
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, data)
    return buf.getvalue()


def no_finish() -> None:
    """The sender's side: it exited 0."""


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.fixture
def where(tmp_path: Path) -> tuple[Path, Path]:
    """(outside, dest): ``dest`` is the copy's target directory, ``outside`` holds it and a
    marker file; nothing else may appear in either after a refused copy."""
    outside = tmp_path / "outside"
    dest = outside / "dest"
    dest.mkdir(parents=True)
    (outside / "flag").write_text("original")
    return outside, dest


def assert_nothing_written(outside: Path, dest: Path) -> None:
    assert files_under(outside) == {"dest", "flag"}, files_under(outside)
    assert (outside / "flag").read_text() == "original"


# -- the validator ------------------------------------------------------------------------


def admit_all(*entries: Entry, top: str = "dl") -> Tree:
    tree = Tree(top)
    with tarfile.open(fileobj=io.BytesIO(archive(*entries))) as tar:
        for member in tar:
            tree.admit(member)
    return tree


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([("/etc/passwd", "file", b"x")], "absolute path"),
        ([("dl", "dir", None), ("dl/../../x", "file", b"x")], "'..'"),
        ([("other/x", "file", b"x")], "not under 'dl'"),
        ([("dl", "sym", "/etc")], "absolute path"),
        ([("dl", "dir", None), ("dl/up", "sym", "../..")], "out of the target"),
        ([("dl", "sym", "..")], "out of the target"),
        ([("dl", "dir", None), ("dl/x", "sym", "a/../../..")], "'..' after a name"),
        ([("dl", "dir", None), ("dl/h", "hard", "../outside/flag")], "'..'"),
        ([("dl", "dir", None), ("dl/h", "hard", "/etc/passwd")], "absolute path"),
        ([("dl", "dir", None), ("dl/h", "hard", "dl/nothing")], "no earlier file"),
        ([("dl", "dir", None), ("dl/null", "chr", None)], "device"),
        ([("dl", "dir", None), ("dl/fifo", "fifo", None)], "FIFO"),
        ([("dl", "dir", None), ("dl/l", "sym", "."), ("dl/l/x", "file", b"x")], "no directory"),
        ([("dl", "dir", None), ("dl/f", "file", b""), ("dl/f/x", "file", b"x")], "no directory"),
        ([("dl", "dir", None), ("dl/l", "sym", "."), ("dl/l", "dir", None)], "twice"),
        ([("dl", "dir", None), ("dl/f", "file", b""), ("dl/f", "sym", ".")], "twice"),
        ([("dl", "dir", None), ("dl/" + "n" * 256, "file", b"")], "longer than 255"),
        ([("dl/" + "/".join(["n" * 200] * 21), "file", b"")], "longer than 4095"),
    ],
)
def test_the_validator_refuses(entries: list[Entry], why: str) -> None:
    with pytest.raises(UnsafeArchive) as info:
        admit_all(*entries)
    assert why in info.value.message and info.value.message.startswith("archive refused")


def test_the_validator_takes_an_ordinary_tree() -> None:
    tree = admit_all(
        ("dl", "dir", None),
        ("dl/a/b.txt", "file", b"b"),  # its directory is implied
        ("dl/a", "dir", None),  # and may come after it
        ("dl/a/link", "sym", "b.txt"),
        ("dl/a/up", "sym", "../a/./b.txt"),
        ("dl/a/top", "sym", "../.."),  # the target directory itself: inside
        ("dl/a/hard", "hard", "dl/a/b.txt"),
        ("dl/./c", "file", b""),
    )
    assert tree.files == {("dl", "a", "b.txt"), ("dl", "a", "hard"), ("dl", "c")}
    assert tree.links == {("dl", "a", "link"), ("dl", "a", "up"), ("dl", "a", "top")}
    assert tree.dirs == {("dl",), ("dl", "a")}


# -- through the code path of download ----------------------------------------------------


def chained_symlinks(dest: Path) -> bytes:
    """The archive of CVE-2025-4517 (after CPython's own test), under the top entry ``dl``:
    long-named directories reached through a chain of symlinks ``a/b/.../p``, whose path
    grows past PATH_MAX only once they are resolved, then a symlink at its end that climbs to
    the target's parent, and files written through it."""
    steps = "abcdefghijklmnop"
    unpacked_in = len(str(dest)) + 1 + len(".troupe-cp.12345678") + 1 + len("dl")
    length = (os.pathconf(dest, "PC_PATH_MAX") - unpacked_in - 1) // (len(steps) + 1)
    component = "d" * length
    entries: list[Entry] = [("dl", "dir", None)]
    path = "dl"
    for step in steps:
        entries.append((f"{path}/{component}", "dir", None))
        entries.append((f"{path}/{step}", "sym", component))
        path = f"{path}/{component}"
    # from dl/ddd.../ddd up to the directory unpacked into: read without resolving the
    # symlinks (what realpath does past PATH_MAX) it is as deep as the real one, so it looks
    # inside, and so does the next link, two levels more up from it: the target's parent
    link = "dl/" + "/".join(steps) + "/" + "l" * 254
    entries.append((link, "sym", "/".join([".."] * (len(steps) + 1))))
    entries.append(("dl/escape", "sym", link.removeprefix("dl/") + "/../.."))
    entries.append(("dl/flaglink", "hard", "dl/escape/flag"))
    entries.append(("dl/flaglink", "file", b"overwritten"))
    entries.append(("dl/escape/newfile", "file", b"new"))
    return archive(*entries, fmt=tarfile.PAX_FORMAT)


def test_the_chained_symlink_archive_is_refused(where: tuple[Path, Path]) -> None:
    outside, dest = where
    with pytest.raises(UnsafeArchive) as info:
        receive(io.BytesIO(chained_symlinks(dest)), "dl", dest, no_finish)
    assert "no directory" in info.value.message
    assert_nothing_written(outside, dest)


@pytest.mark.parametrize(
    "entries",
    [
        [("dl", "dir", None), ("dl/ok", "file", b"fine"), ("dl/x", "sym", "../../flag")],
        [("dl", "dir", None), ("dl/ok", "file", b"fine"), ("dl/h", "hard", "../flag")],
        [("dl", "dir", None), ("dl/ok", "file", b"fine"), ("dl/null", "chr", None)],
        [("dl", "dir", None), ("dl/up", "sym", ".."), ("dl/up/flag", "file", b"overwritten")],
        [("dl", "dir", None), ("/abs", "file", b"x")],
        [("dl", "dir", None), ("dl/../flag", "file", b"overwritten")],
    ],
)
def test_a_refused_archive_leaves_nothing(where: tuple[Path, Path], entries: list[Entry]) -> None:
    outside, dest = where
    with pytest.raises(UnsafeArchive):
        receive(io.BytesIO(archive(*entries)), "dl", dest, no_finish)
    assert_nothing_written(outside, dest)


def test_a_file_shorter_than_declared_is_refused(where: tuple[Path, Path]) -> None:
    outside, dest = where
    data = archive(("dl", "dir", None), ("dl/big", "file", b"x" * 5000))
    cut = data[: 3 * 512 + 1000]  # the headers of dl and dl/big, then part of big's data
    with pytest.raises(UnsafeArchive) as info:
        receive(io.BytesIO(cut), "dl", dest, no_finish)
    assert "broken" in info.value.message or "declared size" in info.value.message
    assert_nothing_written(outside, dest)


def test_a_file_gets_exactly_its_declared_size(where: tuple[Path, Path]) -> None:
    """A header that declares fewer bytes than follow: the file gets those, the rest is no
    data of it (tar reads it as the next header, an invalid one: the archive's end)."""
    outside, dest = where
    data = bytearray(archive(("dl", "dir", None), ("dl/f", "file", b"A" * 1600)))
    info = tarfile.TarInfo("dl/f")
    info.size, info.mode, info.mtime = 10, 0o644, 1_700_000_000
    data[512:1024] = info.tobuf(format=tarfile.GNU_FORMAT)
    receive(io.BytesIO(bytes(data)), "dl", dest, no_finish)
    assert (dest / "dl" / "f").read_bytes() == b"A" * 10
    assert files_under(outside) == {"dest", "flag", "dest/dl", "dest/dl/f"}


def test_an_ordinary_tree_is_unpacked(where: tuple[Path, Path]) -> None:
    outside, dest = where
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, mode in [("dl", 0o755), ("dl/sub", 0o700)]:
            d = tarfile.TarInfo(name)
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, mode, 1_600_000_000
            tar.addfile(d)
        f = tarfile.TarInfo("dl/sub/run")
        f.size, f.mode, f.mtime = 4, 0o6777, 1_600_000_000  # setuid, setgid, world-writable
        tar.addfile(f, io.BytesIO(b"#!/x"))
        for name, target in [("dl/link", "sub/run"), ("dl/sub/back", "../sub")]:
            s = tarfile.TarInfo(name)
            s.type, s.linkname = tarfile.SYMTYPE, target
            tar.addfile(s)
        h = tarfile.TarInfo("dl/hard")
        h.type, h.linkname = tarfile.LNKTYPE, "dl/sub/run"
        tar.addfile(h)
    receive(io.BytesIO(buf.getvalue()), "dl", dest, no_finish)
    got = dest / "dl"
    assert files_under(got) == {"sub", "sub/run", "sub/back", "link", "hard"}
    assert (got / "link").read_text() == "#!/x" and os.readlink(got / "link") == "sub/run"
    assert (got / "hard").stat().st_ino == (got / "sub/run").stat().st_ino
    assert stat.S_IMODE((got / "sub/run").stat().st_mode) == 0o755
    assert (got / "sub").stat().st_mtime == 1_600_000_000
    assert files_under(outside) == {"dest", "flag", "dest/dl", *(f"dest/dl/{p}" for p in
                                    files_under(got))}  # fmt: skip


def test_a_refused_entry_ends_the_copy_at_once(where: tuple[Path, Path]) -> None:
    """The rest of a refused archive is not read (it may be endless), nor is the sender
    waited for."""
    outside, dest = where
    data = archive(("dl", "dir", None), ("dl/null", "chr", None), ("dl/big", "file", b"x" * 8192))
    stream = io.BytesIO(data)

    def finish() -> None:
        raise AssertionError("the sender was waited for")

    with pytest.raises(UnsafeArchive, match="device"):
        receive(stream, "dl", dest, finish)
    assert stream.tell() < len(data) - 8192
    assert_nothing_written(outside, dest)


def test_a_broken_archive_gives_the_senders_failure(where: tuple[Path, Path]) -> None:
    outside, dest = where
    data = archive(("dl", "dir", None), ("dl/big", "file", b"x" * 5000))[: 3 * 512]

    def failed() -> None:
        raise tarsafe.UnsafeArchive("tar: dl/big: file shrank")

    with pytest.raises(UnsafeArchive, match="file shrank"):
        receive(io.BytesIO(data), "dl", dest, failed)
    with pytest.raises(tarsafe.BrokenArchive):
        receive(io.BytesIO(data), "dl", dest, no_finish)
    assert_nothing_written(outside, dest)


def test_a_failed_command_says_why(where: tuple[Path, Path]) -> None:
    """Nothing came and the command failed: its failure, not a tar error."""
    _, dest = where

    def failed() -> None:
        raise tarsafe.UnsafeArchive("the kernel's words")

    with pytest.raises(UnsafeArchive, match="the kernel's words"):
        receive(io.BytesIO(b""), "dl", dest, failed)
    assert files_under(dest) == set()


# -- the command, against a stand-in manager ----------------------------------------------


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """A WebSocket server that answers every connection as the manager's archive endpoint
    would: the archive (the list's one item) in frames, then exit code 0."""
    from websockets.sync.server import ServerConnection, serve

    sent: list[bytes] = []

    def handler(conn: ServerConnection) -> None:
        data = sent[0]
        for i in range(0, len(data), 64 * 1024):
            conn.send(data[i : i + 64 * 1024])
        conn.send(json.dumps({"exit_code": 0}))
        conn.close()

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        monkeypatch.setenv("TROUPE_API_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("TROUPE_API_KEY", "k1")
        yield sent
        server.shutdown()
    thread.join(5)


def cp(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from troupe.main import app

    r = CliRunner().invoke(app, ["session", "cp", *args], env={"COLUMNS": "200"})
    return r.exit_code, r.output


def test_cp_refuses_the_chained_symlink_archive(
    kernel: list[bytes], where: tuple[Path, Path]
) -> None:
    outside, dest = where
    kernel.append(chained_symlinks(dest))
    code, output = cp("s1:dl", str(dest))
    assert code == 1, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: archive refused"), output
    assert "Traceback" not in output
    assert_nothing_written(outside, dest)


def test_cp_of_an_empty_answer_is_one_line(kernel: list[bytes], where: tuple[Path, Path]) -> None:
    """The kernel sent no archive yet exited 0 (a replaced tar): one line, not a traceback."""
    outside, dest = where
    kernel.append(b"")
    code, output = cp("s1:dl", str(dest))
    assert code == 1 and output.strip() == "error: copy: no archive came from the kernel", output
    assert_nothing_written(outside, dest)


def test_cp_down_still_copies(kernel: list[bytes], where: tuple[Path, Path]) -> None:
    _, dest = where
    kernel.append(archive(("dl", "dir", None), ("dl/a.txt", "file", b"hello")))
    code, output = cp("s1:dl", str(dest / "renamed"))
    assert code == 0, output
    assert (dest / "renamed" / "a.txt").read_text() == "hello"
