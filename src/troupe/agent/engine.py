"""How the Docker engine's failures become domain errors.

aiodocker raises :class:`DockerError` (an HTTP status, ``900`` when the engine cannot be reached,
and the engine's message). Nothing above the agent should know aiodocker, so every engine call
that can fail runs inside one of these context managers and leaves as a
:mod:`troupe.api.errors` class: a step that failed is :class:`AgentFailed`; a container the
engine does not know is :class:`NotFound`; one that is not running is :class:`NotRunning`.

The engine's words go to the manager (and so to users) only through :func:`summary`: runc's
wrappers and Go source locations are dropped and host paths (``/var/lib/docker/...``,
``/sys/fs/cgroup/...``, ``/proc/<pid>/...``, the agent's data root) hidden, keeping what helps
(``exec: "nosuch": executable file not found in $PATH``). The full text is logged here, on the
agent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiodocker.exceptions import DockerError

from troupe.api.errors import AgentFailed, NotFound, NotRunning

if TYPE_CHECKING:
    import aiodocker

log = logging.getLogger(__name__)

#: Layers of runc / containerd wrapping around the one useful cause, and Go source locations.
_NOISE = re.compile(
    r"(?:failed to create shim(?: task)?|failed to create task for container"
    r"|OCI runtime (?:create|exec|start|state) failed|runc (?:create|exec|run) failed"
    r"|unable to start container process|starting container process caused"
    r"|container init caused|error during container init|exec failed"
    r"|\b[\w.-]+\.go:\d+)\s*:\s*",
    re.IGNORECASE,
)
#: A container's root file system seen from the host: the path inside the container is kept.
_ROOTFS = re.compile(r"/var/lib/docker/(?:overlay2|aufs|btrfs|zfs|vfs)/[^/\s\"':,]+/merged")
#: The engine's own places on the host.
_HOST_PATH = re.compile(
    r"(?:/var)?/run/(?:docker|containerd|runc)(?:\.sock)?(?:/[^\s\"':,()]*)?"
    r"|/var/lib/(?:docker|containerd)(?:/[^\s\"':,()]*)?"
    r"|/sys/fs/cgroup(?:/[^\s\"':,()]*)?"
    r"|/proc/(?:\d+|self|thread-self)(?:/[^\s\"':,()]*)?"
)
#: runc's closing words: ``...: unknown`` (the gRPC status) and docker's hint after a mount.
_TAIL = re.compile(r"(?::\s*unknown)+(?=\s*(?::|$))", re.IGNORECASE)


#: This agent's own places (its data root, the runner scripts) -> what messages say instead.
_OWN_PLACES: dict[str, str] = {}


def own_place(path: str, name: str) -> None:
    """Says ``name`` (e.g. ``<data root>``) instead of ``path`` in engine messages."""
    _OWN_PLACES[path.rstrip("/") or "/"] = name


def _hide(m: re.Match[str]) -> str:
    last = m.group(0).rstrip("/").rsplit("/", 1)[-1]
    return f"<host>/{last}" if last and not last.isdigit() else "<host>"


def summary(text: str) -> str:
    """The engine's message fit for the manager: the cause without runc's wrappers, Go source
    locations and host paths. The full text is logged when anything was taken out."""
    out = _NOISE.sub("", text)
    out = _ROOTFS.sub(lambda m: "" if m.string.startswith("/", m.end()) else "<rootfs>", out)
    out = _HOST_PATH.sub(_hide, out)
    for path in sorted(_OWN_PLACES, key=len, reverse=True):
        out = re.sub(re.escape(path) + r"(?=[/\s\"':,()]|$)", _OWN_PLACES[path], out)
    out = _TAIL.sub("", out)
    out = re.sub(r"\s+", " ", out).strip(" :")
    if out != text.strip():
        log.warning("engine said: %s", text)
    return out or "engine error"


def message(e: DockerError) -> str:
    """The engine's own words (:func:`summary`), without aiodocker's ``[status]`` prefix."""
    return summary(str(getattr(e, "message", None) or e))


@contextlib.contextmanager
def step(what: str = "", *, kernel: str | None = None) -> Iterator[None]:
    """A step on the engine: a failure leaves as ``AgentFailed("<what>: <engine message>")``,
    naming the kernel when one is concerned."""
    try:
        yield
    except DockerError as e:
        text = f"{what}: {message(e)}" if what else message(e)
        raise AgentFailed(text, kernel=kernel) from e


@contextlib.contextmanager
def on_container(container_id: str) -> Iterator[None]:
    """A step on a container the caller names (logs, exec, shell): an id the engine does not
    know is :class:`NotFound`, a stopped container :class:`NotRunning`, anything else
    :class:`AgentFailed`."""
    try:
        yield
    except DockerError as e:
        if e.status == 404:
            raise NotFound.of("container", container_id) from e
        if e.status == 409:  # exec into a stopped, paused or restarting container
            raise NotRunning(f"container {container_id!r}: {message(e)}") from e
        raise AgentFailed(message(e)) from e


async def list_containers(
    docker: aiodocker.Docker, label: str, running: bool = False
) -> list[dict[str, Any]]:
    """Containers with a label (``key`` or ``key=value``; only running ones with ``running``),
    as the engine lists them: aiodocker's ``list()`` wraps away the labels we need."""
    filters: dict[str, list[str]] = {"label": [label]}
    if running:
        filters["status"] = ["running"]
    params = {"filters": json.dumps(filters), **({} if running else {"all": "1"})}
    with step("listing containers"):
        raw = await docker._query_json("containers/json", params=params)
    return list(raw)


async def end_if_out_of_memory(
    docker: aiodocker.Docker, container_id: str, state: dict[str, Any] | None = None
) -> bool:
    """Kills a running container a process of which the host killed for memory (``state``:
    its ``State``, inspected when not given); whether it did. Its death then says so, as a
    kernel's end for memory does, and its restart makes it anew: a supervised kernel never
    waits on for a word or a go that the killed process was to give."""
    if state is None:
        try:
            state = (await docker.containers.container(container_id).show()).get("State") or {}
        except DockerError:
            return False
    if not (state.get("OOMKilled") and state.get("Running")):
        return False
    with contextlib.suppress(DockerError):
        await docker.containers.container(container_id).kill(signal="SIGKILL")
    return True
