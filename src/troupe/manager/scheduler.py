"""Placement of pending sessions on agents (docs/contract.md, 'Placement'), as a pure function
of plain data.

No I/O and no clock: the registry loads the state, calls :func:`schedule` and records the
placements in one transaction, so accounting stays exact and this stays easy to test.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from troupe.cluster.contract import ClusterMode

EPS = 1e-9


def kernels_fitting(cpu_free: float, mem_free: float, gpu_free: float, req: Request | Part) -> int:
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

    def kernels_fitting(self, req: Request | Part) -> int:
        """How many kernels of ``req`` fit in what is free."""
        return kernels_fitting(self.cpu_free, self.mem_free, self.gpu_free, req)

    def take(self, req: Request | Part, kernels: int) -> AgentState:
        return self.hold(req.cpu * kernels, req.mem * kernels, req.gpu * kernels)

    def hold(self, cpu: float, mem: int, gpu: int) -> AgentState:
        """With this much more in use."""
        return replace(
            self,
            cpu_used=self.cpu_used + cpu,
            mem_used=self.mem_used + mem,
            gpu_used=self.gpu_used + gpu,
        )


class Part(NamedTuple):
    """``kernels`` kernels of one role, each of (cpu, mem, gpu)."""

    role: str
    kernels: int
    cpu: float
    mem: int
    gpu: int = 0


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
    #: Roles whose kernels differ, in rank order (``size`` is their total); empty: ``size``
    #: kernels of (cpu, mem, gpu) each.
    parts: tuple[Part, ...] = ()

    def kernel_shapes(self) -> list[Part]:
        """Each kernel's shape by rank (``kernels`` 1), named ``<role><idx>`` when roles."""
        if not self.parts:
            return [Part("", 1, self.cpu, self.mem, self.gpu)] * self.size
        return [
            Part(f"{p.role}{i}", 1, p.cpu, p.mem, p.gpu)
            for p in self.parts
            for i in range(1, p.kernels + 1)
        ]

    def totals(self) -> tuple[float, int, int]:
        """(cores, bytes, GPUs) of all its kernels together."""
        if not self.parts:
            return self.cpu * self.size, self.mem * self.size, self.gpu * self.size
        return (
            sum(p.cpu * p.kernels for p in self.parts),
            sum(p.mem * p.kernels for p in self.parts),
            sum(p.gpu * p.kernels for p in self.parts),
        )


@dataclass
class Decision:
    placements: dict[str, list[str]] = field(default_factory=dict)
    """session id -> agent id of each kernel, by rank."""
    waiting: dict[str, list[str]] = field(default_factory=dict)
    """session id -> why it could not be placed, one line per agent of its group."""


def _shortage(agent: AgentState, req: Request | Part, kernels: int) -> str:
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


def _kernel_at_fault(agent: AgentState, req: Request) -> tuple[Part, AgentState]:
    """The first kernel (by rank) of ``req`` that no longer fits on ``agent`` once the ones
    before it are on it, and the agent as they leave it."""
    shapes = req.kernel_shapes()
    for kernel in shapes:
        if agent.kernels_fitting(kernel) < 1:
            return kernel, agent
        agent = agent.take(kernel, 1)
    return shapes[-1], agent


def _role_line(kernel: Part, agent: AgentState) -> str:
    role = kernel.role.rstrip("0123456789")
    return f"role {role}, kernel {kernel.role}: {_shortage(agent, kernel, 1)}"


def _gang(req: Request, agents: Sequence[AgentState]) -> list[str] | Part:
    """Roles whose kernels differ, over several agents (the plain rule): role by role in rank
    order, the roomiest agents first (most free cores, then the greater id; as the role
    starts), each taking as many of the role's kernels as fit. The agents by rank, or the
    first kernel that fits nowhere."""
    free = {a.id: a for a in agents}
    out: list[str] = []
    for part in req.parts:
        left = part.kernels
        for a in sorted(free.values(), key=lambda a: (a.cpu_free, a.id), reverse=True):
            n = min(a.kernels_fitting(part), left)
            if n:
                free[a.id] = a.take(part, n)
                out += [a.id] * n
                left -= n
            if not left:
                break
        if left:
            idx = part.kernels - left + 1
            return Part(f"{part.role}{idx}", 1, part.cpu, part.mem, part.gpu)
    return out


def never_fits(req: Request, agents: Sequence[AgentState]) -> str | None:
    """Why ``req`` can never be placed even on idle agents, or None if it can."""
    group = [
        replace(a, cpu_used=0.0, mem_used=0, gpu_used=0) for a in agents if a.group == req.group
    ]
    if not group:
        return f"no agent in resource group {req.group!r}"
    if req.parts:
        return _never_fits_roles(req, group)
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


def _fits_whole(agent: AgentState, totals: tuple[float, int, int]) -> bool:
    cpu, mem, gpu = totals
    return agent.cpu_free + EPS >= cpu and agent.mem_free >= mem and agent.gpu_free >= gpu


def _never_fits_roles(req: Request, idle: list[AgentState]) -> str | None:
    totals = req.totals()
    if any(_fits_whole(a, totals) for a in idle):
        return None
    if req.mode == ClusterMode.SINGLE_NODE:
        best = max(idle, key=lambda a: (a.cpu_free, a.id))
        kernel, left = _kernel_at_fault(best, req)
        return (
            f"single-node session of {req.size} kernels is larger than every agent"
            f" ({_role_line(kernel, left)})"
        )
    placed = _gang(req, idle)
    if isinstance(placed, Part):
        best = max(idle, key=lambda a: (a.cpu_free, a.id))
        return f"no agent has room for it ({_role_line(placed, best)})"
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

    def take(self, agent_id: str, req: Request | Part, kernels: int) -> None:
        self.hold(agent_id, req.cpu * kernels, req.mem * kernels, req.gpu * kernels)

    def hold(self, agent_id: str, cpu: float, mem: int, gpu: int) -> None:
        f = self.free[agent_id]
        del self.by_cpu[bisect_left(self.by_cpu, (f[0], agent_id))]
        f[0] -= cpu
        f[1] -= mem
        f[2] -= gpu
        insort(self.by_cpu, (f[0], agent_id))
        self.state[agent_id] = self.state[agent_id].hold(cpu, mem, gpu)
        self.total_cpu -= cpu
        self.version += 1

    def fitting(self, agent_id: str, req: Request) -> int:
        cpu, mem, gpu = self.free[agent_id]
        return kernels_fitting(cpu, mem, gpu, req)

    def place(self, req: Request) -> list[str] | None:
        if req.parts:
            return self._place_roles(req)
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

    def _place_roles(self, req: Request) -> list[str] | None:
        """Kernels that differ: one agent for all when one fits them together (the tightest
        fit in cores), else (multi-node) the gang rule of :func:`_gang`."""
        need = req.totals()
        by_cpu, free = self.by_cpu, self.free
        for i in range(bisect_left(by_cpu, (need[0] - EPS, "")), len(by_cpu)):
            agent_id = by_cpu[i][1]
            f = free[agent_id]
            if f[1] >= need[1] and f[2] >= need[2]:
                return [agent_id] * req.size
        if req.mode != ClusterMode.MULTI_NODE or self.total_cpu + EPS < need[0]:
            return None
        placed = _gang(req, list(self.state.values()))
        return None if isinstance(placed, Part) else placed

    def report(self, req: Request, limit: int = 3) -> list[str]:
        """Why ``req`` does not fit: the agents closest to fitting it, one line each; with
        roles, each line names the role and the kernel that does not fit."""
        n = req.size if req.mode == ClusterMode.SINGLE_NODE else 1
        roomiest = [self.state[a] for _, a in reversed(self.by_cpu[-limit:])]
        if req.parts and req.mode == ClusterMode.SINGLE_NODE:
            lines = [_role_line(*_kernel_at_fault(a, req)) for a in roomiest]
        elif req.parts:
            placed = _gang(req, list(self.state.values()))
            kernel = placed if isinstance(placed, Part) else req.kernel_shapes()[0]
            lines = [_role_line(kernel, a) for a in roomiest]
        else:
            lines = [_shortage(a, req, n) for a in roomiest]
        if len(self.by_cpu) > limit:
            lines.append(f"... and {len(self.by_cpu) - limit} more agents with less room")
        return lines


def assign_gpus(
    free: dict[str, list[str]], agent_ids: Sequence[str], per_kernel: int | Sequence[int]
) -> list[list[str]]:
    """Whole GPUs for each kernel placed on ``agent_ids`` (by rank): ``per_kernel`` distinct
    devices each (or each kernel's count, by rank), taken (lowest index first) out of ``free``
    (agent id -> free GPU UUIDs in index order), which shrinks. :class:`ValueError` if an agent
    has too few (the scheduler counted them, so it has not)."""
    counts = [per_kernel] * len(agent_ids) if isinstance(per_kernel, int) else per_kernel
    out: list[list[str]] = []
    for agent_id, per_kernel in zip(agent_ids, counts, strict=True):
        pool = free.setdefault(agent_id, [])
        if len(pool) < per_kernel:
            raise ValueError(f"agent {agent_id}: {per_kernel} GPUs wanted, {len(pool)} free")
        out.append(pool[:per_kernel])
        del pool[:per_kernel]
    return out


def waiting_for_lost(req: Request, lost: Sequence[AgentState]) -> list[str]:
    """Why-pending lines for the LOST agents (``lost``: their whole capacity) that could hold
    ``req`` once back: the whole session if single-node (:func:`never_fits`' rule), one of its
    kernels if multi-node; with roles, every role's kernels count, not only main's shape."""
    return [
        f"agent {a.id}: LOST (no heartbeat); waiting for it to come back"
        for a in lost
        if a.group == req.group and _could_hold(a, req)
    ]


def _could_hold(agent: AgentState, req: Request) -> bool:
    if req.mode == ClusterMode.SINGLE_NODE:
        return never_fits(req, [agent]) is None
    return any(agent.kernels_fitting(k) >= 1 for k in req.parts or (req,))


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
            key: tuple[object, ...] = (req.group, req.mode, req.size, req.cpu, req.mem, req.gpu)
            key += (req.parts, group.version)
            if key not in reports:
                reports[key] = group.report(req)
                if req.group in lost_by_group:
                    reports[key] += waiting_for_lost(req, lost_by_group[req.group])
            decision.waiting[req.session_id] = reports[key]
            continue
        if req.parts:
            held: dict[str, list[float]] = {}
            for agent_id, k in zip(placed, req.kernel_shapes(), strict=True):
                h = held.setdefault(agent_id, [0.0, 0, 0])
                h[0], h[1], h[2] = h[0] + k.cpu, h[1] + k.mem, h[2] + k.gpu
            for agent_id, (cpu, mem, gpu) in held.items():
                group.hold(agent_id, cpu, int(mem), int(gpu))
        else:
            for agent_id in dict.fromkeys(placed):
                group.take(agent_id, req, placed.count(agent_id))
        decision.placements[req.session_id] = placed
    return decision
