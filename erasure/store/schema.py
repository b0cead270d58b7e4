"""The erasure store's tables (SQLAlchemy Core), shared by the code and the migrations' checks.

Every table lives on `metadata`; a change here needs a new revision in `migrations/versions/`
(tests/unit/store compares the two). No table holds a raw subject identifier: subjects appear
only as keyed hashes (`erasure.pseudonym.subject_hash`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

# Stable constraint names, so later migrations can refer to them on SQLite and Postgres alike.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

HASH_LENGTH = 64  # hex of HMAC-SHA256


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp that goes in and comes out as aware UTC (SQLite stores no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: give the erasure store aware UTC timestamps")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


suppression_list = sa.Table(
    "suppression_list",
    metadata,
    sa.Column("subject_hash", sa.String(HASH_LENGTH), primary_key=True),
    sa.Column("pepper_version", sa.Integer, primary_key=True),
    sa.Column("identifier_type", sa.String(64), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("request_ref", sa.String(128), nullable=True),
    comment="Tombstones: keyed hashes of erased subjects that ingest must keep out.",
)


# ---------------------------------------------------------------------------------------------
# The request registry (erasure.registry) and DPO rulings (erasure.rulings). The subject appears
# as a keyed hash only; the raw identifier is parked encrypted in `request_secrets`.

REQUEST_REF_LENGTH = 64
RUN_ID_LENGTH = 250  # Airflow's dag_run.run_id
DATASET_LENGTH = 512

requests = sa.Table(
    "requests",
    metadata,
    sa.Column("request_ref", sa.String(REQUEST_REF_LENGTH), primary_key=True),
    sa.Column("subject_hash", sa.String(HASH_LENGTH), nullable=False),
    sa.Column("identifier_type", sa.String(64), nullable=False),
    sa.Column("pepper_version", sa.Integer, nullable=False),
    sa.Column("legal_ground", sa.String(16), nullable=False),
    sa.Column("received_on", sa.Date, nullable=False),
    sa.Column("due_on", sa.Date, nullable=False),
    sa.Column("extended_until", sa.Date, nullable=True),
    sa.Column("extension_reason", sa.Text, nullable=True),
    sa.Column("status", sa.String(32), nullable=False, index=True),
    sa.Column("run_id", sa.String(RUN_ID_LENGTH), nullable=False),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("submission_destroyed_at", UtcDateTime, nullable=True),
    sa.Column("secrets_destroyed_at", UtcDateTime, nullable=True),
    comment="Erasure requests: the workflow's resumable state; subjects as keyed hashes only.",
)

submissions = sa.Table(
    "submissions",
    metadata,
    sa.Column("handle", sa.String(40), primary_key=True),
    sa.Column("request_ref", sa.String(REQUEST_REF_LENGTH), nullable=False, index=True),
    sa.Column("sealed", sa.Text, nullable=False),
    sa.Column("sealed_at", UtcDateTime, nullable=False),
    sa.CheckConstraint("substr(sealed, 1, 6) = 'vault:'", name="sealed"),
    comment="Submissions sealed by the erasure desk (Vault transit), until register opens them.",
)

sealed_notes = sa.Table(
    "sealed_notes",
    metadata,
    sa.Column("handle", sa.String(40), primary_key=True),
    # sha256 of the prompt the note answers (erasure.intake.note_binding): no run id in clear.
    sa.Column("bound_to", sa.String(64), nullable=False),
    sa.Column("sealed", sa.Text, nullable=False),
    sa.Column("sealed_at", UtcDateTime, nullable=False),
    sa.CheckConstraint("substr(sealed, 1, 6) = 'vault:'", name="sealed"),
    comment="Justifications typed into a DPO prompt, sealed before Airflow stores the answer "
    "(which holds only the handle), until the prompt's task opens and destroys them.",
)

request_secrets = sa.Table(
    "request_secrets",
    metadata,
    sa.Column(
        "request_ref",
        sa.String(REQUEST_REF_LENGTH),
        sa.ForeignKey("requests.request_ref", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("blob", sa.LargeBinary, nullable=False),
    comment="The parked identifier and notes, envelope-encrypted under a request-scoped key.",
)

plans = sa.Table(
    "plans",
    metadata,
    sa.Column(
        "request_ref",
        sa.String(REQUEST_REF_LENGTH),
        sa.ForeignKey("requests.request_ref", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("plan_json", sa.Text, nullable=False),
    sa.Column("lineage_snapshot", sa.String(128), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    comment="Plans per request: version 1 is acted on, 2+ are re-plans at verify.",
)

action_log = sa.Table(
    "action_log",
    metadata,
    sa.Column(
        "request_ref",
        sa.String(REQUEST_REF_LENGTH),
        sa.ForeignKey("requests.request_ref", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("dataset", sa.String(DATASET_LENGTH), primary_key=True),  # namespace/name
    sa.Column("action", sa.String(64), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("evidence_json", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("dataset_namespace", sa.String(255), nullable=True),
    sa.Column("dataset_name", sa.String(512), nullable=True),
    comment="What each action of a request did: how a retried task knows what is done.",
)

rulings = sa.Table(
    "rulings",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "request_ref",
        sa.String(REQUEST_REF_LENGTH),
        sa.ForeignKey("requests.request_ref", ondelete="SET NULL"),
        nullable=True,
        index=True,
    ),
    sa.Column("dataset_namespace", sa.String(255), nullable=False),
    sa.Column("dataset_name", sa.String(DATASET_LENGTH), nullable=False),
    sa.Column("option", sa.String(32), nullable=False),
    sa.Column("author_id", sa.String(255), nullable=False),
    sa.Column("author_name", sa.String(255), nullable=False),
    sa.Column("justification", sa.Text, nullable=False),
    sa.Column("exemption", sa.String(1), nullable=True),
    sa.Column("scheduled_by", sa.Date, nullable=True),
    sa.Column("standing_until", sa.Date, nullable=True),
    sa.Column("decided_at", UtcDateTime, nullable=False),
    sa.Index("ix_rulings_dataset", "dataset_namespace", "dataset_name"),
    comment="DPO rulings on escalated artefacts; a standing one covers later requests.",
)


# ---------------------------------------------------------------------------------------------
# Completion records (erasure.audit.records): append-only, hash-chained, signed. The database
# refuses UPDATE and DELETE on them (triggers in the c8f2_records revision), and the one-row
# chain head only moves forward with the chain.

GENESIS_HASH = "0" * HASH_LENGTH  # the prev_hash of the first record

completion_records = sa.Table(
    "completion_records",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("request_ref", sa.String(REQUEST_REF_LENGTH), nullable=False, index=True),
    sa.Column("subject_hash", sa.String(HASH_LENGTH), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("status", sa.String(32), nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("body", sa.Text, nullable=False),  # canonical JSON
    sa.Column("prev_hash", sa.String(HASH_LENGTH), nullable=False, unique=True),
    sa.Column("record_hash", sa.String(HASH_LENGTH), nullable=False, unique=True),
    sa.Column("signature", sa.String(255), nullable=False),
    sa.Column("signing_key_version", sa.Integer, nullable=False),
    comment="Completion records: append-only, hash-chained, signed in Vault.",
)

completion_chain_head = sa.Table(
    "completion_chain_head",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("record_hash", sa.String(HASH_LENGTH), nullable=False),
    comment="The newest completion record; appenders lock this row, so the chain cannot fork.",
)

# Restore replays (erasure.replay): a restored table's rows of erased subjects deleted again.
# What each replay erased is logged here before its delete commits, so a retry after a crash
# still appends the signed `replayed` record (record_seq once it is on the chain).
restore_replays = sa.Table(
    "restore_replays",
    metadata,
    sa.Column("replay_ref", sa.String(REQUEST_REF_LENGTH), primary_key=True),
    sa.Column("dataset_namespace", sa.String(255), nullable=False),
    sa.Column("dataset_name", sa.String(DATASET_LENGTH), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # erasing | erased | recorded
    sa.Column("evidence_json", sa.Text, nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("record_seq", sa.BigInteger, nullable=True),
    sa.Index("ix_restore_replays_dataset", "dataset_namespace", "dataset_name"),
    sa.CheckConstraint("status IN ('erasing', 'erased', 'recorded')", name="status"),
    comment="Restore replays: what each erased (counts, keyed hashes, no value), logged "
    "before its delete commits, until its signed replayed record is on the chain.",
)


rematerialisation_runs = sa.Table(
    "rematerialisation_runs",
    metadata,
    sa.Column("run_id", sa.String(255), primary_key=True),
    sa.Column("dag_id", sa.String(250), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("triggered_for", sa.String(REQUEST_REF_LENGTH), nullable=False),
    sa.Column("triggered_at", UtcDateTime, nullable=False),
    sa.UniqueConstraint("dag_id", "generation", name="uq_rematerialisation_runs_generation"),
    comment="Rematerialisation DAG runs the rebuilds triggered: one run serves every request "
    "whose erasures were done before it started (erasure.actions.coalesce).",
)

interventions = sa.Table(
    "interventions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_ref", sa.String(REQUEST_REF_LENGTH), nullable=False, index=True),
    sa.Column("run_id", sa.String(255), nullable=False),
    sa.Column("target", sa.String(512), nullable=False),  # "run", or "<task_id>[<map_index>]"
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("by", sa.String(255), nullable=False),
    sa.Column("at", UtcDateTime, nullable=False),
    comment="Erasure runs and tasks whose state a person set by hand in Airflow (UI or API), "
    "as the API server heard it: who, when, what (erasure_listener).",
)

pending_vacuums = sa.Table(
    "pending_vacuums",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_ref", sa.String(REQUEST_REF_LENGTH), nullable=False),
    sa.Column("dataset_namespace", sa.String(255), nullable=False),
    sa.Column("dataset_name", sa.String(DATASET_LENGTH), nullable=False),
    # The warehouse's own clock once the delete had committed: a VACUUM covers the delete
    # only if no transaction older than this still held a snapshot (erasure.actions.reclaim).
    sa.Column("deleted_by", UtcDateTime, nullable=False),
    sa.Column("scheduled_at", UtcDateTime, nullable=False),
    sa.Column("due_on", sa.Date, nullable=False),
    sa.Column("reason", sa.String(32), nullable=False),  # why the last attempt did not cover it
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_attempt_at", UtcDateTime, nullable=True),
    sa.Column("vacuumed_at", UtcDateTime, nullable=True, index=True),
    sa.Column("vacuumed_by", sa.String(16), nullable=True),  # daily_pass | erasure | dropped
    sa.UniqueConstraint(
        "request_ref", "dataset_namespace", "dataset_name", name="uq_pending_vacuums_dataset"
    ),
    comment="Tables whose deleted rows await a VACUUM the erasure could not run, and when one "
    "ran: tables by name only, never a value (erasure.actions.reclaim).",
)

# ---------------------------------------------------------------------------------------------
# Observed lineage (erasure.lineage.store.events): raw OpenLineage run events, stored as
# received, once each (keyed by their content hash). The database refuses UPDATE on them
# (triggers in the d9a3_lineage_events revision): evidence is not edited.

EVENT_ID_LENGTH = 80  # "sha256:" + 64 hex (erasure.lineage.openlineage.event_id)
LINEAGE_JOB_LENGTH = 1024  # "<job namespace>/<job name>"
LINEAGE_RUN_ID_LENGTH = 255  # the spec's runId is a UUID

lineage_events = sa.Table(
    "lineage_events",
    metadata,
    sa.Column("event_id", sa.String(EVENT_ID_LENGTH), primary_key=True),
    sa.Column("job", sa.String(LINEAGE_JOB_LENGTH), nullable=False),
    sa.Column("run_id", sa.String(LINEAGE_RUN_ID_LENGTH), nullable=False, index=True),
    sa.Column("event_type", sa.String(16), nullable=True),
    sa.Column("event_time", UtcDateTime, nullable=False, index=True),  # purged by it
    sa.Column("raw", sa.Text, nullable=False),  # the event's JSON as received (lz4 on Postgres)
    sa.Column("received_at", UtcDateTime, nullable=False, index=True),
    comment="Raw OpenLineage run events: immutable, stored once per content hash.",
)


# ---------------------------------------------------------------------------------------------
# The lineage store (erasure.lineage.store): raw events above are projected once, on ingest,
# into runs and edge-set intervals; declared lineage (SQL, rebuild SQL, dbt manifests) is
# parsed when its source changes. Plans read `lineage_edge_sets` through `lineage_index`,
# never the raw events. Everything below is derived from the raw events and the catalog's
# sources (`LineageStore.reproject`; not after a purge, which keeps current edge sets whose
# events it deleted).

SOURCE_KEY_LENGTH = 1024
COLUMN_LENGTH = 512

lineage_datasets = sa.Table(
    "lineage_datasets",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("namespace", sa.String(LINEAGE_JOB_LENGTH), nullable=False),
    sa.Column("name", sa.String(LINEAGE_JOB_LENGTH), nullable=False),
    sa.UniqueConstraint("namespace", "name", name="uq_lineage_datasets_identity"),
    comment="OpenLineage dataset identities (namespace, name) the edges refer to by id.",
)

lineage_runs = sa.Table(
    "lineage_runs",
    metadata,
    sa.Column("job", sa.String(LINEAGE_JOB_LENGTH), primary_key=True),
    sa.Column("run_id", sa.String(LINEAGE_RUN_ID_LENGTH), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("event_time", UtcDateTime, nullable=False, index=True),
    sa.Column("completed_at", UtcDateTime, nullable=True),
    sa.Column("events", sa.Integer, nullable=False),
    sa.Column("inputs", sa.Text, nullable=False),  # JSON list of "namespace/name"
    sa.Column("outputs", sa.Text, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    comment="Every run seen, its state and datasets: FAIL/ABORT runs are evidence, no edges.",
)

lineage_outputs = sa.Table(
    "lineage_outputs",
    metadata,
    sa.Column("producer", sa.String(LINEAGE_JOB_LENGTH), primary_key=True),
    sa.Column("dataset_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("edge_set", sa.String(HASH_LENGTH), nullable=False),
    sa.Column("facet_digest", sa.String(HASH_LENGTH), nullable=True),  # of what links came from
    sa.Column("current_since", UtcDateTime, nullable=False),
    sa.Column("last_run_id", sa.String(LINEAGE_RUN_ID_LENGTH), nullable=False),
    sa.Column("last_completed_at", UtcDateTime, nullable=False),
    sa.Column("gap", sa.Text, nullable=True),  # JSON Gap of the latest run, if any
    comment="Per producer and output: the current edge set's digest and the latest run.",
)

lineage_edge_sets = sa.Table(
    "lineage_edge_sets",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("target_dataset_id", sa.Integer, nullable=False),
    sa.Column("producer", sa.String(LINEAGE_JOB_LENGTH), nullable=False),
    sa.Column("origin", sa.String(8), nullable=False),
    sa.Column("run_id", sa.String(LINEAGE_RUN_ID_LENGTH), nullable=True),
    sa.Column("run_state", sa.String(16), nullable=True),
    sa.Column("valid_from", UtcDateTime, nullable=True),
    sa.Column("valid_to", UtcDateTime, nullable=True),
    sa.Column("observed_at", UtcDateTime, nullable=True),
    sa.Column("source_key", sa.String(SOURCE_KEY_LENGTH), nullable=True),  # declared only
    sa.Column("edges", sa.Integer, nullable=False),
    # JSON [[source dataset id, source column, target column, type, subtype], ...]
    sa.Column("links", sa.Text, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),  # projection version of last change
    sa.Index("ix_lineage_edge_sets_producer_target", "producer", "target_dataset_id"),
    sa.Index("ix_lineage_edge_sets_source_key", "source_key"),
    sa.Index("ix_lineage_edge_sets_version", "version"),
    comment="Edge sets with their validity: one producer's edges into one dataset over an "
    "interval (observed: from completed runs; declared: from a source).",
)

lineage_sources = sa.Table(
    "lineage_sources",
    metadata,
    sa.Column("source_key", sa.String(SOURCE_KEY_LENGTH), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("scope", sa.String(SOURCE_KEY_LENGTH), nullable=False, index=True),
    sa.Column("digest", sa.String(HASH_LENGTH), nullable=False),
    sa.Column("gaps", sa.Text, nullable=False),  # JSON list of Gap
    sa.Column("edges", sa.Integer, nullable=False),
    sa.Column("seen_at", UtcDateTime, nullable=False),
    comment="Declared lineage sources and event files, by content digest: parsed on change.",
)

lineage_quarantine = sa.Table(
    "lineage_quarantine",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("received_at", UtcDateTime, nullable=False, index=True),
    sa.Column("origin", sa.String(SOURCE_KEY_LENGTH), nullable=False),  # "http", "<file>:<line>"
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    comment="Malformed OpenLineage events, kept with the reason they were refused.",
)

lineage_state = sa.Table(
    "lineage_state",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
    comment="Counters of the projection: 'version' moves whenever an edge changes.",
)

lineage_index = sa.Table(
    "lineage_index",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("snapshot", sa.String(128), nullable=False),
    sa.Column("edges", sa.BigInteger, nullable=False),
    sa.Column("built_at", UtcDateTime, nullable=False),
    sa.Column("blob", sa.LargeBinary, nullable=False),
    comment="The columnar edge index plans load, as of a projection version.",
)
