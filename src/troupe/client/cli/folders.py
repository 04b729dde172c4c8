"""``troupe folder ...``: persistent data folders that sessions mount."""

from __future__ import annotations

from typing import Annotated

import typer

from troupe.client.cli.output import App, JsonOpt, client, console, print_json
from troupe.client.cli.table import fmt_time, print_table

app = App(no_args_is_help=True, help="Persistent data folders.")

FolderArg = Annotated[str, typer.Argument(help="folder name", show_default=False)]


@app.command()
def create(name: FolderArg, json_: JsonOpt = False) -> None:
    """Create a data folder (mount it with `session create --mount NAME[:ro]`)."""
    from rich.text import Text

    with client() as c:
        f = c.create_folder(name)
    if json_:
        print_json(f)
    else:
        console.print(Text(f"folder {f.name} created ({f.id})"))


@app.command("list")
def list_(json_: JsonOpt = False) -> None:
    """List your data folders."""
    with client() as c:
        folders = c.list_folders()
    if json_:
        print_json(folders)
        return
    print_table(
        ["NAME", "ID", "OWNER", "CREATED"],
        [[f.name, f.id, f.owner, fmt_time(f.created_at)] for f in folders],
    )


@app.command()
def delete(name: FolderArg) -> None:
    """Delete a data folder and its files (not while a session mounts it)."""
    from rich.text import Text

    with client() as c:
        c.delete_folder(name)
    console.print(Text(f"folder {name} deleted"))
