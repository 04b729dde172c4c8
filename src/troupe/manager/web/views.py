"""What the web UI shows, as pure functions of the API's wire models (no I/O, no FastAPI):
words, colours, progress, why-pending lines, the first failure, start-up timelines and the
largest session that could start now. Kept apart from the routes so it is tested directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from troupe.api.counted import counted
from troupe.api.durations import format_duration
from troupe.api.lifecycle import AgentStatus, KernelStatus, SessionStatus
from troupe.api.models import AgentInfo, KernelInfo, Resources, SessionInfo
from troupe.cluster.contract import ClusterMode
from troupe.manager.scheduler import Request, kernels_fitting

TIMES = "\u00d7"  # the multiplication sign, as in "3 x 0.5 CPU = 1.5 CPU"

S = SessionStatus
#: Statuses on their way somewhere: shown with a spinner.
CHANGING = frozenset({S.PENDING, S.SCHEDULED, S.PREPARING, S.RESTARTING, S.TERMINATING})
#: Status -> colour class of its badge (the CSS defines them).
TONE: Mapping[str, str] = {
    S.PENDING: "wait",
    S.SCHEDULED: "busy",
    S.PREPARING: "busy",
    S.RUNNING: "ok",
    S.RESTARTING: "busy",
    S.TERMINATING: "busy",
    S.TERMINATED: "off",
    S.ERROR: "bad",
    S.CANCELLED: "off",
    KernelStatus.EXITED: "off",
    AgentStatus.ALIVE: "ok",
    AgentStatus.LOST: "bad",
}
#: One line each, under the Cluster mode radios (the words the CLI's help uses).
MODE_HELP: Mapping[str, str] = {
    ClusterMode.SINGLE_NODE: "All containers on one agent (host): fast local network, "
    "limited to what one host has free.",
    ClusterMode.MULTI_NODE: "Containers spread over several agents (hosts) on an overlay "
    "network: for sessions larger than one host.",
}
#: A kernel's start-up phases, in order, as the API's ``phases`` names them.
PHASES = ("created", "started", "entrypoint", "ready")


def tone(status: str) -> str:
    return TONE.get(status, "off")


def changing(status: str) -> bool:
    return status in CHANGING


def size_text(n: int) -> str:
    """Bytes in binary units, as short as exact allows: ``512 MiB``, ``1.5 GiB``."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor:
            value = n / factor
            return f"{value:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def number(x: float) -> str:
    return f"{x:g}"


def resources_text(r: Resources) -> str:
    """Per-kernel resources: ``0.5 CPU · 1 GiB`` (GPUs only when asked for)."""
    text = f"{number(r.cpu)} CPU · {size_text(r.mem)}"
    return text + (f" · {r.gpu} GPU" if r.gpu else "")


def totals_text(size: int, r: Resources) -> str:
    """The session's total: ``3 x 0.5 CPU = 1.5 CPU`` (and memory, GPUs; with the sign
    :data:`TIMES`)."""
    parts = [f"{size} {TIMES} {number(r.cpu)} CPU = {number(round(size * r.cpu, 3))} CPU"]
    parts.append(f"{size} {TIMES} {size_text(r.mem)} = {size_text(size * r.mem)}")
    if r.gpu:
        parts.append(f"{size} {TIMES} {r.gpu} GPU = {size * r.gpu} GPU")
    return "; ".join(parts)


def mode_text(mode: str, size: int) -> str:
    return f"{'multi' if mode == ClusterMode.MULTI_NODE else 'single'}-node {TIMES} {size}"


def age_text(since: datetime, now: datetime | None = None) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min``, ``4 d 2 h``: how long ago, for tables."""
    now = now or datetime.now(UTC)
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return format_duration((now - since).total_seconds())


def kernels_running(s: SessionInfo) -> str | None:
    """``2/3 kernels running`` while a session is on its way up (None otherwise)."""
    if s.status not in (S.SCHEDULED, S.PREPARING, S.RESTARTING) or not s.kernels:
        return None
    up = sum(k.status == KernelStatus.RUNNING for k in s.kernels)
    return f"{up}/{counted(len(s.kernels), 'kernel')} running"


def kernels_in_order(kernels: Iterable[KernelInfo]) -> list[KernelInfo]:
    """By rank, the order of BACKENDAI_CLUSTER_HOSTS: ``main1`` first, then each role's
    kernels one after another in the order the roles were given (``sub1``, ``sub2``, or
    ``worker1``, ``worker2``, ``ps1``), not interleaved by index."""
    return sorted(kernels, key=lambda k: (k.rank, k.hostname))


def pending_lines(info: Mapping[str, Any]) -> list[str]:
    """The why-pending report as readable lines: each distinct reason once, naming the
    kernels it holds back (the scheduler gives one list of reasons per kernel)."""
    pending = info.get("pending")
    if not isinstance(pending, dict) or not pending:
        return []
    by_reason: dict[str, list[str]] = {}
    for host, reasons in pending.items():
        items = reasons if isinstance(reasons, list) else [reasons]
        for r in items or ["waiting for the scheduler"]:
            by_reason.setdefault(str(r), []).append(str(host))
    everyone = len(pending)
    lines = []
    for reason, hosts in by_reason.items():
        who = "all kernels" if len(hosts) == everyone and everyone > 1 else ", ".join(hosts)
        lines.append(f"{who}: {reason}")
    return lines


@dataclass(frozen=True)
class Pull:
    """An image pull of a session being prepared (``status_info["pulling"]``)."""

    agent: str
    image: str
    done: int
    total: int

    @property
    def text(self) -> str:
        if not self.total:
            return "starting"
        return f"{size_text(self.done)} of {size_text(self.total)}"


def pulls(info: Mapping[str, Any]) -> list[Pull]:
    rows = info.get("pulling")
    if not isinstance(rows, list):
        return []
    return [
        Pull(
            str(r.get("agent", "")),
            str(r.get("image", "")),
            int(r.get("done_bytes") or 0),
            int(r.get("total_bytes") or 0),
        )
        for r in rows
        if isinstance(r, dict)
    ]


@dataclass(frozen=True)
class Failure:
    """The first kernel that failed, as the session page shows it."""

    kernel: str | None
    exit_code: int | None
    oom_killed: bool
    reason: str
    message: str = ""
    last_logs: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        who = f"kernel {self.kernel}" if self.kernel else "the session"
        if self.oom_killed:
            return f"{who} ran out of memory (OOM killed)"
        if self.exit_code is not None:
            return f"{who} exited with code {self.exit_code}"
        return f"{who}: {self.reason}"


def failure(s: SessionInfo) -> Failure | None:
    """Why the session failed, naming the *first* failing kernel (the manager records it in
    ``status_info``); for a batch session, a non-zero exit code of its command."""
    info = s.status_info
    logs = [str(x).rstrip("\n") for x in info.get("last_logs") or []]
    if s.status == S.ERROR:
        kernel = info.get("kernel")
        k = next((k for k in s.kernels if k.hostname == kernel), None)
        code = info.get("exit_code", k.exit_code if k else None)
        return Failure(
            kernel=str(kernel) if kernel else None,
            exit_code=code if isinstance(code, int) else None,
            oom_killed=bool(info.get("oom_killed") or (k and k.oom_killed)),
            reason=str(info.get("reason") or "error"),
            message=str(info.get("message") or ""),
            last_logs=logs,
        )
    if s.status == S.TERMINATED and s.exit_code not in (None, 0):
        main = next((k for k in kernels_in_order(s.kernels)), None)
        return Failure(
            kernel=main.hostname if main else "main1",
            exit_code=s.exit_code,
            oom_killed=bool(main and main.oom_killed),
            reason=str(info.get("reason") or "batch command failed"),
            last_logs=logs,
        )
    return None


@dataclass(frozen=True)
class Bar:
    """One kernel's start-up, as offsets in seconds after the session was created."""

    hostname: str
    phases: dict[str, float]
    #: where the bar starts and ends, in percent of the slowest kernel's end
    left: float
    width: float

    @property
    def end(self) -> float | None:
        return max(self.phases.values()) if self.phases else None


def startup_bars(kernels: Sequence[KernelInfo]) -> tuple[list[Bar], str | None]:
    """Per-kernel start-up bars (created → ready) on one scale, and the slowest kernel's
    name (None until some kernel has phases)."""
    ordered = kernels_in_order(kernels)
    ends = [max(k.phases.values()) for k in ordered if k.phases]
    scale = max(ends) if ends else 0.0
    bars = []
    for k in ordered:
        p = {name: k.phases[name] for name in PHASES if name in k.phases}
        if not p or scale <= 0:
            bars.append(Bar(k.hostname, p, 0.0, 0.0))
            continue
        start, end = min(p.values()), max(p.values())
        left = 100 * start / scale
        bars.append(Bar(k.hostname, p, round(left, 1), round(max(100 * end / scale - left, 1), 1)))
    timed = [b for b in bars if b.end is not None]
    slowest = max(timed, key=lambda b: b.end or 0).hostname if len(timed) > 1 else None
    return bars, slowest


def largest_now(
    agents: Iterable[AgentInfo],
    resources: Resources,
    mode: str,
    group: str = "default",
) -> int:
    """The largest cluster size of ``resources`` per kernel that could start right now on
    the agents' free capacity: on one agent (single-node) or over all of them (multi-node).
    The fit rule is the scheduler's own (:func:`troupe.manager.scheduler.kernels_fitting`)."""
    req = Request(
        session_id="",
        group=group,
        mode=mode,
        size=1,
        cpu=resources.cpu,
        mem=resources.mem,
        gpu=resources.gpu,
    )
    fits = [
        kernels_fitting(a.cpu_free, a.mem_free, a.gpu_free, req)
        for a in agents
        if a.status == AgentStatus.ALIVE and a.group == group
    ]
    if not fits:
        return 0
    return sum(fits) if mode == ClusterMode.MULTI_NODE else max(fits)


def percent(used: float, total: float) -> float:
    """Share of ``total`` in use, 0-100, for capacity bars."""
    return 0.0 if total <= 0 else round(min(max(100 * used / total, 0.0), 100.0), 1)


#: What a LOST agent's bars say instead of a share: the manager no longer hears from it.
UNKNOWN_WHILE_LOST = "unknown while lost"


@dataclass(frozen=True)
class Meter:
    """One allocation bar of the agents page; ``percent`` None: unknown (drawn hatched,
    without a value, its ``text`` saying why)."""

    label: str
    percent: float | None
    text: str


def agent_meters(a: AgentInfo) -> list[Meter]:
    """The agent's CPU, memory and GPU bars: allocated (total less free) of total. A LOST
    agent's free is 0 in the API (nothing can be placed on it), which says nothing of its
    use: each of its bars with a capacity reads "unknown while lost" instead of full."""
    lost = a.status == AgentStatus.LOST

    def meter(label: str, total: float, used: float, used_text: str, total_text: str) -> Meter:
        if lost and total > 0:
            return Meter(label, None, f"{UNKNOWN_WHILE_LOST} · {total_text}")
        return Meter(label, percent(used, total), f"{used_text} / {total_text}")

    cpu, mem, gpu = a.cpu - a.cpu_free, a.mem - a.mem_free, a.gpu - a.gpu_free
    return [
        meter("CPU", a.cpu, cpu, number(cpu), counted(a.cpu, "core")),
        meter("Memory", a.mem, mem, size_text(mem), size_text(a.mem)),
        meter("GPU", a.gpu, gpu, str(gpu), counted(a.gpu, "GPU")),
    ]


def clock_lines(s: SessionInfo) -> list[tuple[str, str]]:
    """The session's time limit and idle reclaim, as the facts show them (UTC)."""
    from troupe.api.session_times import describe

    def when(t: datetime) -> str:
        return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    return describe(s, s.status == S.RUNNING, datetime.now(UTC), when)
