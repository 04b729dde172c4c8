"""Alembic environment: runs on the connection troupe hands over (see troupe.manager.store.db)."""

from alembic import context

from troupe.manager.store.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
