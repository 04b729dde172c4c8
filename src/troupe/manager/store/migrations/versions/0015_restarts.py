"""restarts: restart rules, the restart count and history of sessions; RESTARTING sessions
are active and allocated (the partial indexes' predicates name it)

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: models.ACTIVE_SQL / ALLOCATED_SQL before and after this revision
_ACTIVE = "status IN ('PENDING', 'PREPARING', {}'RUNNING', 'SCHEDULED', 'TERMINATING')"
_ALLOCATED = (
    "subnet IS NOT NULL AND status IN ('PREPARING', {}'RUNNING', 'SCHEDULED', 'TERMINATING')"
)


def _indexes(extra: str) -> None:
    """The three partial indexes again, with ``extra`` statuses in their predicates."""
    active, allocated = _ACTIVE.format(extra), _ALLOCATED.format(extra)
    for name in ("uq_sessions_active_name", "uq_sessions_allocated_subnet"):
        op.drop_index(name, table_name="sessions")
    op.drop_index("ix_sessions_active_owner_created", table_name="sessions")
    op.create_index(
        "uq_sessions_active_name",
        "sessions",
        ["owner_id", "name"],
        unique=True,
        sqlite_where=sa.text(active),
        postgresql_where=sa.text(active),
    )
    op.create_index(
        "uq_sessions_allocated_subnet",
        "sessions",
        ["subnet"],
        unique=True,
        sqlite_where=sa.text(allocated),
        postgresql_where=sa.text(allocated),
    )
    op.create_index(
        "ix_sessions_active_owner_created",
        "sessions",
        ["owner_id", "created_at", "id"],
        sqlite_where=sa.text(active),
        postgresql_where=sa.text(active),
    )


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column("max_restarts", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("no_restart_exit_codes", sa.JSON(), nullable=False, server_default="[]")
        )
        batch.add_column(
            sa.Column("success_policy", sa.String(length=8), nullable=False, server_default="main")
        )
        batch.add_column(sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("restart_history", sa.JSON(), nullable=False, server_default="[]")
        )
    _indexes("'RESTARTING', ")


def downgrade() -> None:
    _indexes("")
    with op.batch_alter_table("sessions") as batch:
        for column in (
            "restart_history",
            "restarts",
            "success_policy",
            "no_restart_exit_codes",
            "max_restarts",
        ):
            batch.drop_column(column)
