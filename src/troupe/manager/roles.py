"""The scheduler's request of a session's roles (docs/design.md, 'Roles'): one place decides
when a session's kernels differ in shape, for admission and for the placing pass alike."""

from __future__ import annotations

from collections.abc import Sequence

from troupe.manager.scheduler import Part, Request


def request_of(
    session_id: str,
    group: str,
    mode: str,
    parts: Sequence[Part],
    priority: int = 0,
    order: float = 0.0,
) -> Request:
    """The request of a session's roles (in rank order): a plain one (no ``parts``) when every
    kernel has main's shape, so today's sessions keep the fast path."""
    main = parts[0]
    same = all((p.cpu, p.mem, p.gpu) == (main.cpu, main.mem, main.gpu) for p in parts)
    return Request(
        session_id=session_id,
        group=group,
        mode=mode,
        size=sum(p.kernels for p in parts),
        cpu=main.cpu,
        mem=main.mem,
        gpu=main.gpu,
        priority=priority,
        order=order,
        parts=() if same else tuple(parts),
    )
