"""The composition root: the ``troupe`` command, and the one place that sees every side.

The command line is the client's (:mod:`troupe.client.cli`: session, folder, agent list, image,
registry, user) plus the two commands that start servers: ``troupe server``
(:mod:`troupe.main.server`, the manager with an agent on the local Docker engine) and
``troupe agent --manager URL ...`` (:mod:`troupe.main.agent`, an agent for a manager on
another host). Those two import the manager, the agent and uvicorn only when they run, so
the client commands start fast.

:func:`run` (the ``troupe`` script) builds only the group the command line names: Typer makes
a Click command of every registered function before it parses anything, and importing and
building all groups costs a short command such as ``troupe session list`` a fifth of its time.
``app`` is the whole command (help, tests, docs).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

#: Top-level words of the command line; each builds its own part in :func:`_add`.
GROUPS = ("session", "folder", "agent", "image", "registry", "user", "server")


def main() -> None:
    """troupe: cluster compute sessions on Docker."""


def _add(app: typer.Typer, group: str) -> None:
    import typer

    if group == "server":
        from troupe.main import server

        app.command("server")(server.run)
    elif group == "agent":
        from troupe.client.cli import agents
        from troupe.main import agent

        # with --manager it runs an agent here; its subcommands are the client's
        agent_app = typer.Typer(
            no_args_is_help=True, invoke_without_command=True, help=agents.app.info.help
        )
        agent_app.callback()(agent.run)
        agent_app.add_typer(agents.app)  # no name: its commands (list) join this group
        app.add_typer(agent_app, name="agent")
    else:
        from importlib import import_module

        plural = "registries" if group == "registry" else f"{group}s"
        module = import_module(f"troupe.client.cli.{plural}")
        app.add_typer(module.app, name=group)


def build(groups: tuple[str, ...] = GROUPS) -> typer.Typer:
    """The ``troupe`` command with the given top-level groups, in :data:`GROUPS` order."""
    import typer

    from troupe.client.cli import params

    params.install()  # plain option values (str, choices) without pydantic: see its docstring
    app = typer.Typer(no_args_is_help=True, add_completion=False)
    app.callback()(main)
    for group in GROUPS:
        if group in groups:
            _add(app, group)
    return app


def run() -> None:
    """The ``troupe`` script: the fast path's answer where it has one (``session list`` and
    ``session exec``, :mod:`troupe.client.cli.fastpath`), else the group ``argv[1]`` names, or
    all (help, typos)."""
    if sys.argv[1:2] == ["session"]:
        from troupe.client.cli import fastpath

        code = fastpath.run(sys.argv[1:])
        if code is not None:
            sys.exit(code)
    word = sys.argv[1] if len(sys.argv) > 1 else ""
    build((word,) if word in GROUPS else GROUPS)()


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        app = build()
        globals()["app"] = app
        return app
    raise AttributeError(name)
