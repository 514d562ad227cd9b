"""Usage rows say what the response cache did for the request (issue 26): `cache` is `hit`, `semantic-hit`,
`miss` or `bypass`, and NULL where caching did not apply (the cache off, a model or endpoint it does not
cache, a row logged before this migration). `/admin/cache` reads its hit rate from these rows, so the rate is
the fleet's, whichever replica answered.

A nullable column without a default: on PostgreSQL (11 and later) and SQLite adding it rewrites nothing, so
the migration takes no time on a large usage table, and the rows already there read NULL (unknown).

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"


def upgrade() -> None:
    op.add_column("usage", sa.Column("cache", sa.String(16)))


def downgrade() -> None:
    op.drop_column("usage", "cache")
