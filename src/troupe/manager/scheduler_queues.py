"""The backlog's queues (its waiting sessions per group and shape) and the rules for when a
dead queue may fit again, kept apart from the pass that walks them
(:mod:`troupe.manager.scheduler_backlog`).

Pure, in memory. A queue is *dead* once one of its sessions failed in a way that only more
room can cure (docs/contract.md, 'Placement'): it fails on the agents as they are and on any
state with less room. What it lacks is written down as a bound and as :attr:`Queue.need`,
what a grown agent must have free for it to fit again (a necessary condition), so that the
pass after a change looks only at the dead queues that one of the grown agents could serve.
"""

from __future__ import annotations

from typing import cast

from troupe.cluster.contract import ClusterMode
from troupe.manager.scheduler import EPS, Part, Request, kernels_fitting
from troupe.manager.scheduler import QueueKey as QueueKey
from troupe.manager.scheduler_pool import Pool, Shape
from troupe.manager.scheduler_shapes import Roles
from troupe.manager.scheduler_spread import count
from troupe.manager.scheduler_take import Plan, plan_of

Rank = tuple[int, float, str]
Need = tuple[float, float, float]
#: what any agent has free: a dead queue that any growth of its group may revive
ANY: Need = (-float("inf"), -float("inf"), -float("inf"))


class Queue:
    """The waiting sessions of one shape in one group, in rank order."""

    __slots__ = (
        "dead",
        "group",
        "items",
        "key",
        "need",
        "part",
        "plan",
        "seen",
        "shape",
        "total",
        "touched",
        "whole",
        "why",
    )

    def __init__(self, key: QueueKey) -> None:
        self.key = key
        self.group: str = key[0]
        self.shape: Shape = key[1:]
        _, size, cpu, mem, gpu, parts = self.shape
        #: one agent for a whole session: the search and the hold (:func:`take_whole`)
        self.plan: Plan
        if parts:
            roles = cast(Roles, parts)  # a request's, interned (Request.__post_init__)
            made = roles.made  # once per layout, not once per queue
            if made is None:
                whole, held = _sums(parts)
                made = roles.made = (whole, plan_of(whole, held))
            whole, self.plan = made
        else:
            whole = (cpu * size, mem * size, gpu * size)
            self.plan = plan_of(whole)
        #: (cores, bytes, GPUs) of all the kernels of one of its sessions
        self.whole: Need = whole
        #: the :attr:`Pool.failed_at` at which the pass's failed shapes did not cover it
        self.seen = 0
        self.items: list[Request] = []
        self.dead = False
        #: how it last failed, the pool's :attr:`Pool.reason`: ``count`` (with roles: the role
        #: :attr:`part` fits at most :attr:`total` kernels over the group), ``greedy`` (the
        #: gang failed as packed, :attr:`touched`), or anything else
        self.why = ""
        #: dead multi-node: at most how many of its kernels (of role :attr:`part` with roles)
        #: fit over the group; None: not known
        self.total: int | None = None
        self.part = 0
        #: ``greedy``: the agents that gang took from -> their free resources then
        self.touched: dict[str, list[float]] = {}
        #: dead: what a grown agent must have free (cores, bytes, GPUs) for it to fit again
        self.need: Need = ANY

    def set_need(self) -> None:
        """:attr:`need` for how it died (a necessary condition: :func:`may_fit_now` answers
        no without an agent that has it)."""
        mode, _, cpu, mem, gpu, parts = self.shape
        if mode == ClusterMode.SINGLE_NODE:  # an agent that fits the whole session
            self.need = self.whole
        elif not parts:  # an agent that fits one more kernel
            self.need = _kernel_need(cpu, mem, gpu)
        elif self.why == "count" and self.total is not None:  # one more of the role's kernels
            k = parts[self.part]
            self.need = _kernel_need(k.cpu, k.mem, k.gpu)
        else:
            self.need = ANY


def room(need: Need, frees: list[list[float]]) -> bool:
    """Whether one of the agents whose free resources are ``frees`` has ``need`` free."""
    return any(f[0] + EPS >= need[0] and f[1] >= need[1] and f[2] >= need[2] for f in frees)


def may_fit_now(q: Queue, grown: dict[str, list[float]], pool: Pool) -> bool:
    """Whether the dead ``q`` may fit on ``pool``'s agents as they are now, ``grown`` (agent
    id -> its free resources before it grew) being the agents that grew since it was last
    looked at; raises its bound by what they gained. The bound stays true if this is asked
    at any time before the grown agents are forgotten, as room only shrinks meanwhile."""
    mode, size, cpu, mem, gpu, parts = q.shape
    free = pool.free
    fits = room(q.whole, [free[a] for a in grown if a in free])
    if mode == ClusterMode.SINGLE_NODE:
        return fits
    if parts:
        return fits or _roles_may_fit(q, grown, pool)
    gain = _gain(grown, free, Part("", 1, cpu, mem, gpu))
    if q.total is not None:
        q.total += gain
        return fits or q.total >= size
    # it fits when the kernels that fit over the group are enough, and they were not when it
    # failed: only a gain can change that
    return fits or gain > 0


def _roles_may_fit(q: Queue, grown: dict[str, list[float]], pool: Pool) -> bool:
    """A multi-node gang with roles: whether the role that fit nowhere near (its bound raised
    by the gains) may fit now, and then whether every role may (the pass's counts are bounds);
    a role that may not is remembered instead."""
    if q.why != "count" or q.total is None:
        return any(a in pool.free for a in grown)
    parts = q.shape[5]
    q.total += _gain(grown, pool.free, parts[q.part])
    if q.total < parts[q.part].kernels:
        return False
    for i, p in enumerate(parts):
        n = count(pool, p, p.kernels)
        if n < p.kernels:
            q.part, q.total = i, n
            q.set_need()
            return False
    return True


def _gain(grown: dict[str, list[float]], free: dict[str, list[float]], kernel: Part) -> int:
    """How many more kernels of ``kernel``'s shape the grown agents hold now than before."""
    gain = 0
    for agent_id, old in grown.items():
        f = free.get(agent_id)
        if f is not None:
            now = kernels_fitting(f[0], f[1], f[2], kernel)
            gain += max(now - kernels_fitting(old[0], old[1], old[2], kernel), 0)
    return gain


def _kernel_need(cpu: float, mem: float, gpu: float) -> Need:
    """What an agent must have free to hold one kernel (a resource not asked: anything)."""
    return (cpu if cpu > 0 else ANY[0], mem if mem > 0 else ANY[1], gpu if gpu > 0 else ANY[2])


def _sums(parts: tuple[Part, ...]) -> tuple[Need, Need]:
    """A session with roles: (cores, bytes, GPUs) of all its kernels (each role's times its
    kernels, summed as ``sum`` does), and what it holds on one agent: its kernels summed one by
    one in rank order (as :func:`~troupe.manager.scheduler_take.hold_placed` sums them), the
    sum then added to the agent's use in one step (docs/design.md)."""
    cpu: float = 0  # as ``sum`` starts
    mem = gpu = 0
    hcpu, hmem, hgpu = 0.0, 0, 0
    for p in parts:
        k, pc, pm, pg = p.kernels, p.cpu, p.mem, p.gpu
        cpu, mem, gpu = cpu + pc * k, mem + pm * k, gpu + pg * k
        for _ in range(k):
            hcpu, hmem, hgpu = hcpu + pc, hmem + pm, hgpu + pg
    return (cpu, mem, gpu), (hcpu, hmem, hgpu)
