"""Gap kinds of declared lineage: what a SQL lineage message says is missing."""

from __future__ import annotations

from erasure.model import GapKind


def sql_gap_kind(text: str) -> GapKind:
    """The gap kind of one message from `erasure.lineage.sql` (SQL files, rebuild SQL, dbt)."""
    lowered = text.lower()
    if "table-level lineage only" in lowered:
        return GapKind.TABLE_ONLY_LINEAGE
    if "opaque" in lowered or "function" in lowered:
        return GapKind.OPAQUE_PRODUCER
    if "parse" in lowered or "unsupported" in lowered:
        return GapKind.UNPARSEABLE_SQL
    return GapKind.UNRESOLVED_COLUMN
