"""The manager's FastAPI application: wiring of store, registry, agents and routes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from troupe import __version__
from troupe.agent.base import AgentBackend
from troupe.agent.docker_backend import DockerAgent
from troupe.manager import errors
from troupe.manager.auth import ensure_admin
from troupe.manager.config import ServerConfig
from troupe.manager.registry import Registry
from troupe.manager.routes import agents as agent_routes
from troupe.manager.routes import folders, misc, sessions, users
from troupe.manager.store.db import make_engine, migrate, sessionmaker

log = logging.getLogger(__name__)


def create_app(config: ServerConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        engine = make_engine(config.database_url)
        await migrate(engine)
        db = sessionmaker(engine)
        config.resolve_agent_token()
        async with db() as s:
            if await ensure_admin(
                s, config.credentials_file, f"http://{config.host}:{config.port}"
            ):
                log.warning("created user admin; API key written to %s", config.credentials_file)
        agents: dict[str, AgentBackend] = {}
        if config.local_agent:
            agents["local"] = DockerAgent(
                "local",
                docker_url=config.docker_url,
                cpu=config.agent_cpu,
                mem=config.agent_mem,
                data_root=config.data_dir,
            )
        registry = Registry(config, db, agents)
        try:
            await registry.start()
        except BaseException:
            await registry.stop()
            await engine.dispose()
            raise
        app.state.config, app.state.db, app.state.registry = config, db, registry
        try:
            yield
        finally:
            await registry.stop()
            await engine.dispose()

    app = FastAPI(
        title="troupe",
        version=__version__,
        summary="Cluster compute sessions on Docker",
        lifespan=lifespan,
    )
    errors.install(app)
    for module in (sessions, folders, users, misc, agent_routes):
        app.include_router(module.router, prefix="/v1")
    return app
