"""``troupe agent list`` / ``remove``: the hosts that run kernels. (Running an agent,
``troupe agent --manager URL ...``, belongs to the composition root, :mod:`troupe.main.agent`.)"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer

from troupe.api.lifecycle import AgentStatus
from troupe.client.cli import top
from troupe.client.cli.output import App, JsonOpt, client, console, print_json
from troupe.client.cli.table import human_size, print_table

if TYPE_CHECKING:
    from troupe.api.models import AgentInfo

app = App(no_args_is_help=True, help="Agents (hosts that run kernels).")


@app.command("list")
def list_(
    json_: JsonOpt = False,
) -> None:
    """List agents with their free and total resources (and why an agent offers no GPUs)."""
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
                free_of(a, f"{a.cpu_free:g}", f"{a.cpu:g}"),
                free_of(a, human_size(a.mem_free), human_size(a.mem)),
                gpu_cell(a),
                a.kernels,
                "manager" if a.swarm_manager else "-",
                f"{a.heartbeat_age:.0f}s ago" if a.heartbeat_age is not None else "-",
            ]
            for a in agents
        ],
    )
    from rich.text import Text

    for a in agents:
        if not a.gpu and a.gpu_reason:
            console.print(Text(f"{a.name}: no GPUs: {a.gpu_reason}", style="dim"))


def free_of(a: AgentInfo, free: str, total: str) -> str:
    """``free/total``; ``?/total`` for a LOST agent, whose use is unknown (the API's free
    is 0 for it, as nothing can be placed there, which would read as full)."""
    return f"{'?' if a.status == AgentStatus.LOST else free}/{total}"


def gpu_cell(a: AgentInfo) -> str:
    """``free/total`` and the models, e.g. ``1/2 2x NVIDIA H100 80GB HBM3``."""
    if not a.gpu:
        return "0"
    models = Counter(g.model or "GPU" for g in a.gpus)
    kinds = ", ".join(f"{n}x {m}" if n > 1 else m for m, n in models.items())
    return f"{free_of(a, str(a.gpu_free), str(a.gpu))} {kinds}"


@app.command()
def remove(name: Annotated[str, typer.Argument(help="the agent's name")]) -> None:
    """Forget a LOST agent of another host (admins). An ALIVE one must be stopped first."""
    from rich.text import Text

    with client() as c:
        c.remove_agent(name)
    console.print(Text(f"agent {name} removed"))


app.add_typer(top.agent_app)
