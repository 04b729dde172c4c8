"""``troupe image ...``: kernel images present on the agents, and pre-pulls."""

from __future__ import annotations

from typing import Annotated

import typer

from troupe.client.cli.output import App, JsonOpt, client, console, print_json
from troupe.client.cli.table import fmt_timestamp, human_size, print_table, short_id

app = App(no_args_is_help=True, help="Kernel images.")


@app.command("list")
def list_(
    json_: JsonOpt = False,
) -> None:
    """List the images the agents have, and which agents have each."""
    with client() as c:
        images = c.list_images()
    if json_:
        print_json(images)
        return
    print_table(
        ["NAME", "ID", "SIZE", "CREATED", "AGENTS"],
        [
            [
                i.name,
                short_id(i.id),
                human_size(i.size),
                fmt_timestamp(i.created),
                ",".join(sorted(i.agents)) or "-",
            ]
            for i in sorted(images, key=lambda i: i.name)
        ],
    )


@app.command("pull")
def pull(
    image: Annotated[str, typer.Argument(help="image reference", show_default=False)],
    agent: Annotated[
        str | None, typer.Option(help="pull on this agent only (default: every agent)")
    ] = None,
) -> None:
    """Pull an image on the agents that lack it (admins), from a configured registry."""
    with client() as c:
        results = c.pull_image(image, agent=agent, timeout=None)
    for r in results:
        console.print(f"{r.agent}: {r.image} {'pulled' if r.pulled else 'already present'}")
