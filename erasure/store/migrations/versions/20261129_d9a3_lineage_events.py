"""lineage events: raw OpenLineage run events, immutable, once per content hash

Observed lineage arrives on the plugin's Marquez-compatible endpoint and from files; the raw
event is the evidence the planner reads edges from. The database refuses UPDATE on it
(a trigger on each dialect); a retention purge may still DELETE old events.

Revision ID: d9a3_lineage_events
Revises: c8f2_records
Create Date: 2026-11-29 18:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d9a3_lineage_events"
down_revision: str | Sequence[str] | None = "c8f2_records"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TRIGGER = """CREATE TRIGGER lineage_events_no_update BEFORE UPDATE ON lineage_events
    BEGIN SELECT RAISE(ABORT, 'lineage_events is immutable: UPDATE refused'); END"""

# restrict_violation (23001): drivers raise an IntegrityError, as SQLite's RAISE(ABORT) does.
_PG_FUNCTION = """CREATE FUNCTION lineage_events_refuse_update() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
      RAISE EXCEPTION USING
        MESSAGE = 'lineage_events is immutable: UPDATE refused',
        ERRCODE = 'restrict_violation';
    END $$"""
_PG_TRIGGER = """CREATE TRIGGER lineage_events_no_update BEFORE UPDATE ON lineage_events
    FOR EACH ROW EXECUTE FUNCTION lineage_events_refuse_update()"""


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    op.create_table(
        "lineage_events",
        sa.Column("event_id", sa.String(length=80), nullable=False),
        sa.Column("job", sa.String(length=1024), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("event_type", sa.String(length=16), nullable=True),
        sa.Column("event_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_lineage_events")),
        sa.CheckConstraint(
            "substr(event_id, 1, 7) = 'sha256:'", name=op.f("ck_lineage_events_event_id")
        ),
        comment="Raw OpenLineage run events: immutable, stored once per content hash.",
    )
    op.create_index(op.f("ix_lineage_events_run_id"), "lineage_events", ["run_id"], unique=False)
    op.create_index(
        op.f("ix_lineage_events_received_at"), "lineage_events", ["received_at"], unique=False
    )
    if dialect == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    elif dialect == "sqlite":
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS lineage_events_no_update")
    op.drop_index(op.f("ix_lineage_events_received_at"), table_name="lineage_events")
    op.drop_index(op.f("ix_lineage_events_run_id"), table_name="lineage_events")
    op.drop_table("lineage_events")
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS lineage_events_refuse_update()")
