"""``troupe session apps | open``: the web apps of a session's main1 (docs/apps.md). The commands
join the ``session`` group (see :mod:`troupe.client.cli.sessions`)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from troupe.client.cli.output import JsonOpt, client, err_console, print_json
from troupe.client.cli.session_exec import NameArg
from troupe.client.cli.table import print_table

if TYPE_CHECKING:
    from troupe.api.models import AppInfo

app = typer.Typer()

#: Where an app's log is in main1 (the manager's troupe.manager.apps.state.APPS_DIR).
LOG_DIR = "/home/work/.troupe/apps"


def _log_text(a: AppInfo) -> str:
    lines = "\n".join(f"  {line}" for line in a.log_tail)
    return f"{a.name} is {a.state}; last lines of {LOG_DIR}/{a.name}.log:\n{lines}"


@app.command("apps")
def apps(name: NameArg, json_: JsonOpt = False) -> None:
    """List the apps of a session's main1: name, port, state and URL."""
    with client() as c:
        found = c.list_apps(name)
    if json_:
        print_json(found)
        return
    if not found:
        err_console.print(
            f"session {name}'s image declares no apps; open any port of main1 with:"
            f" troupe session open {name} PORT",
            markup=False,
        )
        return
    print_table(["NAME", "PORT", "STATE", "URL"], [(a.name, a.port, a.state, a.url) for a in found])
    for a in found:
        if a.state != "running" and a.log_tail:
            err_console.print("\n" + _log_text(a), markup=False)


def browser_available() -> bool:
    """Whether opening a web browser makes sense here: a terminal on this machine's screen
    (never a text browser taking over the terminal, nor a browser opened by a script)."""
    if not sys.stdout.isatty() or os.environ.get("SSH_CONNECTION"):
        return False
    if os.environ.get("BROWSER"):
        return True
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@app.command("open")
def open_(
    name: NameArg,
    target: Annotated[
        str, typer.Argument(metavar="APP|PORT", help="an app's name or a port number in main1")
    ],
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="print the link only, open no browser")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Start an app in main1 if needed and print a one-time link into it (it works once,
    within a minute); opens it in your browser when one is available."""
    with client() as c:
        a = c.open_app(name, target)
    if json_:
        print_json(a)
        return
    sys.stdout.write(f"{a.url}\n")
    sys.stdout.flush()
    if not no_browser and a.url and browser_available():
        import webbrowser

        if webbrowser.open(a.url):
            err_console.print(f"{a.name} (port {a.port}) opened in your browser", markup=False)
