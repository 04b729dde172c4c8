"""``troupe server``: the manager, by default with an agent on the local Docker engine (the
embedded set-up: one host, SQLite, no agent token to hand around)."""

from __future__ import annotations

import gc
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
    gpus: Annotated[
        str,
        typer.Option(help="GPUs the local agent offers: auto (all nvidia-smi reports), none, 0,2"),
    ] = "auto",
    nvidia_smi: Annotated[
        str | None, typer.Option(help="nvidia-smi the local agent asks (default: first on PATH)")
    ] = None,
    metrics_interval: Annotated[
        float,
        typer.Option(
            min=0, help="seconds between two samples of the local agent's kernels (0: none)"
        ),
    ] = 5.0,
    metrics_token_file: Annotated[
        Path | None,
        typer.Option(help="file with the token Prometheus scrapes /metrics with (or an admin key)"),
    ] = None,
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
    max_body: Annotated[
        str, typer.Option(help="largest request body, e.g. 1m (larger: 413)")
    ] = "1m",
    saved_log: Annotated[
        str, typer.Option(help="bytes of each kernel's log kept after it is removed, e.g. 8m")
    ] = "8m",
    saved_logs_total: Annotated[
        str,
        typer.Option(
            help="bytes of all saved logs together, e.g. 4g; past it the oldest sessions'"
            " saved logs are deleted (0: no cap)"
        ),
    ] = "4g",
    min_free_disk: Annotated[
        str,
        typer.Option(
            help="new sessions are refused (507) while the data dir's disk has less free,"
            " e.g. 1g (0: no check)"
        ),
    ] = "1g",
    retention_days: Annotated[
        float, typer.Option(help="days finished sessions and their logs are kept (0: forever)")
    ] = defaults.RETENTION_DAYS,
    pids_limit: Annotated[
        int, typer.Option(min=16, help="processes per kernel container (local agent)")
    ] = defaults.PIDS_LIMIT,
    quota_sessions: Annotated[
        int, typer.Option(min=0, help="default per-user limit: active sessions")
    ] = defaults.QUOTA_SESSIONS,
    quota_kernels: Annotated[
        int, typer.Option(min=0, help="default per-user limit: kernels of active sessions")
    ] = defaults.QUOTA_KERNELS,
    quota_cpu: Annotated[
        float | None, typer.Option(help="default per-user limit: cores (default: none)")
    ] = None,
    quota_mem: Annotated[
        str | None, typer.Option(help="default per-user limit: memory, e.g. 64g (default: none)")
    ] = None,
    quota_gpu: Annotated[
        int | None, typer.Option(help="default per-user limit: GPUs (default: none)")
    ] = None,
    quota_streams: Annotated[
        int,
        typer.Option(
            min=1, help="per-user limit: concurrent waits, follows, execs, shells, app requests"
        ),
    ] = defaults.QUOTA_STREAMS,
    default_time_limit: Annotated[
        str | None, typer.Option(help="time limit of sessions that give none, e.g. 1d")
    ] = None,
    default_idle_timeout: Annotated[
        str | None,
        typer.Option(help="idle timeout of interactive sessions that give none, e.g. 2h"),
    ] = None,
    max_time_limit: Annotated[
        str | None, typer.Option(help="default per-user limit: longest time limit, e.g. 7d")
    ] = None,
    max_idle_timeout: Annotated[
        str | None, typer.Option(help="default per-user limit: longest idle timeout, e.g. 1d")
    ] = None,
    idle_cpu: Annotated[
        float, typer.Option(min=0, help="a kernel below this many cores is quiet (idle reclaim)")
    ] = 0.05,
    idle_gpu: Annotated[
        float, typer.Option(min=0, max=100, help="a kernel's GPUs below this % are quiet")
    ] = 5.0,
    reap_interval: Annotated[
        float, typer.Option(min=0.1, help="seconds between checks of time limits and idleness")
    ] = 5.0,
    sweep_interval: Annotated[
        float,
        typer.Option(
            min=1.0, help="seconds between sweeps for containers and networks of ended sessions"
        ),
    ] = 60.0,
    agent_ca: Annotated[
        Path | None, typer.Option(help="CA file to verify agents that serve HTTPS")
    ] = None,
    app_domain: Annotated[
        str | None,
        typer.Option(
            help="apps are served from <port>-<session id>.DOMAIN[:PORT] (DNS: a wildcard"
            " record; default: apps.localhost on --port; '': no apps)"
        ),
    ] = None,
    app_https: Annotated[
        bool, typer.Option("--app-https", help="app links use https (a TLS proxy is in front)")
    ] = False,
    pull_timeout: Annotated[
        float,
        typer.Option(
            min=1, help="seconds one image pull on one agent may take (apart from creation's)"
        ),
    ] = 1800.0,
    allowed_registries: Annotated[
        str,
        typer.Option(
            help="registries images may come from, comma-separated HOST[:PORT] (docker.io for"
            " Docker Hub); others are refused at create time (default: any)"
        ),
    ] = "",
    log_level: Annotated[str, typer.Option()] = "info",
) -> None:
    """Run the manager and a local agent (the embedded default)."""
    from troupe.api.models import parse_size

    sizes: dict[str, int | None] = {}
    for hint, value in (
        ("--mem", mem),
        ("--max-body", max_body),
        ("--saved-log", saved_log),
        ("--saved-logs-total", saved_logs_total),
        ("--min-free-disk", min_free_disk),
        ("--quota-mem", quota_mem),
    ):
        try:
            sizes[hint] = parse_size(value) if value else None
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint=hint) from e

    clocks = _durations(
        {
            "--default-time-limit": default_time_limit,
            "--default-idle-timeout": default_idle_timeout,
            "--max-time-limit": max_time_limit,
            "--max-idle-timeout": max_idle_timeout,
        }
    )
    import uvicorn

    from troupe.agent.docker_backend import DockerAgent
    from troupe.agent.gpus import Choice

    try:
        Choice.parse(gpus)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--gpus") from e
    from troupe.api.errors import Invalid
    from troupe.api.registries import parse_host
    from troupe.manager.app import create_app
    from troupe.manager.config import ServerConfig

    try:
        allowed = [parse_host(h) for h in allowed_registries.split(",") if h.strip()]
    except Invalid as e:
        raise typer.BadParameter(e.message, param_hint="--allowed-registries") from e

    try:
        config = ServerConfig(
            host=host,
            port=port,
            db_url=db_url,
            local_agent=not no_local_agent,
            agent_cpu=cpu,
            agent_mem=sizes["--mem"],
            agent_gpus=gpus,
            nvidia_smi=nvidia_smi,
            subnet_pool=subnet_pool,
            agent_token=agent_token,
            agent_timeout=agent_timeout,
            data_dir=data_dir or defaults.data_dir(),
            max_body_bytes=sizes["--max-body"] or defaults.MAX_BODY_BYTES,
            saved_log_bytes=sizes["--saved-log"] or defaults.SAVED_LOG_BYTES,
            saved_logs_total=sizes["--saved-logs-total"] or 0,
            min_free_disk=sizes["--min-free-disk"] or 0,
            retention_days=retention_days,
            pids_limit=pids_limit,
            quota_sessions=quota_sessions,
            quota_kernels=quota_kernels,
            quota_cpu=quota_cpu,
            quota_mem=sizes["--quota-mem"],
            quota_gpu=quota_gpu,
            quota_streams=quota_streams,
            default_time_limit=clocks["--default-time-limit"],
            default_idle_timeout=clocks["--default-idle-timeout"],
            quota_time_limit=clocks["--max-time-limit"],
            quota_idle_timeout=clocks["--max-idle-timeout"],
            idle_cpu=idle_cpu,
            idle_gpu=idle_gpu,
            reap_interval=reap_interval,
            sweep_interval=sweep_interval,
            agent_ca_file=agent_ca,
            metrics_token_file=metrics_token_file,
            app_domain=app_domain,
            app_https=app_https,
            pull_timeout=pull_timeout,
            allowed_registries=allowed,
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
                pids_limit=config.pids_limit,
                saved_log_bytes=config.saved_log_bytes,
                gpus=config.agent_gpus,
                nvidia_smi=config.nvidia_smi,
                metrics_interval=metrics_interval,
            )
        }
        if config.local_agent
        else {}
    )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(config, local_agents)
    # What is loaded by now (modules, the models' schemas, the app) lives as long as the
    # process: frozen out of the collector's sight, a full collection no longer walks it
    # (those took 100+ ms on a busy server: the API's p99)
    gc.collect()
    gc.freeze()
    from troupe.main.access_log import uvicorn_log_config  # (request lines without secrets)

    uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=uvicorn_log_config())


def _durations(given: dict[str, str | None]) -> dict[str, int | None]:
    """Each option's seconds (None: not given); BadParameter naming a bad one."""
    from troupe.api.durations import MAX_SECONDS, RULE, parse_duration

    out: dict[str, int | None] = {}
    for hint, value in given.items():
        try:
            out[hint] = None if value is None else parse_duration(value)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint=hint) from e
        seconds = out[hint]
        if seconds is not None and not 1 <= seconds <= MAX_SECONDS:
            raise typer.BadParameter(f"{RULE}, from 1 s to 366 days", param_hint=hint)
    return out
