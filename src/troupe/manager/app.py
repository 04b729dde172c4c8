"""The manager's FastAPI application: wiring of store, registry, agents and routes.

The agents are handed in (the composition root ``troupe.main`` makes the in-process Docker
agent; tests hand in fakes), so the manager imports nothing of ``troupe.agent``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI

from troupe import __version__
from troupe.api import edge
from troupe.api.agent import AgentBackend
from troupe.manager import openapi, prometheus
from troupe.manager.apps.proxy import AppOrigins, close_apps
from troupe.manager.auth import KeyCache, ensure_admin
from troupe.manager.changes import ChangeBus
from troupe.manager.config import ServerConfig
from troupe.manager.fleet import RemoteFactory
from troupe.manager.limits import BodyLimit
from troupe.manager.metrics_feed import Feed
from troupe.manager.presence import presence_of
from troupe.manager.private_file import private_dir, touch_private
from troupe.manager.reaper import Reaper
from troupe.manager.registry import Registry
from troupe.manager.remote_agent import verifying_with
from troupe.manager.routes import agents as agent_routes
from troupe.manager.routes import (
    apps,
    events,
    folders,
    metrics,
    misc,
    reach,
    registries,
    session_times,
    sessions,
    specs,
    users,
)
from troupe.manager.store.db import make_engine, migrate
from troupe.manager.store.unit import Store
from troupe.manager.web import pages as web_pages

log = logging.getLogger(__name__)


def create_app(
    config: ServerConfig,
    local_agents: Mapping[str, AgentBackend] | None = None,
    remote: RemoteFactory | None = None,
) -> FastAPI:
    """``local_agents``: in-process agents by id; ``remote`` makes the handle on an agent of
    another host when it registers (default: :class:`RemoteAgent`, verifying agents that serve
    HTTPS with ``config.agent_ca_file``)."""
    remote = remote or verifying_with(config.agent_ca_file)
    # the scrape token, read now: a missing file fails here, not at the first scrape
    token = prometheus.scrape_token(config.metrics_token_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        private_dir(config.data_dir)
        if config.db_url is None:  # SQLite: the file (and its -wal, -shm) readable by us only
            touch_private(config.data_dir / "troupe.db")
        engine = make_engine(config.database_url)
        await migrate(engine)
        keys = KeyCache()
        store = Store(engine, ChangeBus(), keys.session_info())
        config.resolve_agent_token()
        async with store() as s:
            if await ensure_admin(
                s, config.credentials_file, f"http://{config.host}:{config.port}"
            ):
                log.warning("created user admin; API key written to %s", config.credentials_file)
        registry = Registry(config, store, dict(local_agents or {}), remote)
        try:
            await registry.start()
        except BaseException:
            await registry.stop()
            await engine.dispose()
            raise
        app.state.config, app.state.db, app.state.registry = config, store, registry
        app.state.keys, app.state.scrape_token = keys, token
        app.state.metrics = feed = Feed(registry.fleet, store)
        feed.start()
        app.state.reaper = reaper = Reaper(registry, feed, presence_of(app.state))
        reaper.start()
        try:
            yield
        finally:
            await reaper.stop()
            await feed.stop()
            await close_apps(app.state)
            await registry.stop()
            await engine.dispose()

    app = FastAPI(
        title="troupe",
        version=__version__,
        summary="Cluster compute sessions on Docker",
        lifespan=lifespan,
        docs_url=None,  # served by the web UI from local files (no CDN)
        redoc_url=None,
    )
    edge.install(app)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    app.add_middleware(prometheus.Latency)
    routers = (
        sessions,
        specs,
        session_times,
        reach,
        apps,
        folders,
        users,
        misc,
        agent_routes,
        metrics,
        events,
        registries,
    )
    for module in routers:
        app.include_router(module.router, prefix="/v1")
    app.include_router(prometheus.router)
    openapi.install(app)
    web_pages.install(app)
    app.add_middleware(AppOrigins)  # (outermost: app origins never reach the UI or the API)
    return app
