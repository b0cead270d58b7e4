"""action datasets: the action log names a dataset by namespace and name, not one label

Both an OpenLineage namespace (`postgres://crm-db:5432`) and a name (`path/to/file`) may hold
a slash, so the `namespace/name` label the log is keyed by cannot be split back: the two
parts are stored as well. Existing rows are split at the last slash, which is right for every
dataset this project wrote (catalog names hold no slash).

Revision ID: f2c6_action_datasets
Revises: e1b4_answers
Create Date: 2026-12-01 14:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f2c6_action_datasets"
down_revision: str | Sequence[str] | None = "e1b4_answers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("action_log") as batch:
        batch.add_column(sa.Column("dataset_namespace", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("dataset_name", sa.String(length=512), nullable=True))
    log = sa.table(
        "action_log",
        sa.column("dataset", sa.String),
        sa.column("dataset_namespace", sa.String),
        sa.column("dataset_name", sa.String),
    )
    connection = op.get_bind()
    for (label,) in connection.execute(sa.select(log.c.dataset).distinct()).all():
        namespace, _, name = str(label).rpartition("/")
        connection.execute(
            log.update()
            .where(log.c.dataset == label)
            .values(dataset_namespace=namespace, dataset_name=name)
        )


def downgrade() -> None:
    with op.batch_alter_table("action_log") as batch:
        batch.drop_column("dataset_name")
        batch.drop_column("dataset_namespace")
