"""requests: the request registry, parked secrets, plans, action log and DPO rulings

Revision ID: b7e1_requests
Revises: 4fca03289596
Create Date: 2026-11-29 15:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b7e1_requests"
down_revision: str | Sequence[str] | None = "4fca03289596"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the values erasure.requests / erasure.rulings allow: a revision never
# imports application code, so that it reads the same in a year.
_STATUSES = (
    "registered",
    "planned",
    "acting",
    "awaiting_dpo",
    "verifying",
    "complete",
    "complete_with_exemptions",
    "failed",
)
_LEGAL_GROUNDS = tuple(f"art17_1_{point}" for point in "abcdef")
_ACTION_STATUSES = ("pending", "done", "failed")
_OPTIONS = ("rebuild_by_date", "delete_artefact", "retain_exemption", "non_personal")
_EXEMPTIONS = ("a", "b", "c", "d", "e")

# Only a hex HMAC fits subject_hash, and request_ref has no room for '@', '+' or spaces: the
# database itself refuses an email address or phone number in either column.
_HEX_64 = {
    "postgresql": "subject_hash ~ '^[0-9a-f]{64}$'",
    "sqlite": "length(subject_hash) = 64 AND subject_hash NOT GLOB '*[^0-9a-f]*'",
}
_REQUEST_REF = {
    "postgresql": "request_ref ~ '^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$'",
    "sqlite": (
        "length(request_ref) BETWEEN 3 AND 64 AND request_ref NOT GLOB '*[^A-Za-z0-9._-]*' "
        "AND substr(request_ref, 1, 1) GLOB '[A-Za-z0-9]'"
    ),
}


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    hex_check = _HEX_64.get(dialect)
    ref_check = _REQUEST_REF.get(dialect)

    op.create_table(
        "requests",
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("subject_hash", sa.String(length=64), nullable=False),
        sa.Column("identifier_type", sa.String(length=64), nullable=False),
        sa.Column("pepper_version", sa.Integer(), nullable=False),
        sa.Column("legal_ground", sa.String(length=16), nullable=False),
        sa.Column("received_on", sa.Date(), nullable=False),
        sa.Column("due_on", sa.Date(), nullable=False),
        sa.Column("extended_until", sa.Date(), nullable=True),
        sa.Column("extension_reason", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("scrubbed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("secrets_destroyed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("request_ref", name=op.f("pk_requests")),
        sa.CheckConstraint(_one_of("status", _STATUSES), name=op.f("ck_requests_status")),
        sa.CheckConstraint(
            _one_of("legal_ground", _LEGAL_GROUNDS), name=op.f("ck_requests_legal_ground")
        ),
        sa.CheckConstraint("pepper_version >= 0", name=op.f("ck_requests_pepper_version")),
        sa.CheckConstraint("due_on >= received_on", name=op.f("ck_requests_due_on")),
        sa.CheckConstraint(
            "extended_until IS NULL OR (extended_until > due_on AND extension_reason IS NOT NULL)",
            name=op.f("ck_requests_extension"),
        ),
        *([sa.CheckConstraint(hex_check, name=op.f("ck_requests_hex_hash"))] if hex_check else []),
        *(
            [sa.CheckConstraint(ref_check, name=op.f("ck_requests_request_ref"))]
            if ref_check
            else []
        ),
        comment="Erasure requests: the workflow's resumable state; subjects as keyed hashes only.",
    )
    op.create_index(op.f("ix_requests_status"), "requests", ["status"], unique=False)

    op.create_table(
        "request_secrets",
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_ref"],
            ["requests.request_ref"],
            name=op.f("fk_request_secrets_request_ref_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("request_ref", name=op.f("pk_request_secrets")),
        comment="The parked identifier and notes, envelope-encrypted under a request-scoped key.",
    )

    op.create_table(
        "plans",
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("plan_json", sa.Text(), nullable=False),
        sa.Column("lineage_snapshot", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_ref"],
            ["requests.request_ref"],
            name=op.f("fk_plans_request_ref_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("request_ref", "version", name=op.f("pk_plans")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_plans_version")),
        comment="Plans per request: version 1 is acted on, 2+ are re-plans at verify.",
    )

    op.create_table(
        "action_log",
        sa.Column("request_ref", sa.String(length=64), nullable=False),
        sa.Column("dataset", sa.String(length=512), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("evidence_json", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_ref"],
            ["requests.request_ref"],
            name=op.f("fk_action_log_request_ref_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("request_ref", "dataset", "action", name=op.f("pk_action_log")),
        sa.CheckConstraint(_one_of("status", _ACTION_STATUSES), name=op.f("ck_action_log_status")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_action_log_attempts")),
        comment="What each action of a request did: how a retried task knows what is done.",
    )

    op.create_table(
        "rulings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("request_ref", sa.String(length=64), nullable=True),
        sa.Column("dataset_namespace", sa.String(length=255), nullable=False),
        sa.Column("dataset_name", sa.String(length=512), nullable=False),
        sa.Column("option", sa.String(length=32), nullable=False),
        sa.Column("author_id", sa.String(length=255), nullable=False),
        sa.Column("author_name", sa.String(length=255), nullable=False),
        sa.Column("justification", sa.Text(), nullable=False),
        sa.Column("exemption", sa.String(length=1), nullable=True),
        sa.Column("scheduled_by", sa.Date(), nullable=True),
        sa.Column("standing_until", sa.Date(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_ref"],
            ["requests.request_ref"],
            name=op.f("fk_rulings_request_ref_requests"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rulings")),
        sa.CheckConstraint(_one_of("option", _OPTIONS), name=op.f("ck_rulings_option")),
        sa.CheckConstraint(
            f"exemption IS NULL OR {_one_of('exemption', _EXEMPTIONS)}",
            name=op.f("ck_rulings_exemption"),
        ),
        sa.CheckConstraint(
            "length(trim(justification)) > 0", name=op.f("ck_rulings_justification")
        ),
        sa.CheckConstraint(
            "(option = 'retain_exemption') = (exemption IS NOT NULL)",
            name=op.f("ck_rulings_exemption_option"),
        ),
        sa.CheckConstraint(
            "(option = 'rebuild_by_date') = (scheduled_by IS NOT NULL)",
            name=op.f("ck_rulings_scheduled_by_option"),
        ),
        comment="DPO rulings on escalated artefacts; a standing one covers later requests.",
    )
    op.create_index(
        "ix_rulings_dataset", "rulings", ["dataset_namespace", "dataset_name"], unique=False
    )
    op.create_index(op.f("ix_rulings_request_ref"), "rulings", ["request_ref"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_rulings_request_ref"), table_name="rulings")
    op.drop_index("ix_rulings_dataset", table_name="rulings")
    op.drop_table("rulings")
    op.drop_table("action_log")
    op.drop_table("plans")
    op.drop_table("request_secrets")
    op.drop_index(op.f("ix_requests_status"), table_name="requests")
    op.drop_table("requests")
