"""Wire format of kernel and agent utilisation (docs/metrics.md): what agents sample, what the
manager keeps, what ``GET /v1/sessions/{ref}/metrics`` and ``GET /v1/agents/{name}/metrics``
answer.

Times are epoch seconds (floats, UTC). A figure that cannot be known (no limit, a GPU that does
not report its utilisation) is ``None``, never a made-up 0.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

from troupe.api.errors import Invalid

#: Most samples one answer carries per kernel (the history holds fewer: see docs/metrics.md).
MAX_SAMPLES = 4096


class GpuSample(BaseModel):
    """One GPU at one moment, as ``nvidia-smi`` reports it."""

    index: int
    uuid: str
    util_pct: float | None = None
    mem_bytes: int | None = None
    mem_total: int | None = None


class KernelSample(BaseModel):
    """One kernel over one sampling interval: rates are means over the interval, the rest the
    value at its end."""

    t: float
    cpu_cores: float
    cpu_limit: float | None = None
    cpu_pct: float | None = None
    mem_bytes: int
    mem_limit: int | None = None
    #: the kernel's memory cgroup has OOM-killed a process (since the kernel started)
    oom_killed: bool = False
    net_rx_bps: float = 0.0
    net_tx_bps: float = 0.0
    blk_read_bps: float = 0.0
    blk_write_bps: float = 0.0
    pids: int = 0
    gpus: list[GpuSample] = Field(default_factory=list)


class KernelSamples(BaseModel):
    """An agent's samples of one kernel (agent -> manager)."""

    session_id: str
    kernel_id: str = ""
    hostname: str
    samples: list[KernelSample] = Field(default_factory=list, max_length=MAX_SAMPLES)


class HostSample(BaseModel):
    """An agent's kernels together at one moment: what they use of the host."""

    t: float
    cpu_cores: float = 0.0
    mem_bytes: int = 0
    kernels: int = 0
    gpus: list[GpuSample] = Field(default_factory=list)


class AgentMetrics(BaseModel):
    """An agent's recent samples (``GET /agent/v1/metrics?since=``; agent -> manager)."""

    #: seconds between two samples on this agent
    interval: float
    kernels: list[KernelSamples] = Field(default_factory=list)
    host: list[HostSample] = Field(default_factory=list, max_length=MAX_SAMPLES)


class KernelUsage(BaseModel):
    """What one kernel used over its life (from its samples)."""

    peak_mem_bytes: int = 0
    mean_cpu_cores: float = 0.0
    gpu_hours: float = 0.0
    #: seconds the samples cover
    seconds: float = 0.0
    oom_killed: bool = False


class UsageSummary(KernelUsage):
    """A finished session's use, kept after its samples are dropped: the peak memory of its
    largest kernel, the mean cores of all its kernels together, their GPU-hours."""

    kernels: dict[str, KernelUsage] = Field(default_factory=dict)


class KernelMetrics(BaseModel):
    hostname: str
    samples: list[KernelSample] = Field(default_factory=list)


class SessionMetrics(BaseModel):
    """``GET /v1/sessions/{ref}/metrics``: samples oldest first, coarser (5-minute means)
    beyond the last hour; ``summary`` once the session finished."""

    id: str
    name: str
    status: str
    kernels: list[KernelMetrics] = Field(default_factory=list)
    summary: UsageSummary | None = None


class AgentUsage(BaseModel):
    """``GET /v1/agents/{name}/metrics``: an agent's capacity and its kernels' use over time."""

    name: str
    cpu: float
    mem: int
    gpu: int
    samples: list[HostSample] = Field(default_factory=list)


def parse_since(value: str | None, now: float | None = None) -> float | None:
    """``since`` of a metrics request: epoch seconds or an RFC 3339 time (a naive one is UTC);
    :class:`Invalid` naming ``since`` if it is neither, or in the future."""
    if value is None or value == "":
        return None
    try:
        t = float(value)
    except ValueError:
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise Invalid.field_rule(
                "since", "must be epoch seconds or an RFC 3339 time, e.g. 2026-11-27T10:00:00Z"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        try:
            t = when.timestamp()
        except (OverflowError, ValueError, OSError):  # (year 1 with a positive offset)
            raise Invalid.field_rule("since", "must be a time after 1970") from None
    if t != t or t in (float("inf"), float("-inf")) or t < 0:
        raise Invalid.field_rule("since", "must be a time after 1970")
    current = datetime.now(UTC).timestamp() if now is None else now
    if t > current + 1:
        raise Invalid.field_rule("since", "is in the future")
    return t
