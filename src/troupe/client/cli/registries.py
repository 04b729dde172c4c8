"""``troupe registry add/list/remove``: the image registries agents pull from (admins).

The password is read from a file that only its owner may read (mode 0600 or stricter), never
from the command line (where ``ps`` and shell history would show it).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Annotated

import typer

from troupe.client.cli.output import App, JsonOpt, client, console, fail, print_json
from troupe.client.cli.table import print_table

app = App(no_args_is_help=True, help="Image registries the agents pull from (admins).")


def read_password(path: Path) -> str:
    """The password in ``path`` (first line); refused unless only its owner can read it."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as e:
        fail(f"--password-file: cannot read {path}: {e.strerror or e}")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        fail(
            f"--password-file: {path} has mode {stat.S_IMODE(mode):04o}; it must be readable by"
            f" its owner only (chmod 600 {path})"
        )
    password = text.splitlines()[0] if text else ""
    if not password:
        fail(f"--password-file: {path} is empty")
    return password


@app.command("add")
def add(
    host: Annotated[str, typer.Argument(help="HOST[:PORT] of the registry", show_default=False)],
    username: Annotated[str | None, typer.Option(help="user name to log in with")] = None,
    password_file: Annotated[
        Path | None, typer.Option(help="file holding the password (mode 0600)")
    ] = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(help="PEM of the CA that signed the registry's certificate"),
    ] = None,
) -> None:
    """Add a registry: agents pull missing images from it (with its credentials and CA)."""
    if (username is None) != (password_file is None):
        fail("give --username and --password-file together (or neither)")
    password = read_password(password_file) if password_file else None
    ca_pem = None
    if ca_file:
        try:
            ca_pem = ca_file.read_text()
        except OSError as e:
            fail(f"--ca-file: cannot read {ca_file}: {e.strerror or e}")
    with client() as c:
        info = c.add_registry(host, username=username, password=password, ca_pem=ca_pem)
    console.print(f"registry {info.host} added")


@app.command("list")
def list_(
    json_: JsonOpt = False,
) -> None:
    """List the registries (never their passwords)."""
    with client() as c:
        registries = c.list_registries()
    if json_:
        print_json(registries)
        return
    print_table(
        ["HOST", "USERNAME", "PASSWORD", "CA"],
        [
            [
                r.host,
                r.username or "-",
                "set" if r.has_password else "-",
                "yes" if r.has_ca else "-",
            ]
            for r in registries
        ],
    )


@app.command("remove")
def remove(
    host: Annotated[str, typer.Argument(help="HOST[:PORT] of the registry", show_default=False)],
) -> None:
    """Remove a registry and its secrets."""
    with client() as c:
        c.remove_registry(host)
    console.print(f"registry {host} removed")
