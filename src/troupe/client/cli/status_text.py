"""Human words for a session's state: the one-line status, ``status_info`` as lines, failures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from troupe.client.cli.output import err_console

if TYPE_CHECKING:
    from pydantic import ValidationError

    from troupe.api.models import SessionInfo


def validation_message(e: ValidationError, prefix: str = "") -> str:
    """``field: rule`` for the first error of a pydantic validation, the field named and the
    rule in words as the server says them (``roles[1].resources.mem: ...``)."""
    from troupe.api.rule_words import location, words

    err = e.errors()[0]
    loc = location(tuple(p for p in (prefix, *err.get("loc", ())) if p != "")) or ""
    msg = words(err)
    if loc and not msg.startswith(f"{loc}:"):
        return f"{loc}: {msg}"
    return msg


def status_info_lines(info: dict[str, Any]) -> list[str]:
    """Human lines for a session's ``status_info`` (pending report, reason, logs...)."""
    lines: list[str] = []
    pending = info.get("pending")
    if isinstance(pending, dict) and pending:
        lines.append("pending:")
        for host, reasons in pending.items():
            items = reasons if isinstance(reasons, list) else [reasons]
            text = "; ".join(str(r) for r in items)
            lines.append(f"  {host}: {text or 'waiting for the scheduler'}")
    pulling = info.get("pulling")
    if isinstance(pulling, list) and pulling:
        from troupe.client.cli.pull_progress import pull_lines

        lines.append("pulling:")
        lines.extend("  " + line for line in pull_lines(pulling))
    for key in ("reason", "kernel", "message", "exit_code"):
        if info.get(key) not in (None, ""):
            lines.append(f"{key.replace('_', ' ')}: {info[key]}")
    if info.get("oom_killed"):
        lines.append("oom killed: yes")
    shown = {
        "pending",
        "pulling",
        "reason",
        "kernel",
        "message",
        "exit_code",
        "oom_killed",
        "last_logs",
    }
    for key, value in info.items():
        if key not in shown and value not in (None, "", [], {}):
            lines.append(f"{key.replace('_', ' ')}: {value}")
    last_logs = info.get("last_logs")
    if isinstance(last_logs, list) and last_logs:
        lines.append("last logs:")
        lines.extend("  " + str(line).rstrip("\n") for line in last_logs)
    return lines


def status_text(s: SessionInfo) -> str:
    """``session NAME: STATUS``, with why it waits while PENDING."""
    from troupe.api.models import SessionStatus

    text = f"session {s.name}: {s.status.value}"
    pending = s.status_info.get("pending")
    if s.status == SessionStatus.PENDING and isinstance(pending, dict) and pending:
        reasons: list[str] = []
        for value in pending.values():
            for r in value if isinstance(value, list) else [value]:
                if str(r) not in reasons:
                    reasons.append(str(r))
        if reasons:
            text += f" ({'; '.join(reasons)})"
    return text


def report_failure(s: SessionInfo) -> None:
    """``error: session 'NAME' is STATUS: reason`` and the rest of ``status_info``, on stderr."""
    from rich.text import Text

    reason = s.status_info.get("reason")
    head = f"session {s.name!r} is {s.status.value}" + (f": {reason}" if reason else "")
    err_console.print(Text("error: ", style="bold red") + Text(head, style="red"))
    for line in status_info_lines({k: v for k, v in s.status_info.items() if k != "reason"}):
        err_console.print(Text("  " + line))
