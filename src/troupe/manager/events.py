"""What the fleet reports to the session life, in the order it happened (one queue)."""

from __future__ import annotations

from dataclasses import dataclass

from troupe.api.agent import KernelExit


@dataclass(frozen=True)
class AgentLost:
    agent_id: str
    message: str


@dataclass(frozen=True)
class AgentBack:
    agent_id: str


@dataclass(frozen=True)
class KernelExited:
    agent_id: str
    exit: KernelExit


FleetEvent = AgentLost | AgentBack | KernelExited
