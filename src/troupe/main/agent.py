"""``troupe agent --manager URL --token T ...``: an agent serving this host's Docker engine to a
manager on another host (``troupe agent list`` is the client's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from troupe.api import defaults


def run(
    ctx: typer.Context,
    manager: Annotated[
        str | None, typer.Option(help="manager URL, e.g. http://10.0.0.1:8090")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="agent token (the manager's --agent-token or its config dir's agent-token file)"
        ),
    ] = None,
    listen: Annotated[
        str,
        typer.Option(
            help="ADDR:PORT this agent serves the manager on; loopback only by default: give "
            "e.g. 0.0.0.0:6011 for a manager on another host (with --tls-cert/--tls-key)"
        ),
    ] = defaults.AGENT_LISTEN,
    advertise: Annotated[
        str | None,
        typer.Option(
            help="URL the manager uses to reach this agent (default: http://LISTEN, or "
            "https://LISTEN with --tls-cert)"
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            help="serve HTTPS with this certificate (PEM; the manager verifies it with --agent-ca)"
        ),
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="private key of --tls-cert (PEM)")] = None,
    docker_host: Annotated[
        str | None, typer.Option(help="engine, e.g. unix:///run/docker.sock")
    ] = None,
    name: Annotated[str | None, typer.Option(help="agent name (default: host name)")] = None,
    cpu: Annotated[float | None, typer.Option(help="cores to offer (default: all)")] = None,
    mem: Annotated[str | None, typer.Option(help="memory to offer, e.g. 8g (default: all)")] = None,
    group: Annotated[str, typer.Option(help="resource group")] = defaults.GROUP,
    data_root: Annotated[
        Path, typer.Option(help="data root; must be the same shared storage on every agent")
    ] = defaults.AGENT_DATA_ROOT,
    heartbeat: Annotated[
        float, typer.Option(help="seconds between heartbeats")
    ] = defaults.HEARTBEAT_SECONDS,
    pids_limit: Annotated[
        int, typer.Option(min=16, help="processes per kernel container")
    ] = defaults.PIDS_LIMIT,
    saved_log: Annotated[
        str, typer.Option(help="bytes of each kernel's log handed over when it is removed")
    ] = "8m",
    gpus: Annotated[
        str, typer.Option(help="GPUs to offer: auto (all that nvidia-smi reports), none, or 0,2")
    ] = "auto",
    nvidia_smi: Annotated[
        str | None, typer.Option(help="nvidia-smi to ask (default: the first on PATH)")
    ] = None,
    metrics_interval: Annotated[
        float, typer.Option(min=0, help="seconds between two samples of the kernels (0: none)")
    ] = 5.0,
) -> None:
    """Run an agent for a manager on another host (when --manager is given)."""
    if ctx.invoked_subcommand is not None:
        return
    if manager is None:
        raise typer.BadParameter("--manager is required to run an agent", param_hint="--manager")
    if not token:
        raise typer.BadParameter("--token is required", param_hint="--token")
    import asyncio
    import logging
    import socket

    from troupe.agent.daemon import AgentConfig, AgentDaemon
    from troupe.agent.gpus import Choice
    from troupe.api.models import parse_size

    try:
        Choice.parse(gpus)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--gpus") from e

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter("must be ADDR:PORT", param_hint="--listen")
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("give both --tls-cert and --tls-key", param_hint="--tls-key")
    for hint, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not path.is_file():
            raise typer.BadParameter(f"no such file: {path}", param_hint=hint)
    sizes: dict[str, int | None] = {}
    for hint, value in (("--mem", mem), ("--saved-log", saved_log)):
        try:
            sizes[hint] = parse_size(value) if value else None
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint=hint) from e
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if tls_cert is None and not _loopback(host):
        logging.getLogger("troupe.agent").warning(
            "serving %s without TLS: the agent token travels in the clear "
            "(give --tls-cert and --tls-key)",
            listen,
        )
    config = AgentConfig(
        manager=manager,
        token=token,
        listen_host=host,
        listen_port=int(port),
        name=name or socket.gethostname(),
        docker_url=docker_host,
        cpu=cpu,
        mem=sizes["--mem"],
        group=group,
        data_root=data_root,
        heartbeat=heartbeat,
        advertise=advertise,
        tls_cert=tls_cert,
        tls_key=tls_key,
        pids_limit=pids_limit,
        saved_log_bytes=sizes["--saved-log"] or defaults.SAVED_LOG_BYTES,
        gpus=gpus,
        nvidia_smi=nvidia_smi,
        metrics_interval=metrics_interval,
    )
    asyncio.run(AgentDaemon(config).run())


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
