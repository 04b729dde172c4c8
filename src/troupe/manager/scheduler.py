"""Placement of pending sessions on agents (docs/contract.md, 'Placement'), as a pure function
of plain data.

No I/O and no clock: the registry loads the state, calls
:func:`troupe.manager.scheduler_backlog.schedule` and records the placements in one
transaction, so accounting stays exact and this stays easy to test. This module holds the
plain data and the fit rule; ``scheduler_pool`` indexes a group's agents by free capacity and
``scheduler_backlog`` runs the passes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from troupe.api.counted import counted
from troupe.cluster.contract import ClusterMode
from troupe.manager.scheduler_shapes import Key, key_of, roles_of

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


#: (group, mode, size, cpu, mem, gpu, parts): a :class:`Request`'s group and fit, interned
QueueKey = Key


@dataclass(frozen=True, slots=True)
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
    #: The queue it waits in: its group and what sets its fit apart (equal keys, equal fit
    #: and equal why-pending reports). Made (and interned) once: a backlog built afresh
    #: reads 100,000 of them.
    key: QueueKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.parts:  # interned: the key hashes and compares it by identity
            object.__setattr__(self, "parts", roles_of(self.parts))
        key = (self.group, self.mode, self.size, self.cpu, self.mem, self.gpu, self.parts)
        object.__setattr__(self, "key", key_of(key))

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


class Waiting(Mapping[str, list[str]]):
    """Session id -> why it waits. A pass makes one report per queue, shared by every session
    of the queue (sessions of one group and shape: the same lines), so it keeps each report
    with its sessions, as the manager keeps them (``life/pending_reports.py``), and maps
    session ids only when first read: after a full pass over 100,000 sessions, a map
    of 77,000 ids would cost a tenth of the pass (docs/performance.md)."""

    __slots__ = ("_by_id", "_reports")

    def __init__(self) -> None:
        self._reports: list[tuple[list[str], list[Request]]] = []
        self._by_id: dict[str, list[str]] | None = None

    def add(self, lines: list[str], sessions: list[Request]) -> None:
        """``sessions`` wait for ``lines`` (the list is kept: the caller gives it away)."""
        self._reports.append((lines, sessions))
        self._by_id = None

    def _index(self) -> dict[str, list[str]]:
        if self._by_id is None:
            self._by_id = {r.session_id: lines for lines, rs in self._reports for r in rs}
        return self._by_id

    def __getitem__(self, session_id: str) -> list[str]:
        return self._index()[session_id]

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._index()

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())

    def __repr__(self) -> str:
        return f"Waiting({self._index()!r})"


@dataclass
class Decision:
    placements: dict[str, list[str]] = field(default_factory=dict)
    """session id -> agent id of each kernel, by rank."""
    waiting: Waiting = field(default_factory=Waiting)
    """session id -> why it could not be placed, one line per agent of its group."""


def _shortage(agent: AgentState, req: Request | Part, kernels: int) -> str:
    need = [
        ("cpu", req.cpu * kernels, agent.cpu_free, "core"),
        ("mem", req.mem * kernels, agent.mem_free, "byte"),
        ("gpu", req.gpu * kernels, agent.gpu_free, "GPU"),
    ]
    short = [
        f"{name}: needs {counted(n, unit)}, {counted(max(free, 0), unit)} free"
        for name, n, free, unit in need
        if n > free + EPS
    ]
    return f"agent {agent.id}: " + ("; ".join(short) or "no room")


def _kernel_at_fault(agent: AgentState, req: Request) -> tuple[Part, AgentState]:
    """The first kernel (by rank) of ``req`` that no longer fits on ``agent`` once the ones
    before it are on it, and the agent as they leave it."""
    p, idx, cpu, mem, gpu = _fault(agent, req)
    kernel = Part(f"{p.role}{idx}" if req.parts else "", 1, p.cpu, p.mem, p.gpu)  # as named
    a = agent  # built directly: dataclasses.replace costs more than the walk (reports)
    return kernel, AgentState(a.id, a.group, a.cpu, a.mem, a.gpu, cpu, mem, gpu, a.gpu_free_ids)


def _fault(agent: AgentState, req: Request) -> tuple[Part, int, float, int, int]:
    """:func:`_kernel_at_fault` as plain values: the kernel's part and index in it, and what
    the agent has in use with the kernels before it."""
    cpu, mem, gpu = agent.cpu_used, agent.mem_used, agent.gpu_used
    parts = req.parts or (Part("", req.size, req.cpu, req.mem, req.gpu),)
    for p in parts:  # AgentState.take, kernel by kernel
        pc, pm, pg = p.cpu, p.mem, p.gpu
        for idx in range(1, p.kernels + 1):
            # kernels_fitting(...) < 1, without its cost (a resource not asked: any)
            if (
                (pc > 0 and agent.cpu - cpu + EPS < pc)
                or (pm > 0 and agent.mem - mem < pm)
                or (pg > 0 and agent.gpu - gpu < pg)
            ):
                return p, idx, cpu, mem, gpu
            cpu, mem, gpu = cpu + pc, mem + pm, gpu + pg
    return parts[-1], parts[-1].kernels, cpu, mem, gpu


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
