"""``troupe agent list`` / ``remove``: the hosts that run kernels. (Running an agent,
``troupe agent --manager URL ...``, belongs to the composition root, :mod:`troupe.main.agent`.)"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from troupe.client.cli.output import client, console, human_size, print_json, print_table

app = typer.Typer(no_args_is_help=True, help="Agents (hosts that run kernels).")


@app.command("list")
def list_(
    json_: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """List agents with their free and total resources."""
    with client() as c:
        agents = c.list_agents()
    if json_:
        print_json(agents)
        return
    print_table(
        ["NAME", "GROUP", "STATUS", "CPU", "MEM", "GPU", "KERNELS", "SWARM", "HEARTBEAT"],
        [
            [
                a.name,
                a.group,
                a.status,
                f"{a.cpu_free:g}/{a.cpu:g}",
                f"{human_size(a.mem_free)}/{human_size(a.mem)}",
                f"{a.gpu_free}/{a.gpu}",
                a.kernels,
                "manager" if a.swarm_manager else "-",
                f"{a.heartbeat_age:.0f}s ago" if a.heartbeat_age is not None else "-",
            ]
            for a in agents
        ],
    )


@app.command()
def remove(name: Annotated[str, typer.Argument(help="the agent's name")]) -> None:
    """Forget a LOST agent of another host (admins). An ALIVE one must be stopped first."""
    with client() as c:
        c.remove_agent(name)
    console.print(Text(f"agent {name} removed"))
