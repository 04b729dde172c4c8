"""The agents of one resource group, indexed by free capacity for the scheduler's passes.

Pure and in memory. Every agent is in the list of its level of free memory, sorted by free
cores (the tightest whole fit is a bisection per level away); agents with free GPUs are also
kept per free-GPU count, so a GPU session never walks the agents without one. Both kinds of
lists are kept highest first, so a search stops at the first below what it needs. The list
of every agent by free cores (the roomiest agents are its end) is made from the levels only
when asked: a pass holds agents far more often than it walks them all in order. Each agent's
free resources are its capacity less what is in use, computed as :class:`AgentState` does,
so the index and the plain rule agree to the last bit.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import replace
from itertools import count as numbers
from typing import TYPE_CHECKING, cast

from troupe.cluster.contract import ClusterMode
from troupe.manager.scheduler import EPS, AgentState, Part, Request
from troupe.manager.scheduler_keys import RANK_MASK, Ranks, cores_key
from troupe.manager.scheduler_report import Report
from troupe.manager.scheduler_shapes import Roles
from troupe.manager.scheduler_spread import count, spread, spread_roles
from troupe.manager.scheduler_take import (
    KEYS_KEPT,
    LEVEL_BITS,
    hold_placed,
    level_of,
    list_of,
    move,
    take_whole,
)

if TYPE_CHECKING:
    from troupe.manager.scheduler_queues import Queue

#: What sets a request's fit apart: (mode, size, cpu, mem, gpu, parts); its group aside.
Shape = tuple[str, int, float, int, int, tuple[Part, ...]]

#: (free cores, agent id) as one int in the same order (:mod:`scheduler_keys`)
Entry = int
#: an agent's id, free resources, resources in use and state (:attr:`Pool.slots`)
Slot = tuple[str, list[float], list[float], AgentState]
#: the values of :attr:`Pool.failed_at`: never the same twice in a process
_versions = numbers(1)


def shape_of(req: Request) -> Shape:
    return (req.mode, req.size, req.cpu, req.mem, req.gpu, req.parts)


def _covers(a: Shape, b: Shape) -> bool:
    """Whether a plain request of shape ``b`` fails once one of shape ``a`` failed in this
    pass (resources only shrink within a pass): it asks at least as much, and a single-node
    request fails where a multi-node one of its shape did."""
    return (
        (a[0] == ClusterMode.MULTI_NODE or b[0] != ClusterMode.MULTI_NODE)
        and a[1] <= b[1]
        and a[2] <= b[2] + EPS
        and a[3] <= b[3]
        and a[4] <= b[4]
    )


class Pool:
    """The free resources of one group's agents and the placement rule over them."""

    def __init__(self, agents: Iterable[AgentState]) -> None:
        self.base: dict[str, AgentState] = {}
        self.used: dict[str, list[float]] = {}
        #: agent id -> [cores, bytes, GPUs] free
        self.free: dict[str, list[float]] = {}
        #: :attr:`by_cpu` as last made, and the :attr:`version` it was made at
        self._by_cpu: list[Entry] = []
        self._by_cpu_at = -1
        self.by_gpu: dict[int, list[Entry]] = {}
        #: agents by free memory's level (:func:`~troupe.manager.scheduler_take.level_of`)
        self.by_mem: dict[int, list[Entry]] = {}
        self.total_cpu = 0.0
        #: bumped by every change: a request that failed at one version fails again at it
        self.version = 0
        #: plain shapes that failed in the current pass (kept minimal, see :func:`_covers`),
        #: each with its :attr:`last_total`
        self.failed: dict[Shape, int | None] = {}
        #: changes with :attr:`failed` (unique over pools and passes): a queue that
        #: :attr:`failed` did not cover at this value is not covered while it stays
        self.failed_at = 0
        #: free cores -> their key's high part (:func:`cores_key`), remembered
        self.keys: dict[float, int] = {}
        #: how the last :meth:`place` failed: True when more room is the only way to fit
        self.monotone = True
        #: after a plain multi-node failure: how many of its kernels fit over all agents
        self.last_total: int | None = None
        #: after a multi-node failure with roles: ``count`` when one role's kernels fit
        #: nowhere near (:func:`~troupe.manager.scheduler_spread.count`), ``greedy`` when
        #: the gang failed as packed (not :attr:`monotone`), else ``room``
        self.reason = ""
        #: after a ``count`` failure: the first role (by index) whose kernels fit nowhere
        #: near; :attr:`last_total` is then at most how many of them fit over the group
        self.last_part = 0
        #: after a ``greedy`` failure: the agents the gang took from -> their free resources
        self.last_touched: dict[str, list[float]] = {}
        #: the agents the last failed gang with roles took from
        self.took: list[str] = []
        #: kernel shape -> how many of them fit over the group, where a count fell short in
        #: this pass: exact then, at most that many since
        self.counts: dict[tuple[float, float, float], int] = {}
        #: the report lines made on the agents as they are (:meth:`report`)
        self.reports = Report()
        base, used, free = self.base, self.used, self.free
        total = 0.0
        for a in agents:
            agent_id = a.id
            base[agent_id] = a
            used[agent_id] = [a.cpu_used, a.mem_used, a.gpu_used]
            # AgentState's cpu_free, mem_free and gpu_free, without three property calls
            cpu, mem, gpu = a.cpu - a.cpu_used, a.mem - a.mem_used, a.gpu - a.gpu_used
            free[agent_id] = [cpu, mem, gpu]
            if cpu > 0:  # max(cpu, 0.0), without the call
                total += cpu
        self.total_cpu = total
        self.ranks = Ranks(base)
        #: rank -> agent id (an entry's agent: ``id_of[entry & RANK_MASK]``)
        self.id_of = self.ranks.id_of
        #: rank -> (agent id, its free, its used, its state): an entry's agent in one look-up
        #: (the hot paths': :func:`~troupe.manager.scheduler_take.take_whole`)
        self.slots: dict[int, Slot] = {}
        self._build()

    def _build(self) -> None:
        """The sorted lists, made anew from :attr:`free` (at the start, and when the ranks
        were numbered again)."""
        by_gpu: dict[int, list[Entry]] = {}
        by_mem: dict[int, list[Entry]] = {}
        rank, keys, base, used = self.ranks.rank, self.keys, self.base, self.used
        slots: dict[int, Slot] = {}
        for agent_id, f in self.free.items():
            cpu, mem, gpu = f
            r = rank[agent_id]
            slots[r] = (agent_id, f, used[agent_id], base[agent_id])
            key = keys.get(cpu)
            if key is None:
                key = cores_key(cpu)
                if len(keys) < KEYS_KEPT:
                    keys[cpu] = key
            entry = key | r
            if gpu > 0:
                by_gpu.setdefault(int(gpu), []).append(entry)
            level = int(mem).bit_length() >> LEVEL_BITS if mem > 0 else 0  # level_of, inline
            by_mem.setdefault(level, []).append(entry)
        for entries in (*by_gpu.values(), *by_mem.values()):
            entries.sort()
        # highest first: a search stops at the first list below what it needs
        self.by_gpu = dict(sorted(by_gpu.items(), reverse=True))
        self.by_mem = dict(sorted(by_mem.items(), reverse=True))
        self.slots = slots
        self.version += 1

    # --- the index -------------------------------------------------------------------------

    @property
    def by_cpu(self) -> list[Entry]:
        """Every agent's entry, sorted by free cores: the memory levels' lists merged, made
        again only after a change."""
        if self._by_cpu_at != self.version:
            entries = [e for level in self.by_mem.values() for e in level]
            entries.sort()  # a merge of sorted runs
            self._by_cpu, self._by_cpu_at = entries, self.version
        return self._by_cpu

    def _unindex(self, agent_id: str) -> None:
        f = self.free[agent_id]
        entry = cores_key(f[0]) | self.ranks.rank[agent_id]
        if f[2] > 0:
            bucket = self.by_gpu[int(f[2])]
            del bucket[bisect_left(bucket, entry)]
            if not bucket:  # searches walk the buckets: no empty ones
                del self.by_gpu[int(f[2])]
        level = level_of(f[1])
        bucket = self.by_mem[level]
        del bucket[bisect_left(bucket, entry)]
        if not bucket:
            del self.by_mem[level]
        self.total_cpu -= max(f[0], 0.0)

    def _index(self, agent_id: str) -> None:
        a, u = self.base[agent_id], self.used[agent_id]
        f = self.free[agent_id] = [a.cpu - u[0], a.mem - u[1], a.gpu - u[2]]
        rank = self.ranks.rank[agent_id]
        self.slots[rank] = (agent_id, f, u, a)
        entry = cores_key(f[0]) | rank
        if f[2] > 0:
            insort(list_of(self.by_gpu, int(f[2])), entry)
        insort(list_of(self.by_mem, level_of(f[1])), entry)
        self.total_cpu += max(f[0], 0.0)
        self.version += 1

    def hold(self, agent_id: str, cpu: float, mem: float, gpu: float) -> None:
        """With this much more in use on ``agent_id`` (the hot path of a pass: every placement
        moves its agents in the sorted lists)."""
        f = self.free[agent_id]
        old_cpu, old_mem, old_gpu = f
        u, a = self.used[agent_id], self.base[agent_id]
        u[0], u[1], u[2] = u[0] + cpu, u[1] + mem, u[2] + gpu
        total = self.total_cpu - max(old_cpu, 0.0)
        f[0], f[1], f[2] = new_cpu, new_mem, new_gpu = a.cpu - u[0], a.mem - u[1], a.gpu - u[2]
        self.total_cpu = total + max(new_cpu, 0.0)
        rank = self.ranks.rank[agent_id]
        old, new = cores_key(old_cpu) | rank, cores_key(new_cpu) | rank
        old_level = int(old_mem).bit_length() >> LEVEL_BITS if old_mem > 0 else 0
        level = int(new_mem).bit_length() >> LEVEL_BITS if new_mem > 0 else 0
        by_mem = self.by_mem
        if level == old_level:
            move(by_mem[level], old, new)
        else:
            bucket = by_mem[old_level]
            del bucket[bisect_left(bucket, old)]
            if not bucket:  # searches walk the buckets: no empty ones
                del by_mem[old_level]
            insort(list_of(by_mem, level), new)
        old_gpu, free_gpu = int(old_gpu), int(new_gpu)
        if old_gpu > 0 or free_gpu > 0:
            by_gpu = self.by_gpu
            if old_gpu == free_gpu:
                move(by_gpu[old_gpu], old, new)
            else:
                if old_gpu > 0:
                    bucket = by_gpu[old_gpu]
                    del bucket[bisect_left(bucket, old)]
                    if not bucket:
                        del by_gpu[old_gpu]
                if free_gpu > 0:
                    insort(list_of(by_gpu, free_gpu), new)
        self.version += 1

    def set_agent(self, agent: AgentState) -> None:
        """``agent`` as it is now (new, or its capacity or use changed)."""
        if agent.id in self.base:
            self._unindex(agent.id)
        elif self.ranks.add(agent.id):  # every rank changed: so did every key
            self._build()
        self.base[agent.id] = agent
        self.used[agent.id] = [agent.cpu_used, agent.mem_used, agent.gpu_used]
        self._index(agent.id)

    def remove(self, agent_id: str) -> None:
        self._unindex(agent_id)
        del self.slots[self.ranks.rank[agent_id]]
        self.ranks.remove(agent_id)
        del self.base[agent_id], self.used[agent_id], self.free[agent_id]
        self.version += 1

    def agent(self, agent_id: str) -> AgentState:
        u = self.used[agent_id]
        return replace(self.base[agent_id], cpu_used=u[0], mem_used=int(u[1]), gpu_used=int(u[2]))

    def __len__(self) -> int:
        return len(self.base)

    # --- the placement rule (docs/contract.md, 'Placement') ----------------------------------

    def place(self, req: Request, q: Queue) -> list[str] | None:
        """Where ``req`` (of queue ``q``) puts its kernels by rank, held there; or None
        (:attr:`monotone` says how it failed)."""
        if not req.parts and self.failed and q.seen != self.failed_at:
            if self._covered(q.shape):
                return None
            q.seen = self.failed_at
        elif req.parts and self.counts and self.ruled_out(cast(Roles, req.parts)):
            return None
        whole = take_whole(self, q.plan)
        if whole is not None:
            return [whole] * req.size
        return self.place_apart(req, q)

    def place_apart(self, req: Request, q: Queue) -> list[str] | None:
        """:meth:`place` once no agent has room for all of ``req`` (and, without roles, no
        failed shape covers it): a gang over several agents if multi-node, or None."""
        self.monotone, self.last_total = True, None
        if req.parts:
            return self._place_roles(req, q.whole[0])
        placed = None
        if req.mode == ClusterMode.MULTI_NODE:
            placed = spread(self, req)
        if placed is not None:
            hold_placed(self, req, placed)
        else:
            # Kept minimal: a failure the new one covers goes (it rejects nothing more).
            failed = {f: t for f, t in self.failed.items() if not _covers(q.shape, f)}
            failed[q.shape] = self.last_total
            self.failed, self.failed_at = failed, next(_versions)
        return placed

    def ruled_out(self, roles: Roles) -> bool:
        """Whether a request with ``roles`` fits neither on one agent nor as a gang, by this
        pass's :attr:`counts` alone (room only shrinks within a pass): a role of k kernels
        whose shape fits fewer than k - 1 over the group. A gang needs k of them; an agent
        with room for the whole session holds k - 1 at least (its free cores are at least the
        sum of the role's k kernels', which is within an ulp of k times one kernel's), so it
        was counted. Then it failed as :meth:`place_apart` says a role's count fails."""
        many = roles.many
        if many is None:
            many = roles.many = tuple(
                (i, (p.cpu, p.mem, p.gpu), p.kernels - 1)
                for i, p in enumerate(roles)
                if p.kernels > 1
            )
        counts = self.counts
        for i, shape, most in many:
            n = counts.get(shape)
            if n is not None and n < most:
                self.monotone, self.reason, self.last_part, self.last_total = True, "count", i, n
                return True
        return False

    def _covered(self, shape: Shape) -> bool:
        """Whether a shape that failed in this pass covers ``shape`` (:func:`_covers`): it
        fails then, and :attr:`last_total` bounds how many of its kernels fit."""
        self.monotone, self.last_total = True, None
        single = shape[0] != ClusterMode.MULTI_NODE
        _, size, cpu, mem, gpu, _ = shape
        for f, total in self.failed.items():  # :func:`_covers`, inline
            if (
                (single or f[0] == ClusterMode.MULTI_NODE)
                and f[1] <= size
                and f[2] <= cpu + EPS
                and f[3] <= mem
                and f[4] <= gpu
            ):
                # it asks at least as much per kernel: at most as many of its kernels fit
                self.last_total = total if f[2] <= cpu else None
                return True
        return False

    def report(self, req: Request, limit: int = 3) -> list[str]:
        """Why ``req`` does not fit: the agents closest to fitting it, one line each; with
        roles, each line names the role and the kernel that does not fit."""
        return self.reports.lines(self, req, limit)

    def whole_fit(self, cpu: float, mem: float, gpu: float) -> str | None:
        """The agent with room for all of it and the fewest free cores (then the lower id).

        Without GPUs: in each memory level above the request's every agent has the memory,
        so its first agent with the cores is its best; only the request's own level is
        walked. With GPUs: the agents with enough free GPUs, walked."""
        slots = self.slots
        best: Entry | None = None
        key = cores_key(cpu - EPS)
        if gpu <= 0:
            level = level_of(mem)
            lists = []
            for at, entries in self.by_mem.items():
                if entries[-1] < key:  # not one agent of it has the cores
                    continue
                if at > level:
                    i = bisect_left(entries, key)
                    if i < len(entries) and (best is None or entries[i] < best):
                        best = entries[i]
                elif at == level:
                    lists.append(entries)
        else:
            lists = [e for g, e in self.by_gpu.items() if g >= gpu]
        for entries in lists:
            for i in range(bisect_left(entries, key), len(entries)):
                entry = entries[i]
                if best is not None and entry >= best:
                    break
                f = slots[entry & RANK_MASK][1]
                if f[1] >= mem and f[2] >= gpu:
                    best = entry
                    break
        return None if best is None else slots[best & RANK_MASK][0]

    def _place_roles(self, req: Request, cpu: float) -> list[str] | None:
        """Kernels that differ (``cpu`` cores in all), when no agent fits them together:
        (multi-node) role by role over the roomiest agents."""
        if req.mode != ClusterMode.MULTI_NODE:
            return None
        self.reason = "room"
        if self.total_cpu + 1e-6 < cpu:
            return None
        for i, part in enumerate(req.parts):
            n = count(self, part, part.kernels)
            if n < part.kernels:  # too few even if it had every agent alone
                self.reason, self.last_part, self.last_total = "count", i, n
                return None
        placed = spread_roles(self, req.parts)
        if isinstance(placed, Part):
            # Greedy packing may fail with more room and fit with less: it fails again only
            # while no agent grows and the agents it took from stay as they are.
            self.monotone, self.reason = False, "greedy"
            self.last_touched = {a: list(self.free[a]) for a in self.took}
            return None
        hold_placed(self, req, placed)
        return placed
