"""sealed submissions: the desk's front door replaces the conf scrub

The erasure desk seals a submission (Vault transit, encrypt-only for the API server) and keeps
it in `submissions` until the register step opens and destroys it; Airflow's conf holds only
the reference and the handle. `requests.scrubbed_at` (when the plugin scrubbed the identifier
from Airflow) becomes `submission_destroyed_at` (when the sealed copy was destroyed).

Revision ID: a7d3_submissions
Revises: a7c3_lineage_ingest
Create Date: 2026-12-01 14:30:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a7d3_submissions"
down_revision: str | Sequence[str] | None = "a7c3_lineage_ingest"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("handle", sa.String(length=40), nullable=False),
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("sealed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("handle", name=op.f("pk_submissions")),
        # Only Vault's ciphertext fits: the database itself refuses a submission in clear.
        sa.CheckConstraint("substr(sealed, 1, 6) = 'vault:'", name=op.f("ck_submissions_sealed")),
        comment="Submissions sealed by the erasure desk (Vault transit), until register opens "
        "them.",
    )
    op.create_index(
        op.f("ix_submissions_request_ref"), "submissions", ["request_ref"], unique=False
    )
    with op.batch_alter_table("requests") as batch:
        batch.alter_column("scrubbed_at", new_column_name="submission_destroyed_at")


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.alter_column("submission_destroyed_at", new_column_name="scrubbed_at")
    op.drop_index(op.f("ix_submissions_request_ref"), table_name="submissions")
    op.drop_table("submissions")
