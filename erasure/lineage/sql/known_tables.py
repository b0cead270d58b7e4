"""The tables SQL lineage knows the columns of: schema.json keys, and what statements create.

Each is kept under the name edges carry (`table_resolution.TableName.text`) with the
identity the warehouse gives it, so a reference meets a key only when both mean one table:
with `--default-db` / `--default-schema`, Snowflake's `events` (EVENTS) and `"events"` share the
name lineage writes but are two tables, and the key's columns are not lent to the other.
A date-shard family (`events_yyyymmdd`) is lineage's own name for many tables: it matches by
name alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from erasure.errors import LineageError
from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.table_resolution import TableName, TableNaming
from erasure.model import GapKind


class KnownTables(Mapping[str, list[str]]):
    """Column names by table name; a table's identity decides which references it serves."""

    def __init__(self) -> None:
        self._columns: dict[str, list[str]] = {}
        self._identity: dict[str, tuple[str, ...] | None] = {}
        self._keys: dict[str, str] = {}  # name -> the schema key that gave it, for errors

    @classmethod
    def from_schema(cls, schema: Mapping[str, Sequence[str]], naming: TableNaming) -> KnownTables:
        """schema.json's tables, each under its fully resolved name when defaults are given."""
        known = cls()
        for key, columns in schema.items():
            if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
                raise LineageError(f"schema entry {key!r} must be a list of column names")
            name = naming.key(key)
            names = list(dict.fromkeys(c.lower() for c in columns))
            earlier = known._keys.get(name.text)
            if naming.completes and earlier is not None and known._columns[name.text] != names:
                raise LineageError(
                    f"schema keys {earlier!r} and {key!r} both name {name.text} once completed "
                    "with --default-db/--default-schema, with different columns; keep one"
                )
            known.define(name, names)
            known._keys[name.text] = key
        return known

    def define(self, name: TableName, columns: Iterable[str]) -> None:
        """`name` has `columns` (a later statement reads what an earlier one created)."""
        self._columns[name.text] = list(columns)
        self._identity[name.text] = name.identity

    def means(self, name: TableName) -> bool:
        """Whether the known table of `name.text` is the one `name` refers to."""
        if name.text not in self._columns:
            return False
        known = self._identity.get(name.text)
        return known is None or name.identity is None or known == name.identity

    def conflict(self, name: TableName, written: str, number: int) -> SqlGap | None:
        """The gap when `name` shares its text with a known table it does not mean."""
        if name.text not in self._columns or self.means(name):
            return None
        ours = ".".join(name.identity or ())
        theirs = ".".join(self._identity.get(name.text) or ())
        return SqlGap(
            f"{written} in statement {number} means {ours}, the known {name.text} is {theirs}: "
            "a different table to the warehouse (quoted names keep their case), so its "
            "columns are not used",
            GapKind.UNRESOLVED_COLUMN,
        )

    def without(self, names: Iterable[str]) -> KnownTables:
        """These tables' columns forgotten: for one statement whose references mean others."""
        dropped = set(names)
        view = KnownTables()
        for text, columns in self._columns.items():
            if text not in dropped:
                view._columns[text] = columns
                view._identity[text] = self._identity.get(text)
        return view

    def __getitem__(self, name: str) -> list[str]:
        return self._columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)
