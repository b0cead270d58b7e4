"""pending vacuums: the deleted rows' space a VACUUM will reclaim later, and when it did

After an erasure deletes rows from a Postgres table it runs VACUUM on the table. When it
cannot (the role does not own the table, a lock or the statement timed out, a transaction
older than the delete still saw the rows) the table is listed here, by name only, with the
date the daily pass (`erasure_reprove`) will have run it by; the pass, or the next erasure's
VACUUM of the same table, records when it ran.

Revision ID: b4d1_pending_vacuums
Revises: a9e3_restore_replays
Create Date: 2026-12-05 09:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b4d1_pending_vacuums"
down_revision: str | Sequence[str] | None = "a9e3_restore_replays"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pending_vacuums",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("dataset_namespace", sa.String(length=255), nullable=False),
        sa.Column("dataset_name", sa.String(length=512), nullable=False),
        sa.Column("deleted_by", sa.DateTime(timezone=True), nullable=False),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_on", sa.Date(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("vacuumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("vacuumed_by", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_vacuums")),
        sa.UniqueConstraint(
            "request_ref",
            "dataset_namespace",
            "dataset_name",
            name=op.f("uq_pending_vacuums_dataset"),
        ),
        comment="Tables whose deleted rows await a VACUUM the erasure could not run, and when "
        "one ran: tables by name only, never a value (erasure.actions.reclaim).",
    )
    op.create_index(
        op.f("ix_pending_vacuums_vacuumed_at"), "pending_vacuums", ["vacuumed_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_vacuums_vacuumed_at"), table_name="pending_vacuums")
    op.drop_table("pending_vacuums")
