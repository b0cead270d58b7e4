"""What every lakehouse table format offers the erasure: read, count, erase with history, prove.

The caller decides who the subject is: it passes the located values (`values`: column ->
stored values, for deletes and counts) and a `Match` (column, stored value) -> is it theirs,
for proofs. A table never sees an identity and never puts a value in a message.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from erasure.lakehouse.evidence import HistoryErasure, Residue

Match = Callable[[str, object], bool]
SubjectValues = Mapping[str, Collection[object]]


class LakehouseTable(Protocol):
    """One Iceberg or Delta table, opened through `erasure.lakehouse.open_table`."""

    format: str  # "iceberg" | "delta"
    label: str  # for messages: "iceberg shop.customers", "delta crm/customers"

    def physical_id(self) -> str:
        """The table's own id, however it is catalogued: Iceberg's table UUID, the id in a
        Delta table's metadata."""
        ...

    def refresh(self) -> object:
        """Read the table's current metadata again."""
        ...

    def columns(self) -> list[str]:
        """The top-level columns of the current schema."""
        ...

    def matchable(self) -> dict[str, bool]:
        """Per top-level column: whether it holds text or whole numbers (what a `Match`
        judges)."""
        ...

    def distinct(self, columns: Sequence[str]) -> dict[str, dict[object, int]]:
        """Per column, each stored value of the current snapshot and its rows (nulls skipped)."""
        ...

    def count(self, values: SubjectValues) -> int:
        """Current rows where any named column holds one of its values."""
        ...

    def refs_holding(self, match: Match, columns: Sequence[str]) -> list[str]:
        """Branches and tags other than `main` whose snapshot has a row `match` accepts."""
        ...

    def erase(
        self,
        values: SubjectValues,
        match: Match,
        columns: Sequence[str],
        *,
        before_commit: Callable[[HistoryErasure], None] | None = None,
        staged_before: Sequence[str] = (),
        search: SubjectValues | None = None,
    ) -> HistoryErasure:
        """Delete the subject's rows copy-on-write and every snapshot and file that held them;
        `staged_before` names the files an earlier try logged as staged before it died;
        `search` what the history and files are searched for (`values` by default)."""
        ...

    def expire_history(self) -> HistoryErasure:
        """Keep only the current snapshot (after a rebuild); remove every file it does not use."""
        ...

    def residue(self, match: Match, columns: Sequence[str], values: SubjectValues) -> Residue:
        """Search every snapshot and every file under the table for the subject, independently."""
        ...
