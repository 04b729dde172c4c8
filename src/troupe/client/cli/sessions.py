"""``troupe session ...``: create, list, inspect and destroy cluster sessions; the commands that
use a running session's kernels (logs, exec, run, shell) are in
:mod:`troupe.client.cli.session_exec`."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from troupe.client.cli import apps, events, limit_options, reach, session_exec, session_file, top
from troupe.client.cli import policy_options as policy
from troupe.client.cli.choices import (
    CREATE_DEFAULTS,
    RESOURCE_DEFAULTS,
    ClusterMode,
    DistEnvMode,
    SessionType,
)
from troupe.client.cli.output import (
    App,
    JsonOpt,
    client,
    console,
    fail,
    print_fields,
    print_json,
)
from troupe.client.cli.session_wait import wait_started
from troupe.client.cli.status_text import status_info_lines
from troupe.client.cli.table import (
    SESSION_COLUMNS,
    fmt_time,
    format_size,
    print_table,
    session_row,
    short_id,
)

if TYPE_CHECKING:
    from troupe.api.models import Resources

app = App(no_args_is_help=True, help="Create and use cluster sessions.")

NameArg = session_exec.NameArg


def _default(field: str) -> Any:
    """What the server assumes for a field of a new session left out (help texts)."""
    return CREATE_DEFAULTS[field]


def _value(choice: StrEnum | None) -> str | None:
    return None if choice is None else choice.value


@app.command()
def create(
    name: Annotated[
        str | None,
        typer.Argument(help="session name (letters, digits, _ . -)", show_default=False),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image", "-i", help="kernel image, e.g. troupe/base:0.1.0", show_default=False
        ),
    ] = None,
    file: Annotated[str | None, session_file.FileOpt] = None,
    cluster_size: Annotated[
        int | None,
        typer.Option(
            help=f"number of kernels (main1, sub1, ...) (default {_default('cluster_size')})",
            show_default=False,
        ),
    ] = None,
    cluster_mode: Annotated[
        ClusterMode | None,
        typer.Option(
            help=f"kernels on one agent or spread (default {_default('cluster_mode')})",
            show_default=False,
        ),
    ] = None,
    cpu: Annotated[
        float | None,
        typer.Option(
            help=f"cores per kernel (default {RESOURCE_DEFAULTS['cpu']:g})", show_default=False
        ),
    ] = None,
    mem: Annotated[
        str | None,
        typer.Option(
            help="memory per kernel, e.g. 512m, 2g "
            f"(default {format_size(RESOURCE_DEFAULTS['mem'])})",
            show_default=False,
        ),
    ] = None,
    gpu: Annotated[
        int | None,
        typer.Option(
            help=f"GPUs per kernel (default {RESOURCE_DEFAULTS['gpu']})", show_default=False
        ),
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            help="a role NAME:REPLICAS[,image=IMG][,cpu=C][,mem=M][,gpu=G] (repeatable); main"
            " is main1 with the top-level values unless given as --role main:1,...; hostnames"
            " are NAME1, NAME2, ...",
            show_default=False,
        ),
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
            help="interactive, or batch (runs --startup-command, then ends; "
            f"default {_default('type')})",
            show_default=False,
        ),
    ] = None,
    startup_command: Annotated[
        str | None, typer.Option(help="shell command of a batch session", show_default=False)
    ] = None,
    dist_env: Annotated[
        DistEnvMode | None,
        typer.Option(
            help=f"distributed-training variables (default {_default('dist_env')})",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(help=f"agent group (default {_default('group')})", show_default=False),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            help=f"scheduling priority, -100..100 (default {_default('priority')})",
            show_default=False,
        ),
    ] = None,
    uid: Annotated[
        int | None,
        typer.Option(help=f"uid of user work (default {_default('uid')})", show_default=False),
    ] = None,
    gid: Annotated[
        int | None,
        typer.Option(help=f"gid of user work (default {_default('gid')})", show_default=False),
    ] = None,
    isolated_network: Annotated[
        bool, typer.Option("--isolated-network", help="no route out of the session network")
    ] = False,
    max_pending_seconds: Annotated[
        float | None,
        typer.Option(help="cancel if not scheduled within this many seconds", show_default=False),
    ] = None,
    ssh_key: Annotated[
        str | None,
        typer.Option(
            "--ssh-key",
            help="your public key for main1's authorized_keys (troupe session ssh); default: the"
            " first of ~/.ssh/id_ed25519.pub, id_ecdsa.pub, id_rsa.pub; 'none' for none",
            show_default=False,
        ),
    ] = None,
    time_limit: limit_options.TimeLimitOpt = None,
    stop_grace: limit_options.StopGraceOpt = None,
    idle_timeout: limit_options.IdleTimeoutOpt = None,
    max_restarts: policy.MaxRestartsOpt = None,
    no_restart_exit_codes: policy.NoRestartOpt = None,
    success: policy.SuccessOpt = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="wait until running (batch: until finished)")
    ] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait with --wait")] = 300.0,
    json_: JsonOpt = False,
) -> None:
    """Create a session (from flags, a session file -f, or both); with --wait, follow it."""
    from pydantic import ValidationError
    from rich.text import Text

    from troupe.api.models import Mount, SessionStatus
    from troupe.api.models import SessionType as Type
    from troupe.client.cli.status_text import report_failure, validation_message

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
    from troupe.client.cli.role_option import parse_role

    roles: list[dict[str, Any]] = []
    for i, spec in enumerate(role or []):
        try:
            roles.append(parse_role(spec))
        except ValueError as e:
            fail(f"roles[{i}]: --role {e}", 2)
    data: dict[str, Any] = {"name": name, "image": image}
    resources = {k: v for k, v in (("cpu", cpu), ("mem", mem), ("gpu", gpu)) if v is not None}
    optional: dict[str, Any] = {
        "cluster_size": cluster_size,
        "cluster_mode": _value(cluster_mode),
        "resources": resources,
        "mounts": mounts,
        "environ": environ,
        "type": _value(type_),
        "startup_command": startup_command,
        "dist_env": _value(dist_env),
        "group": group,
        "priority": priority,
        "uid": uid,
        "gid": gid,
        "isolated_network": isolated_network or None,
        "max_pending_seconds": max_pending_seconds,
        "roles": roles,
    }
    data = {k: v for k, v in {**data, **optional}.items() if v not in (None, {}, [])}
    data.update(limit_options.given(time_limit, stop_grace, idle_timeout))
    data.update(policy.policy_fields(max_restarts, no_restart_exit_codes, success))
    req, key_file = session_file.request(file, data, ssh_key)

    with client() as c:
        info = c.create_session(req)
    if key_file is not None:
        reach.remember_identity(key_file)
    if not wait:
        if json_:
            print_json(info)
        else:
            console.print(Text(f"session {info.name} ({info.id}): {info.status.value}"))
        return

    info = wait_started(info, timeout)
    if json_:
        print_json(info)
    if info.type == Type.BATCH:
        if info.status == SessionStatus.TERMINATED and info.exit_code is not None:
            if not json_:
                console.print(Text(f"session {info.name}: finished, exit code {info.exit_code}"))
        else:
            report_failure(info)
        raise typer.Exit(info.exit_code if info.exit_code is not None else 1)
    if info.status == SessionStatus.RUNNING:
        if not json_:
            console.print(Text(f"session {info.name} ({info.id}): RUNNING"))
        return
    report_failure(info)
    raise typer.Exit(1)


@app.command("list")
def list_(
    all_: Annotated[bool, typer.Option("--all", "-a", help="include finished sessions")] = False,
    json_: JsonOpt = False,
) -> None:
    """List your sessions (active ones; --all for finished too)."""
    with client() as c:
        sessions = c.list_sessions_data(all=all_)  # the table needs no models
    if json_:
        from troupe.api.models import SessionInfo

        print_json([SessionInfo.model_validate(s) for s in sessions])
        return
    print_table(SESSION_COLUMNS, [session_row(s) for s in sessions])


@app.command()
def info(name: NameArg, json_: JsonOpt = False) -> None:
    """Show a session, its kernels and why it waits or failed."""
    from rich.text import Text

    with client() as c:
        s = c.get_session(name)
    if json_:
        print_json(s)
        return
    r = s.resources
    roles_differ = (
        "; each kernel's below"
        if any((k.image or s.image, k.resources or r) != (s.image, r) for k in s.kernels)
        else ""
    )
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
            ("type", s.type.value),
            ("image", s.image),
            ("cluster", f"{s.cluster_size} kernel(s), {s.cluster_mode.value}"),
            ("resources", f"{_kernel_resources(r)} (per kernel{roles_differ})"),
            (
                "mounts",
                ", ".join(m.folder + (" (ro)" if m.readonly else "") for m in s.mounts) or "-",
            ),
            ("dist env", s.dist_env.value),
            ("group", s.group),
            ("priority", s.priority),
            ("uid/gid", f"{s.uid}/{s.gid}"),
            ("network", network),
            ("exit code", s.exit_code),
            ("success", s.success_policy.value if s.type == "batch" else None),
            ("created", fmt_time(s.created_at)),
            ("started", fmt_time(s.started_at)),
            ("terminated", fmt_time(s.terminated_at)),
            *limit_options.info_fields(s),
        ]
    )
    if s.kernels:
        gpus = any(k.gpus for k in s.kernels)  # the GPUs' UUIDs, shortened as nvidia-smi -L
        console.print()
        print_table(
            ["HOSTNAME", "ROLE", "IMAGE", "RESOURCES", "AGENT", "CONTAINER", "IP", "STATUS"]
            + ["EXIT"]
            + (["GPUS"] if gpus else []),
            [
                [
                    k.hostname,
                    k.role,
                    k.image or s.image,
                    _kernel_resources(k.resources or r),
                    k.agent,
                    short_id(k.container_id),
                    k.ip,
                    k.status.value,
                    (f"{k.exit_code} (oom)" if k.oom_killed else k.exit_code),
                ]
                + ([", ".join(g[:12] for g in k.gpus) or "-"] if gpus else [])
                for k in s.kernels
            ],
        )
    lines = status_info_lines(s.status_info) + top.usage_lines(s.usage) + policy.restart_lines(s)
    if lines:
        console.print()
        for line in lines:
            console.print(Text(line))


def _kernel_resources(r: Resources) -> str:
    return f"cpu {r.cpu:g}, mem {format_size(r.mem)}, gpu {r.gpu}"


@app.command()
def spec(name: NameArg) -> None:
    """Print the session file (YAML) that recreates a session: create -f FILE."""
    session_file.spec(name)


@app.command()
def destroy(name: NameArg, json_: JsonOpt = False) -> None:
    """Destroy a session: stop its kernels (logs are kept) and remove its network."""
    from rich.text import Text

    with client() as c:
        s = c.destroy_session(name)
    if json_:
        print_json(s)
    else:
        console.print(Text(f"session {s.name} ({s.id}): {s.status.value}"))


# logs, exec, run, shell, then tunnel, ssh, ssh-config, forward, cp, then apps, open: after the
# commands above
app.add_typer(session_exec.app)
app.add_typer(reach.app)
app.add_typer(apps.app)
app.add_typer(top.session_app)
app.add_typer(limit_options.app)
app.add_typer(events.session_app)
