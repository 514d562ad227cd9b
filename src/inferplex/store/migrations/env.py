"""Alembic environment: always handed a live connection by `store.backend.upgrade`, never reads a .ini."""

from __future__ import annotations

from alembic import context

from inferplex.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
