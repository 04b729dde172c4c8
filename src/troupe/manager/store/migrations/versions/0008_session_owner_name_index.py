"""session owner+name index: a user's look-up by name is one index search

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sessions_owner_name", "sessions", ["owner_id", "name"])


def downgrade() -> None:
    op.drop_index("ix_sessions_owner_name", table_name="sessions")
