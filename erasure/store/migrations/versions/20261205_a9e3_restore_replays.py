"""restore replays: a restored table's erased subjects deleted again, on record

A backup restored over a table brings back every subject erased since it was taken.
`erasure restore replay` finds them through the suppression list and deletes them again;
what it erased is logged in `restore_replays` before its delete commits, and a signed
record of a new kind, `replayed`, goes on the chain citing the original completions. This
revision creates the log and lets the records' kind check accept `replayed`.

SQLite cannot alter a CHECK constraint: batch mode copies `completion_records`. Its append-
only triggers go with the old table (and the chain head's trigger names it), so they are
dropped first and created again afterwards, unchanged; the copy keeps every record as it was.
All of it runs in one real transaction (pysqlite would commit each DROP on its own): a failure
part way leaves the ledger as it was, triggers included. A run that died part way under an
earlier version of this revision (a leftover batch table, the log table created, triggers
gone) is finished by running it again. The downgrade is refused, before anything is dropped,
while a `replayed` record or an open replay exists: records are never dropped.

Revision ID: a9e3_restore_replays
Revises: f6b9_sealed_notes
Create Date: 2026-12-05 09:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import context, op
from alembic.util import CommandError

revision: str = "a9e3_restore_replays"
down_revision: str | Sequence[str] | None = "f6b9_sealed_notes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (see c8f2_records): the record kinds before and after this revision.
_KINDS = ("received", "extended", "escalated", "decided", "completed", "failed")
_NEW_KINDS = (*_KINDS, "replayed")
_STATUSES = ("erasing", "erased", "recorded")
_OPEN = ("erasing", "erased")
_BATCH_TABLE = "_alembic_tmp_completion_records"  # what batch mode copies the records into

# c8f2_records' SQLite triggers, as it created them (text and all): dropped around the copy.
_SQLITE_TRIGGERS = {
    "completion_records_no_update": (
        "completion_records",
        """CREATE TRIGGER completion_records_no_update BEFORE UPDATE ON completion_records
    BEGIN SELECT RAISE(ABORT, 'completion_records is append-only: UPDATE refused'); END""",
    ),
    "completion_records_no_delete": (
        "completion_records",
        """CREATE TRIGGER completion_records_no_delete BEFORE DELETE ON completion_records
    BEGIN SELECT RAISE(ABORT, 'completion_records is append-only: DELETE refused'); END""",
    ),
    "completion_records_extend_head": (
        "completion_records",
        """CREATE TRIGGER completion_records_extend_head BEFORE INSERT ON completion_records
    WHEN NEW.seq IS NOT (SELECT seq + 1 FROM completion_chain_head WHERE id = 1)
      OR NEW.prev_hash IS NOT (SELECT record_hash FROM completion_chain_head WHERE id = 1)
    BEGIN SELECT RAISE(ABORT, 'completion_records: a new record must extend the chain head');
    END""",
    ),
    "completion_chain_head_forward_only": (
        "completion_chain_head",
        """CREATE TRIGGER completion_chain_head_forward_only BEFORE UPDATE ON completion_chain_head
    WHEN NEW.id IS NOT OLD.id OR NEW.seq IS NOT OLD.seq + 1
      OR NEW.record_hash IS NOT (SELECT record_hash FROM completion_records WHERE seq = NEW.seq)
    BEGIN SELECT RAISE(ABORT, 'completion_chain_head only moves forward with the chain'); END""",
    ),
}


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


def _online() -> bool:
    return not context.is_offline_mode()  # `alembic upgrade --sql` has no database to ask


def _in_one_transaction() -> None:
    """On SQLite, open a real transaction if none is open: pysqlite begins one only before
    DML, so each DROP and CREATE would otherwise commit on its own (and survive a failure)."""
    if not (_sqlite() and _online()):
        return
    bind = op.get_bind()
    raw = bind.connection.dbapi_connection
    if raw is not None and not getattr(raw, "in_transaction", False):
        bind.exec_driver_sql("BEGIN")


def _sqlite_objects(kind: str) -> set[str]:
    rows = op.get_bind().execute(
        sa.text("SELECT name FROM sqlite_master WHERE type = :kind"), {"kind": kind}
    )
    return {str(name) for name in rows.scalars()}


def _restore_triggers() -> None:
    """Create each append-only trigger that is missing, on its table if that exists."""
    if not (_sqlite() and _online()):
        return
    triggers, tables = _sqlite_objects("trigger"), _sqlite_objects("table")
    for name, (table, statement) in _SQLITE_TRIGGERS.items():
        if name not in triggers and table in tables:
            op.execute(statement)


@contextmanager
def _triggers_lifted() -> Iterator[None]:
    """The records' SQLite triggers dropped for the block, and there again after it, whether
    it succeeded or not (the transaction's rollback restores them too; this does not rely
    on it)."""
    if not _sqlite():
        yield
        return
    for name in _SQLITE_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    try:
        yield
    finally:
        _restore_triggers()


def _replace_kind_check(kinds: Sequence[str]) -> None:
    if _sqlite() and _online() and _BATCH_TABLE in _sqlite_objects("table"):
        # Left by a copy that died part way (its records are all still in the old table).
        op.execute(f"DROP TABLE {_BATCH_TABLE}")
    with _triggers_lifted(), op.batch_alter_table("completion_records") as batch:
        batch.drop_constraint(op.f("ck_completion_records_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_completion_records_kind"), _one_of("kind", kinds))


def upgrade() -> None:
    _in_one_transaction()
    op.create_table(
        "restore_replays",
        sa.Column("replay_ref", sa.String(length=64), nullable=False),
        sa.Column("dataset_namespace", sa.String(length=255), nullable=False),
        sa.Column("dataset_name", sa.String(length=512), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("evidence_json", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("record_seq", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("replay_ref", name=op.f("pk_restore_replays")),
        sa.CheckConstraint(_one_of("status", _STATUSES), name=op.f("ck_restore_replays_status")),
        comment="Restore replays: what each erased (counts, keyed hashes, no value), logged "
        "before its delete commits, until its signed replayed record is on the chain.",
        if_not_exists=True,  # a run that died part way may have created it
    )
    op.create_index(
        "ix_restore_replays_dataset",
        "restore_replays",
        ["dataset_namespace", "dataset_name"],
        unique=False,
        if_not_exists=True,
    )
    _replace_kind_check(_NEW_KINDS)  # its triggers are there after, whatever was before


def downgrade() -> None:
    _in_one_transaction()
    if _online():
        bind = op.get_bind()
        replayed = bind.execute(
            sa.text("SELECT count(*) FROM completion_records WHERE kind = 'replayed'")
        ).scalar_one()
        open_replays = bind.execute(
            sa.text(f"SELECT count(*) FROM restore_replays WHERE {_one_of('status', _OPEN)}")
        ).scalar_one()
        if replayed or open_replays:
            raise CommandError(
                f"cannot downgrade below {revision}: the ledger holds {replayed} replayed "
                f"record(s) and {open_replays} restore replay(s) are open (erased, not yet on "
                "record); records are never dropped and an open replay's evidence would be "
                "lost. Stay at this revision (run `erasure restore replay` again to close an "
                "open one)"
            )
    _replace_kind_check(_KINDS)
    op.drop_index("ix_restore_replays_dataset", table_name="restore_replays")
    op.drop_table("restore_replays")
