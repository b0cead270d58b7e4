"""lineage events: raw text compressed with lz4 on Postgres

Every raw event is a few KB of JSON, compressed on insert: pglz (Postgres' default) made a
bulk COPY of events half as fast as with lz4, for the same size on disk. Only values
written from now on use it (no table rewrite); servers built without lz4, and SQLite, keep
what they have.

Revision ID: a7c3_lineage_lz4
Revises: e4b2_lineage_store
Create Date: 2026-12-01 15:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "a7c3_lineage_lz4"
down_revision: str | Sequence[str] | None = "e4b2_lineage_store"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HAS_LZ4 = (
    "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
    "AND 'lz4' = ANY(enumvals)"
)  # Postgres 14+ built with lz4


def upgrade() -> None:
    _compress_with("lz4")


def downgrade() -> None:
    _compress_with("pglz")


def _compress_with(method: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or bind.exec_driver_sql(_HAS_LZ4).first() is None:
        return
    op.execute(f"ALTER TABLE lineage_events ALTER COLUMN raw SET COMPRESSION {method}")
