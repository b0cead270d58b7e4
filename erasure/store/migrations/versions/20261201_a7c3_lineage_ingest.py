"""lineage events at peak ingest: raw text compressed with lz4, event_time indexed

Every raw event is a few KB of JSON, compressed on insert: pglz (Postgres' default) made a
bulk COPY of events half as fast as with lz4, for the same size on disk. Only values
written from now on use it (no table rewrite); servers built without lz4, and SQLite, keep
what they have.

`erasure lineage purge` deletes raw events by `event_time`: without an index that is a scan
of the whole table (a year of history is ~73 million rows). On a store that already holds a
large history, create the index by hand first, without blocking ingest:
`CREATE INDEX CONCURRENTLY ix_lineage_events_event_time ON lineage_events (event_time)`;
this revision then finds it and skips it.

Revision ID: a7c3_lineage_ingest
Revises: e4b2_lineage_store
Create Date: 2026-12-01 15:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "a7c3_lineage_ingest"
down_revision: str | Sequence[str] | None = "e4b2_lineage_store"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HAS_LZ4 = (
    "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
    "AND 'lz4' = ANY(enumvals)"
)  # Postgres 14+ built with lz4


def upgrade() -> None:
    op.create_index(
        "ix_lineage_events_event_time", "lineage_events", ["event_time"], if_not_exists=True
    )
    _compress_with("lz4")


def downgrade() -> None:
    _compress_with("pglz")
    op.drop_index("ix_lineage_events_event_time", "lineage_events")


def _compress_with(method: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or bind.exec_driver_sql(_HAS_LZ4).first() is None:
        return
    op.execute(f"ALTER TABLE lineage_events ALTER COLUMN raw SET COMPRESSION {method}")
