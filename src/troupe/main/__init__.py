"""The composition root: the ``troupe`` command, and the one place that sees every side.

The command line is the client's (:mod:`troupe.client.cli`: session, folder, agent list, image,
user) plus the two commands that start servers: ``troupe server`` (:mod:`troupe.main.server`,
the manager with an agent on the local Docker engine) and ``troupe agent --manager URL ...``
(:mod:`troupe.main.agent`, an agent for a manager on another host). Those two import the
manager, the agent and uvicorn only when they run, so the client commands start fast.
"""

from __future__ import annotations

import typer

from troupe.client.cli import agents, folders, images, params, sessions, users
from troupe.main import agent, server

params.install()  # plain option values (str, choices) without pydantic: see its docstring
app = typer.Typer(no_args_is_help=True, add_completion=False)
app.command("server")(server.run)


@app.callback()
def main() -> None:
    """troupe: cluster compute sessions on Docker."""


#: ``troupe agent``: with --manager it runs an agent here; its subcommands are the client's.
agent_app = typer.Typer(
    no_args_is_help=True, invoke_without_command=True, help=agents.app.info.help
)
agent_app.callback()(agent.run)
agent_app.add_typer(agents.app)  # no name: its commands (list) join this group

app.add_typer(sessions.app, name="session")
app.add_typer(folders.app, name="folder")
app.add_typer(agent_app, name="agent")
app.add_typer(images.app, name="image")
app.add_typer(users.app, name="user")
