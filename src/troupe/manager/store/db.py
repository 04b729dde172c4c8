"""Engine and schema migrations (SQLite by default, PostgreSQL by URL)."""

from __future__ import annotations

from pathlib import Path

import orjson
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).with_name("migrations")


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def make_engine(url: str) -> AsyncEngine:
    # orjson reads the JSON columns (timelines, mounts, status_info, ...): with the stdlib's
    # json, decoding them was a third of the CPU of a page of the session list
    engine = create_async_engine(
        url, pool_pre_ping=not url.startswith("sqlite"), json_deserializer=orjson.loads
    )
    if url.startswith("sqlite"):

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a crash of troupe loses nothing; only a power cut may lose the last
            # commits (never corrupts). FULL would fsync every status change.
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

    return engine


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


async def migrate(engine: AsyncEngine) -> None:
    """Brings the schema to the newest revision (idempotent)."""

    def upgrade(conn: Connection) -> None:
        command.upgrade(alembic_config(conn), "head")

    async with engine.begin() as conn:
        await conn.run_sync(upgrade)
