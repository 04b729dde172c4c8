"""agents: data root marker and underlay MTU (multi-host sessions)

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("data_marker", sa.String(64), nullable=False, server_default=""))
        batch.add_column(
            sa.Column("underlay_mtu", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("underlay_mtu")
        batch.drop_column("data_marker")
