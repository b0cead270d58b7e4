"""What one `erase_rows` did, as the action log and the completion record keep it (its own
module: the warehouse and lakehouse erasures both give it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from erasure.actions.reclaim import SpaceEvidence
from erasure.model import Evidence


class ErasureEvidence(Evidence):
    """What one `erase_rows` did, for the completion record (counts and SQL, no values)."""

    dataset: str
    rows_before: int
    rows_deleted: int
    rows_after: int
    statement: str | None  # the DELETE with placeholders; None when nothing was located
    executed_at: datetime
    already_done: bool
    # A lakehouse table's: the snapshots expired and files removed (erasure.lakehouse).
    history: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)
    # What became of the deleted rows' bytes once the delete committed (VACUUM, secure_delete:
    # erasure.actions.reclaim); None on evidence written before that step.
    space: SpaceEvidence | None = Field(default=None, exclude_if=lambda v: v is None)
