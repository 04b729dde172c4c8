"""Reading from and running in a session's kernels: logs, exec, terminals.

Logs come from the agent while a kernel exists and from the saved copy once it was removed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from troupe.api.agent import AgentBackend
from troupe.api.errors import Invalid, NotRunning
from troupe.api.exec import ExecItem
from troupe.api.lifecycle import SessionStatus
from troupe.api.models import ExecRequest
from troupe.manager.fleet import Fleet
from troupe.manager.logs import LogStore, merged, strip
from troupe.manager.store.models import Kernel, Session


def check_kernel(s: Session, hostname: str | None) -> list[Kernel]:
    kernels = [k for k in s.kernels if hostname in (None, k.hostname)]
    if not kernels:
        raise Invalid.field_rule("container", f"no kernel named {hostname!r} in this session")
    return kernels


async def logs(
    fleet: Fleet, store: LogStore, s: Session, container: str | None, follow: bool
) -> AsyncIterator[str]:
    kernels = check_kernel(s, container)

    def stream(k: Kernel) -> AsyncIterator[str]:
        agent = fleet.get(k.agent_id or "")
        if k.container_id and agent and not store.has(s.id, k.hostname):
            return agent.logs(k.container_id, follow=follow)
        return _aiter(store.lines(s.id, k.hostname))

    if container is not None:
        async for line in stream(kernels[0]):
            yield strip(line)
        return
    async for line in merged({k.hostname: stream(k) for k in kernels}, follow=follow):
        yield line


def kernel_target(fleet: Fleet, s: Session, hostname: str) -> tuple[AgentBackend, str]:
    """The agent and container of a running session's kernel (for exec and shells)."""
    if s.status != SessionStatus.RUNNING:
        raise NotRunning(f"session {s.name!r} is {s.status}, not RUNNING")
    k = next((k for k in s.kernels if k.hostname == hostname), None)
    if k is None or not k.container_id:
        raise Invalid.field_rule("kernel", f"no kernel named {hostname!r} in this session")
    return fleet[k.agent_id or ""], k.container_id


def exec_stream(fleet: Fleet, s: Session, req: ExecRequest) -> AsyncIterator[ExecItem]:
    agent, container_id = kernel_target(fleet, s, req.kernel)
    return agent.exec_stream(container_id, req.command, user=req.user)


async def _aiter(lines: list[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line
