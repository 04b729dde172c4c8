"""A session's life in named steps: admission, placing, preparing, exits, restarting,
teardown, a lost agent, and reconciliation after a restart. Each step is a small function over a
:class:`Life`; the registry (``manager/registry.py``) owns the tasks that run them."""

from troupe.manager.life import (
    admission,
    exits,
    lost,
    placing,
    preparing,
    reconcile,
    replacing,
    restarting,
    teardown,
)
from troupe.manager.life.context import Life

__all__ = [
    "Life",
    "admission",
    "exits",
    "lost",
    "placing",
    "preparing",
    "reconcile",
    "replacing",
    "restarting",
    "teardown",
]
