"""A session's kernels started again in the containers they had: a whole-session restart in
place (docs/policies.md), without removing and creating them (the removal alone took about a
second of an N=4 restart), and without starting again the containers still running.

A running container of a session that may restart (its entrypoint supervises the kernel:
:data:`~troupe.api.policies.SUPERVISED_VAR`) is not touched by the engine at all: its files
archive is rewritten in place (its ``kernel.conf`` carries the new ``TROUPE_RESTART_COUNT``,
which the entrypoint exports for the command, ``exec``, terminals and SSH alike), then the
agent's word, ``runner/restart.sh`` run by ``docker exec``, kills every process of the kernel
but init and the supervisor, which sets the kernel up again (files, sshd, environment files,
readiness, the command). No container dies: the engine reports no exit. The readiness wait
and the manager's split of the log by attempt read the lines stamped after the word (the
agent's clock: it runs on its engine's host); the failed attempt's log is the lines before.

The failed kernel's container was held: in place, where its command failed and the container
runs on (its supervisor reported the failure: :mod:`troupe.agent.reports`), or started again on
its death (:mod:`troupe.agent.hold`):
its files archive is rewritten in place and its word given at once as a line on its FIFO, its
start under way or done; then the start is waited for. Its new attempt begins at the later of
the word and the start (the readiness wait and the log's split read from there).

A supervised kernel's container that is not running (the failed kernel's, where it was not
started again held on its death) is started now: its entrypoint,
having run a supervisor before, waits for the word (held), and the kernel goes the way of a
running one. Its address is pinned first (the engine would give it any free one). One whose
word is not taken is killed (its death is no news: see :data:`DockerAgent.removing`), started
and told again, once.

A container without a supervisor is killed if it still runs, its log read (the manager keeps
it as that attempt's: the engine's log of a container goes on across starts), its files
archive written again and the container started again: same id, name, hostname, address,
network and folders. The readiness wait then reads the log from this start on
(:func:`troupe.agent.ready.wait_ready`'s ``since``).

A container that is gone, or that the engine killed for memory, is made anew instead (removed
first, its log kept the same way): the restart of that kernel is the fresh one it was before.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiodocker.exceptions import DockerError

from troupe.agent import exec as execs
from troupe.agent import logs as klogs
from troupe.agent import ready
from troupe.agent.engine import step
from troupe.agent.files import kernel_files, rewrite_files
from troupe.agent.hold import pin_address, supervised
from troupe.agent.kernel import RUNNER_MOUNT, files_archive
from troupe.api.agent import KernelRestarted, KernelSpec, KernelStarted
from troupe.api.errors import AgentFailed
from troupe.api.policies import RESTART_COUNT_VAR

if TYPE_CHECKING:
    from troupe.agent.docker_backend import DockerAgent

log = logging.getLogger(__name__)

#: The agent's word to a supervised kernel (it exits 3 where the kernel has no supervisor).
WORD = f"{RUNNER_MOUNT}/restart.sh"


def started_of(spec: KernelSpec, info: dict[str, Any]) -> KernelStarted:
    """What the manager records of a started container (``show``'s answer)."""
    nets = info.get("NetworkSettings", {}).get("Networks", {})
    started = info["State"].get("StartedAt")
    return KernelStarted(
        kernel_id=spec.kernel_id,
        container_id=info["Id"],
        ip=(nets.get(spec.network) or {}).get("IPAddress") or None,
        created_at=ready.engine_time(info["Created"]) if info.get("Created") else None,
        started_at=ready.engine_time(started) if started else None,
    )


async def restart_kernel(agent: DockerAgent, spec: KernelSpec) -> KernelRestarted:
    """``spec``'s kernel started again (see the module's docstring)."""
    info = await _show(agent, spec)
    if info is not None:  # (a death of it read meanwhile is not held; earlier reports old news)
        agent.holds.starting(info["Id"], int(spec.env.get(RESTART_COUNT_VAR) or 0))
    oom = bool(((info or {}).get("State") or {}).get("OOMKilled"))  # (made anew: below)
    if info is not None and not oom and agent.holds.word_ready(info["Id"]):
        again = await _held(agent, spec, info["Id"])
        if again is not None:
            return again
        info = await _show(agent, spec)  # (it stopped while held: started below)
    if info is not None and await agent.holds.settle(info["Id"]):
        info = await _show(agent, spec)  # (after its held start)
    state = (info or {}).get("State") or {}
    if info is None or state.get("OOMKilled") or state.get("Status") in ("dead", "removing"):
        text = ""
        if info is not None:
            text = await agent.remove_container(info["Id"])
            agent.holds.release(info["Id"], info.get("Name") or "")
        fresh = await agent.create_kernel(spec)
        return KernelRestarted(**fresh.model_dump(), log=text, recreated=True)
    if supervised(info):
        for _ in range(2):  # (a word not taken: the container killed, started and told again)
            if not info["State"].get("Running"):  # (not held: started now, held)
                info, _ = await _start(agent, spec, info)
            again = await _in_place(agent, spec, info)
            if again is not None:
                return again
            info, _ = await _start(agent, spec, info)
        raise AgentFailed("its supervisor did not take the restart", kernel=spec.hostname)
    text = await klogs.last_bytes(agent.docker, info["Id"], agent.saved_log_bytes, tty=False)
    info, fifo = await _start(agent, spec, info, files=True)
    agent.restarted(info["Id"], fifo, ready.engine_nanos(info["State"]["StartedAt"]))
    if not info["State"].get("Running"):
        raise AgentFailed(
            f"exited at once with code {info['State'].get('ExitCode')}", kernel=spec.hostname
        )
    return KernelRestarted(**started_of(spec, info).model_dump(), log=text)


async def _held(agent: DockerAgent, spec: KernelSpec, cid: str) -> KernelRestarted | None:
    """A container held with its FIFO here (:mod:`troupe.agent.hold`): its files rewritten,
    then its word on the FIFO, at once, its start under way or not; then that start waited
    for. None where the word could not be given so (no files archive here; the FIFO could not
    be written; the start failed: the word went with the FIFO's end; the container stopped
    while held: the word goes with the agent's end): the container goes the way of the others
    (its word ``restart.sh``)."""
    files = rewrite_files(spec) if spec.files else None
    if spec.files and files is None:
        return None
    word_at = time.time_ns()  # (before the word: every line of the new attempt is later)
    if not agent.holds.word(cid, spec.container_name) or not await agent.holds.settle(cid):
        return None
    info = await _show(agent, spec)
    if info is None or not info["State"].get("Running"):
        agent.holds.unword(cid)  # (a word left in its FIFO would wake its next start early)
        return None  # (stopped while held, or as it was started: started again as the others)
    since = max(word_at, ready.engine_nanos(info["State"]["StartedAt"]))
    text = await klogs.last_bytes(agent.docker, cid, agent.saved_log_bytes, tty=False)
    agent.restarted(cid, files.events if files else None, since)
    started = started_of(spec, info).model_copy(update={"started_at": iso_nanos(since)})
    agent.holds.ran(cid, spec.network, started.ip)
    return KernelRestarted(**started.model_dump(), log=before(text, since))


async def _show(agent: DockerAgent, spec: KernelSpec) -> dict[str, Any] | None:
    """The kernel's container's inspection; None when it is gone."""
    try:
        info: dict[str, Any] = await agent.docker.containers.container(spec.container_name).show()
    except DockerError as e:
        if e.status != 404:
            raise AgentFailed(
                f"cannot inspect its container: {e.message}", kernel=spec.hostname
            ) from None
        return None
    return info


async def _start(
    agent: DockerAgent, spec: KernelSpec, info: dict[str, Any], files: bool = False
) -> tuple[dict[str, Any], Path | None]:
    """The container killed if it runs (its death is no news, see
    :data:`DockerAgent.removing`) and started again, its address pinned; with ``files``, its
    files archive written anew first (a supervised kernel's come with the word, after the start,
    its entrypoint waiting for the word: held). Its inspection after the start, and its
    readiness FIFO where ``files`` made one."""
    cid = info["Id"]
    container = agent.docker.containers.container(cid)
    agent.holds.starting(cid)  # (a death of it read meanwhile is not held)
    agent.removing.add(cid)  # (until started again)
    written = None
    try:
        with step(kernel=spec.hostname):
            if info["State"].get("Running"):
                with contextlib.suppress(DockerError):  # (stopped meanwhile)
                    await container.kill(signal="SIGKILL")
                await container.wait()
            if spec.ip:
                await pin_address(agent.docker, info, spec.network, spec.ip, spec.hostname)
            if files:
                written = kernel_files(spec) if spec.files else None
                if spec.files and written is None:
                    await container.put_archive("/", files_archive(spec.files))  # type: ignore[no-untyped-call]
            await container.start()
            info = await container.show()
    finally:
        agent.removing.discard(cid)
    return info, written.events if written else None


async def _in_place(
    agent: DockerAgent, spec: KernelSpec, info: dict[str, Any]
) -> KernelRestarted | None:
    """The kernel set up again by its supervisor, its container left running; None when the
    word could not be given (no supervisor after all, no shell to run it): then the container
    is started again instead."""
    cid = info["Id"]
    with step(kernel=spec.hostname):
        files = rewrite_files(spec) if spec.files else None
        if spec.files and files is None:
            container = agent.docker.containers.container(cid)
            await container.put_archive("/", files_archive(spec.files))  # type: ignore[no-untyped-call]
    # the shell the entrypoint was started with: the runtime's, or the image's
    shell = ((info.get("Config") or {}).get("Entrypoint") or ["/bin/sh"])[0]
    word_at = time.time_ns()  # (before the word: every line of the new attempt is later)
    agent.holds.release(cid, info.get("Name") or "")  # (held or not: it has its word)
    code, out = await execs.exec_collect(agent.docker, cid, [shell, WORD], "root")
    if code != 0:
        log.warning(
            "kernel %s: no restart in place (%s %s): starting it again",
            spec.hostname,
            code,
            out.strip(),
        )
        return None
    text = await klogs.last_bytes(agent.docker, cid, agent.saved_log_bytes, tty=False)
    agent.restarted(cid, files.events if files else None, word_at)
    started = started_of(spec, info).model_copy(update={"started_at": iso_nanos(word_at)})
    agent.holds.ran(cid, spec.network, started.ip)
    return KernelRestarted(**started.model_dump(), log=before(text, word_at))


def iso_nanos(ns: int) -> str:
    """Epoch nanoseconds as ISO 8601 UTC with microseconds (as :func:`ready.engine_time`)."""
    seconds, rest = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000).isoformat()


def before(text: str, ns: int) -> str:
    """The lines of a timestamped log (:func:`klogs.last_bytes`) stamped before ``ns``: the
    failed attempt's, without the first lines of the next one. Lines without a stamp (the
    note that the log was cut) stay."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        at = ready.engine_nanos(line.partition(" ")[0])
        if at and at >= ns:
            return "".join(lines[:i])
    return text
