"""The scheduler pool's sort keys: (free cores, agent id) as one int that compares the same.

A bisection over ints is about four times cheaper than over (float, str) tuples, and every
placement makes several. The key is exact, with no grid on the amounts: free cores map to
their IEEE 754 bits with the sign folded (an int in the same order as the floats, -0.0 as
0.0), shifted left by :data:`RANK_BITS`; the agent id to its rank among the group's ids
(:class:`Ranks`), in the low bits. So ``key(a) < key(b)`` exactly when
``(a.cpu_free, a.id) < (b.cpu_free, b.id)``, ties of cores included.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterable

#: the low bits of a key: the agent's rank
RANK_BITS = 40
RANK_MASK = (1 << RANK_BITS) - 1
#: room left between two ranks for ids that come later (between them by sort order)
GAP = 1 << 16
_SIGN = 1 << 63
_ALL = (1 << 64) - 1
_pack = struct.Struct("<d").pack
_from_bytes = int.from_bytes


def cores_key(cores: float) -> int:
    """``cores`` as the high part of a key (rank 0): in the order of the floats."""
    b = _from_bytes(_pack(cores + 0.0), "little")  # + 0.0: -0.0 becomes 0.0
    return (b | _SIGN if b < _SIGN else _ALL ^ b) << RANK_BITS


class Ranks:
    """Agent ids as ints in the ids' order, spaced by :data:`GAP` so that an id that comes
    later gets one between its neighbours' (all are numbered again when none is left)."""

    def __init__(self, ids: Iterable[str]) -> None:
        self.ids = sorted(ids)
        self.rank: dict[str, int] = {}
        #: rank -> agent id
        self.id_of: dict[int, str] = {}
        self._number()

    def _number(self) -> None:
        """Every rank anew (in place: the pool holds :attr:`id_of`)."""
        self.rank.clear()
        self.rank.update((a, (i + 1) * GAP) for i, a in enumerate(self.ids))
        self.id_of.clear()
        self.id_of.update((r, a) for a, r in self.rank.items())

    def add(self, agent_id: str) -> bool:
        """A new id; True when every rank changed (the keys made with them are stale)."""
        ids = self.ids
        i = bisect_left(ids, agent_id)
        lo = self.rank[ids[i - 1]] if i else 0
        hi = self.rank[ids[i]] if i < len(ids) else lo + 2 * GAP
        ids.insert(i, agent_id)
        mid = (lo + hi) // 2
        if mid == lo or hi > RANK_MASK:
            self._number()
            return True
        self.rank[agent_id] = mid
        self.id_of[mid] = agent_id
        return False

    def remove(self, agent_id: str) -> None:
        del self.ids[bisect_left(self.ids, agent_id)]
        del self.id_of[self.rank.pop(agent_id)]
