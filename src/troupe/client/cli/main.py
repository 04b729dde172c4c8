"""The ``troupe`` command line (Typer + Rich), built on :mod:`troupe.client.sdk`."""

from __future__ import annotations

import typer

from troupe.client.cli.server import server

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="troupe: cluster compute sessions on Docker."
)
app.command()(server)


@app.callback()
def main() -> None:
    """troupe: cluster compute sessions on Docker."""


from troupe.client.cli import agents, folders, images, sessions, users  # noqa: E402

app.add_typer(sessions.app, name="session", help="Create and use cluster sessions.")
app.add_typer(folders.app, name="folder", help="Persistent data folders.")
app.add_typer(agents.app, name="agent", help="Agents (hosts that run kernels).")
app.add_typer(images.app, name="image", help="Kernel images.")
app.add_typer(users.app, name="user", help="Users and API keys (admin).")
