"""The pending sessions kept between passes, so that the pass after a change looks again only
at what that change can affect; :func:`schedule` is one pass over a fresh backlog.

Pure, in memory. Waiting sessions are queued per group and shape (sessions of equal shape
share a fit answer, :mod:`troupe.manager.scheduler_queues`). A queue is *dead* once one of
its sessions failed in a way that only more room can cure (docs/contract.md, 'Placement'):
it then fails on the agents as they are and on any state with less room, so a later pass
skips it (and every session of that shape added meanwhile) unless an agent of its group
gained room it could use:
- single-node: a grown agent that now fits the whole session;
- multi-node: that, or an upper bound of the kernels that fit over the group (with roles: of
  the first role that fit nowhere near), raised by each grown agent's gain, that reaches
  what it needs (then, with roles, every role's count of the pass must too).
A multi-node gang with roles whose greedy packing (role by role) failed may fit later with
*less* room: its queue sleeps (dead) until an agent of its group grows or an agent its gang
took from changes, also by a placement in the same pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from heapq import heapify, heappop, heappush, heapreplace
from operator import attrgetter

from troupe.manager.scheduler import EPS, AgentState, Decision, Request, waiting_for_lost
from troupe.manager.scheduler_collector import collector_paused
from troupe.manager.scheduler_pool import Pool
from troupe.manager.scheduler_queues import Queue, QueueKey, Rank, may_fit_now, room
from troupe.manager.scheduler_take import take_whole

#: The queue a request waits in (:attr:`Request.key`).
queue_key: Callable[[Request], QueueKey] = attrgetter("key")
Heap = list[tuple[Rank, int, Queue]]


def rank_of(req: Request) -> Rank:
    """Highest priority first, then first come (then the session id, for a total order)."""
    return (-req.priority, req.order, req.session_id)


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
        self.queues: dict[QueueKey, Queue] = {}
        self._queue_of: dict[str, QueueKey] | None = {}
        #: group -> agent id -> its free resources before it grew since the last pass
        #: (zeros for one that was not there)
        self.grown: dict[str, dict[str, list[float]]] = {}
        self.lost: Sequence[AgentState] = lost
        #: the queues a pass walks; the dead ones by group (a pass looks only at those that a
        #: grown agent has the :attr:`Queue.need` of)
        self.live: set[Queue] = set()
        self.dead: dict[str, set[Queue]] = {}
        #: agent id -> the dead ``greedy`` queues whose gang took from it
        self.touched_by: dict[str, set[Queue]] = {}
        #: after :meth:`add_all` on an empty backlog, until a change: every session in rank
        #: order (the next pass walks it instead of a heap)
        self._line: list[Request] | None = None
        #: that order while its queues are not made yet (:meth:`_fill`; the fresh walk makes
        #: them as it goes, each with the sessions it leaves waiting)
        self._unfilled: list[Request] | None = None

    # --- changes ---------------------------------------------------------------------------

    def _queue(self, key: QueueKey) -> Queue:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = Queue(key)
            self.live.add(q)
        return q

    def _fill(self) -> None:
        """The queues and their sessions, in rank order, after :meth:`add_all` (made when
        first needed: a fresh walk makes them itself)."""
        if self._unfilled is not None:
            ordered, self._unfilled = self._unfilled, None
            for req in ordered:
                self._queue(req.key).items.append(req)

    def add(self, req: Request) -> None:
        self._fill()
        self._line = None
        key: QueueKey = queue_key(req)
        q = self._queue(key)
        rank = rank_of(req)
        if not q.items or rank_of(q.items[-1]) < rank:
            q.items.append(req)
        else:
            q.items.insert(_bisect_rank(q.items, rank), req)
        self.queue_of[req.session_id] = key

    @collector_paused
    def add_all(self, requests: Iterable[Request]) -> None:
        """Many at once (a fresh backlog: no session, no queue left): one sort of all, kept
        for the pass that follows (:meth:`run`), which makes the queues as it meets their
        first session; otherwise one by one."""
        if self._queue_of is None or self._queue_of or self.queues:
            for req in requests:
                self.add(req)
            return
        # stable sorts: by arrival, then by priority, highest first
        ordered = sorted(requests, key=_order)  # floats compare fast; ties are rare
        if len(set(map(_order, ordered))) < len(ordered):
            ordered.sort(key=_arrival)
        ordered.sort(key=_priority, reverse=True)
        self._queue_of = None  # made when first asked (a pass needs none)
        self._line = self._unfilled = ordered

    @property
    def queue_of(self) -> dict[str, QueueKey]:
        """Session id -> the key of its queue."""
        self._fill()
        if self._queue_of is None:
            self._queue_of = {r.session_id: k for k, q in self.queues.items() for r in q.items}
        return self._queue_of

    def remove(self, session_id: str) -> None:
        """A pending session that went (destroyed, timed out)."""
        key = self.queue_of.pop(session_id, None)
        if key is None:
            return
        self._line = None
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

    @collector_paused
    def run(self, report: bool = True) -> Decision:
        """One pass: places what fits, highest priority first, then first come; a session that
        does not fit does not hold back smaller ones behind it. With ``report``, ``waiting``
        names the sessions whose queue this pass tried, with why they wait (on the agents
        as the pass left them; :meth:`why` tells it for any waiting session)."""
        decision = Decision()
        for pool in self.pools.values():
            pool.failed, pool.counts = {}, {}
        line, self._line = self._line, None
        placements = decision.placements
        if line is not None and not self.dead and not self.touched_by:
            if self._unfilled is None:  # made already (asked for): the walk makes them anew
                for q in self.queues.values():
                    q.items.clear()
            self._unfilled = None
            looked = self._walk_line(line, placements)
        else:
            self._fill()
            for q in [q for q in self.live if not q.items]:
                # nothing to remember: the next session of its shape makes it anew
                self.live.discard(q)
                del self.queues[q.key]
            looked = self._walk_heap(placements)
        self.grown = {}
        if self._queue_of is not None:
            for sid in decision.placements:
                del self._queue_of[sid]
        for q in looked:  # its last session failed as packed: so would the next, as they are
            if q.why == "greedy" and not q.dead and q.items:
                self._kill(q)
                for a in q.touched:
                    self.touched_by.setdefault(a, set()).add(q)
        if report:
            self._report(looked, decision)
        return decision

    def _walk_heap(self, placements: dict[str, list[str]]) -> list[Queue]:
        """The pass over the live queues and the dead ones that may fit now: their heads in
        rank order (a heap). Places into ``placements``; the queues it tried, in turn."""
        heap: Heap = [(rank_of(q.items[0]), 0, q) for q in self.live]  # ranks are unique
        maybe = self._maybe(heap)
        heapify(heap)
        looked: list[Queue] = []
        placed_at: dict[Queue, list[int]] = {}
        pools = self.pools
        while heap:
            _, at, q = heap[0]
            if at == 0:
                if q.dead:  # its turn: may it fit now (only after the sessions before it)?
                    pool = pools[q.group]
                    if not (room(q.need, maybe[q]) and may_fit_now(q, self.grown[q.group], pool)):
                        heappop(heap)
                        continue
                    self._wake(q)
                looked.append(q)
            req = q.items[at]
            placed = self._place(q, req)
            if placed is not None:
                placements[req.session_id] = placed
                placed_at.setdefault(q, []).append(at)
                if self.touched_by:
                    self._wake_touched(placed, heap, looked, maybe)
            elif q.dead:
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
        return looked

    def _walk_line(self, ordered: list[Request], placements: dict[str, list[str]]) -> list[Queue]:
        """The pass over a fresh backlog (every queue live, none dead or asleep): every
        session in rank order as :meth:`add_all` sorted them, those of a queue that died
        skipped; the heap's order, without the heap. Each queue made at its first session
        (found by the request's interned key: no list of each session's queue is kept), its
        :attr:`Queue.items` as it goes: the sessions left waiting."""
        place, settle, pools = self._place, self._settle, self.pools
        queues, live = self.queues, self.live
        for req in ordered:
            key = req.key
            q = queues.get(key)
            if q is None:  # its first session: a new queue, live
                q = queues[key] = Queue(key)
                live.add(q)
            elif q.dead:
                q.items.append(req)
                continue
            pool = pools.get(q.group)
            if pool is None or not pool.base:
                place(q, req)  # kills it
                q.items.append(req)
                continue
            if not req.parts and (not pool.failed or q.seen == pool.failed_at):
                # Pool.place, inline for plain requests: its whole fit first (the hot path),
                # then the rest (with roles, Pool.place whole: its ruled-out check first)
                whole = take_whole(pool, q.plan)
                if whole is not None:
                    placements[req.session_id] = [whole] * req.size
                    if q.why:
                        q.why = ""
                    continue
                placed = settle(q, pool, pool.place_apart(req, q))
            else:
                placed = settle(q, pool, pool.place(req, q))
            if placed is not None:
                placements[req.session_id] = placed
            else:
                q.items.append(req)
        return list(queues.values())

    def _place(self, q: Queue, req: Request) -> list[str] | None:
        """``req`` (the next session of ``q`` in rank order) placed and held, or None (and
        ``q`` dead when only more room can cure it)."""
        group = self.pools.get(q.group)
        if group is None or not group.base:
            q.total, q.why = None, ""
            self._kill(q)
            return None
        return self._settle(q, group, group.place(req, q))

    def _settle(self, q: Queue, group: Pool, placed: list[str] | None) -> list[str] | None:
        """``q`` after ``group`` placed its next session (``placed``) or did not."""
        if placed is not None:
            if q.why:
                q.why = ""
        elif not group.monotone:
            q.why, q.touched = group.reason, group.last_touched
        else:
            q.total, q.why, q.part = group.last_total, group.reason, group.last_part
            self._kill(q)
        return placed

    def why(self, session_id: str) -> list[str]:
        """Why a waiting session waits, on the agents as they are now (its queue's report:
        made once, not copied to each session of the queue)."""
        q = self.queues[self.queue_of[session_id]]
        lost = [a for a in self.lost if a.group == q.group]
        return self._lines(q.items[0], lost)

    def _kill(self, q: Queue) -> None:
        """``q`` failed in a way only more room can cure: later passes skip it until a grown
        agent has its :attr:`Queue.need` free."""
        q.dead = True
        self.live.discard(q)
        self.dead.setdefault(q.group, set()).add(q)
        q.set_need()

    def _wake(self, q: Queue) -> None:
        q.dead = False
        self.dead[q.group].discard(q)
        self.live.add(q)
        if q.why == "greedy":
            for a in q.touched:
                queues = self.touched_by.get(a)
                if queues is not None:
                    queues.discard(q)
                    if not queues:
                        del self.touched_by[a]

    def _maybe(self, heap: Heap) -> dict[Queue, list[list[float]]]:
        """The dead queues that may fit now, each with the free resources of its group's grown
        agents: those a grown agent has the :attr:`Queue.need` of join ``heap`` still dead
        (:meth:`run` asks at their turn, when the sessions before them took their room), the
        ``greedy`` ones whose gang took from an agent that changed wake."""
        for agent_id, queues in list(self.touched_by.items()):
            for q in list(queues):
                pool = self.pools.get(q.group)
                if pool is None or pool.free.get(agent_id) != q.touched[agent_id]:
                    self._wake(q)
                    if q.items:
                        heap.append((rank_of(q.items[0]), 0, q))
        maybe: dict[Queue, list[list[float]]] = {}
        for group, grown in self.grown.items():
            dead, pool = self.dead.get(group), self.pools.get(group)
            if not dead or pool is None:
                continue
            frees = [pool.free[a] for a in grown if a in pool.free]
            for f in frees:
                c, m, g = f[0] + EPS, f[1], f[2]
                for q in [q for q in dead if (n := q.need)[0] <= c and n[1] <= m and n[2] <= g]:
                    maybe[q] = frees
        for q in maybe:
            if q.items:
                heap.append((rank_of(q.items[0]), 0, q))
            elif may_fit_now(q, self.grown[q.group], self.pools[q.group]):  # keeps its bound
                self._wake(q)
        return maybe

    def _wake_touched(
        self,
        placed: list[str],
        heap: Heap,
        looked: list[Queue],
        maybe: dict[Queue, list[list[float]]],
    ) -> None:
        """The dead ``greedy`` queues whose gang took from an agent that a placement just
        changed join the pass from their first session after the one placed (the ones before
        failed at their turn, on the agents as they were)."""
        rank = heap[0][0]
        for agent_id in dict.fromkeys(placed):
            for q in list(self.touched_by.get(agent_id, ())):
                self._wake(q)
                at = _bisect_rank(q.items, rank)
                if at == 0 and q in maybe:
                    continue  # already in the heap at its first session
                looked.append(q)
                if at < len(q.items):
                    heappush(heap, (rank_of(q.items[at]), at, q))  # after heap[0]: it stays

    def _report(self, looked: list[Queue], decision: Decision) -> None:
        """Why each session of the looked-at queues waits, on the agents as the pass left them
        (one report per queue)."""
        lost_by_group: dict[str, list[AgentState]] = {}
        waiting = decision.waiting
        for a in self.lost:
            lost_by_group.setdefault(a.group, []).append(a)
        for q in dict.fromkeys(looked):  # (a queue woken again in the pass: looked twice)
            if q.items:
                lines = self._lines(q.items[0], lost_by_group.get(q.group, ()))
                waiting.add(lines, list(q.items))  # a copy: later passes change the queue

    def _lines(self, req: Request, lost: Sequence[AgentState]) -> list[str]:
        """The report of ``req``'s queue (``req``: its first session; ``lost``: the LOST
        agents of its group)."""
        pool = self.pools.get(req.group)
        if pool is None or not pool.base:
            return waiting_for_lost(req, lost) or [f"no agent in resource group {req.group!r}"]
        return pool.report(req) + (waiting_for_lost(req, lost) if lost else [])


_order = attrgetter("order")
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


@collector_paused
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
