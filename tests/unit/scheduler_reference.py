"""The placement rule (docs/contract.md, 'Placement') written out plainly: the reference the
scheduler's fast passes (full and incremental) are held to, forever."""

from __future__ import annotations

from troupe.manager.scheduler import AgentState, Request


def plain_schedule(reqs: list[Request], agents: list[AgentState]) -> dict[str, list[str]]:
    """The placement rule (docs/contract.md, 'Placement') written out plainly, with none of the
    pass's shortcuts (failed shapes remembered, bisection over agents sorted by free cores)."""
    free = {a.id: a for a in agents}
    out: dict[str, list[str]] = {}
    for r in sorted(reqs, key=lambda r: (-r.priority, r.order, r.session_id)):
        group = sorted(
            (a for a in free.values() if a.group == r.group), key=lambda a: (a.cpu_free, a.id)
        )
        if r.parts:
            placed = plain_roles(r, group)
            if placed is None:
                continue
            hold(free, r, placed)
            out[r.session_id] = placed
            continue
        whole = [a for a in group if a.kernels_fitting(r) >= r.size]
        if whole:
            placed = [whole[0].id] * r.size  # the tightest fit in cores
        elif r.mode == "multi-node":
            placed = []
            for a in reversed(group):  # the roomiest first
                placed += [a.id] * min(a.kernels_fitting(r), r.size - len(placed))
            if len(placed) < r.size:
                continue
        else:
            continue
        hold(free, r, placed)
        out[r.session_id] = placed
    return out


def plain_roles(r: Request, group: list[AgentState]) -> list[str] | None:
    """Roles of different shapes: one agent that fits every kernel together (the tightest in
    cores), else (multi-node) role by role the roomiest agents first, as many as fit each."""
    cpu, mem, gpu = r.totals()
    for a in group:  # sorted by free cores, then id
        if a.cpu_free + 1e-9 >= cpu and a.mem_free >= mem and a.gpu_free >= gpu:
            return [a.id] * r.size
    if r.mode != "multi-node":
        return None
    free = {a.id: a for a in group}
    placed: list[str] = []
    for p in r.parts:
        left = p.kernels
        for a in sorted(free.values(), key=lambda a: (a.cpu_free, a.id), reverse=True):
            n = min(a.kernels_fitting(p), left)
            free[a.id] = a.take(p, n)
            placed += [a.id] * n
            left -= n
        if left:
            return None
    return placed


def hold(free: dict[str, AgentState], r: Request, placed: list[str]) -> None:
    """``r``'s kernels taken on the agents they were placed on (``free`` changes): on each
    agent, the sum of its kernels (added in rank order) is added to its use in one step."""
    if r.parts:
        held: dict[str, tuple[float, int, int]] = {}
        for a_id, k in zip(placed, r.kernel_shapes(), strict=True):
            cpu, mem, gpu = held.get(a_id, (0.0, 0, 0))
            held[a_id] = (cpu + k.cpu, mem + k.mem, gpu + k.gpu)
        for a_id, (cpu, mem, gpu) in held.items():
            free[a_id] = free[a_id].hold(cpu, mem, gpu)
        return
    for a_id in set(placed):
        free[a_id] = free[a_id].take(r, placed.count(a_id))
