"""Which containers an agent acts on, and as whom: its kernels only, as ``work`` or ``root``.

Finding N5 (docs/reliability.md): the agent token used to open commands, terminals, copies,
tunnels and logs in *any* container of the engine, troupe's or not, as any user. Now every
request that names a container passes :meth:`Kernels.resolve` first, and every command
:func:`check_user`.

A kernel is a container that carries the labels every kernel gets at creation
(:func:`troupe.agent.kernel.container_config`): ``troupe.session`` and ``troupe.kernel``.
Labels are fixed when a container is made, so no container that exists can be given them
later; agents sharing one engine also share the agent token, so a label naming the agent
would protect nothing more. Containers troupe makes for other jobs (the GPU probe) carry
neither and are refused like anyone else's.

The answer is cached by the container's full id (the engine's ids are random and never
reused): the exec fast path costs no extra engine round trip for a kernel this agent made or
listed. A name or a short id is resolved by the engine every time (a name can be given to a
new container) and the full id is what the caller then uses. A removed kernel is dropped from
the cache when this agent removes it or the engine answers that it does not know it; until
then a stale entry only lets the request reach the engine, which refuses it (404).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping

import aiodocker

from troupe.agent.engine import on_container
from troupe.api.agent import LABEL_KERNEL, LABEL_SESSION
from troupe.api.errors import Invalid, NotFound
from troupe.api.exec import USERS

#: An engine's full container id: the only key the cache trusts.
FULL_ID = re.compile(r"[0-9a-f]{64}")
#: Past this many ids the cache starts again (the engine is asked again once per kernel).
CACHE_SIZE = 10_000


def is_kernel(labels: Mapping[str, str] | None) -> bool:
    """Whether a container's labels are those of a troupe kernel."""
    return bool(labels and labels.get(LABEL_SESSION) and labels.get(LABEL_KERNEL))


def check_user(user: str) -> None:
    """Commands run as the kernel's ``work`` user or as ``root``, nobody else (no numeric ids,
    no ``user:group``): :class:`Invalid` otherwise."""
    if user not in USERS:
        raise Invalid(f"user: must be 'work' or 'root', not {user!r}", field="user")


def not_a_kernel(container_id: str) -> NotFound:
    """The answer for a container that is not one of this agent's kernels: the same as for one
    that does not exist (the token does not reveal what else runs on the engine)."""
    return NotFound(f"container {container_id!r} is not a troupe kernel")


class Kernels:
    """The containers this agent may act on, checked by their labels and cached by full id."""

    def __init__(self, docker: Callable[[], aiodocker.Docker]) -> None:
        self._docker = docker
        self._known: set[str] = set()

    def add(self, container_id: str) -> None:
        """A kernel this agent made or listed (by its labels)."""
        if FULL_ID.fullmatch(container_id):
            if len(self._known) >= CACHE_SIZE:
                self._known.clear()
            self._known.add(container_id)

    def forget(self, container_id: str) -> None:
        """A kernel that was removed (or that the engine no longer knows)."""
        self._known.discard(container_id)

    @contextlib.contextmanager
    def gone_if_unknown(self, container_id: str) -> Iterator[None]:
        """A step on a kernel: when the engine no longer knows it, it is not one any more."""
        try:
            yield
        except NotFound:
            self.forget(container_id)
            raise

    def __contains__(self, container_id: object) -> bool:
        return container_id in self._known

    async def resolve(self, container_id: str) -> str:
        """The full id of the kernel ``container_id`` names (an id, a short id or a name);
        :class:`NotFound` when there is no such container or it is not a troupe kernel."""
        if container_id in self._known:
            return container_id
        with self.gone_if_unknown(container_id), on_container(container_id):
            info = await self._docker().containers.container(container_id).show()
        full_id = str(info.get("Id") or "")
        if not full_id or not is_kernel((info.get("Config") or {}).get("Labels")):
            raise not_a_kernel(container_id)
        self.add(full_id)
        return full_id
