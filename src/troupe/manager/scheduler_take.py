"""Holding placements on a :class:`~troupe.manager.scheduler_pool.Pool`: the hot path of a pass.

Most placements put a whole session on one agent: :func:`take_whole` finds that agent (the
tightest fit, :meth:`Pool.whole_fit`'s rule) and holds the session on it in one step, with the
lists bound to locals and the agent's old entry already found by the search (one bisection
fewer per list it was found in). Pure, in memory; answers equal to ``whole_fit`` then
``hold`` to the last bit. Its body repeats, inline, what :func:`move` and ``Pool``'s level of
a memory amount do (inlined: the hot path of every placement): those are the
reference versions, and a change to either must be made here too (the scheduler's hypothesis
tests compare both paths).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from troupe.manager.scheduler import EPS, Request
from troupe.manager.scheduler_keys import RANK_MASK, cores_key

if TYPE_CHECKING:
    from troupe.manager.scheduler_pool import Entry, Pool

#: free memory's levels: each spans ``2**LEVEL_BITS`` binary orders of magnitude (fewer
#: levels: fewer bisections per search, longer walks in the request's own level)
LEVEL_BITS = 2
#: at most this many free-core amounts' keys remembered per pool (:attr:`Pool.keys`)
KEYS_KEPT = 1 << 16


def level_of(mem: float) -> int:
    """Free memory's level: more memory, the same level or a higher one (the hot paths below
    and in ``Pool`` compute it inline)."""
    return int(mem).bit_length() >> LEVEL_BITS if mem > 0 else 0


def move(entries: list[Entry], old: Entry, new: Entry) -> None:
    """``old`` becomes ``new`` in the sorted ``entries`` (a hold: ``new`` comes before, found
    by a shorter bisection; in place when nothing is between them)."""
    i = bisect_left(entries, old)
    if new <= old:
        j = bisect_left(entries, new, 0, i)
        if j == i:
            entries[i] = new
        else:
            del entries[i]
            entries.insert(j, new)
    else:
        del entries[i]
        insort(entries, new)


def list_of(lists: dict[int, list[Entry]], at: int) -> list[Entry]:
    """The list of a pool's lists by memory level or by free GPUs (``lists``) at ``at``, made
    if there is none (the lists stay in order, the highest first)."""
    entries = lists.get(at)
    if entries is None:
        entries = lists[at] = []
        if len(lists) > 1:
            ordered = sorted(lists.items(), reverse=True)
            lists.clear()  # in place: callers hold the dict
            lists.update(ordered)
    return entries


#: a queue's whole fit, made once per queue (:func:`plan_of`): what one agent must have free
#: (cores, bytes, GPUs), the cores' key less EPS, the bytes' level, and what is held on it
Plan = tuple[float, float, float, int, int, float, float, float]


def plan_of(
    whole: tuple[float, float, float], held: tuple[float, float, float] | None = None
) -> Plan:
    """The plan of a session that needs ``whole`` on one agent and holds ``held`` there (the
    same unless roles sum their kernels, one by one, in rank order)."""
    cpu, mem, gpu = whole
    return (cpu, mem, gpu, cores_key(cpu - EPS), level_of(mem), *(held or whole))


def take_whole(pool: Pool, plan: Plan) -> str | None:
    """The agent with room for all of the plan's (cores, bytes, GPUs) and the fewest free cores
    (then the lower id), with its held amounts more in use on it; None (nothing held) if none."""
    slots = pool.slots
    best: Entry | None = None
    at = 0  # where ``best`` is in its list (by memory level, or by free GPUs with GPUs)
    _, mem, gpu, key, level, cpu, hmem, hgpu = plan
    if gpu <= 0:
        for lv, entries in pool.by_mem.items():  # the highest level first
            if lv < level:  # nor any after it: not one agent has the memory
                break
            if entries[-1] < key:  # not one agent of it has the cores
                continue
            if lv > level:  # every agent of it has the memory: its first with the cores
                i = bisect_left(entries, key)
                if best is None or entries[i] < best:
                    best, at = entries[i], i
            else:
                for i in range(bisect_left(entries, key), len(entries)):
                    entry = entries[i]
                    if best is not None and entry >= best:
                        break
                    f = slots[entry & RANK_MASK][1]
                    if f[1] >= mem and f[2] >= gpu:
                        best, at = entry, i
                        break
    else:
        for g, entries in pool.by_gpu.items():  # the most GPUs first
            if g < gpu:
                break
            if entries[-1] < key:  # not one agent of it has the cores
                continue
            for i in range(bisect_left(entries, key), len(entries)):
                entry = entries[i]
                if best is not None and entry >= best:
                    break
                f = slots[entry & RANK_MASK][1]
                if f[1] >= mem and f[2] >= gpu:
                    best, at = entry, i
                    break
    if best is None:
        return None
    # Pool.hold, with ``best``'s place in the list it was found in known
    agent_id, f, u, a = slots[best & RANK_MASK]
    old_cpu, old_mem, old_gpu = f
    u[0], u[1], u[2] = u[0] + cpu, u[1] + hmem, u[2] + hgpu
    total = pool.total_cpu  # less max(old_cpu, 0.0), plus max(new_cpu, 0.0), without calls
    if old_cpu > 0:
        total -= old_cpu
    f[0], f[1], f[2] = new_cpu, new_mem, new_gpu = a.cpu - u[0], a.mem - u[1], a.gpu - u[2]
    pool.total_cpu = total + new_cpu if new_cpu > 0 else total
    keys = pool.keys  # free cores take few values: their keys remembered
    new = keys.get(new_cpu)
    if new is None:
        new = cores_key(new_cpu)
        if len(keys) < KEYS_KEPT:
            keys[new_cpu] = new
    new |= best & RANK_MASK  # as many free cores or fewer: not after best
    old_level = int(old_mem).bit_length() >> LEVEL_BITS if old_mem > 0 else 0
    level = int(new_mem).bit_length() >> LEVEL_BITS if new_mem > 0 else 0
    by_mem = pool.by_mem
    entries = by_mem[old_level]
    i = at if gpu <= 0 else bisect_left(entries, best)
    if level == old_level:
        j = bisect_left(entries, new, 0, i)
        if j == i:
            entries[i] = new
        else:
            del entries[i]
            entries.insert(j, new)
    else:
        del entries[i]
        if not entries:  # searches walk the lists: no empty ones
            del by_mem[old_level]
        insort(list_of(by_mem, level), new)
    old_g, new_g = int(old_gpu), int(new_gpu)
    if old_g > 0:
        by_gpu = pool.by_gpu
        entries = by_gpu[old_g]
        i = at if gpu > 0 else bisect_left(entries, best)
        if old_g == new_g:
            j = bisect_left(entries, new, 0, i)
            if j == i:
                entries[i] = new
            else:
                del entries[i]
                entries.insert(j, new)
        else:
            del entries[i]
            if not entries:
                del by_gpu[old_g]
            if new_g > 0:
                insort(list_of(by_gpu, new_g), new)
    pool.version += 1
    return agent_id


def hold_placed(pool: Pool, req: Request, placed: list[str]) -> None:
    """Holds ``req``'s kernels on the agents they were placed on (a gang over several)."""
    n = len(placed)
    if not req.parts:
        for agent_id in dict.fromkeys(placed):
            n = placed.count(agent_id)
            pool.hold(agent_id, req.cpu * n, req.mem * n, req.gpu * n)
        return
    held: dict[str, list[float]] = {}
    at = 0
    for p in req.parts:  # each agent's kernels summed in rank order, then held in one step
        for agent_id in placed[at : at + p.kernels]:
            h = held.setdefault(agent_id, [0.0, 0, 0])
            h[0], h[1], h[2] = h[0] + p.cpu, h[1] + p.mem, h[2] + p.gpu
        at += p.kernels
    for agent_id, (cpu, mem, gpu) in held.items():
        pool.hold(agent_id, cpu, mem, gpu)
