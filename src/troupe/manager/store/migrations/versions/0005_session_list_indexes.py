"""session list indexes: pages of GET /v1/sessions, newest first

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: models.ACTIVE_SQL as it was when this revision was written
ACTIVE = "status IN ('PENDING', 'PREPARING', 'RUNNING', 'SCHEDULED', 'TERMINATING')"


def upgrade() -> None:
    op.create_index("ix_sessions_created", "sessions", ["created_at", "id"])
    op.create_index("ix_sessions_owner_created", "sessions", ["owner_id", "created_at", "id"])
    op.create_index(
        "ix_sessions_active_owner_created",
        "sessions",
        ["owner_id", "created_at", "id"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_active_owner_created", table_name="sessions")
    op.drop_index("ix_sessions_owner_created", table_name="sessions")
    op.drop_index("ix_sessions_created", table_name="sessions")
