"""A failed kernel's container started again at once, held: the expensive part of its restart
(the engine's ``docker start``, about as long as a fresh container's create and start) done
while the manager judges the failure, not after (docs/policies.md, "A restart, in place").

When a supervised kernel's container (a session that may restart) dies on its own with a
non-zero exit, not killed for memory (that kernel is made anew by a restart), the agent reads
what it reports of the death (the engine's state, the last lines), reports the exit as before
and at the same time starts the container again: its entrypoint sees that it ran a supervisor
before and waits, running nothing of the kernel, for the agent's word. The word is the line
``restart`` on the kernel's readiness FIFO (its host end, bind-mounted: :mod:`.files`), held
open by the agent from before the start, so that it can be given before the start is done
(the restart's files written first); where there is no FIFO here, the word is
``runner/restart.sh`` as for a running kernel. Until the word the container is *held*: listed
as ``held``, not ``running`` (a manager's reconcile does not take it for a live kernel), and
its death is no news (no exit reported, no second start). When the session is not restarted
(no restarts left, a ``no_restart_exit_codes`` code, destroyed, a time limit) its end removes
it with its other containers, as before; the removal waits for a start under way first.

A death is held only while nothing else started the container since it was read (a restart of
the same kernel, set off by another kernel's failure, can start it while the death's inspection
and log are read): the agent counts each start of a container it makes (:meth:`Holds.starting`)
and holds a death only where the count did not change meanwhile, nor the container is being
removed; the held start itself skips a container running again, or started since its death.

The agent's end of the FIFO is closed once the held kernel is ready (its supervisor read the
word: :meth:`Holds.worded`), at its next hold or removal, or with the agent.

A supervised kernel whose command failed while its container runs on is held the same way,
in place (:meth:`Holds.hold_in_place`): its supervisor reported the failure
(:mod:`troupe.agent.reports`) and waits for the same word; there is no start to make.

The address it had on the session network is pinned before the start (the engine gives a
started-again container any free one otherwise), as the restart does; a container whose
address this agent does not know (it was restarted since the container last started, and the
address was never pinned) is not held: its restart starts it as before.

Which containers are held is kept in memory and, for an agent restarted meanwhile, as a marker
file next to the kernel's files archive (:data:`troupe.agent.files.FILES_DIR`, tmpfs), removed
with the container's files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiodocker.exceptions import DockerError
from aiodocker.networks import DockerNetwork

from troupe.agent.files import FILES_DIR, events_path
from troupe.agent.kernel import endpoint
from troupe.api.agent import LABEL_HOSTNAME
from troupe.api.policies import SUPERVISED_VAR

if TYPE_CHECKING:
    import aiodocker

log = logging.getLogger(__name__)

#: The state :meth:`DockerAgent.list_kernels` reports for a held container.
HELD = "held"
#: The agent's word on a held kernel's FIFO (runner/entrypoint.sh).
WORD_LINE = b"restart\n"


def held_path(container_name: str) -> Path:
    return FILES_DIR / f"{container_name.lstrip('/')}.held"


def supervised(info: dict[str, Any]) -> bool:
    """Whether a container's entrypoint supervises its kernel (:data:`SUPERVISED_VAR`)."""
    return f"{SUPERVISED_VAR}=1" in ((info.get("Config") or {}).get("Env") or [])


def name_of(info: dict[str, Any]) -> str:
    return str(info.get("Name") or "").lstrip("/")


def address_of(info: dict[str, Any], known: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """(network, address) of a dead container: the one pinned on its network, else the one
    it had when it last started (``known``: container id -> that)."""
    network = str((info.get("HostConfig") or {}).get("NetworkMode") or "")
    nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
    pinned = ((nets.get(network) or {}).get("IPAMConfig") or {}).get("IPv4Address")
    return (network, pinned) if pinned else known.get(str(info.get("Id")))


class Holds:
    """The held starts of one agent's containers."""

    def __init__(self, docker: Callable[[], aiodocker.Docker]) -> None:
        self._docker = docker
        #: container id -> (network, address) it had while it last ran (set at each start)
        self.addresses: dict[str, tuple[str, str]] = {}
        #: the containers held (from their death until their word: their deaths are no news)
        self._held: set[str] = set()
        #: container id -> its held start, under way or done, until its restart or removal
        self._starts: dict[str, asyncio.Future[bool]] = {}
        #: container id -> the agent's end of its FIFO, open from before its held start until
        #: its next hold or removal (a line written to a FIFO lives while an end is open)
        self._fifos: dict[str, int] = {}
        #: container id -> how many times this agent started it again (:meth:`starting`)
        self._starts_made: dict[str, int] = {}
        #: container id -> the attempt its last restart here set up (TROUPE_RESTART_COUNT)
        self._attempts: dict[str, int] = {}

    def starting(self, cid: str, attempt: int | None = None) -> None:
        """The agent starts the container again (a restart, of ``attempt``): a death read
        before, or a report of an earlier attempt, is old news."""
        self._starts_made[cid] = self._starts_made.get(cid, 0) + 1
        if attempt is not None:
            self._attempts[cid] = attempt

    def attempt(self, cid: str) -> int:
        """The attempt the container's last restart here set up (0: none known)."""
        return self._attempts.get(cid, 0)

    def generation(self, cid: str) -> int:
        """How many times the agent started the container again (read before a death's reads,
        compared after them)."""
        return self._starts_made.get(cid, 0)

    def ran(self, cid: str, network: str, ip: str | None) -> None:
        """A container (re)started with ``ip`` on ``network``."""
        if ip:
            self.addresses[cid] = (network, ip)

    def is_held(self, cid: str, name: str = "") -> bool:
        """Whether the container (``name``: its name, where known) is held (started, or being
        started, to wait for its word)."""
        return cid in self._held or (bool(name) and held_path(name).exists())

    def holds(self, info: dict[str, Any], exit_code: int, oom: bool) -> bool:
        """Whether a dead container (``info``: its inspection after the death) is to be
        started again, held: supervised, a failure (non-zero, not for memory), its address
        known, not held already."""
        return (
            exit_code != 0
            and not oom
            and supervised(info)
            and address_of(info, self.addresses) is not None
            and not self.is_held(str(info.get("Id")), name_of(info))
        )

    def start(self, info: dict[str, Any]) -> None:
        """Starts the container held, in the background (see the module's docstring)."""
        self._hold(info)
        name = name_of(info)
        self._starts[str(info["Id"])] = asyncio.create_task(self._start(info), name=f"hold-{name}")

    def hold_in_place(self, info: dict[str, Any]) -> None:
        """Holds a running container whose supervisor reported its command's failure: it
        waits for its word as a held start does, its start done."""
        self._hold(info)
        done = asyncio.get_running_loop().create_future()
        done.set_result(True)
        self._starts[str(info["Id"])] = done

    def _hold(self, info: dict[str, Any]) -> None:
        cid, name = str(info["Id"]), name_of(info)
        with contextlib.suppress(OSError):  # (no marker: an agent restarted forgets it)
            held_path(name).touch(mode=0o600)
        self._close(cid)
        self._held.add(cid)
        with contextlib.suppress(OSError):  # (none: the word is restart.sh)
            self._fifos[cid] = os.open(events_path(name), os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)

    async def _start(self, info: dict[str, Any]) -> bool:
        cid = str(info["Id"])
        try:
            container = self._docker().containers.container(cid)
            now = (await container.show()).get("State") or {}
            if now.get("Running") or now.get("StartedAt") != info["State"].get("StartedAt"):
                raise _StartedSince  # (a restart started it: not held)
            network, ip = address_of(info, self.addresses) or ("", "")
            host = ((info.get("Config") or {}).get("Labels") or {}).get(LABEL_HOSTNAME) or ""
            await pin_address(self._docker(), info, network, ip, host)
            await container.start()
        except Exception as e:  # (its restart starts it, as before)
            if not isinstance(e, _StartedSince):
                log.warning("could not start %s again (held): %s", name_of(info), _why(e))
            self._close(cid)
            self.release(cid, name_of(info))
            self._starts.pop(cid, None)
            return False
        return True

    def word_ready(self, cid: str) -> bool:
        """Whether the container is held with its FIFO here: its word needs no ``exec``."""
        return cid in self._held and cid in self._starts and cid in self._fifos

    def word(self, cid: str, name: str) -> bool:
        """Gives a held container its word on its FIFO (kept there until it reads it); whether
        it was written (else the word is ``restart.sh``'s)."""
        self.release(cid, name)
        fd = self._fifos.get(cid)
        try:
            return fd is not None and os.write(fd, WORD_LINE) == len(WORD_LINE)
        except OSError as e:
            log.warning("could not give %s its word on its FIFO: %s", name, e)
            return False

    def unword(self, cid: str) -> None:
        """A word given and not taken (the container stopped) goes with the agent's end."""
        self._close(cid)

    @contextlib.contextmanager
    def worded(self, cids: Iterable[str]) -> Iterator[None]:
        """Around a readiness wait: the agent's ends of these containers' FIFOs closed after it
        (a ready kernel's supervisor read its word; a line left unread goes with the attempt)."""
        try:
            yield
        finally:
            for cid in cids:
                if cid not in self._held:
                    self._close(cid)

    async def settle(self, cid: str) -> bool:
        """Waits for the container's held start if one was made (and forgets it); whether it
        started."""
        task = self._starts.pop(cid, None)
        if task is None:
            return False
        with contextlib.suppress(Exception):
            return await asyncio.shield(task)
        return False

    def release(self, cid: str, name: str) -> None:
        """The container is held no more (it has its word, or its start failed)."""
        self._held.discard(cid)
        if name:
            held_path(name).unlink(missing_ok=True)

    def forget(self, cid: str) -> None:
        """A removed container (its marker file goes with its files: ``remove_files``)."""
        self._held.discard(cid)
        self._starts.pop(cid, None)
        self.addresses.pop(cid, None)
        self._attempts.pop(cid, None)
        self._close(cid)

    def close(self) -> None:
        """The agent closes: its ends of the FIFOs with it."""
        for cid in list(self._fifos):
            self._close(cid)

    def _close(self, cid: str) -> None:
        fd = self._fifos.pop(cid, None)
        if fd is not None:
            os.close(fd)


class _StartedSince(Exception):
    """The container was started again since its death was read."""


def _why(e: Exception) -> str:
    return e.message if isinstance(e, DockerError) else (str(e) or type(e).__name__)


async def pin_address(
    docker: aiodocker.Docker, info: dict[str, Any], network: str, ip: str, hostname: str
) -> None:
    """Pins a stopped container's address on its network (the engine gives a stopped
    container's endpoint a free one at its next start otherwise: containers started at once
    swap theirs). Once per container: a container made by a fresh start had none pinned."""
    nets = info.get("NetworkSettings", {}).get("Networks", {})
    pinned = ((nets.get(network) or {}).get("IPAMConfig") or {}).get("IPv4Address")
    if pinned == ip:
        return
    net = DockerNetwork(docker, network)  # type: ignore[no-untyped-call]
    with contextlib.suppress(DockerError):  # (not connected: connected below)
        await net.disconnect({"Container": info["Id"], "Force": True})
    await net.connect({"Container": info["Id"], "EndpointConfig": endpoint(hostname, ip)})
