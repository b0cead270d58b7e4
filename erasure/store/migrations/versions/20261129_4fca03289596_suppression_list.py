"""suppression list: tombstones (keyed hashes) that CRM ingest keeps out

Revision ID: 4fca03289596
Revises:
Create Date: 2026-11-29 12:09:06.513361+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "4fca03289596"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Only lower-case hex of the right length fits: a raw identifier is refused by the database too.
_HEX_64 = {
    "postgresql": "subject_hash ~ '^[0-9a-f]{64}$'",
    "sqlite": "length(subject_hash) = 64 AND subject_hash NOT GLOB '*[^0-9a-f]*'",
}


def upgrade() -> None:
    hex_check = _HEX_64.get(op.get_context().dialect.name)
    op.create_table(
        "suppression_list",
        sa.Column("subject_hash", sa.String(length=64), nullable=False),
        sa.Column("pepper_version", sa.Integer(), nullable=False),
        sa.Column("identifier_type", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request_ref", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("subject_hash", "pepper_version", name=op.f("pk_suppression_list")),
        *(
            [sa.CheckConstraint(hex_check, name=op.f("ck_suppression_list_hex_hash"))]
            if hex_check
            else []
        ),
        comment="Tombstones: keyed hashes of erased subjects that ingest must keep out.",
    )


def downgrade() -> None:
    op.drop_table("suppression_list")
