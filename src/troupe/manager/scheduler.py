"""Placement of pending sessions on agents (SPEC section 3), as a pure function of plain data.

No I/O and no clock: the registry loads the state, calls :func:`schedule` and records the
placements in one transaction, so accounting stays exact and this stays easy to test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

EPS = 1e-9


@dataclass(frozen=True)
class AgentState:
    id: str
    group: str
    cpu: float
    mem: int
    gpu: int
    cpu_used: float = 0.0
    mem_used: int = 0
    gpu_used: int = 0

    @property
    def cpu_free(self) -> float:
        return self.cpu - self.cpu_used

    @property
    def mem_free(self) -> int:
        return self.mem - self.mem_used

    @property
    def gpu_free(self) -> int:
        return self.gpu - self.gpu_used

    def kernels_fitting(self, req: Request) -> int:
        """How many kernels of ``req`` fit in what is free."""
        n = int((self.cpu_free + EPS) // req.cpu) if req.cpu > 0 else 10**9
        n = min(n, self.mem_free // req.mem if req.mem > 0 else 10**9)
        if req.gpu > 0:
            n = min(n, self.gpu_free // req.gpu)
        return max(n, 0)

    def take(self, req: Request, kernels: int) -> AgentState:
        return replace(
            self,
            cpu_used=self.cpu_used + req.cpu * kernels,
            mem_used=self.mem_used + req.mem * kernels,
            gpu_used=self.gpu_used + req.gpu * kernels,
        )


@dataclass(frozen=True)
class Request:
    """A pending session: ``size`` kernels of (cpu, mem, gpu) each."""

    session_id: str
    group: str
    mode: str
    size: int
    cpu: float
    mem: int
    gpu: int = 0
    priority: int = 0
    #: Arrival order (e.g. creation time as a number); lower goes first at equal priority.
    order: float = 0.0


@dataclass
class Decision:
    placements: dict[str, list[str]] = field(default_factory=dict)
    """session id -> agent id of each kernel, by rank."""
    waiting: dict[str, list[str]] = field(default_factory=dict)
    """session id -> why it could not be placed, one line per agent of its group."""


def _shortage(agent: AgentState, req: Request, kernels: int) -> str:
    need = [
        ("cpu", req.cpu * kernels, agent.cpu_free, "{:g} cores"),
        ("mem", req.mem * kernels, agent.mem_free, "{} bytes"),
        ("gpu", req.gpu * kernels, agent.gpu_free, "{} GPUs"),
    ]
    short = [
        f"{name}: needs {fmt.format(n)}, {fmt.format(max(free, 0))} free"
        for name, n, free, fmt in need
        if n > free + EPS
    ]
    return f"agent {agent.id}: " + ("; ".join(short) or "no room")


def never_fits(req: Request, agents: Sequence[AgentState]) -> str | None:
    """Why ``req`` can never be placed even on idle agents, or None if it can."""
    group = [
        replace(a, cpu_used=0.0, mem_used=0, gpu_used=0) for a in agents if a.group == req.group
    ]
    if not group:
        return f"no agent in resource group {req.group!r}"
    if req.mode == "single-node":
        if any(a.kernels_fitting(req) >= req.size for a in group):
            return None
        best = max(group, key=lambda a: a.kernels_fitting(req))
        return (
            f"single-node session of {req.size} kernels is larger than every agent "
            f"({_shortage(best, req, req.size)})"
        )
    total = sum(a.kernels_fitting(req) for a in group)
    if total == 0:
        best = group[0]
        return f"one kernel is larger than every agent ({_shortage(best, req, 1)})"
    if total < req.size:
        return f"the group {req.group!r} has room for only {total} of {req.size} kernels"
    return None


def _place(req: Request, agents: dict[str, AgentState]) -> list[str] | None:
    group = [a for a in agents.values() if a.group == req.group]
    # One agent for the whole session when one fits: tightest fit keeps big holes for others.
    whole = [a for a in group if a.kernels_fitting(req) >= req.size]
    if whole:
        best = min(whole, key=lambda a: (a.kernels_fitting(req), a.id))
        return [best.id] * req.size
    if req.mode != "multi-node":
        return None
    # Gang over several agents: fill the roomiest agents first (fewest hosts), all or nothing.
    room = sorted(((a.kernels_fitting(req), a.id) for a in group), key=lambda t: (-t[0], t[1]))
    out: list[str] = []
    for n, agent_id in room:
        take = min(n, req.size - len(out))
        out += [agent_id] * take
        if len(out) == req.size:
            return out
    return None


def schedule(requests: Sequence[Request], agents: Sequence[AgentState]) -> Decision:
    """Places what fits, highest priority first, then first come first served.

    A session that does not fit does not block smaller ones behind it (backfilling).
    """
    state = {a.id: a for a in agents}
    decision = Decision()
    for req in sorted(requests, key=lambda r: (-r.priority, r.order, r.session_id)):
        placed = _place(req, state)
        if placed is None:
            group = [a for a in state.values() if a.group == req.group]
            n = req.size if req.mode == "single-node" else 1
            decision.waiting[req.session_id] = [_shortage(a, req, n) for a in group] or [
                f"no agent in resource group {req.group!r}"
            ]
            continue
        for agent_id in set(placed):
            state[agent_id] = state[agent_id].take(req, placed.count(agent_id))
        decision.placements[req.session_id] = placed
    return decision
