"""sealed notes: a DPO's justification is sealed before Airflow stores her answer

Airflow keeps a HITL answer's params in `hitl_detail`, its history and the audit log. The
erasure plugin now seals the justification typed into a `dpo_decides` prompt (Vault transit,
encrypt-only for the API server) into `sealed_notes` and hands Airflow only the handle; the
prompt's task opens it, checks it names nobody, records it with the ruling and destroys it.

Revision ID: f6b9_sealed_notes
Revises: e5a8_tombstones_append_only
Create Date: 2026-12-03 14:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f6b9_sealed_notes"
down_revision: str | Sequence[str] | None = "e5a8_tombstones_append_only"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sealed_notes",
        sa.Column("handle", sa.String(length=40), nullable=False),
        sa.Column("bound_to", sa.String(length=64), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("sealed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("handle", name=op.f("pk_sealed_notes")),
        # Only Vault's ciphertext fits: the database itself refuses a note in clear.
        sa.CheckConstraint("substr(sealed, 1, 6) = 'vault:'", name=op.f("ck_sealed_notes_sealed")),
        comment="Justifications typed into a DPO prompt, sealed before Airflow stores the "
        "answer (which holds only the handle), until the prompt's task opens and destroys them.",
    )


def downgrade() -> None:
    op.drop_table("sealed_notes")
