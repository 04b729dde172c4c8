"""What every agent backend offers the manager: the local Docker one and remote agents alike.

The registry only talks to :class:`AgentBackend`; whether the engine is in this process or on
another host behind HTTP is invisible to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from troupe.api.agent import AgentCapacity, KernelExit, KernelSpec, KernelStarted, NetworkSpec
from troupe.api.models import ImageInfo

ExitHandler = Callable[[KernelExit], Awaitable[None]]
T = TypeVar("T")


async def gather_all(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Runs all at once and waits for all; then raises the first failure, if any.

    Unlike a plain gather, no step is left running behind a failure, so rollback never races
    a create still in flight.
    """
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [r for r in results if not isinstance(r, BaseException)]


class AgentError(Exception):
    """A step on an agent failed; ``kernel`` names the kernel when one is concerned."""

    def __init__(self, message: str, kernel: str | None = None) -> None:
        super().__init__(message)
        self.kernel = kernel


@dataclass
class ExecOutput:
    data: bytes


@dataclass
class ExecExit:
    exit_code: int


class Shell(Protocol):
    """Both ends of an interactive terminal: bytes in and out, resize, exit code."""

    async def read(self) -> bytes | None: ...
    async def write(self, data: bytes) -> None: ...
    async def resize(self, rows: int, cols: int) -> None: ...
    async def exit_code(self) -> int: ...


class AgentBackend(Protocol):
    name: str

    async def start(self, on_exit: ExitHandler | None = None) -> None: ...
    async def close(self) -> None: ...
    async def capacity(self) -> AgentCapacity: ...
    async def images(self) -> list[ImageInfo]: ...
    async def has_image(self, name: str) -> bool: ...
    async def used_subnets(self) -> list[str]: ...
    async def create_network(self, spec: NetworkSpec) -> None: ...
    async def remove_session_networks(self, session_id: str) -> None: ...
    async def create_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelStarted]: ...
    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> None: ...
    async def signal_go(self, container_id: str) -> None: ...
    async def remove_kernels(self, session_id: str) -> dict[str, str]: ...
    async def list_kernels(self) -> list[dict[str, Any]]: ...
    async def list_session_ids_with_networks(self) -> set[str]: ...
    def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]: ...
    def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecOutput | ExecExit]: ...
    def shell(
        self, container_id: str, user: str = "work"
    ) -> AbstractAsyncContextManager[Shell]: ...
