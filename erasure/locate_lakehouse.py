"""Find the subject in lakehouse tables (Iceberg, Delta): in the current rows and in history.

A lakehouse table is searched by every identity `locate()` found, with the same matching
(`erasure.matching`) as a warehouse table, read in Python over the distinct values of its
identifier columns. It adds no identities of its own (expansion runs over the warehouse).

A table whose current rows no longer hold the subject may still serve them through an older
snapshot, a branch or a tag (deleted from, never expired): it is a root all the same, found
in its history. Values found live in memory only; what leaves (RootHit) carries counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from erasure.catalog import Catalog, DatasetSpec, shown_name
from erasure.drift import catalog_drift
from erasure.lakehouse import LakehouseTable
from erasure.matching import Matcher
from erasure.model import DatasetRef, Identity, RootHit
from erasure.warehouse import Warehouse


@dataclass
class LakehouseLocated:
    """A lakehouse table holding the subject now or in its history."""

    dataset: DatasetSpec
    identifier_types: list[str]
    columns: list[str]
    values: dict[str, set[object]]  # column -> the subject's stored values in current rows
    rows: int  # current rows
    history_rows: int  # rows of older snapshots (and files) holding them, current excluded
    refs: list[str] = field(default_factory=list)  # branches/tags holding them (Iceberg)
    via: str = "request"
    others_rows: int = 0  # rows the subject's values reach that another person's key names

    def hit(self) -> RootHit:
        return RootHit(
            dataset=self.dataset.ref,
            identifier_type=next(iter(self.identifier_types), ""),
            columns=self.columns,
            rows=self.rows,
            via=self.via,
        )


class SubjectMatch:
    """Whether a stored value of a column is the subject's: the columns the catalog declares
    for each identifier type the subject has, each read the column's way."""

    def __init__(
        self,
        catalog: Catalog,
        ds: DatasetSpec,
        identities: Iterable[Identity],
        copies: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """`copies`: column -> identifier types of a root column of that name, which a
        derived table may hold in any form a source stores it in (verify of a rebuild)."""
        by_type: dict[str, set[str]] = {}
        for identity in identities:
            by_type.setdefault(identity.type, set()).add(identity.value)
        self.tests: dict[str, list[Callable[[object], bool]]] = {}
        self.types: list[str] = []
        for id_type, columns in sorted(ds.holds_subject.items()):
            if not by_type.get(id_type):
                continue
            self.types.append(id_type)
            for column in columns:
                matcher = Matcher.for_column(catalog, ds, column, id_type)
                self.tests.setdefault(column, []).append(matcher.matches(by_type[id_type]))
        for column, id_types in sorted((copies or {}).items()):
            for id_type in sorted(id_types):
                if by_type.get(id_type) and column not in ds.holds_subject.get(id_type, ()):
                    any_form = Matcher.any_form_of(catalog, column, id_type)
                    self.tests.setdefault(column, []).append(any_form(by_type[id_type]))
        self.identities = {v for values in by_type.values() for v in values}

    @property
    def columns(self) -> list[str]:
        return sorted(self.tests)

    def __call__(self, column: str, value: object) -> bool:
        return value is not None and any(test(value) for test in self.tests.get(column, ()))


def locate_lakehouse(
    catalog: Catalog,
    warehouse: Warehouse,
    identities: Iterable[Identity],
    *,
    via: str = "request",
    history: bool = True,
) -> dict[DatasetRef, LakehouseLocated]:
    """Every lakehouse table holding one of `identities`, now or (with `history`) in its
    history. Relocating for the act and verify steps skips the history: every lakehouse table
    holding identifiers is planned (erasure.planner), its erasure expires what holds them, and
    verify reads every snapshot and file of it again."""
    identities = list(identities)
    found: dict[DatasetRef, LakehouseLocated] = {}
    for ds in catalog.datasets:
        if ds.lakehouse is None or not ds.holds_subject:
            continue
        match = SubjectMatch(catalog, ds, identities)
        if not match.columns or catalog_drift(catalog, warehouse, ds) is not None:
            continue  # drift: a blocking gap of the plan (erasure.drift)
        table = warehouse.lakehouse_table(ds)
        with warehouse.holding(table):
            hit = _search(catalog, table, ds, match, via, history)
        if hit is not None:
            found[ds.ref] = hit
    return found


def _search(
    catalog: Catalog,
    table: LakehouseTable,
    ds: DatasetSpec,
    match: SubjectMatch,
    via: str,
    history: bool,
) -> LakehouseLocated | None:
    present = set(table.columns())
    columns = [c for c in match.columns if c in present]
    values: dict[str, set[object]] = {}
    for column, counts in table.distinct(columns).items():
        mine = {v for v in counts if match(column, v)}
        if mine:
            values[column] = mine
    rows = table.count(values) if values else 0
    refs = table.refs_holding(match, columns)
    history_rows = 0
    if not rows and not refs:
        if not history:
            return None
        # Nothing now: the history may still serve them (a delete never expired).
        residue = table.residue(match, columns, search_values(values, match))
        history_rows = sum(residue.rows_by_snapshot.values()) + len(residue.files_holding)
        if not history_rows:
            return None
    return LakehouseLocated(
        dataset=ds,
        identifier_types=match.types,
        columns=columns,
        values=values,
        rows=rows,
        history_rows=history_rows,
        refs=shown_refs(refs, match, values),
        via=via if rows else "history",
        others_rows=_others_rows(catalog, table, ds, values),
    )


def _others_rows(
    catalog: Catalog, table: LakehouseTable, ds: DatasetSpec, values: dict[str, set[object]]
) -> int:
    """Rows found by one of the subject's identifiers whose one-per-person key (a customer
    id) is not one of theirs, or is missing: a value the subject shares with another person
    (a family mailbox), or rows that cannot be told to be theirs. Counted, never erased.

    By counts alone: the rows the other columns find and the key's columns do not."""
    others = 0
    for id_type, columns in sorted(ds.holds_subject.items()):
        spec = catalog.identifiers.get(id_type)
        if spec is None or not spec.one_per_person:
            continue
        rest = {c: v for c, v in values.items() if c not in columns}
        if not rest:
            continue
        keyed = {c: v for c, v in values.items() if c in columns}
        others = max(others, table.count(values) - (table.count(keyed) if keyed else 0))
    return others


def shown_refs(
    refs: Iterable[str], match: SubjectMatch, values: Mapping[str, set[object]]
) -> list[str]:
    """Branch and tag names as a plan or record may keep them: a plain name holding none of
    the subject's values as they are stored or typed (`dsar-alice@example.com`, a tag named
    after a customer id) is not repeated."""
    held = {str(v).casefold() for found in values.values() for v in found}
    held |= {i.casefold() for i in match.identities}
    shown = []
    for name in refs:
        folded = name.casefold()
        plain = shown_name(name, "") == repr(name)
        if plain and not any(len(v) >= 3 and v in folded for v in held):
            shown.append(name)
        else:
            shown.append("(a name not repeated)")
    return shown


def search_values(
    values: Mapping[str, set[object]], match: SubjectMatch
) -> dict[str, set[object]]:
    """What a file scan looks for as text: the stored values found now, and the identities
    in their canonical form under every identifier column."""
    out: dict[str, set[object]] = {c: set(v) for c, v in values.items()}
    for column in match.columns:
        out.setdefault(column, set()).update(match.identities)
    return out
