"""interventions: erasure runs and tasks whose state a person set by hand

An Admin may still mark an erasure task success, fail a run or force it to success from
Airflow's UI or API. None of it completes a request or changes a ruling; each is recorded
here, with who did it and when, as the API server hears it, so the desk shows it at once and
the request's records name it.

Revision ID: d4f6_interventions
Revises: c3e5_owner_erases
Create Date: 2026-12-02 12:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d4f6_interventions"
down_revision: str | Sequence[str] | None = "c3e5_owner_erases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "interventions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("target", sa.String(length=512), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("by", sa.String(length=255), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_interventions")),
        comment="Erasure runs and tasks whose state a person set by hand in Airflow (UI or "
        "API), as the API server heard it: who, when, what (erasure_listener).",
    )
    op.create_index(
        op.f("ix_interventions_request_ref"), "interventions", ["request_ref"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_interventions_request_ref"), table_name="interventions")
    op.drop_table("interventions")
