"""Apps in main1: which a session has, their state, and starting one on demand.

A session's apps are those its image declares (:mod:`troupe.api.apps`); any other port of main1
can be opened too, but troupe starts only declared apps. Everything happens in main1 through
the exec path every entry path shares (``exec.sh``: the kernel's environment, as user
``work`` in ``/home/work``), by the runner's ``app.sh``: one exec lists every app's state, one
starts an app (detached, in a session of its own, its output to
``/home/work/.troupe/apps/<name>.log``) and waits until its port answers, or kills it again
(docs/apps.md, "States"). Opens of one app of one session are serialized here, so concurrent
opens start it once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from dataclasses import dataclass, field

from troupe.api.agent import AgentBackend
from troupe.api.apps import AppDecl, parse_service_ports
from troupe.api.errors import AgentFailed, Conflict, Invalid, NotFound
from troupe.api.exec import ExecExit, ExecOutput
from troupe.api.models import AppState
from troupe.api.pipe import RUNNER_DIR
from troupe.manager import kernel_io
from troupe.manager.fleet import Fleet
from troupe.manager.store.models import Session

log = logging.getLogger(__name__)

#: Where each app's log, PID and exit files are, in main1.
APPS_DIR = "/home/work/.troupe/apps"
#: How long an app may take until its port answers (JupyterLab on two slow cores: ~20 s).
READY_SECONDS = 60.0
#: The longest log line passed on (progress bars redraw a line without end).
MAX_LINE = 1000
#: The only protocol the proxy serves.
SERVED = "http"
#: A path segment that means a port (a sign included, so that ``-1`` is a bad port).
_PORT = re.compile(r"[+-]?[0-9]+\Z")
_STATES: frozenset[str] = frozenset({"stopped", "starting", "running", "failed"})


@dataclass(frozen=True)
class AppStatus:
    """An app's state as ``app.sh`` reported it; ``detail`` says how a failed one ended."""

    name: str
    port: int
    state: AppState
    detail: str = ""
    log_tail: list[str] = field(default_factory=list)


def app_command(*args: str) -> list[str]:
    return ["/bin/sh", f"{RUNNER_DIR}/app.sh", *args]


def parse_report(text: str, ports: dict[str, int]) -> dict[str, AppStatus]:
    """``app.sh``'s lines (``app NAME STATE DETAIL``, ``log NAME LINE``) for the apps named in
    ``ports``; other lines are ignored."""
    states: dict[str, tuple[AppState, str]] = {}
    tails: dict[str, list[str]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        name, _, value = rest.partition(" ")
        if name not in ports:
            continue
        if kind == "app":
            state, _, detail = value.partition(" ")
            if state in _STATES:
                states[name] = (state, detail.strip())  # type: ignore[assignment]
        elif kind == "log":
            tails.setdefault(name, []).append(value[:MAX_LINE])
    return {
        name: AppStatus(name, ports[name], state, detail, tails.get(name, []))
        for name, (state, detail) in states.items()
    }


def resolve(decls: list[AppDecl], app: str) -> AppDecl:
    """The declared app ``app`` names (by name or port), or, for any other port, an app of
    that port without a command; :class:`Invalid` for a bad port, :class:`NotFound` for an
    unknown name."""
    if _PORT.match(app):
        port = int(app)
        if not 1 <= port <= 65535:
            raise Invalid.field_rule("app", f"port {app} is not a port number (1-65535)")
        return next((d for d in decls if d.port == port), AppDecl(str(port), SERVED, port, None))
    for d in decls:
        if d.name == app:
            return d
    names = ", ".join(d.name for d in decls) or "none"
    shown = app if len(app) <= 64 else app[:61] + "..."
    raise NotFound(
        f"no app {shown!r} in this session (its image declares: {names});"
        " give a port number 1-65535 to open any other port of main1",
        field="app",
    )


def failure(s: AppStatus, what: str) -> str:
    """Why ``s`` is not running, with its log's last lines."""
    why = f"app {s.name!r} {what}: {s.detail or s.state}"
    if not s.log_tail:
        return why
    return why + f"; last lines of {APPS_DIR}/{s.name}.log:\n" + "\n".join(s.log_tail)


class Apps:
    """The apps of every session this manager serves (one per manager app)."""

    def __init__(self, ready_seconds: float = READY_SECONDS) -> None:
        self.ready_seconds = ready_seconds
        #: (session id, port) -> the lock its opens take (gone when no open holds it)
        self._locks: weakref.WeakValueDictionary[tuple[str, int], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def _lock(self, session_id: str, port: int) -> asyncio.Lock:
        lock = self._locks.get((session_id, port))
        if lock is None:
            lock = self._locks[(session_id, port)] = asyncio.Lock()
        return lock

    async def declared(self, agent: AgentBackend, s: Session) -> list[AppDecl]:
        """The apps main1's image declares."""
        labels = await agent.image_labels(s.image)
        try:
            return parse_service_ports(labels)
        except ValueError as e:
            raise Invalid(f"image {s.image} declares its apps wrongly: {e}") from None

    async def states(self, fleet: Fleet, s: Session) -> list[AppStatus]:
        """Every declared app's state (one exec in main1); [] if the image declares none."""
        agent, container_id = kernel_io.kernel_target(fleet, s, "main1")
        decls = await self.declared(agent, s)
        if not decls:
            return []
        reports = await _run(
            agent,
            container_id,
            app_command("status", APPS_DIR, *(f"{d.name}:{d.port}" for d in decls)),
            {d.name: d.port for d in decls},
        )
        return [reports[d.name] for d in decls]

    async def open(self, fleet: Fleet, s: Session, app: str) -> AppStatus:
        """The app ``app`` (a declared name or a port) running: started if it is not (a
        declared app), waited for until its port answers. A failure raises, with the app's
        last log lines, and leaves nothing running."""
        agent, container_id = kernel_io.kernel_target(fleet, s, "main1")
        d = resolve(await self.declared(agent, s), app)
        if d.protocol != SERVED:
            raise Invalid.field_rule(
                "app", f"app {d.name!r} speaks {d.protocol}: only {SERVED} apps can be opened"
            )
        async with self._lock(s.id, d.port):
            if d.command is None:
                status = await self._status(agent, container_id, d)
                if status.state != "running":
                    raise Conflict(_not_listening(d), field="app")
                return status
            command = app_command(
                "start", APPS_DIR, d.name, str(d.port), str(round(self.ready_seconds)), d.command
            )
            status = (await _run(agent, container_id, command, {d.name: d.port}))[d.name]
        if status.state != "running":
            raise Invalid(failure(status, "did not start"), field="app")
        return status

    async def _status(self, agent: AgentBackend, container_id: str, d: AppDecl) -> AppStatus:
        command = app_command("status", APPS_DIR, f"{d.name}:{d.port}")
        return (await _run(agent, container_id, command, {d.name: d.port}))[d.name]


def _not_listening(d: AppDecl) -> str:
    if d.name != str(d.port):
        return (
            f"nothing answers on port {d.port} of app {d.name!r}, and its image says no"
            f" command to start it (label troupe.app.{d.name}.command)"
        )
    return (
        f"nothing answers on port {d.port} in main1: troupe starts only the apps the image"
        f" declares; start your server in main1 (listening on 127.0.0.1:{d.port} or"
        " 0.0.0.0), then open the port again"
    )


async def _run(
    agent: AgentBackend, container_id: str, command: list[str], ports: dict[str, int]
) -> dict[str, AppStatus]:
    """Runs ``app.sh`` in main1: the state of each app of ``ports``; :class:`AgentFailed` if
    it did not say (a runner without ``app.sh``, an exec that failed)."""
    out = bytearray()
    code = -1
    async for item in agent.exec_stream(container_id, command, user="work"):
        if isinstance(item, ExecOutput):
            out += item.data
        elif isinstance(item, ExecExit):
            code = item.exit_code
    text = out.decode(errors="replace")
    reports = parse_report(text, ports)
    missing = [name for name in ports if name not in reports]
    if missing:
        said = text.strip().splitlines()[-3:]
        raise AgentFailed(
            f"could not learn the state of app {missing[0]!r} in main1 (exit code {code}"
            + (f": {' / '.join(said)[:MAX_LINE]}" if said else "")
            + ")",
            kernel="main1",
        )
    return reports
