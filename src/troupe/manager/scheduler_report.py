"""Why a waiting session does not fit on a group's agents (docs/contract.md, 'Placement'): the
agents closest to fitting it, a line each; with roles, each line names the role and the
kernel that does not fit.

Pure, in memory. A pass reports on every queue it tried, thousands of them on the same
agents, so the roomiest agents are found once per state of the pool (its ``version``) and a
report's lines are made once per what the requests are short of, not once per queue.
"""

from __future__ import annotations

from heapq import nlargest
from typing import TYPE_CHECKING

from troupe.cluster.contract import ClusterMode
from troupe.manager.scheduler import (
    AgentState,
    Part,
    Request,
    _fault,
    _kernel_at_fault,
    _role_line,
    _shortage,
)
from troupe.manager.scheduler_keys import RANK_MASK
from troupe.manager.scheduler_spread import spread_roles

if TYPE_CHECKING:
    from troupe.manager.scheduler_pool import Pool


class Report:
    """A pool's report lines, kept while the pool does not change (:meth:`Pool.report`; the
    pool is passed in, not held: no reference cycle, so a pool is freed by reference counts
    while the scheduler runs with the cyclic collector paused)."""

    def __init__(self) -> None:
        #: the (pool version, limit) the roomiest agents and the lines below were made at
        self.at = (-1, 0)
        self.roomiest: list[AgentState] = []
        #: a report's lines by what the request is short of, on :attr:`roomiest`
        self.known: dict[tuple[object, ...], list[str]] = {}
        self.role_lines: dict[tuple[object, ...], str] = {}
        #: the first two roles of a multi-node request -> their kernel that the gang rule
        #: cannot place (or ``()``: they fit), on :attr:`roomiest`'s state
        self.shorts: dict[tuple[Part, ...], Part | tuple[()]] = {}
        #: a kernel shape -> whether one agent of :attr:`roomiest`'s state has room for it
        #: (few shapes lead the roles: one search each, not one per layout)
        self.fits: dict[tuple[float, int, int], bool] = {}

    def lines(self, pool: Pool, req: Request, limit: int) -> list[str]:
        """Why ``req`` does not fit on ``pool``: the ``limit`` agents with the most free
        cores, a line each, and how many agents more the group has."""
        n = req.size if req.mode == ClusterMode.SINGLE_NODE else 1
        if self.at != (pool.version, limit):  # the same for every report of a pass
            # the roomiest of all are the roomiest of their memory level
            top = nlargest(limit, [e for level in pool.by_mem.values() for e in level[-limit:]])
            self.roomiest = [pool.agent(pool.id_of[e & RANK_MASK]) for e in top]
            self.at = (pool.version, limit)
            self.known, self.role_lines, self.shorts, self.fits = {}, {}, {}, {}
        roomiest = self.roomiest
        more = len(pool.base) - limit
        if req.parts and req.mode == ClusterMode.SINGLE_NODE:
            return _with_more([self._fault_line(a, req) for a in roomiest], more)
        # the same lines for every request that is short of the same (on these agents)
        short = self._kernel_short(pool, req) if req.parts else None
        key = short or (req.cpu, req.mem, req.gpu, n)
        known = self.known.get(key)
        if known is None:
            if short is not None:
                lines = [_role_line(short, a) for a in roomiest]
            else:
                lines = [_shortage(a, req, n) for a in roomiest]
            known = self.known[key] = _with_more(lines, more)
        return list(known)

    def _fault_line(self, agent: AgentState, req: Request) -> str:
        """The line of a single-node ``req`` with roles on ``agent``: its kernel at fault
        (the same line for requests whose kernels before it use the same)."""
        at = (agent.id, *_fault(agent, req))
        line = self.role_lines.get(at)
        if line is None:
            line = self.role_lines[at] = _role_line(*_kernel_at_fault(agent, req))
        return line

    def _kernel_short(self, pool: Pool, req: Request) -> Part:
        """The first kernel of a multi-node ``req`` with roles that the gang rule cannot
        place now (its first kernel if it would fit)."""
        parts = req.parts
        head = parts[:2]  # main and the first role: few layouts, shared by many requests
        short = self.shorts.get(head)
        if short is None:
            first = parts[0]
            shape = (first.cpu, first.mem, first.gpu)
            fits = self.fits.get(shape)
            if fits is None:
                fits = self.fits[shape] = pool.whole_fit(*shape) is not None
            if not fits:  # the walk's answer
                short = Part(f"{first.role}1", 1, first.cpu, first.mem, first.gpu)
            else:
                placed = spread_roles(pool, head)
                short = placed if isinstance(placed, Part) else ()
            self.shorts[head] = short
        if short:
            return short
        placed = spread_roles(pool, parts) if len(parts) > 2 else []
        return placed if isinstance(placed, Part) else req.kernel_shapes()[0]


def _with_more(lines: list[str], more: int) -> list[str]:
    """A report's ``lines``, and how many agents of the group it leaves out."""
    if more > 0:
        lines.append(f"... and {more} more agents with less room")
    return lines
