"""The app proxy's tunnel as httpcore's byte stream: chunks larger than httpcore reads (the
agent's namespace socket reads 256 KiB) come out whole and in order, without re-copying the
rest at every read; the end of the tunnel is seen as readable (closed by the app)."""

from __future__ import annotations

import contextlib
import os

from troupe.api.pipe import STDOUT
from troupe.manager.apps.tunnel import TunnelStream


class ChunksPipe:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def read(self) -> tuple[int, bytes] | None:
        return (STDOUT, self.chunks.pop(0)) if self.chunks else None

    async def write(self, data: bytes) -> None:
        pass

    async def close_input(self) -> None:
        pass

    async def exit_code(self) -> int:
        return 0


async def test_large_chunks_are_read_in_pieces_in_order() -> None:
    chunks = [os.urandom(256 * 1024 + 17), b"x", os.urandom(65536), os.urandom(70000)]
    stream = TunnelStream(contextlib.AsyncExitStack(), ChunksPipe(chunks))
    got, sizes = b"", []
    while data := await stream.read(65536):
        got += data
        sizes.append(len(data))
    assert got == b"".join(chunks)
    assert max(sizes) == 65536 and sizes[:5] == [65536, 65536, 65536, 65536, 17]
    assert stream.get_extra_info("is_readable")  # (the end: the app closed it)
    await stream.aclose()
