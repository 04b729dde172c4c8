"""``troupe image ...``: kernel images present on the agents."""

from __future__ import annotations

from typing import Annotated

import typer

from troupe.client.cli.output import App, client, print_json
from troupe.client.cli.table import fmt_timestamp, human_size, print_table, short_id

app = App(no_args_is_help=True, help="Kernel images.")


@app.command("list")
def list_(
    json_: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """List the images the agents have."""
    with client() as c:
        images = c.list_images()
    if json_:
        print_json(images)
        return
    print_table(
        ["NAME", "ID", "SIZE", "CREATED"],
        [
            [i.name, short_id(i.id), human_size(i.size), fmt_timestamp(i.created)]
            for i in sorted(images, key=lambda i: i.name)
        ],
    )
