"""lineage store: runs, edge intervals, declared sources, quarantine, the plan index

The raw events in `lineage_events` are projected once, on ingest, into `lineage_runs` and
`lineage_edge_sets` (one producer's edges into one dataset over an interval); declared
lineage is parsed when its source changes (`lineage_sources`); malformed events go to
`lineage_quarantine` with their reason.
Plans load the columnar index in `lineage_index` and apply the edges changed since
(`lineage_edge_sets.version`). Events stored before this revision are projected by the first
`LineageStore` that opens the store (`lineage_state` 'backfilled' is 0 until then).

Revision ID: e4b2_lineage_store
Revises: f2c6_action_datasets
Create Date: 2026-12-01 09:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e4b2_lineage_store"
down_revision: str | Sequence[str] | None = "f2c6_action_datasets"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIGINT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "lineage_datasets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=1024), nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_datasets")),
        sa.UniqueConstraint("namespace", "name", name="uq_lineage_datasets_identity"),
        comment="OpenLineage dataset identities (namespace, name) the edges refer to by id.",
    )
    op.create_table(
        "lineage_runs",
        sa.Column("job", sa.String(length=1024), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("event_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("inputs", sa.Text(), nullable=False),
        sa.Column("outputs", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job", "run_id", name=op.f("pk_lineage_runs")),
        comment="Every run seen, its state and datasets: FAIL/ABORT runs are evidence, no edges.",
    )
    op.create_index(op.f("ix_lineage_runs_event_time"), "lineage_runs", ["event_time"])
    op.create_table(
        "lineage_outputs",
        sa.Column("producer", sa.String(length=1024), nullable=False),
        sa.Column("dataset_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("edge_set", sa.String(length=64), nullable=False),
        sa.Column("facet_digest", sa.String(length=64), nullable=True),
        sa.Column("current_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_run_id", sa.String(length=255), nullable=False),
        sa.Column("last_completed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gap", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("producer", "dataset_id", name=op.f("pk_lineage_outputs")),
        comment="Per producer and output: the current edge set's digest and the latest run.",
    )
    op.create_table(
        "lineage_edge_sets",
        sa.Column("id", _BIGINT_ID, nullable=False),
        sa.Column("target_dataset_id", sa.Integer(), nullable=False),
        sa.Column("producer", sa.String(length=1024), nullable=False),
        sa.Column("origin", sa.String(length=8), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=True),
        sa.Column("run_state", sa.String(length=16), nullable=True),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=True),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("source_key", sa.String(length=1024), nullable=True),
        sa.Column("edges", sa.Integer(), nullable=False),
        sa.Column("links", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_edge_sets")),
        comment="Edge sets with their validity: one producer's edges into one dataset over an "
        "interval (observed: from completed runs; declared: from a source).",
    )
    op.create_index(
        "ix_lineage_edge_sets_producer_target",
        "lineage_edge_sets",
        ["producer", "target_dataset_id"],
    )
    op.create_index("ix_lineage_edge_sets_source_key", "lineage_edge_sets", ["source_key"])
    op.create_index("ix_lineage_edge_sets_version", "lineage_edge_sets", ["version"])
    op.create_table(
        "lineage_sources",
        sa.Column("source_key", sa.String(length=1024), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=1024), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("gaps", sa.Text(), nullable=False),
        sa.Column("edges", sa.Integer(), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("source_key", name=op.f("pk_lineage_sources")),
        comment="Declared lineage sources and event files, by content digest: parsed on change.",
    )
    op.create_index(op.f("ix_lineage_sources_scope"), "lineage_sources", ["scope"])
    op.create_table(
        "lineage_quarantine",
        sa.Column("id", _BIGINT_ID, nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("origin", sa.String(length=1024), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_quarantine")),
        comment="Malformed OpenLineage events, kept with the reason they were refused.",
    )
    op.create_index(
        op.f("ix_lineage_quarantine_received_at"), "lineage_quarantine", ["received_at"]
    )
    op.create_table(
        "lineage_state",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_lineage_state")),
        comment="Counters of the projection: 'version' moves whenever an edge changes.",
    )
    op.create_table(
        "lineage_index",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("snapshot", sa.String(length=128), nullable=False),
        sa.Column("edges", sa.BigInteger(), nullable=False),
        sa.Column("built_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_index")),
        comment="The columnar edge index plans load, as of a projection version.",
    )
    state = sa.table(
        "lineage_state", sa.column("key", sa.String), sa.column("value", sa.BigInteger)
    )
    op.bulk_insert(state, [{"key": "version", "value": 0}, {"key": "backfilled", "value": 0}])


def downgrade() -> None:
    op.drop_table("lineage_index")
    op.drop_table("lineage_state")
    op.drop_index(op.f("ix_lineage_quarantine_received_at"), table_name="lineage_quarantine")
    op.drop_table("lineage_quarantine")
    op.drop_index(op.f("ix_lineage_sources_scope"), table_name="lineage_sources")
    op.drop_table("lineage_sources")
    op.drop_index("ix_lineage_edge_sets_version", table_name="lineage_edge_sets")
    op.drop_index("ix_lineage_edge_sets_source_key", table_name="lineage_edge_sets")
    op.drop_index("ix_lineage_edge_sets_producer_target", table_name="lineage_edge_sets")
    op.drop_table("lineage_edge_sets")
    op.drop_table("lineage_outputs")
    op.drop_index(op.f("ix_lineage_runs_event_time"), table_name="lineage_runs")
    op.drop_table("lineage_runs")
    op.drop_table("lineage_datasets")
