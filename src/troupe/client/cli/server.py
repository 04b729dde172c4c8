"""``troupe server``: the manager with a local agent, SQLite and the local Docker engine."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from troupe.api.models import parse_size


def server(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8090,
    data_dir: Annotated[Path | None, typer.Option(help="database, folders, saved logs")] = None,
    db_url: Annotated[
        str | None,
        typer.Option(
            help="SQLAlchemy URL, e.g. postgresql+asyncpg://... (default: SQLite in data dir)"
        ),
    ] = None,
    no_local_agent: Annotated[bool, typer.Option("--no-local-agent")] = False,
    cpu: Annotated[float | None, typer.Option(help="cores the local agent offers")] = None,
    mem: Annotated[str | None, typer.Option(help="memory the local agent offers, e.g. 8g")] = None,
    subnet_pool: Annotated[str, typer.Option(help="pool of session subnets")] = "10.88.0.0/16",
    agent_token: Annotated[
        str | None,
        typer.Option(help="secret shared with agents (default: generated into the config dir)"),
    ] = None,
    agent_timeout: Annotated[
        float, typer.Option(help="seconds without heartbeat before an agent is LOST")
    ] = 15.0,
    log_level: Annotated[str, typer.Option()] = "info",
) -> None:
    """Run the manager and a local agent (the embedded default)."""
    import uvicorn

    from troupe.manager.app import create_app
    from troupe.manager.config import ServerConfig

    try:
        mem_bytes = parse_size(mem) if mem else None
        config = ServerConfig(
            host=host,
            port=port,
            db_url=db_url,
            local_agent=not no_local_agent,
            agent_cpu=cpu,
            agent_mem=mem_bytes,
            subnet_pool=subnet_pool,
            agent_token=agent_token,
            agent_timeout=agent_timeout,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    if data_dir:
        config.data_dir = data_dir
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(create_app(config), host=host, port=port, log_level=log_level)
