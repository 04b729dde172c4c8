"""The scheduler's passes run with Python's cyclic garbage collector paused.

A pass over 100,000 pending sessions makes tens of thousands of objects (a list of agents per
placement, the queues, the report lines) and no reference cycles: the collections those
allocations set off free nothing, and a full one walks every object of the process.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def collector_paused(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn`` with the collector paused while it runs (left paused if it already was): 10-20%
    of a full pass over 100,000 sessions (docs/performance.md). What it allocates is freed by
    reference counts as ever."""

    @wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> T:
        if not gc.isenabled():  # paused already (an outer call)
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused
