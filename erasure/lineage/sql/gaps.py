"""A gap in SQL lineage: the text a user reads, and its kind, set where the gap is found.

The kind decides how an artefact escalates, so it is never read back out of the text:
rewording a message changes nothing else.
"""

from __future__ import annotations

from erasure.model import GapKind


class SqlGap(str):
    """A gap's text (what `erasure lineage sql` prints, equal to the plain string) and kind."""

    kind: GapKind

    def __new__(cls, text: str, kind: GapKind) -> SqlGap:
        gap = super().__new__(cls, text)
        gap.kind = kind
        return gap

    def __getnewargs__(self) -> tuple[str, GapKind]:  # type: ignore[override]
        return str(self), self.kind

    def placed(self, where: str) -> SqlGap:
        """The same gap with where it is (`statement 3 (line 7)`) before its text."""
        return SqlGap(f"{where} {self}", self.kind)
