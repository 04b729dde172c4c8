"""``troupe user ...``: users and their API keys (admins only)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.text import Text

from troupe.client.cli.output import client, console, err_console, print_json

app = typer.Typer(no_args_is_help=True, help="Users and API keys (admin).")


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="user name", show_default=False)],
    admin: Annotated[
        bool, typer.Option("--admin", help="may manage users and see all sessions")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the API key")] = False,
    json_: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """Create a user and print its API key (shown this once only)."""
    with client() as c:
        user = c.create_user(name, admin=admin)
    key = user.api_key or ""
    if json_:
        print_json(user)
    elif quiet:
        sys.stdout.write(key + "\n")
        sys.stdout.flush()
    else:
        role = "admin" if user.admin else "user"
        console.print(Text(f"{role} {user.name} created ({user.id})"))
        console.print(Text("API key: ") + Text(key, style="bold"))
        err_console.print(
            Text("this key is shown only now; keep it (TROUPE_API_KEY)", style="yellow")
        )
