"""tombstones append-only: the database refuses UPDATE and DELETE on suppression_list

A deleted tombstone brings its subject back at the next CRM sync, and nothing would notice:
like completion_records, suppression_list now only grows. UPDATE, DELETE (and TRUNCATE on
Postgres) are refused by triggers. Nothing in the code changes a tombstone: a retried insert
is ON CONFLICT DO NOTHING, and a pepper rotation adds tombstones under the new version,
keeping the old ones (ingest hashes under every version).

Revision ID: e5a8_tombstones_append_only
Revises: d4f6_interventions
Create Date: 2026-12-03 08:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "e5a8_tombstones_append_only"
down_revision: str | Sequence[str] | None = "d4f6_interventions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER suppression_list_no_update BEFORE UPDATE ON suppression_list
    BEGIN SELECT RAISE(ABORT, 'suppression_list is append-only: UPDATE refused'); END""",
    """CREATE TRIGGER suppression_list_no_delete BEFORE DELETE ON suppression_list
    BEGIN SELECT RAISE(ABORT, 'suppression_list is append-only: DELETE refused'); END""",
)

# restrict_violation (23001), as completion_records: drivers raise an IntegrityError.
# No '%' anywhere: `alembic upgrade --sql` would print it doubled.
_PG_FUNCTION = """CREATE FUNCTION suppression_list_refuse_change() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
      RAISE EXCEPTION USING
        MESSAGE = 'suppression_list is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'restrict_violation';
    END $$"""
_PG_TRIGGERS = (
    """CREATE TRIGGER suppression_list_append_only BEFORE UPDATE OR DELETE
    ON suppression_list FOR EACH ROW EXECUTE FUNCTION suppression_list_refuse_change()""",
    # Row triggers do not fire on TRUNCATE.
    """CREATE TRIGGER suppression_list_no_truncate BEFORE TRUNCATE
    ON suppression_list FOR EACH STATEMENT EXECUTE FUNCTION suppression_list_refuse_change()""",
)


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        for statement in (_PG_FUNCTION, *_PG_TRIGGERS):
            op.execute(statement)
    elif dialect == "sqlite":
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS suppression_list_no_truncate ON suppression_list")
        op.execute("DROP TRIGGER IF EXISTS suppression_list_append_only ON suppression_list")
        op.execute("DROP FUNCTION IF EXISTS suppression_list_refuse_change()")
    elif dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS suppression_list_no_delete")
        op.execute("DROP TRIGGER IF EXISTS suppression_list_no_update")
