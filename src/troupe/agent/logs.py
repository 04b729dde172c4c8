"""A kernel's output as the engine keeps it: streamed, followed, its last bytes or last lines.

Lines carry the engine's timestamps (``2026-...Z text``) when they are read for people (the
manager merges several kernels by them) and none when they explain a failure.

Everything is read as a stream in pieces of at most :data:`CHUNK` bytes, never the whole log at
once: a kernel may write gigabytes (the engine keeps at most its json-file ``max-size`` times
``max-file``), and the agent's memory must not grow with it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import struct
from collections.abc import AsyncIterator

import aiodocker
import aiohttp

from troupe.agent.engine import on_container
from troupe.api.errors import TroupeError

#: Bytes read from the engine at a time.
CHUNK = 64 * 1024
#: A line longer than this (output without newlines) is passed on in pieces of this size.
MAX_LINE = 64 * 1024
#: Room kept in a saved log for the line saying it was cut.
CUT_NOTE_ROOM = 80


#: What troupe's entrypoint says on a kernel's output about its start-up (read by
#: :mod:`troupe.agent.ready`); not shown with the kernel's own output. Warnings are.
STARTED = "troupe: started"
READY = "troupe: ready"
PROGRESS = frozenset({STARTED, READY})


def is_progress(line: str) -> bool:
    """Whether a log line (timestamped or not) is one of :data:`PROGRESS`."""
    text = line.rstrip("\n")
    return text in PROGRESS or text.partition(" ")[2] in PROGRESS


async def _shown(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    async for line in lines:
        if not is_progress(line):
            yield line


def _shown_text(text: str) -> str:
    if "troupe: " not in text:
        return text
    return "".join(x for x in text.splitlines(keepends=True) if not is_progress(x))


def cut_note(kept: int) -> str:
    return f"[troupe: earlier output cut, {kept} bytes kept]\n"


async def _is_tty(docker: aiodocker.Docker, container_id: str) -> bool:
    """Whether the container has a TTY (its log is one raw stream, not frames);
    :class:`NotFound` for an unknown container."""
    with on_container(container_id):
        info = await docker.containers.container(container_id).show()
    return bool((info.get("Config") or {}).get("Tty"))


async def _chunks(
    docker: aiodocker.Docker,
    container_id: str,
    tty: bool,
    *,
    follow: bool = False,
    timestamps: bool = True,
    tail: int | None = None,
) -> AsyncIterator[bytes]:
    """The log's bytes as the engine sends them (stdout and stderr, demultiplexed), in pieces of
    at most :data:`CHUNK` bytes. The engine's refusal leaves as :func:`on_container` says; a
    connection that breaks ends the stream."""
    params = {
        "stdout": "true",
        "stderr": "true",
        "follow": "true" if follow else "false",
        "timestamps": "true" if timestamps else "false",
        "tail": "all" if tail is None else str(tail),
    }
    with on_container(container_id):
        query = docker._query(f"containers/{container_id}/logs", params=params, timeout=None)
        async with query as resp:
            body = resp.content
            with contextlib.suppress(aiohttp.ClientError, asyncio.IncompleteReadError):
                if tty:  # one raw stream
                    async for chunk in body.iter_chunked(CHUNK):
                        yield chunk
                    return
                async for payload in _payloads(body):
                    yield payload


async def _payloads(body: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The payloads of the engine's frames (an 8-byte header: stream, size; then the payload),
    read in pieces of up to :data:`CHUNK` bytes, whatever is there (so a followed line goes on
    at once), and passed on in pieces of at most as many."""
    pending = bytearray()  # read, not yet parsed
    need = 0  # bytes of the current frame's payload still to come
    while data := await body.read(CHUNK):
        pending += data
        out = bytearray()
        pos = 0
        while True:
            if need:
                take = min(need, len(pending) - pos)
                out += pending[pos : pos + take]
                pos, need = pos + take, need - take
                if need:
                    break
            if len(pending) - pos < 8:
                break
            (need,) = struct.unpack_from(">4xL", pending, pos)
            pos += 8
        del pending[:pos]
        if out:
            yield bytes(out)


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """Text lines (newline kept) from byte pieces; a line longer than :data:`MAX_LINE` is
    passed on in pieces."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    async for chunk in chunks:
        pending += decoder.decode(chunk)
        while True:
            end = pending.find("\n", 0, MAX_LINE) + 1
            if not end and len(pending) >= MAX_LINE:
                end = MAX_LINE
            if not end:
                break
            yield pending[:end]
            pending = pending[end:]
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def follow_lines(docker: aiodocker.Docker, container_id: str) -> AsyncIterator[str]:
    """The timestamped lines of a kernel (troupe's have no TTY), followed until it stops."""
    return _lines(_chunks(docker, container_id, False, follow=True))


async def open_logs(
    docker: aiodocker.Docker, container_id: str, follow: bool = False
) -> AsyncIterator[str]:
    """Asks the engine now (an unknown container raises :class:`NotFound` at once) and returns
    the timestamped lines; with ``follow`` they go on until the container stops."""
    tty = await _is_tty(docker, container_id)
    return _shown(_lines(_chunks(docker, container_id, tty, follow=follow)))


def _line_start(buf: bytes | bytearray) -> int:
    """Where the first whole line of ``buf`` starts (its first whole character if it has no
    newline)."""
    nl = buf.find(b"\n")
    if 0 <= nl < len(buf) - 1:
        return nl + 1
    start = 0
    while start < len(buf) and buf[start] & 0xC0 == 0x80:  # UTF-8 continuation bytes
        start += 1
    return start


async def last_bytes(
    docker: aiodocker.Docker, container_id: str, limit: int, tty: bool | None = None
) -> str:
    """The end of everything a container wrote, timestamped, in at most ``limit`` bytes (UTF-8):
    read as a stream keeping only the last bytes, cut at a line start and then led by one line
    saying so (:func:`cut_note`). ``""`` when the engine cannot say. ``tty``: whether the
    container has a TTY, when the caller knows (else the engine is asked)."""
    keep = max(limit - CUT_NOTE_ROOM, 0)
    buf = bytearray()
    cut = False
    try:
        if tty is None:
            tty = await _is_tty(docker, container_id)
        async for chunk in _chunks(docker, container_id, tty):
            buf += chunk
            if len(buf) > keep:
                del buf[: len(buf) - keep]  # CPython drops a bytearray's head in place
                cut = True
    except TroupeError:  # the engine cannot say: keep what was read
        pass
    if not cut:
        return _shown_text(buf.decode(errors="replace"))
    if limit < CUT_NOTE_ROOM:
        return ""
    start = _line_start(buf)
    with memoryview(buf)[start:] as body:  # decoded without another copy of the bytes
        return cut_note(len(body)) + _shown_text(str(body, "utf-8", "replace"))


async def last_lines(docker: aiodocker.Docker, container_id: str, n: int) -> list[str]:
    """The last ``n`` lines, newlines stripped, to explain why a kernel stopped; ``[]`` when the
    engine cannot say."""
    out: list[str] = []
    with contextlib.suppress(TroupeError):
        tty = await _is_tty(docker, container_id)
        async for line in _lines(_chunks(docker, container_id, tty, timestamps=False, tail=n)):
            if not is_progress(line):
                out.append(line.rstrip("\n"))
    return out[-n:] if n > 0 else []
