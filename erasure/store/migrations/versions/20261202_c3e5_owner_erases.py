"""owner_erases: the DPO's option for a system only its owner can reach (rule 2c)

A system of record the warehouse copies (a CRM) or any holder of people's rows without a
connection is its owner's to erase: the DPO rules `owner_erases`, and the deletion stays
pending until the owner's confirmation is recorded.

Revision ID: c3e5_owner_erases
Revises: b2d4_rematerialisation_runs
Create Date: 2026-12-02 08:30:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "c3e5_owner_erases"
down_revision: str | Sequence[str] | None = "b2d4_rematerialisation_runs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (see b7e1_requests): before and after this revision.
_OPTIONS = (
    "rebuild_by_date",
    "delete_artefact",
    "retain_exemption",
    "non_personal",
    "delete_row",
    "not_held",
)
_NEW_OPTIONS = (*_OPTIONS, "owner_erases")


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _replace_check(table: str, name: str, condition: str) -> None:
    # Batch mode: SQLite cannot alter a CHECK constraint, so the table is copied.
    with op.batch_alter_table(table) as batch:
        batch.drop_constraint(op.f(name), type_="check")
        batch.create_check_constraint(op.f(name), condition)


def upgrade() -> None:
    _replace_check("rulings", "ck_rulings_option", _one_of("option", _NEW_OPTIONS))


def downgrade() -> None:
    _replace_check("rulings", "ck_rulings_option", _one_of("option", _OPTIONS))
