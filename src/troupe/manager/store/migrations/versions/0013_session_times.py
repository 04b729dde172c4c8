"""session times: a time limit, its stop grace, an idle timeout and since when it is idle

Revision ID: 0013
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("time_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("stop_grace", sa.Integer(), nullable=False, server_default="10"))
        batch.add_column(sa.Column("idle_timeout", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        for column in ("idle_since", "idle_timeout", "stop_grace", "time_limit"):
            batch.drop_column(column)
