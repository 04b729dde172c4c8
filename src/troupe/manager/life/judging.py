"""What a RUNNING session's kernel exit means under the session's rules (docs/policies.md):
the end of a batch (success), a restart of the whole session, or its end with the usual
first-failure report. Pure: works on loaded rows, inside the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from troupe.api.agent import KernelExit
from troupe.api.lifecycle import Change, KernelStatus, SessionStatus, transition, utcnow
from troupe.api.models import SessionType, format_size
from troupe.api.policies import HISTORY_LOG_LINES, SuccessPolicy
from troupe.manager.session_events import policy
from troupe.manager.store.models import Kernel, Session

S, K = SessionStatus, KernelStatus


#: Who restarts a session (its events' actor): the session's own rule.
RESTART_ACTOR = policy("max_restarts")


@dataclass(frozen=True)
class Outcome:
    """What follows the exit: ``ending`` is RESTARTING for a restart, else the final status
    its teardown reaches."""

    ending: SessionStatus
    info: dict[str, Any]
    exit_code: int | None = None


def exit_info(ev: KernelExit, hostname: str, preparing: bool) -> dict[str, Any]:
    """The session's status_info after a kernel's exit: which kernel, how, its last logs."""
    reason = "kernel ran out of memory" if ev.oom_killed else "kernel exited"
    if preparing:
        reason += " while the session was being prepared"
    info: dict[str, Any] = {
        "reason": reason,
        "kernel": hostname,
        "exit_code": ev.exit_code,
        "oom_killed": ev.oom_killed,
    }
    # The engine's error; while preparing, else the kernel's last words: a command that could
    # not run at all fails in Docker's init, after the container started, and says why only
    # in its output (which one of the start's own checks may or may not have seen first).
    said = [line.strip() for line in ev.last_logs if line.strip()] if preparing else []
    message = ev.error or (said[-1][:MESSAGE_CHARS] if said else "")
    if message:
        info["message"] = message
    info["last_logs"] = ev.last_logs
    return info


#: At most this much of a log line becomes a failure's message.
MESSAGE_CHARS = 500


def batch_info(ev: KernelExit, hostname: str, mem: int) -> dict[str, Any]:
    """The session's status_info when its batch command (main1) ended: its exit code, and
    whether the kernel was killed for memory (the exit code alone, 137, does not say)."""
    if not ev.oom_killed:
        return {"reason": "batch command finished", "exit_code": ev.exit_code}
    return {
        "reason": f"{hostname} killed: out of memory (limit {format_size(mem)})",
        "kernel": hostname,
        "exit_code": ev.exit_code,
        "oom_killed": True,
    }


def exit_message(ev: KernelExit) -> str:
    """The event of an exit, in words."""
    if ev.oom_killed:
        return f"killed: out of memory (exit code {ev.exit_code})"
    return f"exited with code {ev.exit_code}"


def judge(s: Session, k: Kernel, ev: KernelExit, changes: list[Change]) -> Outcome | None:
    """The outcome of ``k``'s exit (already marked EXITED); None: nothing to do yet (under
    ``success_policy=all``, a kernel done while others still run). A restart begins here."""
    batch = s.type == SessionType.BATCH
    every = s.success_policy == SuccessPolicy.ALL
    failed = ev.exit_code != 0 or ev.oom_killed
    decides = every or k.role == "main"  # whose exit 0 is a success
    if batch and decides and not failed:
        if not every:
            return Outcome(S.TERMINATED, batch_info(ev, k.hostname, s.mem), ev.exit_code)
        done = sum(x.status == K.EXITED and x.exit_code == 0 for x in s.kernels)
        if done == len(s.kernels):
            return Outcome(S.TERMINATED, {"reason": "every kernel's command finished"}, 0)
        # (a write of the session row: two exits judged at once conflict, and one is judged
        # again with the other's kernel EXITED, so the last one is never missed)
        s.status_info = {"finished": f"{done} of {len(s.kernels)} kernels' commands exited 0"}
        return None
    if ev.exit_code in (s.no_restart_exit_codes or []):
        info = {
            **exit_info(ev, k.hostname, preparing=False),
            "reason": f"exit code {ev.exit_code} ends the session (no_restart_exit_codes)",
        }
        return Outcome(S.ERROR, _counted(s, info), ev.exit_code)
    if s.restarts < s.max_restarts:
        begin_restart(s, k, ev, changes)
        return Outcome(S.RESTARTING, dict(s.status_info))
    if batch and k.role == "main" and not every:
        return Outcome(S.TERMINATED, _counted(s, batch_info(ev, k.hostname, s.mem)), ev.exit_code)
    info = exit_info(ev, k.hostname, preparing=False)
    return Outcome(S.ERROR, _counted(s, info), ev.exit_code if every else None)


def _counted(s: Session, info: dict[str, Any]) -> dict[str, Any]:
    """A final report with the number of restarts before it (when there were any)."""
    return {**info, "restarts": s.restarts} if s.restarts else info


def begin_restart(s: Session, k: Kernel, ev: KernelExit, changes: list[Change]) -> None:
    """RUNNING -> RESTARTING, every kernel RESTARTING, the failure in the restart history."""
    how = "ran out of memory" if ev.oom_killed else f"exited with {ev.exit_code}"
    failure = {
        "kernel": k.hostname,
        "reason": "kernel ran out of memory" if ev.oom_killed else "kernel exited",
        "exit_code": ev.exit_code,
        "oom_killed": ev.oom_killed,
        "last_logs": ev.last_logs[-HISTORY_LOG_LINES:],
    }
    restarting(s, failure, how, changes)


def restarting(s: Session, failure: dict[str, Any], how: str, changes: list[Change]) -> None:
    """The start of a restart: ``failure`` (kernel, reason, exit code, ...) in the restart
    history, one more restart, RESTARTING for the session and its kernels."""
    host = failure["kernel"]
    s.restart_history = [
        *(s.restart_history or []),
        {"attempt": s.restarts, **failure, "at": utcnow().isoformat()},
    ]
    s.restarts += 1
    reason = f"restarting: {host} {how} (restart {s.restarts} of {s.max_restarts})"
    s.status_info = {"reason": reason}
    transition(s, S.RESTARTING, changes, reason=reason, actor=RESTART_ACTOR)
    for x in s.kernels:
        transition(x, K.RESTARTING, changes)
