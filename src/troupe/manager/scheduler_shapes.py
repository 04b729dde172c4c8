"""Role layouts made once per distinct layout (interned), so that a pass over 100,000 sessions
neither hashes nor compares each session's roles: a queue's key (:attr:`Request.key`) holds
its :class:`Roles`, hashed and compared by identity, and the queue's sums over its kernels
are made once per layout, not once per queue (:mod:`troupe.manager.scheduler_queues`).

Pure, in memory, process-wide. Two equal layouts are always the same object: every
:class:`~troupe.manager.scheduler.Request` with roles gets its layout from :func:`roles_of`.
Layouts no request holds any more are dropped when the table doubles (a table of the layouts
still pending, not of every one the process saw).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from troupe.manager.scheduler import Part
    from troupe.manager.scheduler_take import Plan

#: the table is swept (layouts only it holds dropped) when it reaches this many, or twice
#: as many as the last sweep kept
SWEEP_AT = 1 << 12


class Roles(tuple["Part", ...]):
    """A session's roles in rank order, interned: hashed and compared by identity (equal
    layouts are one object), with what queues of it compute once (``made``)."""

    __hash__ = object.__hash__  # identity, as C does it: no walk of the parts
    #: what a queue of it computes once (:class:`~troupe.manager.scheduler_queues.Queue`:
    #: its ``whole`` and ``plan``), once made
    made: tuple[tuple[float, float, float], Plan] | None = None
    #: its roles of two kernels or more: (index, kernel shape, kernels less one), once made
    #: (:meth:`~troupe.manager.scheduler_pool.Pool.ruled_out`)
    many: tuple[tuple[int, tuple[float, float, float], int], ...] | None = None


_known: dict[tuple[Part, ...], Roles] = {}
_sweep_at = SWEEP_AT


def roles_of(parts: tuple[Part, ...]) -> Roles:
    """The one :class:`Roles` equal to ``parts``."""
    if type(parts) is Roles:
        return parts
    roles = _known.get(parts)
    if roles is None:
        if len(_known) >= _sweep_at:
            _sweep()
        roles = _known[tuple(parts)] = Roles(parts)
    return roles


def _sweep() -> None:
    """Drops the layouts that nothing but the table holds (no request, no queue)."""
    global _sweep_at
    for parts in list(_known):
        if sys.getrefcount(_known[parts]) <= 2:  # the table's reference and the call's
            del _known[parts]
    _sweep_at = max(SWEEP_AT, 2 * len(_known))
