"""Multi-node gangs over a :class:`~troupe.manager.scheduler_pool.Pool`: the walks over its
agents, the roomiest first (docs/contract.md, 'Placement').

Pure, in memory. A walk looks only at the agents with the cores of one kernel (a bisection
of each of the pool's lists) and, for a kernel with GPUs, only at the agents with that many
GPUs free: the pool's lists by memory level (or by free GPUs) merged, in the order of free
cores, so each answer is the plain rule's to the last bit. A count stops as soon as it is
enough (all the pass asks of it), so only a count that fails walks the whole group; it needs
no order, so it walks the lists one after the other. A gang of one shape is counted so
first (not remembered: its failure's bound stays exact), and only a gang that fits walks the
roomiest in order (to take them).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from heapq import merge
from itertools import chain, islice
from typing import TYPE_CHECKING

from troupe.manager.scheduler import EPS, Part, Request, kernels_fitting
from troupe.manager.scheduler_keys import RANK_MASK, cores_key
from troupe.manager.scheduler_take import level_of

if TYPE_CHECKING:
    from troupe.manager.scheduler_pool import Entry, Pool


def _lists(pool: Pool, cpu: float, mem: float, gpu: float) -> tuple[int, list[list[Entry]]]:
    """The lowest key with the cores of one kernel of ``cpu`` cores, and the pool's lists
    that together hold every agent with them, ``mem`` bytes and, when ``gpu`` > 0, at least
    ``gpu`` GPUs free (each agent in one of them; some in them may lack the bytes)."""
    lo = cores_key(cpu - EPS) if cpu > 0 else 0
    if gpu <= 0:  # every agent is in the list of its memory level, the highest first
        level = level_of(mem)  # below it, not one agent has the bytes (full ones among them)
        return lo, [e for lv, e in pool.by_mem.items() if lv >= level and e[-1] >= lo]
    # an agent with free GPUs is in the list of its count (a whole number)
    return lo, [e for g, e in pool.by_gpu.items() if g >= gpu and e[-1] >= lo]


def roomiest(pool: Pool, cpu: float, mem: float, gpu: float) -> Iterable[Entry]:
    """The entries of the agents with the cores of one kernel of ``cpu`` cores and, when
    ``gpu`` > 0, at least ``gpu`` GPUs free, the most free cores first (then the greater id);
    they include every such agent with ``mem`` bytes free."""
    lo, lists = _lists(pool, cpu, mem, gpu)
    tails: list[Iterator[Entry]] = [islice(reversed(e), len(e) - bisect_left(e, lo)) for e in lists]
    if len(tails) == 1:
        return tails[0]
    return merge(*tails, reverse=True)


def with_cores(pool: Pool, cpu: float, mem: float, gpu: float) -> Iterable[Entry]:
    """:func:`roomiest`'s entries in no order (a sum needs none: no merge)."""
    lo, lists = _lists(pool, cpu, mem, gpu)
    return chain.from_iterable(e[bisect_left(e, lo) :] for e in lists)


def spread(pool: Pool, req: Request) -> list[str] | None:
    """A gang of ``req``'s kernels (one shape) over several agents: the roomiest first, each
    taking as many as fit, all or nothing (not held); else None and :attr:`Pool.last_total`
    at most how many of its kernels fit over the group."""
    size, cpu, mem, gpu = req.size, req.cpu, req.mem, req.gpu
    if pool.total_cpu + 1e-6 < cpu * size:  # a margin for the running sum's rounding
        # a bound, with room for each agent's EPS and the running sum's rounding
        pool.last_total = int((pool.total_cpu + len(pool) * EPS + 1e-6) // cpu) + 1
        return None
    # counted in no order (a failure walks them all), and apart from the roles' counts that
    # the pass remembers: a failed gang's bound stays exact
    fit = _kernels_over(pool, Part("", 1, cpu, mem, gpu), size)
    if fit < size:
        pool.last_total = fit
        return None
    out: list[str] = []
    got = 0
    slots = pool.slots
    for entry in roomiest(pool, cpu, mem, gpu):  # they fit: the roomiest take them
        agent_id, f, _, _ = slots[entry & RANK_MASK]
        if f[1] < mem or f[2] < gpu:
            continue
        n = kernels_fitting(f[0], f[1], f[2], req)  # (a walk that stops once they are taken)
        if n > 0:
            take = min(n, size - got)
            out += [agent_id] * take
            got += n
            if got >= size:
                return out
    pool.last_total = got  # (not reached: the count walked the same agents)
    return None


def count(pool: Pool, part: Part, want: int) -> int:
    """How many kernels of ``part``'s shape fit over the group, counted until ``want``: at
    least ``want`` when that many fit; else exact, and remembered for the pass as a bound (room
    only shrinks within a pass), so a later count of the shape that wants more fails at once."""
    key = (part.cpu, part.mem, part.gpu)
    n = pool.counts.get(key)
    if n is not None and n < want:
        return n
    n = _kernels_over(pool, part, want)
    if n < want:
        pool.counts[key] = n
    return n


def _kernels_over(pool: Pool, part: Part, want: int) -> int:
    """How many kernels of ``part``'s shape fit over the group, counted (in no order) until
    ``want``: at least ``want`` when that many fit, else exact."""
    n = 0
    slots, cpu, mem, gpu = pool.slots, part.cpu, part.mem, part.gpu
    for entry in with_cores(pool, cpu, mem, gpu):
        f = slots[entry & RANK_MASK][1]
        if f[1] >= mem and f[2] >= gpu:  # kernels_fitting, inline (a failure walks them all)
            k = int((f[0] + EPS) // cpu) if cpu > 0 else 10**9
            if mem > 0:
                k = min(k, int(f[1] // mem))
            if gpu > 0:
                k = min(k, int(f[2] // gpu))
            if k > 0:
                n += k
                if n >= want:
                    return n
    return n


def spread_roles(pool: Pool, parts: Sequence[Part]) -> list[str] | Part:
    """The plain gang rule (:func:`troupe.manager.scheduler._gang`) for a request's ``parts``
    (or the first of them: the walk of a role never looks at those after it), without copying
    the group: the agents this gang took from are re-sorted as each role starts and merged
    with the untouched ones, which stay in the index's order. The agents by rank (not held),
    or the first kernel that fits nowhere (:attr:`Pool.took`: the agents it took from)."""
    by_cpu, base, id_of, rank = pool.by_cpu, pool.base, pool.id_of, pool.ranks.rank
    local: dict[str, list[float]] = {}  # agent id -> in use, with this gang's kernels
    out: list[str] = []
    for part in parts:
        touched = sorted(
            (cores_key(base[a].cpu - u[0]) | rank[a] for a, u in local.items()), reverse=True
        )
        lo = bisect_left(by_cpu, cores_key(part.cpu - EPS)) if part.cpu > 0 else 0
        i, t, left = len(by_cpu) - 1, 0, part.kernels
        pc, pm, pg = part.cpu, part.mem, part.gpu
        while left:
            while i >= lo and id_of[by_cpu[i] & RANK_MASK] in local:
                i -= 1
            if i >= lo and (t >= len(touched) or by_cpu[i] > touched[t]):
                agent_id = id_of[by_cpu[i] & RANK_MASK]
                i -= 1
            elif t < len(touched):
                agent_id = id_of[touched[t] & RANK_MASK]
                t += 1
            else:
                idx = part.kernels - left + 1
                pool.took = list(local)
                return Part(f"{part.role}{idx}", 1, part.cpu, part.mem, part.gpu)
            a = base[agent_id]
            u = local.get(agent_id) or pool.used[agent_id]
            fc, fm, fg = a.cpu - u[0], a.mem - u[1], a.gpu - u[2]
            if (pm > 0 and fm < pm) or (pg > 0 and fg < pg) or (pc > 0 and fc + EPS < pc):
                continue  # not one kernel: kernels_fitting's answer without its cost
            n = min(kernels_fitting(fc, fm, fg, part), left)
            if n:
                local[agent_id] = [
                    u[0] + part.cpu * n,
                    u[1] + part.mem * n,
                    u[2] + part.gpu * n,
                ]
                out += [agent_id] * n
                left -= n
    return out
