"""GPUs: the devices each agent offers (and why none), the devices each kernel holds

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("gpus", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("gpu_reason", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("kernels") as batch:
        batch.add_column(sa.Column("gpus", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.drop_column("gpus")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("gpu_reason")
        batch.drop_column("gpus")
