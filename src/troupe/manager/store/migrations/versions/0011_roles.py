"""roles: each kernel's own image, resources, environment and startup command (its role's)

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: Kernels stored before roles get their session's values.
_FROM_SESSION = ("image", "cpu", "mem", "gpu")


def upgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.alter_column("role", type_=sa.String(length=16), existing_nullable=False)
        batch.add_column(sa.Column("image", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("cpu", sa.Float(), nullable=True))
        batch.add_column(sa.Column("mem", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("gpu", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("environ", sa.JSON(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("startup_command", sa.Text(), nullable=True))
    for column in _FROM_SESSION:
        op.execute(
            f"UPDATE kernels SET {column} = "
            f"(SELECT sessions.{column} FROM sessions WHERE sessions.id = kernels.session_id)"
        )
    op.execute(
        "UPDATE kernels SET startup_command = (SELECT sessions.startup_command FROM sessions"
        " WHERE sessions.id = kernels.session_id) WHERE kernels.role = 'main'"
    )
    with op.batch_alter_table("kernels") as batch:
        batch.alter_column("image", existing_type=sa.String(length=255), nullable=False)
        batch.alter_column("cpu", existing_type=sa.Float(), nullable=False)
        batch.alter_column("mem", existing_type=sa.BigInteger(), nullable=False)
        batch.alter_column("gpu", existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        for column in ("startup_command", "environ", *reversed(_FROM_SESSION)):
            batch.drop_column(column)
        batch.alter_column("role", type_=sa.String(length=8), existing_nullable=False)
