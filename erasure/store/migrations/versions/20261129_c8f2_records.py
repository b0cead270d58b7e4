"""records: append-only, hash-chained completion records and their chain head

The database itself keeps the ledger honest: UPDATE, DELETE (and TRUNCATE) on
completion_records are refused by triggers; an INSERT must extend the chain head (next seq,
prev_hash = the head's hash); the head moves forward one record at a time and is never deleted.

Revision ID: c8f2_records
Revises: b7e1_requests
Create Date: 2026-11-29 16:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c8f2_records"
down_revision: str | Sequence[str] | None = "b7e1_requests"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of erasure.audit.records' values: a revision never imports application code.
_KINDS = ("received", "extended", "escalated", "decided", "completed", "failed")
_GENESIS = "0" * 64
_STATUS_FOR_KIND = (
    "(kind = 'completed' AND status IN ('complete', 'complete_with_exemptions'))"
    " OR (kind = 'failed' AND status = 'failed')"
    " OR (kind NOT IN ('completed', 'failed') AND status IS NULL)"
)
_HEX = {
    "postgresql": "{col} ~ '^[0-9a-f]{{64}}$'",
    "sqlite": "length({col}) = 64 AND {col} NOT GLOB '*[^0-9a-f]*'",
}
_REQUEST_REF = {
    "postgresql": "request_ref ~ '^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$'",
    "sqlite": (
        "length(request_ref) BETWEEN 3 AND 64 AND request_ref NOT GLOB '*[^A-Za-z0-9._-]*' "
        "AND substr(request_ref, 1, 1) GLOB '[A-Za-z0-9]'"
    ),
}

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER completion_records_no_update BEFORE UPDATE ON completion_records
    BEGIN SELECT RAISE(ABORT, 'completion_records is append-only: UPDATE refused'); END""",
    """CREATE TRIGGER completion_records_no_delete BEFORE DELETE ON completion_records
    BEGIN SELECT RAISE(ABORT, 'completion_records is append-only: DELETE refused'); END""",
    """CREATE TRIGGER completion_records_extend_head BEFORE INSERT ON completion_records
    WHEN NEW.seq IS NOT (SELECT seq + 1 FROM completion_chain_head WHERE id = 1)
      OR NEW.prev_hash IS NOT (SELECT record_hash FROM completion_chain_head WHERE id = 1)
    BEGIN SELECT RAISE(ABORT, 'completion_records: a new record must extend the chain head');
    END""",
    """CREATE TRIGGER completion_chain_head_forward_only BEFORE UPDATE ON completion_chain_head
    WHEN NEW.id IS NOT OLD.id OR NEW.seq IS NOT OLD.seq + 1
      OR NEW.record_hash IS NOT (SELECT record_hash FROM completion_records WHERE seq = NEW.seq)
    BEGIN SELECT RAISE(ABORT, 'completion_chain_head only moves forward with the chain'); END""",
    """CREATE TRIGGER completion_chain_head_no_delete BEFORE DELETE ON completion_chain_head
    BEGIN SELECT RAISE(ABORT, 'completion_chain_head cannot be deleted'); END""",
)
_SQLITE_DROP = (
    "completion_chain_head_no_delete",
    "completion_chain_head_forward_only",
    "completion_records_extend_head",
    "completion_records_no_delete",
    "completion_records_no_update",
)

# restrict_violation (23001): drivers raise an IntegrityError, as SQLite's RAISE(ABORT) does.
# SET search_path FROM CURRENT pins the tables the functions see to the store's schema.
# No '%' anywhere: `alembic upgrade --sql` would print it doubled, breaking the DBA's script.
_PG_FUNCTIONS = (
    """CREATE FUNCTION completion_records_refuse_change() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
      RAISE EXCEPTION USING
        MESSAGE = 'completion_records is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'restrict_violation';
    END $$""",
    """CREATE FUNCTION completion_records_extend_head() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    DECLARE
      head_seq bigint;
      head_hash text;
    BEGIN
      SELECT seq, record_hash INTO head_seq, head_hash FROM completion_chain_head WHERE id = 1;
      IF NOT FOUND OR NEW.seq <> head_seq + 1 OR NEW.prev_hash <> head_hash THEN
        RAISE EXCEPTION USING
          MESSAGE = 'completion_records: a new record must extend the chain head',
          ERRCODE = 'restrict_violation';
      END IF;
      RETURN NEW;
    END $$""",
    """CREATE FUNCTION completion_chain_head_forward_only() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
      IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION USING
          MESSAGE = 'completion_chain_head cannot be deleted (' || TG_OP || ' refused)',
          ERRCODE = 'restrict_violation';
      END IF;
      IF NEW.id <> OLD.id OR NEW.seq <> OLD.seq + 1 OR NEW.record_hash IS DISTINCT FROM
         (SELECT record_hash FROM completion_records WHERE seq = NEW.seq) THEN
        RAISE EXCEPTION USING
          MESSAGE = 'completion_chain_head only moves forward with the chain',
          ERRCODE = 'restrict_violation';
      END IF;
      RETURN NEW;
    END $$""",
)
_PG_TRIGGERS = (
    """CREATE TRIGGER completion_records_append_only BEFORE UPDATE OR DELETE
    ON completion_records FOR EACH ROW EXECUTE FUNCTION completion_records_refuse_change()""",
    # Row triggers do not fire on TRUNCATE.
    """CREATE TRIGGER completion_records_no_truncate BEFORE TRUNCATE
    ON completion_records FOR EACH STATEMENT EXECUTE FUNCTION completion_records_refuse_change()""",
    """CREATE TRIGGER completion_records_extend_head BEFORE INSERT
    ON completion_records FOR EACH ROW EXECUTE FUNCTION completion_records_extend_head()""",
    """CREATE TRIGGER completion_chain_head_forward_only BEFORE UPDATE OR DELETE
    ON completion_chain_head FOR EACH ROW EXECUTE FUNCTION completion_chain_head_forward_only()""",
    """CREATE TRIGGER completion_chain_head_no_truncate BEFORE TRUNCATE
    ON completion_chain_head FOR EACH STATEMENT
    EXECUTE FUNCTION completion_chain_head_forward_only()""",
)


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    hex_checks = [
        sa.CheckConstraint(_HEX[dialect].format(col=col), name=op.f(f"ck_completion_records_{col}"))
        for col in ("subject_hash", "prev_hash", "record_hash")
        if dialect in _HEX
    ]
    ref_check = _REQUEST_REF.get(dialect)

    op.create_table(
        "completion_records",
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("subject_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("record_hash", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.String(length=255), nullable=False),
        sa.Column("signing_key_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_completion_records")),
        # One successor per record: even past the lock, the chain cannot fork.
        sa.UniqueConstraint("prev_hash", name=op.f("uq_completion_records_prev_hash")),
        sa.UniqueConstraint("record_hash", name=op.f("uq_completion_records_record_hash")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_completion_records_seq")),
        sa.CheckConstraint(
            "kind IN (" + ", ".join(f"'{k}'" for k in _KINDS) + ")",
            name=op.f("ck_completion_records_kind"),
        ),
        sa.CheckConstraint(_STATUS_FOR_KIND, name=op.f("ck_completion_records_status")),
        sa.CheckConstraint(
            "signing_key_version >= 1", name=op.f("ck_completion_records_key_version")
        ),
        sa.CheckConstraint(
            "substr(signature, 1, 7) = 'vault:v'", name=op.f("ck_completion_records_signature")
        ),
        *hex_checks,
        *(
            [sa.CheckConstraint(ref_check, name=op.f("ck_completion_records_request_ref"))]
            if ref_check
            else []
        ),
        comment="Completion records: append-only, hash-chained, signed in Vault.",
    )
    op.create_index(
        op.f("ix_completion_records_request_ref"),
        "completion_records",
        ["request_ref"],
        unique=False,
    )
    op.create_index(
        op.f("ix_completion_records_created_at"), "completion_records", ["created_at"], unique=False
    )

    op.create_table(
        "completion_chain_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("record_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_completion_chain_head")),
        sa.CheckConstraint("id = 1", name=op.f("ck_completion_chain_head_one_row")),
        comment="The newest completion record; appenders lock this row, so the chain cannot fork.",
    )
    op.execute(
        f"INSERT INTO completion_chain_head (id, seq, record_hash) VALUES (1, 0, '{_GENESIS}')"
    )

    if dialect == "postgresql":
        for statement in (*_PG_FUNCTIONS, *_PG_TRIGGERS):
            op.execute(statement)
    elif dialect == "sqlite":
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        # Dropping the tables drops their triggers; the functions go after.
        op.drop_table("completion_chain_head")
        op.drop_index(op.f("ix_completion_records_created_at"), table_name="completion_records")
        op.drop_index(op.f("ix_completion_records_request_ref"), table_name="completion_records")
        op.drop_table("completion_records")
        for function in (
            "completion_chain_head_forward_only",
            "completion_records_extend_head",
            "completion_records_refuse_change",
        ):
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
        return
    for trigger in _SQLITE_DROP if dialect == "sqlite" else ():
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.drop_table("completion_chain_head")
    op.drop_index(op.f("ix_completion_records_created_at"), table_name="completion_records")
    op.drop_index(op.f("ix_completion_records_request_ref"), table_name="completion_records")
    op.drop_table("completion_records")
