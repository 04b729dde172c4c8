"""lifecycle: timelines, the ending of a TERMINATING session, row versions, uniqueness

Statuses keep their stored strings (the columns are now typed with the lifecycle enums, same
VARCHAR). Active session names, folder names per owner are unique in the database: duplicate
rows an older version let in are renamed first (``name~2``...) so nothing is lost.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ACTIVE_SQL = "status IN ('PENDING', 'PREPARING', 'RUNNING', 'SCHEDULED', 'TERMINATING')"
ALLOCATED_SQL = (
    "subnet IS NOT NULL AND status IN ('PREPARING', 'RUNNING', 'SCHEDULED', 'TERMINATING')"
)


def _rename_duplicates(table: str, where: str) -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(f"SELECT id, owner_id, name FROM {table} WHERE {where} ORDER BY id")
    ).fetchall()
    seen: dict[tuple[str, str], int] = {}
    for row_id, owner, name in rows:
        n = seen.get((owner, name), 0) + 1
        seen[(owner, name)] = n
        if n > 1:
            conn.execute(
                sa.text(f"UPDATE {table} SET name = :name WHERE id = :id"),
                {"name": f"{name}~{n}"[:64], "id": row_id},
            )


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("timeline", sa.JSON(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("ending", sa.String(16), nullable=True))
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("kernels") as batch:
        batch.add_column(sa.Column("timeline", sa.JSON(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="0"))
    _rename_duplicates("sessions", ACTIVE_SQL)
    _rename_duplicates("folders", "1 = 1")
    op.create_index(
        "uq_sessions_active_name",
        "sessions",
        ["owner_id", "name"],
        unique=True,
        sqlite_where=sa.text(ACTIVE_SQL),
        postgresql_where=sa.text(ACTIVE_SQL),
    )
    op.create_index(
        "uq_sessions_allocated_subnet",
        "sessions",
        ["subnet"],
        unique=True,
        sqlite_where=sa.text(ALLOCATED_SQL),
        postgresql_where=sa.text(ALLOCATED_SQL),
    )
    with op.batch_alter_table("folders") as batch:
        batch.create_unique_constraint("uq_folders_owner_name", ["owner_id", "name"])


def downgrade() -> None:
    with op.batch_alter_table("folders") as batch:
        batch.drop_constraint("uq_folders_owner_name", type_="unique")
    op.drop_index("uq_sessions_allocated_subnet", table_name="sessions")
    op.drop_index("uq_sessions_active_name", table_name="sessions")
    for table in ("agents", "kernels", "sessions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("version")
    with op.batch_alter_table("kernels") as batch:
        batch.drop_column("timeline")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("ending")
        batch.drop_column("timeline")
