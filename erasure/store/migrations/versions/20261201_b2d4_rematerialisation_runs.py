"""rematerialisation runs: one run of a rebuild DAG serves several requests

A rebuild by DAG used to trigger a run of its own per request and try. Now it joins a run
another request triggered when that run had not started before this request's erasures were
done; the runs the rebuilds triggered are kept here, numbered per DAG, so two rebuilds that
decide at once on a new run name the same one.

Revision ID: b2d4_rematerialisation_runs
Revises: a7d3_submissions
Create Date: 2026-12-01 18:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b2d4_rematerialisation_runs"
down_revision: str | Sequence[str] | None = "a7d3_submissions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rematerialisation_runs",
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("triggered_for", sa.String(length=64), nullable=False),
        sa.Column("triggered_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_rematerialisation_runs")),
        sa.UniqueConstraint(
            "dag_id", "generation", name=op.f("uq_rematerialisation_runs_generation")
        ),
        comment="Rematerialisation DAG runs the rebuilds triggered: one run serves every "
        "request whose erasures were done before it started (erasure.actions.coalesce).",
    )


def downgrade() -> None:
    op.drop_table("rematerialisation_runs")
