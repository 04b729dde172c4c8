"""The pending sessions kept between passes, so that the pass after a change looks again only
at what that change can affect; :func:`schedule` is one pass over a fresh backlog.

Pure, in memory. Waiting sessions are queued per group and shape (sessions of equal shape
share a fit answer). A queue is *dead* once one of its sessions failed in a way that only
more room can cure (docs/contract.md, 'Placement'): it then fails on the agents as they are
and on any state with less room, so a later pass skips it (and every session of that shape
added meanwhile) unless an agent of its group gained room it could use:
- single-node: a grown agent that now fits the whole session;
- multi-node: that, or (one shape for every kernel) an upper bound of the kernels that fit
  over the group, raised by each grown agent's gain, that reaches the size; with roles, any
  grown agent.
A multi-node session with roles whose gang (greedy, role by role) failed may fit later with
*less* room, so its queue never dies that way: each pass looks at it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from heapq import heapify, heappop, heappush, heapreplace
from operator import attrgetter

from troupe.cluster.contract import ClusterMode
from troupe.manager.scheduler import (
    EPS,
    AgentState,
    Decision,
    Part,
    Request,
    kernels_fitting,
    waiting_for_lost,
)
from troupe.manager.scheduler_pool import Pool

Rank = tuple[int, float, str]
#: (group, mode, size, cpu, mem, gpu, parts): the group and the :data:`Shape`
QueueKey = tuple[str, str, int, float, int, int, tuple[Part, ...]]
_queue_key = attrgetter("group", "mode", "size", "cpu", "mem", "gpu", "parts")


def rank_of(req: Request) -> Rank:
    """Highest priority first, then first come (then the session id, for a total order)."""
    return (-req.priority, req.order, req.session_id)


class _Queue:
    """The waiting sessions of one shape in one group, in rank order."""

    __slots__ = (
        "dead",
        "group",
        "items",
        "need",
        "shape",
        "short",
        "total",
        "touched",
        "whole",
        "why",
    )

    def __init__(self, key: QueueKey) -> None:
        self.group, self.shape = key[0], key[1:]
        _, size, cpu, mem, gpu, parts = self.shape
        #: (cores, bytes, GPUs) of all the kernels of one of its sessions
        self.whole = (
            (
                sum(p.cpu * p.kernels for p in parts),
                sum(p.mem * p.kernels for p in parts),
                sum(p.gpu * p.kernels for p in parts),
            )
            if parts
            else (cpu * size, mem * size, gpu * size)
        )
        self.items: list[Request] = []
        self.dead = False
        #: dead plain multi-node: at least the kernels of its shape that fit over the group
        self.total: int | None = None
        #: dead multi-node with roles: the pool's :attr:`Pool.reason`; for ``count``, each
        #: role (by index) whose kernels fit nowhere near -> a bound of those that fit over
        #: the group (:attr:`Pool.last_short`)
        self.why = ""
        self.short: dict[int, int] = {}
        #: ``greedy`` (its last gang failed as packed, :attr:`Pool.last_touched`): the agents
        #: that gang took from -> their free resources then
        self.touched: dict[str, list[float]] = {}
        #: dead: what a grown agent must have free (cores, bytes, GPUs) for it to fit again
        self.need: tuple[float, float, float] = _ANY


class Backlog:
    """Pending sessions and the agents they wait for, between scheduler passes.

    The caller says what changed (:meth:`add`, :meth:`remove`, :meth:`set_agent`,
    :meth:`remove_agent`) and runs a pass (:meth:`run`); the placements it makes are held on
    the agents here at once, and the placed sessions leave the backlog.
    """

    def __init__(self, agents: Iterable[AgentState] = (), lost: Sequence[AgentState] = ()):
        by_group: dict[str, list[AgentState]] = {}
        for a in agents:
            by_group.setdefault(a.group, []).append(a)
        self.pools = {g: Pool(members) for g, members in by_group.items()}
        self.group_of = {a.id: g for g, members in by_group.items() for a in members}
        self.queues: dict[QueueKey, _Queue] = {}
        self.queue_of: dict[str, QueueKey] = {}
        #: group -> agent id -> its free resources before it grew since the last pass
        #: (zeros for one that was not there)
        self.grown: dict[str, dict[str, list[float]]] = {}
        self.lost: Sequence[AgentState] = lost
        #: the queues a pass looks at; the dead ones by group (a pass after a change looks
        #: only at those a grown agent could revive, :attr:`_Queue.need`)
        self.live: set[_Queue] = set()
        self.dead: dict[str, set[_Queue]] = {}
        #: the dead ``greedy`` queues: also revived when an agent their gang took from changed
        self.asleep: set[_Queue] = set()
        #: agent id -> the ``asleep`` queues whose gang took from it
        self.touched_by: dict[str, set[_Queue]] = {}
        self._gains: dict[tuple[float, float, float], int] = {}

    # --- changes ---------------------------------------------------------------------------

    def add(self, req: Request) -> None:
        key: QueueKey = _queue_key(req)
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = _Queue(key)
            self.live.add(q)
        rank = rank_of(req)
        if not q.items or rank_of(q.items[-1]) < rank:
            q.items.append(req)
        else:
            q.items.insert(_bisect_rank(q.items, rank), req)
        self.queue_of[req.session_id] = key

    def add_all(self, requests: Iterable[Request]) -> None:
        """Many at once (a fresh backlog): queued, then each queue sorted once."""
        if self.queue_of:
            for req in requests:
                self.add(req)
            return
        # one sort of all (stable: by arrival, then by priority, highest first), then each
        # session to its queue, which stays in rank order
        ordered = sorted(requests, key=_arrival)
        ordered.sort(key=_priority, reverse=True)
        queues, queue_of = self.queues, self.queue_of
        for req in ordered:
            key = _queue_key(req)
            q = queues.get(key)
            if q is None:
                q = queues[key] = _Queue(key)
                self.live.add(q)
            q.items.append(req)
            queue_of[req.session_id] = key

    def remove(self, session_id: str) -> None:
        """A pending session that went (destroyed, timed out)."""
        key = self.queue_of.pop(session_id, None)
        if key is None:
            return
        q = self.queues[key]
        q.items = [r for r in q.items if r.session_id != session_id]

    def set_agent(self, agent: AgentState) -> None:
        """``agent`` as it is now: new, back, or with more or less in use (a session ended)."""
        old_group = self.group_of.get(agent.id)
        if old_group is not None and old_group != agent.group:
            self.remove_agent(agent.id)
            old_group = None
        pool = self.pools.get(agent.group)
        if pool is None:
            pool = self.pools[agent.group] = Pool(())
        old = list(pool.free[agent.id]) if old_group else [0.0, 0.0, 0.0]
        pool.set_agent(agent)
        self.group_of[agent.id] = agent.group
        new = pool.free[agent.id]
        if old_group is None or new[0] > old[0] or new[1] > old[1] or new[2] > old[2]:
            # the first growth since the last pass (a shrink before it only makes the gain
            # counted from here larger than the true one: still a bound)
            self.grown.setdefault(agent.group, {}).setdefault(agent.id, old)

    def remove_agent(self, agent_id: str) -> None:
        group = self.group_of.pop(agent_id, None)
        if group is None:
            return
        self.pools[group].remove(agent_id)  # less room: no queue can fit where it did not

    # --- the pass --------------------------------------------------------------------------

    def run(self, report: bool = True) -> Decision:
        """One pass: places what fits, highest priority first, then first come; a session that
        does not fit does not hold back smaller ones behind it. With ``report``, ``waiting``
        names the sessions whose queue this pass looked at, with why they wait (on the agents
        as the pass left them; :meth:`why` tells it for any waiting session)."""
        decision = Decision()
        for pool in self.pools.values():
            pool.failed, pool.counts = {}, {}
        revived = self._revive()
        heap: list[tuple[Rank, int, _Queue]] = []
        for q in list(self.live):
            if q.items:
                heap.append((rank_of(q.items[0]), 0, q))  # ranks are unique: q never compared
            else:  # nothing to remember: the next session of its shape makes it anew
                self.live.discard(q)
                del self.queues[(q.group, *q.shape)]
        heapify(heap)
        looked: list[_Queue] = []
        placed_at: dict[_Queue, list[int]] = {}
        placements = decision.placements
        pools = self.pools
        while heap:
            _, at, q = heap[0]
            if at == 0:
                looked.append(q)
                frees = revived.get(q)
                if frees is not None and not _room(q.need, frees):
                    # the room it was revived for went to the sessions before it: it fails
                    self._kill(q)
                    heappop(heap)
                    continue
            req = q.items[at]
            group = pools.get(q.group)
            if group is None or not len(group):
                q.total, q.why = None, ""
                self._kill(q)
                heappop(heap)
                continue
            placed = group.place(req, q.shape)
            if placed is not None:
                _hold(group, req, placed)
                placements[req.session_id] = placed
                placed_at.setdefault(q, []).append(at)
                q.why = ""
                if self.touched_by:
                    self._wake_touched(placed, heap, looked)
            elif not group.monotone:
                q.why, q.touched = group.reason, group.last_touched
            else:
                q.total, q.why, q.short = group.last_total, group.reason, group.last_short
                self._kill(q)
                heappop(heap)
                continue
            if at + 1 < len(q.items):
                heapreplace(heap, (rank_of(q.items[at + 1]), at + 1, q))
            else:
                heappop(heap)
        for q, ats in placed_at.items():
            if ats[-1] == len(ats) - 1:
                del q.items[: len(ats)]
            else:
                gone = set(ats)
                q.items = [it for i, it in enumerate(q.items) if i not in gone]
        for sid in decision.placements:
            del self.queue_of[sid]
        for q in looked:  # its last session failed as packed: so would the next, as they are
            if q.why == "greedy" and not q.dead and q.items:
                self._kill(q)
                self.asleep.add(q)
                for a in q.touched:
                    self.touched_by.setdefault(a, set()).add(q)
        if report:
            self._report(looked, decision)
        return decision

    def why(self, session_id: str) -> list[str]:
        """Why a waiting session waits, on the agents as they are now."""
        q = self.queues[self.queue_of[session_id]]
        decision = Decision()
        self._report([q], decision)
        return decision.waiting[session_id]

    def _kill(self, q: _Queue) -> None:
        """``q`` failed in a way only more room can cure: later passes skip it until a grown
        agent has at least :attr:`_Queue.need` free (what :meth:`_may_fit_now` could answer
        yes to)."""
        q.dead = True
        self.live.discard(q)
        self.dead.setdefault(q.group, set()).add(q)
        _set_need(q)

    def _revive(self) -> dict[_Queue, list[list[float]]]:
        """The dead queues that a grown agent may let fit now go back to the live ones (the
        others are not looked at), each with the free resources of its group's grown agents;
        the grown agents are forgotten."""
        revived: dict[_Queue, list[list[float]]] = {}
        for q in list(self.asleep):
            pool = self.pools.get(q.group)
            if pool is None or any(pool.free.get(a) != f for a, f in q.touched.items()):
                self._wake(q)
        for group, grown in self.grown.items():
            dead, pool = self.dead.get(group), self.pools.get(group)
            if not dead or pool is None:
                continue
            frees = [pool.free[a] for a in grown if a in pool.free]
            self._gains = {}
            maybe: set[_Queue] = set()
            for f in frees:
                c, m, g = f[0] + EPS, f[1], f[2]
                maybe.update(
                    q for q in dead if q.need[0] <= c and q.need[1] <= m and q.need[2] <= g
                )
            for q in maybe:
                if self._may_fit_now(q):  # also keeps its bound true
                    self._wake(q)
                    revived[q] = frees
        self.grown = {}
        return revived

    def _wake(self, q: _Queue) -> None:
        q.dead = False
        self.dead[q.group].discard(q)
        self.live.add(q)
        if q in self.asleep:
            self.asleep.discard(q)
            for a in q.touched:
                self.touched_by[a].discard(q)
                if not self.touched_by[a]:
                    del self.touched_by[a]

    def _wake_touched(
        self, placed: list[str], heap: list[tuple[Rank, int, _Queue]], looked: list[_Queue]
    ) -> None:
        """The ``asleep`` queues whose gang took from an agent that a placement just changed
        join the pass from their first session after the one placed (the ones before failed
        at their turn, on the agents as they were)."""
        rank = heap[0][0]
        for agent_id in dict.fromkeys(placed):
            for q in list(self.touched_by.get(agent_id, ())):
                self._wake(q)
                looked.append(q)
                at = _bisect_rank(q.items, rank)
                if at < len(q.items):
                    heappush(heap, (rank_of(q.items[at]), at, q))  # after heap[0]: it stays

    def _may_fit_now(self, q: _Queue) -> bool:
        """Whether a dead queue may fit on the agents as they are now (module docstring);
        raises its bound of the kernels that fit by what the grown agents gained."""
        grown = self.grown.get(q.group)
        pool = self.pools.get(q.group)
        if not grown or pool is None:
            return False
        mode, size, cpu, mem, gpu, parts = q.shape
        free = pool.free
        fits = _room(q.whole, [free[a] for a in grown if a in free])
        if mode == ClusterMode.SINGLE_NODE:
            return fits
        if parts:
            return fits or self._roles_may_fit(q, grown, pool)
        gain = self._gain(grown, free, Part("", 1, cpu, mem, gpu))
        if q.total is not None:
            q.total += gain
            return fits or q.total >= size
        # it fits when the kernels that fit over the group are enough, and they were not
        # when it failed: only a gain can change that
        return fits or gain > 0

    def _gain(
        self, grown: dict[str, list[float]], free: dict[str, list[float]], kernel: Part
    ) -> int:
        """How many more kernels of ``kernel``'s shape the grown agents (id -> free resources
        before they grew) hold now than before (the same for every queue of the group: kept
        while :meth:`_revive` looks at the group)."""
        key = (kernel.cpu, kernel.mem, kernel.gpu)
        gain = self._gains.get(key)
        if gain is None:
            gain = 0
            for agent_id, old in grown.items():
                f = free.get(agent_id)
                if f is not None:
                    now = kernels_fitting(f[0], f[1], f[2], kernel)
                    gain += max(now - kernels_fitting(old[0], old[1], old[2], kernel), 0)
            self._gains[key] = gain
        return gain

    def _roles_may_fit(self, q: _Queue, grown: dict[str, list[float]], pool: Pool) -> bool:
        """A multi-node gang with roles: whether each role that fit nowhere near (the bounds
        raised by the gains) may fit now, and then (the pass's counts are exact at its start)
        whether every role may; the roles that may not are remembered instead."""
        if q.why != "count":
            return any(a in pool.free for a in grown)
        parts, short = q.shape[5], q.short
        for i in short:
            short[i] += self._gain(grown, pool.free, parts[i])
        if any(n < parts[i].kernels for i, n in short.items()):
            return False
        now = {i: n for i, p in enumerate(parts) if (n := pool.count(p)) < p.kernels}
        if now:
            q.short = now
            _set_need(q)
            return False
        return True

    def _report(self, looked: list[_Queue], decision: Decision) -> None:
        """Why each session of the looked-at queues waits, on the agents as the pass left them
        (one report per queue)."""
        lost_by_group: dict[str, list[AgentState]] = {}
        for a in self.lost:
            lost_by_group.setdefault(a.group, []).append(a)
        for q in looked:
            if not q.items:
                continue
            req = q.items[0]
            pool = self.pools.get(q.group)
            lost = lost_by_group.get(q.group, ())
            if pool is None or not len(pool):
                lines = waiting_for_lost(req, lost) or [f"no agent in resource group {req.group!r}"]
            else:
                lines = pool.report(req) + (waiting_for_lost(req, lost) if lost else [])
            decision.waiting.update(dict.fromkeys([r.session_id for r in q.items], lines))


#: what any grown agent has free: a dead queue that any growth may revive
_ANY = (-float("inf"), -float("inf"), -float("inf"))


def _set_need(q: _Queue) -> None:
    """What a grown agent must have free for the dead ``q`` to fit again (a necessary
    condition: :meth:`Backlog._may_fit_now` answers no without it)."""
    mode, _, cpu, mem, gpu, parts = q.shape
    if mode == ClusterMode.SINGLE_NODE:  # an agent that fits the whole session
        q.need = q.whole
    elif not parts:  # an agent that fits one more kernel
        q.need = _kernel_need(cpu, mem, gpu)
    elif q.why == "count":  # one more kernel of a role that fits nowhere near (any one)
        k = parts[next(iter(q.short))]
        q.need = _kernel_need(k.cpu, k.mem, k.gpu)
    else:
        q.need = _ANY


def _room(need: tuple[float, float, float], frees: list[list[float]]) -> bool:
    """Whether one of the agents whose free resources are ``frees`` has ``need`` free."""
    return any(f[0] + EPS >= need[0] and f[1] >= need[1] and f[2] >= need[2] for f in frees)


def _kernel_need(cpu: float, mem: float, gpu: float) -> tuple[float, float, float]:
    """What an agent must have free to hold one kernel (a resource not asked: anything)."""
    return (cpu if cpu > 0 else _ANY[0], mem if mem > 0 else _ANY[1], gpu if gpu > 0 else _ANY[2])


_arrival = attrgetter("order", "session_id")
_priority = attrgetter("priority")


def _bisect_rank(items: list[Request], rank: Rank) -> int:
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if rank_of(items[mid]) < rank:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _hold(pool: Pool, req: Request, placed: list[str]) -> None:
    """Holds ``req``'s kernels on the agents they were placed on."""
    n = len(placed)
    if not req.parts and placed[0] == placed[-1]:  # a gang spans 2 agents at least
        pool.hold(placed[0], req.cpu * n, req.mem * n, req.gpu * n)
        return
    if not req.parts:
        for agent_id in dict.fromkeys(placed):
            n = placed.count(agent_id)
            pool.hold(agent_id, req.cpu * n, req.mem * n, req.gpu * n)
        return
    held: dict[str, list[float]] = {}
    at = 0
    for p in req.parts:  # kernel by kernel in rank order, as the plain rule adds them
        for agent_id in placed[at : at + p.kernels]:
            h = held.setdefault(agent_id, [0.0, 0, 0])
            h[0], h[1], h[2] = h[0] + p.cpu, h[1] + p.mem, h[2] + p.gpu
        at += p.kernels
    for agent_id, (cpu, mem, gpu) in held.items():
        pool.hold(agent_id, cpu, mem, gpu)


def schedule(
    requests: Sequence[Request], agents: Sequence[AgentState], lost: Sequence[AgentState] = ()
) -> Decision:
    """Places what fits on ``agents``, highest priority first, then first come first served;
    ``lost`` agents hold nothing but are named in the report of the sessions they could hold.

    A session that does not fit does not block smaller ones behind it (backfilling).
    """
    backlog = Backlog(agents, lost)
    backlog.add_all(requests)
    return backlog.run()
