"""Placement of pending sessions on agents (docs/contract.md, 'Placement'), as a pure function
of plain data.

No I/O and no clock: the registry loads the state, calls :func:`schedule` and records the
placements in one transaction, so accounting stays exact and this stays easy to test.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from troupe.cluster.contract import ClusterMode

EPS = 1e-9


def kernels_fitting(cpu_free: float, mem_free: float, gpu_free: float, req: Request) -> int:
    """How many kernels of ``req`` fit in the free resources: the one resource-fit rule."""
    n = int((cpu_free + EPS) // req.cpu) if req.cpu > 0 else 10**9
    n = min(n, int(mem_free // req.mem) if req.mem > 0 else 10**9)
    if req.gpu > 0:
        n = min(n, int(gpu_free // req.gpu))
    return max(n, 0)


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
    #: UUIDs of the GPUs no kernel holds, in index order (``gpu_free`` of them)
    gpu_free_ids: tuple[str, ...] = ()

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
        return kernels_fitting(self.cpu_free, self.mem_free, self.gpu_free, req)

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
    if req.mode == ClusterMode.SINGLE_NODE:
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


#: A request's shape: (multi-node, size, cpu, mem, gpu).
Shape = tuple[bool, int, float, int, int]


def _shape(req: Request) -> Shape:
    return (req.mode == ClusterMode.MULTI_NODE, req.size, req.cpu, req.mem, req.gpu)


def _covers(a: Shape, b: Shape) -> bool:
    """Whether a request of shape ``b`` fails once one of shape ``a`` failed in this pass
    (resources only shrink): it asks at least as much, and a single-node request fails where a
    multi-node one of its shape did."""
    return (
        (a[0] or not b[0]) and a[1] <= b[1] and a[2] <= b[2] + EPS and a[3] <= b[3] and a[4] <= b[4]
    )


class _Group:
    """The agents of one resource group, kept sorted by free cores for fast best-fit search.

    Within one pass resources only shrink, so a request shape that failed stays failed: later
    requests dominated by a failure are rejected without a search.
    """

    def __init__(self, agents: list[AgentState]) -> None:
        self.state = {a.id: a for a in agents}
        #: agent id -> [cores, bytes, GPUs] free; plain lists keep the hot loops cheap
        self.free = {a.id: [a.cpu_free, a.mem_free, a.gpu_free] for a in agents}
        self.by_cpu = sorted((a.cpu_free, a.id) for a in agents)
        self.total_cpu = sum(max(a.cpu_free, 0.0) for a in agents)
        self.failed: list[Shape] = []
        self.version = 0

    def take(self, agent_id: str, req: Request, kernels: int) -> None:
        f = self.free[agent_id]
        del self.by_cpu[bisect_left(self.by_cpu, (f[0], agent_id))]
        f[0] -= req.cpu * kernels
        f[1] -= req.mem * kernels
        f[2] -= req.gpu * kernels
        insort(self.by_cpu, (f[0], agent_id))
        self.state[agent_id] = self.state[agent_id].take(req, kernels)
        self.total_cpu -= req.cpu * kernels
        self.version += 1

    def fitting(self, agent_id: str, req: Request) -> int:
        cpu, mem, gpu = self.free[agent_id]
        return kernels_fitting(cpu, mem, gpu, req)

    def place(self, req: Request) -> list[str] | None:
        shape = _shape(req)
        if any(_covers(f, shape) for f in self.failed):
            return None
        placed = self._place(req)
        if placed is None:
            # Kept minimal: a failure the new one covers goes (it rejects nothing more);
            # every later request of the pass is checked against each one left.
            self.failed = [f for f in self.failed if not _covers(shape, f)]
            self.failed.append(shape)
        return placed

    def _place(self, req: Request) -> list[str] | None:
        # One agent for the whole session when one fits: the tightest fit in cores keeps big
        # holes for big sessions. Agents from ``start`` on have the cores; check the rest.
        need_cpu, need_mem, need_gpu = req.cpu * req.size, req.mem * req.size, req.gpu * req.size
        by_cpu, free = self.by_cpu, self.free
        for i in range(bisect_left(by_cpu, (need_cpu - EPS, "")), len(by_cpu)):
            agent_id = by_cpu[i][1]
            f = free[agent_id]
            if f[1] >= need_mem and f[2] >= need_gpu:
                return [agent_id] * req.size
        if req.mode != ClusterMode.MULTI_NODE or self.total_cpu + EPS < need_cpu:
            return None
        # Gang over several agents: the roomiest first (fewest hosts), all or nothing; agents
        # without the cores of one kernel are not looked at.
        out: list[str] = []
        lo = bisect_left(by_cpu, (req.cpu - EPS, "")) if req.cpu > 0 else 0
        for i in range(len(by_cpu) - 1, lo - 1, -1):
            agent_id = by_cpu[i][1]
            n = self.fitting(agent_id, req)
            out += [agent_id] * min(n, req.size - len(out))
            if len(out) == req.size:
                return out
        return None

    def report(self, req: Request, limit: int = 3) -> list[str]:
        """Why ``req`` does not fit: the agents closest to fitting it, one line each."""
        n = req.size if req.mode == ClusterMode.SINGLE_NODE else 1
        roomiest = [self.state[a] for _, a in reversed(self.by_cpu[-limit:])]
        lines = [_shortage(a, req, n) for a in roomiest]
        if len(self.by_cpu) > limit:
            lines.append(f"... and {len(self.by_cpu) - limit} more agents with less room")
        return lines


def assign_gpus(
    free: dict[str, list[str]], agent_ids: Sequence[str], per_kernel: int
) -> list[list[str]]:
    """Whole GPUs for each kernel placed on ``agent_ids`` (by rank): ``per_kernel`` distinct
    devices each, taken (lowest index first) out of ``free`` (agent id -> free GPU UUIDs in
    index order), which shrinks. :class:`ValueError` if an agent has too few (the scheduler
    counted them, so it has not)."""
    out: list[list[str]] = []
    for agent_id in agent_ids:
        pool = free.setdefault(agent_id, [])
        if len(pool) < per_kernel:
            raise ValueError(f"agent {agent_id}: {per_kernel} GPUs wanted, {len(pool)} free")
        out.append(pool[:per_kernel])
        del pool[:per_kernel]
    return out


def waiting_for_lost(req: Request, lost: Sequence[AgentState]) -> list[str]:
    """Why-pending lines for the LOST agents (``lost``: their whole capacity) that could hold
    ``req`` once back: the whole session if single-node, one kernel if multi-node."""
    n = req.size if req.mode == ClusterMode.SINGLE_NODE else 1
    return [
        f"agent {a.id}: LOST (no heartbeat); waiting for it to come back"
        for a in lost
        if a.group == req.group and a.kernels_fitting(req) >= n
    ]


def schedule(
    requests: Sequence[Request], agents: Sequence[AgentState], lost: Sequence[AgentState] = ()
) -> Decision:
    """Places what fits on ``agents``, highest priority first, then first come first served;
    ``lost`` agents hold nothing but are named in the report of the sessions they could hold.

    A session that does not fit does not block smaller ones behind it (backfilling).
    """
    by_group: dict[str, list[AgentState]] = {}
    for a in agents:
        by_group.setdefault(a.group, []).append(a)
    groups = {g: _Group(members) for g, members in by_group.items()}
    lost_by_group: dict[str, list[AgentState]] = {}
    for a in lost:
        lost_by_group.setdefault(a.group, []).append(a)
    decision = Decision()
    reports: dict[tuple[object, ...], list[str]] = {}
    for req in sorted(requests, key=lambda r: (-r.priority, r.order, r.session_id)):
        group = groups.get(req.group)
        if group is None:
            decision.waiting[req.session_id] = waiting_for_lost(
                req, lost_by_group.get(req.group, ())
            ) or [f"no agent in resource group {req.group!r}"]
            continue
        placed = group.place(req)
        if placed is None:
            key = (req.group, req.mode, req.size, req.cpu, req.mem, req.gpu, group.version)
            if key not in reports:
                reports[key] = group.report(req)
                if req.group in lost_by_group:
                    reports[key] += waiting_for_lost(req, lost_by_group[req.group])
            decision.waiting[req.session_id] = reports[key]
            continue
        for agent_id in dict.fromkeys(placed):
            group.take(agent_id, req, placed.count(agent_id))
        decision.placements[req.session_id] = placed
    return decision
