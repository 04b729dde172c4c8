"""Unpacking an archive from a kernel without trusting it (``troupe session cp`` down).

Root in a kernel, or a hostile image, decides what the archive holds. Python's ``data`` filter
is not relied upon: how safe it is depends on the interpreter's patch level (before the fix
for CVE-2025-4517 a chain of long-named symlinks took its checks past ``PATH_MAX``, where
``realpath`` stops resolving, and a file was written outside the target). Here every entry is
checked before anything of it is written, and the writing is done here too:

- names are relative, without ``..``, under the one top entry the copy asked for, and not too
  long (:data:`MAX_COMPONENT` bytes a component, :data:`MAX_PATH` bytes in all);
- nothing is written through a link: an entry under a symlink or a file of the archive is
  refused, as is one that would replace an earlier entry, and each directory on the way is
  checked on disk (``lstat``) before anything is made in it;
- a symlink's target is relative, ``../`` at most as many times as the link lies deep under
  the target directory, then names only (no ``..`` after a name): it then leads inside the
  target whatever the other symlinks are - each step down goes into a directory of the target
  or through another such symlink - so chains of symlinks, later entries and case-insensitive
  file systems cannot lead it out;
- a hard link names an earlier regular file of the archive;
- only directories, regular files and links: no devices, FIFOs or sparse files;
- a file gets exactly the bytes its header declares (a short archive is refused), and its mode
  without setuid, setgid, sticky and group/other write bits.

The caller unpacks into a fresh directory beside its target and moves the result in only when
the whole archive passed, so a refused archive leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from troupe.api.errors import TroupeError

#: Longest name of one path component (bytes, as most file systems allow).
MAX_COMPONENT = 255
#: Longest whole path, the target directory's included (bytes: Linux's PATH_MAX less its NUL).
MAX_PATH = 4095
#: Bytes copied at a time.
CHUNK = 256 * 1024

Parts = tuple[str, ...]


class UnsafeArchive(TroupeError):
    """The archive holds an entry that could write outside its target, or is broken; nothing
    of it is kept."""

    code = "unsafe_archive"


class BrokenArchive(UnsafeArchive):
    """The archive breaks off or is not one: the sender's own failure may say why."""


def _refuse(name: str, why: str) -> UnsafeArchive:
    return UnsafeArchive(f"archive refused, nothing written: entry {name[:200]!r} {why}")


@dataclass
class Tree:
    """What the archive holds so far (directories, files, symlinks), by path; checks each
    next entry against it (nothing here touches the disk).

    ``top`` is the entry every other lies under; ``base`` the length in bytes of the directory
    it is unpacked into (every path must fit beside it)."""

    top: str
    base: int = 0
    dirs: set[Parts] = field(default_factory=set)
    files: set[Parts] = field(default_factory=set)
    links: set[Parts] = field(default_factory=set)

    def admit(self, member: tarfile.TarInfo) -> Parts:
        """The checked path of ``member``, now part of the tree; :class:`UnsafeArchive` if it
        may not be unpacked."""
        name = member.name
        parts = self.parts(name, name)
        if parts[0] != self.top:
            raise _refuse(name, f"is not under {self.top!r}, the name copied")
        for i in range(1, len(parts)):
            parent = parts[:i]
            if parent in self.links or parent in self.files:
                raise _refuse(name, f"lies under {'/'.join(parent)!r}, which is no directory")
        taken = parts in self.links or parts in self.files
        if taken or (parts in self.dirs and not member.isdir()):
            raise _refuse(name, "comes twice")
        if member.isdir():
            kind = self.dirs
        elif member.issym():
            self._check_symlink(name, member.linkname, depth=len(parts) - 1)
            kind = self.links
        elif member.islnk():
            if self.parts(member.linkname, name) not in self.files:
                raise _refuse(name, f"is a hard link to {member.linkname!r}, no earlier file")
            kind = self.files
        elif member.isreg() and not member.issparse():
            kind = self.files
        else:
            raise _refuse(name, "is no file, directory or link (a device, FIFO or sparse file)")
        self.dirs.update(parts[:i] for i in range(1, len(parts)))
        kind.add(parts)
        return parts

    def parts(self, path: str, name: str) -> Parts:
        """``path`` (an entry's name, or a hard link's target) as components: relative, no
        ``..``, each and all of a length the file system takes."""
        if "\0" in path:
            raise _refuse(name, "has a NUL byte in its name")
        if path.startswith("/"):
            raise _refuse(name, "has an absolute path")
        parts = tuple(p for p in path.split("/") if p not in ("", "."))
        if not parts:
            raise _refuse(name, "has no name")
        if ".." in parts:
            raise _refuse(name, "has '..' in its path")
        if any(len(os.fsencode(p)) > MAX_COMPONENT for p in parts):
            raise _refuse(name, f"has a name longer than {MAX_COMPONENT} bytes")
        if self.base + 1 + len(os.fsencode("/".join(parts))) > MAX_PATH:
            raise _refuse(name, f"makes a path longer than {MAX_PATH} bytes")
        return parts

    @staticmethod
    def _check_symlink(name: str, target: str, depth: int) -> None:
        """A symlink ``depth`` directories under the target leads inside it (see above)."""
        if not target or "\0" in target:
            raise _refuse(name, "is a symlink without a target")
        if target.startswith("/"):
            raise _refuse(name, f"is a symlink to an absolute path ({target[:200]!r})")
        if len(os.fsencode(target)) > MAX_PATH:
            raise _refuse(name, f"is a symlink longer than {MAX_PATH} bytes")
        steps = [p for p in target.split("/") if p not in ("", ".")]
        up = 0
        while up < len(steps) and steps[up] == "..":
            up += 1
        if up > depth:
            raise _refuse(name, f"is a symlink out of the target ({target[:200]!r})")
        if ".." in steps[up:]:
            raise _refuse(name, f"is a symlink with '..' after a name ({target[:200]!r})")


def unpack(tar: tarfile.TarFile, into: Path, top: str) -> None:
    """Unpacks ``tar`` (read as a stream, entry by entry) into the empty directory ``into``;
    every entry must lie under ``top``. :class:`UnsafeArchive` when an entry is refused or the
    archive breaks off: the caller then removes ``into`` with whatever was written there."""
    tree = Tree(top, base=len(os.fsencode(str(into))))
    made: set[Parts] = set()  # directories made (or found) and checked on disk
    dir_times: list[tuple[Path, float]] = []
    try:
        for member in tar:
            parts = tree.admit(member)
            _make_dirs(into, parts[:-1], made, member.name)
            path = into.joinpath(*parts)
            if member.isdir():
                _make_dirs(into, parts, made, member.name)
                dir_times.append((path, member.mtime))
            elif member.issym():
                os.symlink(member.linkname, path)
            elif member.islnk():
                source = into.joinpath(*tree.parts(member.linkname, member.name))
                os.link(source, path, follow_symlinks=False)
            else:
                _write_file(tar, member, path)
    except (tarfile.TarError, EOFError) as e:
        raise BrokenArchive(f"archive refused, nothing written: it is broken ({e})") from None
    for path, mtime in reversed(dir_times):  # deepest first: their parents' times stay
        _set_time(path, mtime)


def _make_dirs(into: Path, parts: Parts, made: set[Parts], name: str) -> None:
    """Each directory of ``parts`` in turn, made if missing, and checked with ``lstat`` to be
    one (not a link, which a case-insensitive file system may alias) before going in."""
    for i in range(1, len(parts) + 1):
        if parts[:i] in made:
            continue
        path = into.joinpath(*parts[:i])
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise _refuse(name, f"lies under {'/'.join(parts[:i])!r}, which is no directory")
        made.add(parts[:i])


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    """Exactly ``member.size`` bytes into a new file at ``path`` (never through a link)."""
    source = tar.extractfile(member)
    if source is None:
        raise _refuse(member.name, "has no data")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags, 0o600), "wb") as out:
        left = member.size
        while left > 0:
            data = source.read(min(CHUNK, left))
            if not data:
                raise _refuse(member.name, f"ends {left} bytes before its declared size")
            out.write(data[:left])
            left -= len(data)
    # the modes of Python's data filter: no setuid/setgid/sticky, no group/other write bits,
    # read and write for the owner, executable bits only where the owner's is set
    mode = member.mode & 0o755
    if not mode & 0o100:
        mode &= ~0o111
    os.chmod(path, mode | 0o600)
    _set_time(path, member.mtime)


def _set_time(path: Path, mtime: float) -> None:
    with contextlib.suppress(OSError, OverflowError, ValueError):
        os.utime(path, (mtime, mtime), follow_symlinks=False)
