"""``troupe server``: the manager, by default with an agent on the local Docker engine (the
embedded set-up: one host, SQLite, no agent token to hand around)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from troupe.api import defaults


def run(
    host: Annotated[str, typer.Option(help="address to listen on")] = defaults.HOST,
    port: Annotated[int, typer.Option(min=1, max=65535)] = defaults.PORT,
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
    subnet_pool: Annotated[
        str, typer.Option(help="pool of session subnets")
    ] = defaults.SUBNET_POOL,
    agent_token: Annotated[
        str | None,
        typer.Option(help="secret shared with agents (default: generated into the config dir)"),
    ] = None,
    agent_timeout: Annotated[
        float, typer.Option(help="seconds without heartbeat before an agent is LOST")
    ] = defaults.AGENT_TIMEOUT_SECONDS,
    log_level: Annotated[str, typer.Option()] = "info",
) -> None:
    """Run the manager and a local agent (the embedded default)."""
    from troupe.api.models import parse_size

    try:
        mem_bytes = parse_size(mem) if mem else None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--mem") from e

    import uvicorn

    from troupe.agent.docker_backend import DockerAgent
    from troupe.manager.app import create_app
    from troupe.manager.config import ServerConfig

    try:
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
            data_dir=data_dir or defaults.data_dir(),
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    local_agents = (
        {
            "local": DockerAgent(
                "local",
                docker_url=config.docker_url,
                cpu=config.agent_cpu,
                mem=config.agent_mem,
                data_root=config.data_dir,
            )
        }
        if config.local_agent
        else {}
    )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(create_app(config, local_agents), host=host, port=port, log_level=log_level)
