"""answers: the DPO's options for shared rows and subjects found nowhere; waiting actions

A row of a root that other people's rows reference is retained or deleted alone
(`delete_row`); a subject found nowhere is confirmed not held (`not_held`). An action that
waits for an earlier one of its request is logged as `waiting`, so a wait is bounded.

Revision ID: e1b4_answers
Revises: d9a3_lineage_events
Create Date: 2026-12-01 11:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "e1b4_answers"
down_revision: str | Sequence[str] | None = "d9a3_lineage_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (see b7e1_requests): before and after this revision.
_OPTIONS = ("rebuild_by_date", "delete_artefact", "retain_exemption", "non_personal")
_NEW_OPTIONS = (*_OPTIONS, "delete_row", "not_held")
_ACTION_STATUSES = ("pending", "done", "failed")
_NEW_ACTION_STATUSES = ("waiting", *_ACTION_STATUSES)


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _replace_check(table: str, name: str, condition: str) -> None:
    # Batch mode: SQLite cannot alter a CHECK constraint, so the table is copied.
    with op.batch_alter_table(table) as batch:
        batch.drop_constraint(op.f(name), type_="check")
        batch.create_check_constraint(op.f(name), condition)


def upgrade() -> None:
    _replace_check("rulings", "ck_rulings_option", _one_of("option", _NEW_OPTIONS))
    _replace_check("action_log", "ck_action_log_status", _one_of("status", _NEW_ACTION_STATUSES))


def downgrade() -> None:
    _replace_check("action_log", "ck_action_log_status", _one_of("status", _ACTION_STATUSES))
    _replace_check("rulings", "ck_rulings_option", _one_of("option", _OPTIONS))
