"""``troupe session top NAME`` and ``troupe agent top``: utilisation tables refreshed in place,
as ``docker stats`` shows them (docs/metrics.md).

The table is the CLI's plain one (:func:`troupe.client.cli.table.table_lines`: columns never
squeezed), redrawn by Rich's live display; ``--once`` prints it once, ``--json`` one JSON line
per kernel (or agent): its newest sample's keys plus ``hostname`` (or the agent's ``name`` and
capacity).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from troupe.client.cli.output import client, console
from troupe.client.cli.table import human_size, table_lines

if TYPE_CHECKING:
    from troupe.api.metrics import AgentUsage, GpuSample, SessionMetrics, UsageSummary
    from troupe.client.sdk import Client

session_app = typer.Typer()
agent_app = typer.Typer()

Interval = Annotated[float, typer.Option(min=0.2, help="seconds between two refreshes")]
Once = Annotated[bool, typer.Option("--once", help="print once and exit")]
Json = Annotated[
    bool, typer.Option("--json", help="one JSON line per kernel: its newest sample + hostname")
]

KERNEL_COLUMNS = ["KERNEL", "CPU", "CPU %", "MEM / LIMIT", "MEM %", "NET RX/TX", "BLOCK R/W"]
KERNEL_COLUMNS += ["PIDS", "GPU", "OOM"]


def rate(bps: float) -> str:
    return f"{human_size(round(bps))}/s"


def gpu_cell(gpus: list[GpuSample]) -> str:
    """``87% 3G/16G`` per GPU (``-`` where a figure is not reported)."""
    if not gpus:
        return "-"
    parts = []
    for g in gpus:
        util = f"{g.util_pct:.0f}%" if g.util_pct is not None else "-"
        mem = human_size(g.mem_bytes) if g.mem_bytes is not None else "-"
        total = human_size(g.mem_total) if g.mem_total is not None else "-"
        parts.append(f"{util} {mem}/{total}")
    return ", ".join(parts)


def kernel_rows(m: SessionMetrics) -> list[list[object]]:
    rows: list[list[object]] = []
    for k in m.kernels:
        if not k.samples:
            rows.append([k.hostname, "-", "-", "-", "-", "-", "-", "-", "-", "-"])
            continue
        s = k.samples[-1]
        limit = human_size(s.mem_limit) if s.mem_limit else "-"
        rows.append(
            [
                k.hostname,
                f"{s.cpu_cores:.2f}/{s.cpu_limit:g}" if s.cpu_limit else f"{s.cpu_cores:.2f}",
                f"{s.cpu_pct:.1f}%" if s.cpu_pct is not None else "-",
                f"{human_size(s.mem_bytes)} / {limit}",
                f"{100 * s.mem_bytes / s.mem_limit:.1f}%" if s.mem_limit else "-",
                f"{rate(s.net_rx_bps)} / {rate(s.net_tx_bps)}",
                f"{rate(s.blk_read_bps)} / {rate(s.blk_write_bps)}",
                s.pids,
                gpu_cell(s.gpus),
                "yes" if s.oom_killed else "-",
            ]
        )
    return rows


def summary_lines(m: SessionMetrics, u: UsageSummary) -> list[str]:
    return [f"session {m.name} is {m.status}; what it used:", *usage_table(u)]


def usage_lines(u: UsageSummary | None) -> list[str]:
    """A finished session's summary for ``session info`` (none while it runs)."""
    return [] if u is None else ["what it used:", *usage_table(u)]


def usage_table(u: UsageSummary) -> list[str]:
    """Per kernel and the session: peak memory, mean CPU, GPU-hours, seconds sampled, OOM."""
    return table_lines(
        ["KERNEL", "PEAK MEM", "MEAN CPU", "GPU-HOURS", "SECONDS", "OOM"],
        [
            [
                host,
                human_size(k.peak_mem_bytes),
                f"{k.mean_cpu_cores:.2f}",
                f"{k.gpu_hours:.3f}",
                f"{k.seconds:.0f}",
                "yes" if k.oom_killed else "-",
            ]
            for host, k in [*u.kernels.items(), ("(session)", u)]
        ],
    )


def session_view(m: SessionMetrics) -> list[str]:
    if m.summary is not None:
        return summary_lines(m, m.summary)
    head = f"session {m.name} ({m.status})"
    return [head, *table_lines(KERNEL_COLUMNS, kernel_rows(m))]


def session_records(m: SessionMetrics) -> list[dict[str, Any]]:
    """One record per kernel with a sample: the newest one's keys plus ``hostname``."""
    return [
        {"hostname": k.hostname, **k.samples[-1].model_dump(mode="json")}
        for k in m.kernels
        if k.samples
    ]


def agent_view(agents: list[AgentUsage]) -> list[str]:
    rows: list[list[object]] = []
    for a in agents:
        s = a.samples[-1] if a.samples else None
        if s is None:
            rows.append([a.name, f"-/{a.cpu:g}", f"-/{human_size(a.mem)}", "-", "-"])
            continue
        rows.append(
            [
                a.name,
                f"{s.cpu_cores:.2f}/{a.cpu:g}",
                f"{human_size(s.mem_bytes)}/{human_size(a.mem)}",
                s.kernels,
                gpu_cell(s.gpus),
            ]
        )
    return table_lines(["AGENT", "CPU USED", "MEM USED", "KERNELS", "GPU"], rows)


def agent_records(agents: list[AgentUsage]) -> list[dict[str, Any]]:
    return [
        {
            "name": a.name,
            "cpu": a.cpu,
            "mem": a.mem,
            "gpu": a.gpu,
            **a.samples[-1].model_dump(mode="json"),
        }
        for a in agents
        if a.samples
    ]


def show(
    fetch: Callable[[Client], Any],
    view: Callable[[Any], list[str]],
    records: Callable[[Any], list[dict[str, Any]]],
    interval: float,
    once: bool,
    json_: bool,
    done: Callable[[Any], bool] = lambda _: False,
) -> None:
    """Prints (``--once``, ``--json``) or keeps redrawing ``view`` of what ``fetch`` answers
    until Ctrl-C or ``done``."""
    with client() as c:
        data = fetch(c)
        if json_:
            for r in records(data):
                sys.stdout.write(json.dumps(r) + "\n")
            sys.stdout.flush()
            return
        if once or done(data) or not sys.stdout.isatty():
            lines = view(data)
            print_table_text(lines)
            return
        from rich.live import Live
        from rich.text import Text

        with Live(Text("\n".join(view(data))), console=console, auto_refresh=False) as live:
            try:
                while not done(data):
                    time.sleep(interval)
                    data = fetch(c)
                    live.update(Text("\n".join(view(data))), refresh=True)
            except KeyboardInterrupt:
                pass


def print_table_text(lines: list[str]) -> None:
    """A title line and a table of :func:`table_lines`."""
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


@session_app.command("top")
def session_top(
    name: Annotated[str, typer.Argument(help="session name or id")],
    interval: Interval = 2.0,
    once: Once = False,
    json_: Json = False,
) -> None:
    """Live CPU, memory, network, block I/O, processes and GPUs of each kernel (a finished
    session: its summary)."""
    show(
        lambda c: c.session_metrics(name),
        session_view,
        session_records,
        interval,
        once,
        json_,
        done=lambda m: m.summary is not None,
    )


@agent_app.command("top")
def agent_top(
    name: Annotated[str | None, typer.Argument(help="one agent (default: all)")] = None,
    interval: Interval = 2.0,
    once: Once = False,
    json_: Annotated[
        bool, typer.Option("--json", help="one JSON line per agent: its newest sample + capacity")
    ] = False,
) -> None:
    """What each agent's kernels use of its cores, memory and GPUs, live (admins)."""

    def fetch(c: Client) -> list[AgentUsage]:
        names = [name] if name else [a.name for a in c.list_agents()]
        return [c.agent_metrics(n) for n in names]

    show(fetch, agent_view, agent_records, interval, once, json_)
