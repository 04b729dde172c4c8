"""Migration 0011: kernels stored before roles get their session's image, resources and
(main1) startup command, so every reader can take a kernel's own values."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import create_engine, text

from troupe.manager.store.db import alembic_config


def test_kernels_stored_before_roles_get_their_sessions_values(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0009")
        conn.execute(
            text(
                "INSERT INTO users (id, name, admin, key_hash, created_at, limits)"
                " VALUES ('u', 'u', 0, 'h', '2026-01-01', '{}')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO sessions (id, name, owner_id, status, status_info, timeline, type,"
                " image, cluster_size, cluster_mode, cpu, mem, gpu, mounts, environ,"
                ' startup_command, dist_env, "group", priority, uid, gid, isolated_network,'
                " ssh_private_key, ssh_public_key, created_at)"
                " VALUES ('s', 'n', 'u', 'RUNNING', '{}', '{}', 'batch', 'img:1', 2,"
                " 'single-node', 0.5, 1024, 1, '[]', '{}', 'echo hi', 'default', 'default', 0,"
                " 1000, 1000, 0, '', 'k', '2026-01-01')"
            )
        )
        for kid, host, role, rank in (("s", "main1", "main", 0), ("k", "sub1", "sub", 1)):
            conn.execute(
                text(
                    "INSERT INTO kernels (id, session_id, hostname, role, idx, rank, status,"
                    " timeline, gpus, oom_killed, host_public_key, host_private_key)"
                    f" VALUES ('{kid}', 's', '{host}', '{role}', 1, {rank}, 'RUNNING', '{{}}',"
                    " '[]', 0, 'k', 'p')"
                )
            )
        command.upgrade(alembic_config(conn), "head")
        rows = conn.execute(
            text(
                "SELECT hostname, image, cpu, mem, gpu, environ, startup_command FROM kernels"
                " ORDER BY rank"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("main1", "img:1", 0.5, 1024, 1, "{}", "echo hi"),
        ("sub1", "img:1", 0.5, 1024, 1, "{}", None),
    ]
