"""reproject lineage: stored OpenLineage events are projected again with today's rules

Two rules changed what an event's edges are: an input a run declares that its column facet
does not name now reaches the outputs table-level, and JobEvents are read as runs. The
projection (runs, edge sets, the index) is derived from the stored events; a run that repeats
its job's facets is recognised by their digest and never read again, so edges projected under
the old rules would stay. Marking the projection not yet backfilled makes the next process
that opens the lineage store project every stored event again, once, under its lock
(`LineageStore.reproject`): a large store's first plan after this upgrade takes that long.

Revision ID: a7d2_reproject_lineage
Revises: f6b9_sealed_notes
Create Date: 2026-12-04 17:30:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a7d2_reproject_lineage"
down_revision: str | Sequence[str] | None = "f6b9_sealed_notes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    state = sa.table("lineage_state", sa.column("key", sa.String), sa.column("value", sa.Integer))
    op.execute(state.update().where(state.c.key == "backfilled").values(value=0))


def downgrade() -> None:
    """Nothing to undo: a projection made again is the same under the rules that made it."""
