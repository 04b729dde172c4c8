"""Role layouts and queue keys made once per distinct value (interned), so that a pass over
100,000 sessions neither hashes nor compares each session's roles or key: equal values are one
object, hashed and compared by identity (a dict finds a session's queue without reading its
key's items, which a pass in rank order would fetch from all over memory), and a queue's sums
over its kernels are made once per layout, not once per queue
(:mod:`troupe.manager.scheduler_queues`).

Pure, in memory, process-wide. Every :class:`~troupe.manager.scheduler.Request` gets its key
from :data:`key_of` and, with roles, its layout from :data:`roles_of`; a copy or a pickle of
one is interned again (``__reduce__``). Values nothing else holds are dropped when a table
doubles (a table of what is still pending, not of every value the process saw; a layout
held only by such a key goes at a later sweep).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from troupe.manager.scheduler import Part
    from troupe.manager.scheduler_take import Plan

#: a table is swept (values only it holds dropped) when it reaches this many, or twice as
#: many as its last sweep kept
SWEEP_AT = 1 << 12


class Roles(tuple["Part", ...]):
    """A session's roles in rank order, interned: hashed and compared by identity (equal
    layouts are one object), with what queues of it compute once (``made``)."""

    __hash__ = object.__hash__  # identity, as C does it: no walk of the parts

    def __reduce__(self) -> tuple[object, tuple[tuple[Part, ...]]]:
        return _layout, (tuple(self),)  # a copy or a pickle: the one equal layout

    #: what a queue of it computes once (:class:`~troupe.manager.scheduler_queues.Queue`:
    #: its ``whole`` and ``plan``), once made
    made: tuple[tuple[float, float, float], Plan] | None = None
    #: its roles of two kernels or more: (index, kernel shape, kernels less one), once made
    #: (:meth:`~troupe.manager.scheduler_pool.Pool.ruled_out`)
    many: tuple[tuple[int, tuple[float, float, float], int], ...] | None = None


class Key(tuple[str, str, int, float, int, int, tuple["Part", ...]]):
    """The queue a request waits in (:attr:`~troupe.manager.scheduler.Request.key`): its
    (group, mode, size, cpu, mem, gpu, roles), interned: hashed by identity (a plain tuple
    equal to it is no key: it would not be found)."""

    __slots__ = ()
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[object, tuple[tuple[object, ...]]]:
        return _key, (tuple(self),)  # a copy or a pickle: the one equal key


T = TypeVar("T", Roles, Key)


class Interned(Generic[T]):
    """The one object of kind ``T`` equal to a tuple: ``table(value)``."""

    def __init__(self, kind: Callable[[Any], T]) -> None:
        self.kind: Callable[[Any], T] = kind
        self.known: dict[tuple[Any, ...], T] = {}
        self.sweep_at = SWEEP_AT

    def __call__(self, value: tuple[Any, ...]) -> T:
        if type(value) is self.kind:
            return value  # type: ignore[return-value]  # (the kind, checked)
        got = self.known.get(value)
        if got is None:
            if len(self.known) >= self.sweep_at:
                self.sweep()
            got = self.known[tuple(value)] = self.kind(value)
        return got

    def sweep(self) -> None:
        """Drops the values that nothing but the table holds (no request, no queue)."""
        known = self.known
        for value in list(known):
            if sys.getrefcount(known[value]) <= 2:  # the table's reference and the call's
                del known[value]
        self.sweep_at = max(SWEEP_AT, 2 * len(known))


roles_of: Interned[Roles] = Interned(Roles)
key_of: Interned[Key] = Interned(Key)


def _layout(parts: tuple[Part, ...]) -> Roles:  # (pickled by name, unlike the tables)
    return roles_of(parts)


def _key(value: tuple[object, ...]) -> Key:
    return key_of(value)
