"""The host's neighbour (ARP) table, which a session's kernels fill with one entry per peer
each one reaches.

Linux keeps one such table for all network namespaces, with a hard limit (``gc_thresh3``,
1024 by default). A big session passes it on its own: 22 kernels of a 64-kernel session on
one host, each reaching its 63 peers, need 1386 entries. Past the limit a new peer's packets
are dropped while they wait for its address (``neighbor table overflow`` in the kernel log):
connections stall and the readiness barrier times out with nothing in the kernels' output to
say why. The agent therefore warns when a session's kernels here may need more entries than
the limit, and adds the cause to a readiness failure when the table overflowed meanwhile.
Both files are visible from the host's network namespace only; elsewhere (an agent in a
namespace of its own) neither check can be made and both stay silent.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

LIMIT = Path("/proc/sys/net/ipv4/neigh/default/gc_thresh3")
STATS = Path("/proc/net/stat/arp_cache")
SYSCTL = "net.ipv4.neigh.default.gc_thresh3"


def limit() -> int | None:
    """The table's hard limit (None: not visible here)."""
    try:
        return int(LIMIT.read_text().strip())
    except (OSError, ValueError):
        return None


def overflows() -> int | None:
    """How often the table was full so far: the sum of the per-CPU ``table_fulls`` counters
    (hexadecimal) of ``/proc/net/stat/arp_cache`` (None: not visible here)."""
    try:
        head, *rows = STATS.read_text().splitlines()
        col = head.split().index("table_fulls")
        return sum(int(row.split()[col], 16) for row in rows if row.strip())
    except (OSError, ValueError, IndexError):
        return None


def entries_needed(kernels_here: int, cluster_size: int) -> int:
    """Entries the kernels on this host hold once each has reached every peer."""
    return kernels_here * max(0, cluster_size - 1)


def check(kernels_here: int, cluster_size: int) -> str | None:
    """A warning (also logged) when the session's kernels here may need more entries than the
    table holds; None when they fit or the limit is not visible."""
    most, need = limit(), entries_needed(kernels_here, cluster_size)
    if most is None or need <= most:
        return None
    msg = (
        f"{kernels_here} kernels of a {cluster_size}-kernel session here need about {need} "
        f"neighbour-table entries, over this host's limit ({SYSCTL} = {most}): connections "
        f"between them may stall; raise {SYSCTL} (and gc_thresh2)"
    )
    log.warning(msg)
    return msg


def overflow_note(before: int | None) -> str:
    """What to add to a failure when the table overflowed since ``before`` (:func:`overflows`
    then); empty otherwise."""
    now = overflows()
    if before is None or now is None or now <= before:
        return ""
    return (
        f" (this host's neighbour table overflowed meanwhile: {SYSCTL} = {limit()} is too "
        f"small for the kernels here to reach their peers; raise it and gc_thresh2)"
    )
