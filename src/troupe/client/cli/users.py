"""``troupe user ...``: users, their API keys and their limits (admins; ``rotate`` without a
name and ``limits`` without a name are for everyone)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from troupe.client.cli import events
from troupe.client.cli.output import (
    App,
    JsonOpt,
    client,
    console,
    err_console,
    fail,
    print_fields,
    print_json,
)
from troupe.client.cli.table import fmt_time, human_size, print_table

if TYPE_CHECKING:
    from troupe.api.models import UserInfo
    from troupe.api.users import UserDetail

app = App(no_args_is_help=True, help="Users, API keys and limits.")

NameArg = Annotated[str, typer.Argument(help="user name", show_default=False)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="print only the API key")]

#: The limits, in the order shown; ``troupe user limits --reset`` takes these names.
LIMIT_KEYS = (
    "sessions",
    "kernels",
    "cpu",
    "mem",
    "gpu",
    "streams",
    "max_priority",
    "groups",
    "max_time_limit",
    "max_idle_timeout",
)


def _print_key(user: UserInfo, quiet: bool, json_: bool, done: str) -> None:
    from rich.text import Text

    key = user.api_key or ""
    if json_:
        print_json(user)
    elif quiet:
        sys.stdout.write(key + "\n")
        sys.stdout.flush()
    else:
        console.print(Text(done))
        console.print(Text("API key: ") + Text(key, style="bold"))
        err_console.print(
            Text("this key is shown only now; keep it (TROUPE_API_KEY)", style="yellow")
        )


@app.command()
def create(
    name: NameArg,
    admin: Annotated[
        bool, typer.Option("--admin", help="may manage users and see all sessions")
    ] = False,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Create a user and print its API key (shown this once only)."""
    with client() as c:
        user = c.create_user(name, admin=admin)
    role = "admin" if user.admin else "user"
    _print_key(user, quiet, json_, f"{role} {user.name} created ({user.id})")


@app.command("list")
def list_(json_: JsonOpt = False) -> None:
    """List the users (deleted ones are not shown)."""
    with client() as c:
        users = c.list_users()
    if json_:
        print_json(users)
        return
    print_table(
        ["NAME", "ROLE", "KEY", "CREATED", "ID"],
        [
            [
                u.name,
                "admin" if u.admin else "user",
                "revoked" if u.revoked else "valid",
                fmt_time(u.created_at),
                u.id,
            ]
            for u in users
        ],
    )


def _limit_text(key: str, value: Any) -> str:
    if value is None:
        return "unlimited" if key != "groups" else "any"
    if key == "mem":
        return human_size(int(value))
    if key == "groups":
        return ", ".join(value) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    if key.startswith("max_") and key.endswith(("_limit", "_timeout")):
        from troupe.api.durations import format_duration

        return format_duration(value)
    return str(value)


def _source(key: str, overrides: dict[str, Any], admin: bool) -> str:
    """Who set a limit: an admin for this user, the server's default, or none (admins)."""
    if key in overrides:
        return "user"
    return "admin" if admin and key != "streams" else "default"


def _show(d: UserDetail) -> None:
    role = "admin" if d.admin else "user"
    print_fields(
        [
            ("user", d.name),
            ("role", role + (" (no limits but streams)" if d.admin else "")),
            ("key", "revoked" if d.revoked else "valid"),
        ]
    )
    console.print()
    limits, usage = d.limits.model_dump(), d.usage.model_dump()
    rows = []
    for key in LIMIT_KEYS:
        used = usage.get(key)
        rows.append(
            [
                key,
                _limit_text(key, limits[key]),
                "-" if used is None else _limit_text(key, used),
                _source(key, d.overrides, d.admin),
            ]
        )
    print_table(["LIMIT", "VALUE", "IN USE", "SET"], rows)


@app.command()
def limits(
    name: Annotated[
        str | None, typer.Argument(help="user name (none: yourself)", show_default=False)
    ] = None,
    sessions: Annotated[int | None, typer.Option(min=0, help="active sessions")] = None,
    kernels: Annotated[int | None, typer.Option(min=0, help="kernels of active sessions")] = None,
    cpu: Annotated[float | None, typer.Option(min=0, help="cores in use")] = None,
    mem: Annotated[str | None, typer.Option(help="memory in use, e.g. 64g")] = None,
    gpu: Annotated[int | None, typer.Option(min=0, help="GPUs in use")] = None,
    streams: Annotated[
        int | None, typer.Option(min=1, help="concurrent waits, log follows, execs, shells")
    ] = None,
    max_priority: Annotated[
        int | None, typer.Option(min=-100, max=100, help="highest session priority")
    ] = None,
    groups: Annotated[
        str | None, typer.Option(help="resource groups the user may use: a,b ('' for none)")
    ] = None,
    max_time_limit: Annotated[
        str | None, typer.Option(help="longest session time limit, e.g. 1d (90s, 2h)")
    ] = None,
    max_idle_timeout: Annotated[
        str | None, typer.Option(help="longest idle timeout of a session, e.g. 4h")
    ] = None,
    reset: Annotated[
        str | None,
        typer.Option(help="limits back to the server's default: names (a,b) or 'all'"),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Show a user's limits and what their active sessions hold; with options, set them
    (admin). Limits left out keep their value."""
    given: dict[str, Any] = {
        "sessions": sessions,
        "kernels": kernels,
        "cpu": cpu,
        "mem": mem,
        "gpu": gpu,
        "streams": streams,
        "max_priority": max_priority,
        "groups": None if groups is None else [g.strip() for g in groups.split(",") if g.strip()],
        "max_time_limit": max_time_limit,
        "max_idle_timeout": max_idle_timeout,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    if reset is not None:
        names = LIMIT_KEYS if reset.strip() == "all" else reset.split(",")
        for key in (k.strip().replace("-", "_") for k in names):
            if key not in LIMIT_KEYS:
                fail(f"--reset: unknown limit {key!r} (one of {', '.join(LIMIT_KEYS)}, all)")
            if key in changes:
                fail(f"--reset {key} contradicts --{key.replace('_', '-')}")
            changes[key] = None
    if changes and name is None:
        fail("name the user whose limits to set")
    with client() as c:
        d = c.set_user_limits(name, changes) if name and changes else c.get_user(name)
    if json_:
        print_json(d)
    else:
        _show(d)


@app.command()
def revoke(name: NameArg, json_: JsonOpt = False) -> None:
    """Revoke a user's API key: it stops working at once (`troupe user rotate` gives a new one)."""
    from rich.text import Text

    with client() as c:
        u = c.revoke_user(name)
    if json_:
        print_json(u)
    else:
        console.print(Text(f"user {u.name}: API key revoked"))


@app.command()
def rotate(
    name: Annotated[
        str | None, typer.Argument(help="user name (admin; none: yourself)", show_default=False)
    ] = None,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Give a user (or yourself) a new API key, shown once; the old one stops working."""
    from rich.text import Text

    with client() as c:
        user = c.rotate_key(name)
    _print_key(user, quiet, json_, f"user {user.name}: new API key (the old one no longer works)")
    if name is None and not (quiet or json_):
        err_console.print(
            Text(
                "your old key is no longer valid: put this one in TROUPE_API_KEY or the"
                " credentials file",
                style="yellow",
            )
        )


@app.command()
def delete(name: NameArg) -> None:
    """Delete a user without active sessions: their key stops working, their folders are
    deleted with their files, and their name may be given to a new user."""
    from rich.text import Text

    with client() as c:
        c.delete_user(name)
    console.print(Text(f"user {name} deleted"))


app.add_typer(events.user_app)  # audit
