"""``troupe session ...``: create, list, inspect, use and destroy cluster sessions."""

from __future__ import annotations

import os
import sys
import threading
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.status import Status
from rich.text import Text

from troupe.api.models import Mount, SessionCreate, SessionInfo, SessionStatus, format_size
from troupe.client.cli.output import (
    client,
    console,
    err_console,
    fail,
    fmt_time,
    print_fields,
    print_json,
    print_table,
    short_id,
)
from troupe.client.cli.terminal import open_terminal, shell_url
from troupe.client.sdk import load_settings

if TYPE_CHECKING:
    pass

app = typer.Typer(no_args_is_help=True, help="Create and use cluster sessions.")


class ClusterMode(StrEnum):
    single_node = "single-node"
    multi_node = "multi-node"


class SessionType(StrEnum):
    interactive = "interactive"
    batch = "batch"


class DistEnv(StrEnum):
    default = "default"
    per_container = "per-container"


class ExecUser(StrEnum):
    work = "work"
    root = "root"


JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
NameArg = Annotated[str, typer.Argument(help="session name or id", show_default=False)]


def validation_message(e: ValidationError, prefix: str = "") -> str:
    """``field: message`` for the first error of a pydantic validation."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in (prefix, *err.get("loc", ())) if p != "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
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
    for key in ("reason", "kernel", "message", "exit_code"):
        if info.get(key) not in (None, ""):
            lines.append(f"{key.replace('_', ' ')}: {info[key]}")
    if info.get("oom_killed"):
        lines.append("oom killed: yes")
    shown = {"pending", "reason", "kernel", "message", "exit_code", "oom_killed", "last_logs"}
    for key, value in info.items():
        if key not in shown and value not in (None, "", [], {}):
            lines.append(f"{key.replace('_', ' ')}: {value}")
    last_logs = info.get("last_logs")
    if isinstance(last_logs, list) and last_logs:
        lines.append("last logs:")
        lines.extend("  " + str(line).rstrip("\n") for line in last_logs)
    return lines


def _status_text(s: SessionInfo) -> str:
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


def _progress(s: SessionInfo) -> None:
    err_console.print(Text(f"{time.strftime('%H:%M:%S')} {_status_text(s)}"))


def _wait_started(info: SessionInfo, timeout: float) -> SessionInfo:
    """Long-polls status changes until the session runs (interactive) or ends (batch)."""
    batch = info.type == "batch"

    def done(s: SessionInfo) -> bool:
        return s.status.is_final or (not batch and s.status == SessionStatus.RUNNING)

    deadline = time.monotonic() + timeout
    spinner: Status | None = None
    if err_console.is_terminal:
        spinner = err_console.status(_status_text(info))
        spinner.start()
    _progress(info)
    try:
        with client() as c:
            while not done(info):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if spinner:
                        spinner.stop()
                    fail(
                        f"session {info.name!r} is still {info.status.value} after "
                        f"{timeout:g} s; it keeps going (see `troupe session info "
                        f"{info.name}`, or destroy it)"
                    )
                # while PENDING, wake now and then to show why it still waits
                poll = 10.0 if info.status == SessionStatus.PENDING else 300.0
                new = c.wait_session(
                    info.id,
                    until="change",
                    since=info.status.value,
                    timeout=max(0.1, min(remaining, poll)),
                )
                if _status_text(new) != _status_text(info):
                    _progress(new)
                info = new
                if spinner:
                    spinner.update(_status_text(info))
    except KeyboardInterrupt:
        if spinner:
            spinner.stop()
        fail(f"interrupted; session {info.name!r} ({info.status.value}) was left as it is", 130)
    finally:
        if spinner:
            spinner.stop()
    return info


def _report_failure(s: SessionInfo) -> None:
    reason = s.status_info.get("reason")
    head = f"session {s.name!r} is {s.status.value}" + (f": {reason}" if reason else "")
    err_console.print(Text("error: ", style="bold red") + Text(head, style="red"))
    for line in status_info_lines({k: v for k, v in s.status_info.items() if k != "reason"}):
        err_console.print(Text("  " + line))


@app.command()
def create(
    name: Annotated[
        str, typer.Argument(help="session name (letters, digits, _ . -)", show_default=False)
    ],
    image: Annotated[
        str,
        typer.Option(
            "--image", "-i", help="kernel image, e.g. troupe/base:0.1.0", show_default=False
        ),
    ],
    cluster_size: Annotated[
        int | None,
        typer.Option(help="number of kernels (main1, sub1, ...) (default 1)", show_default=False),
    ] = None,
    cluster_mode: Annotated[
        ClusterMode | None,
        typer.Option(
            help="kernels on one agent or spread (default single-node)", show_default=False
        ),
    ] = None,
    cpu: Annotated[
        float | None, typer.Option(help="cores per kernel (default 0.5)", show_default=False)
    ] = None,
    mem: Annotated[
        str | None,
        typer.Option(help="memory per kernel, e.g. 512m, 2g (default 512m)", show_default=False),
    ] = None,
    gpu: Annotated[
        int | None, typer.Option(help="GPUs per kernel (default 0)", show_default=False)
    ] = None,
    mount: Annotated[
        list[str] | None,
        typer.Option(
            "--mount", "-m", help="data folder FOLDER or FOLDER:ro (repeatable)", show_default=False
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env", "-e", help="environment variable K=V (repeatable)", show_default=False
        ),
    ] = None,
    type_: Annotated[
        SessionType | None,
        typer.Option(
            "--type",
            help="interactive, or batch (runs --startup-command, then ends; default interactive)",
            show_default=False,
        ),
    ] = None,
    startup_command: Annotated[
        str | None, typer.Option(help="shell command of a batch session", show_default=False)
    ] = None,
    dist_env: Annotated[
        DistEnv | None,
        typer.Option(help="distributed-training variables (default default)", show_default=False),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="agent group (default default)", show_default=False)
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(help="scheduling priority, -100..100 (default 0)", show_default=False),
    ] = None,
    uid: Annotated[
        int | None, typer.Option(help="uid of user work (default 1000)", show_default=False)
    ] = None,
    gid: Annotated[
        int | None, typer.Option(help="gid of user work (default 1000)", show_default=False)
    ] = None,
    isolated_network: Annotated[
        bool, typer.Option("--isolated-network", help="no route out of the session network")
    ] = False,
    max_pending_seconds: Annotated[
        float | None,
        typer.Option(help="cancel if not scheduled within this many seconds", show_default=False),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="wait until running (batch: until finished)")
    ] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait with --wait")] = 300.0,
    json_: JsonOpt = False,
) -> None:
    """Create a session; with --wait, follow it until it runs (batch: until it ends)."""
    environ: dict[str, str] = {}
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r} is not of the form K=V", param_hint="'--env'")
        environ[key] = value
    mounts: list[Mount] = []
    for spec in mount or []:
        try:
            mounts.append(Mount.parse(spec))
        except ValidationError as e:
            fail(validation_message(e, "mounts"), 2)
        except ValueError as e:
            fail(f"mounts: {e}", 2)
    data: dict[str, Any] = {"name": name, "image": image}
    resources = {k: v for k, v in (("cpu", cpu), ("mem", mem), ("gpu", gpu)) if v is not None}
    optional: dict[str, Any] = {
        "cluster_size": cluster_size,
        "cluster_mode": cluster_mode,
        "resources": resources,
        "mounts": mounts,
        "environ": environ,
        "type": type_,
        "startup_command": startup_command,
        "dist_env": dist_env,
        "group": group,
        "priority": priority,
        "uid": uid,
        "gid": gid,
        "isolated_network": isolated_network or None,
        "max_pending_seconds": max_pending_seconds,
    }
    data.update(
        {
            k: (v.value if isinstance(v, StrEnum) else v)
            for k, v in optional.items()
            if v not in (None, {}, [])
        }
    )
    try:
        req = SessionCreate.model_validate(data)
    except ValidationError as e:
        fail(validation_message(e), 2)

    with client() as c:
        info = c.create_session(req)
    if not wait:
        if json_:
            print_json(info)
        else:
            console.print(Text(f"session {info.name} ({info.id}): {info.status.value}"))
        return

    info = _wait_started(info, timeout)
    if json_:
        print_json(info)
    if info.type == "batch":
        if info.status == SessionStatus.TERMINATED and info.exit_code is not None:
            if not json_:
                console.print(Text(f"session {info.name}: finished, exit code {info.exit_code}"))
        else:
            _report_failure(info)
        raise typer.Exit(info.exit_code if info.exit_code is not None else 1)
    if info.status == SessionStatus.RUNNING:
        if not json_:
            console.print(Text(f"session {info.name} ({info.id}): RUNNING"))
        return
    _report_failure(info)
    raise typer.Exit(1)


@app.command("list")
def list_(
    all_: Annotated[bool, typer.Option("--all", "-a", help="include finished sessions")] = False,
    json_: JsonOpt = False,
) -> None:
    """List your sessions (active ones; --all for finished too)."""
    with client() as c:
        sessions = c.list_sessions(all=all_)
    if json_:
        print_json(sessions)
        return
    print_table(
        ["NAME", "STATUS", "TYPE", "IMAGE", "SIZE", "MODE", "CPU", "MEM", "CREATED", "ID"],
        [
            [
                s.name,
                s.status.value,
                s.type,
                s.image,
                s.cluster_size,
                s.cluster_mode,
                s.resources.cpu,
                format_size(s.resources.mem),
                fmt_time(s.created_at),
                short_id(s.id, 8),
            ]
            for s in sessions
        ],
    )


@app.command()
def info(name: NameArg, json_: JsonOpt = False) -> None:
    """Show a session, its kernels and why it waits or failed."""
    with client() as c:
        s = c.get_session(name)
    if json_:
        print_json(s)
        return
    r = s.resources
    network = s.network or "-"
    if s.subnet:
        network += f" ({s.subnet})"
    if s.isolated_network:
        network += " isolated"
    print_fields(
        [
            ("name", s.name),
            ("id", s.id),
            ("owner", s.owner),
            ("status", s.status.value),
            ("type", s.type),
            ("image", s.image),
            ("cluster", f"{s.cluster_size} kernel(s), {s.cluster_mode}"),
            ("resources", f"cpu {r.cpu:g}, mem {format_size(r.mem)}, gpu {r.gpu} (per kernel)"),
            (
                "mounts",
                ", ".join(m.folder + (" (ro)" if m.readonly else "") for m in s.mounts) or "-",
            ),
            ("dist env", s.dist_env),
            ("group", s.group),
            ("priority", s.priority),
            ("uid/gid", f"{s.uid}/{s.gid}"),
            ("network", network),
            ("exit code", s.exit_code),
            ("created", fmt_time(s.created_at)),
            ("started", fmt_time(s.started_at)),
            ("terminated", fmt_time(s.terminated_at)),
        ]
    )
    if s.kernels:
        console.print()
        print_table(
            ["HOSTNAME", "ROLE", "AGENT", "CONTAINER", "IP", "STATUS", "EXIT"],
            [
                [
                    k.hostname,
                    k.role,
                    k.agent,
                    short_id(k.container_id),
                    k.ip,
                    k.status,
                    (f"{k.exit_code} (oom)" if k.oom_killed else k.exit_code),
                ]
                for k in s.kernels
            ],
        )
    lines = status_info_lines(s.status_info)
    if lines:
        console.print()
        for line in lines:
            console.print(Text(line))


@app.command()
def destroy(name: NameArg, json_: JsonOpt = False) -> None:
    """Destroy a session: stop its kernels (logs are kept) and remove its network."""
    with client() as c:
        s = c.destroy_session(name)
    if json_:
        print_json(s)
    else:
        console.print(Text(f"session {s.name} ({s.id}): {s.status.value}"))


def _quiet_stdout() -> None:
    """After a broken pipe (``| head``), keeps Python from complaining at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@app.command()
def logs(
    name: NameArg,
    container: Annotated[
        str | None,
        typer.Option(
            "--container",
            "-c",
            help="one kernel's log, e.g. sub1 (default: all, prefixed)",
            show_default=False,
        ),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
) -> None:
    """Print a session's logs (also after it ended)."""
    try:
        with client() as c:
            for line in c.logs(name, container=container, follow=follow):
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:
        _quiet_stdout()
        raise typer.Exit(141) from None  # as if killed by SIGPIPE


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    name: NameArg,
    command: Annotated[list[str], typer.Argument(help="the command, after --", show_default=False)],
    kernel: Annotated[str, typer.Option("--kernel", "-k", help="main1, sub1, ...")] = "main1",
    user: Annotated[
        ExecUser, typer.Option("--user", "-u", help="run as work or root")
    ] = ExecUser.work,
) -> None:
    """Run a command in a kernel; its output streams, its exit code is passed through."""
    code: int | None = None
    try:
        with client() as c:
            for item in c.exec_stream(name, command, kernel=kernel, user=user.value):
                if isinstance(item, int):
                    code = item
                else:
                    sys.stdout.write(item)
                    sys.stdout.flush()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:
        _quiet_stdout()
        raise typer.Exit(141) from None  # as if killed by SIGPIPE
    if code is None:
        fail("the command's output ended without an exit code")
    raise typer.Exit(code)


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    name: NameArg,
    command: Annotated[list[str], typer.Argument(help="the command, after --", show_default=False)],
    user: Annotated[
        ExecUser, typer.Option("--user", "-u", help="run as work or root")
    ] = ExecUser.work,
) -> None:
    """Run a command on every kernel at once; lines are prefixed [host], the worst exit
    code is passed through."""

    with client() as c:
        hosts = [k.hostname for k in c.get_session(name).kernels]
    lock = threading.Lock()
    codes: dict[str, int] = {}
    errors: dict[str, str] = {}

    def one(host: str) -> None:
        pending = ""
        try:
            with client() as c:
                for item in c.exec_stream(name, command, kernel=host, user=user.value):
                    if isinstance(item, int):
                        codes[host] = item
                        continue
                    *lines, pending = (pending + item).split("\n")
                    if lines:
                        with lock:
                            sys.stdout.write("".join(f"[{host}] {line}\n" for line in lines))
                            sys.stdout.flush()
        except (Exception, SystemExit) as e:  # one kernel's failure must not hide the others
            errors[host] = str(e) or type(e).__name__
        if pending:
            with lock:
                sys.stdout.write(f"[{host}] {pending}\n")

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    for host, message in errors.items():
        err_console.print(f"[red]{host}: {message}[/red]")
    worst = max([codes.get(h, 255 if h in errors else 0) for h in hosts], default=0)
    raise typer.Exit(worst if worst >= 0 else 255)


@app.command()
def shell(
    name: NameArg,
    kernel: Annotated[str, typer.Option("--kernel", "-k", help="main1, sub1, ...")] = "main1",
) -> None:
    """Open an interactive terminal in a kernel (stdin may also be piped)."""
    url, key = load_settings()
    result = open_terminal(shell_url(url, name, kernel), key)
    if isinstance(result, str):
        fail(result)
    raise typer.Exit(result)
