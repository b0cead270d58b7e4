"""Catalog drift: a catalogued dataset the warehouse does not hold as the catalog describes it.

A table that cannot be found, a column the catalog names that is missing, an identifier column
whose type can hold no identifier: each would otherwise read as "no rows of the subject here".
It is an error, not an absence: the plan carries it as a blocking gap (the dataset escalates)
and verify fails on it, each with a message that says what to fix in the catalog.
"""

from __future__ import annotations

import difflib

import sqlalchemy as sa

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import ErasureError
from erasure.model import Gap, GapKind
from erasure.warehouse import Warehouse

# Column types no identifier is stored in: a column of one of them was retyped, or the catalog
# names the wrong column. Anything else (text, numbers, domains, types this SQLAlchemy does not
# know) is matched, and refused there if its equality is not exact (erasure.matching).
_UNMATCHABLE = (
    sa.LargeBinary,
    sa.Boolean,
    sa.Date,
    sa.DateTime,
    sa.Time,
    sa.Interval,
    sa.JSON,
    sa.ARRAY,
)


def catalog_drift(catalog: Catalog, warehouse: Warehouse, ds: DatasetSpec) -> str | None:
    """What of `ds`, as the catalog describes it, the warehouse lacks; None: all there, or
    nothing to compare (a dataset without a connection). WarehouseError when the warehouse
    cannot be read: a fault a retry may mend is never taken for drift."""
    if ds.lakehouse is not None:
        return _lakehouse_drift(catalog, warehouse, ds)
    if ds.connection is None:
        return None
    table = warehouse.table(ds)  # a warehouse that cannot answer fails the step: not drift
    if table is None:
        return (
            f"the catalog names table {ds.name!r} on connection {ds.connection!r}, which has "
            f"no such table{_similar(warehouse, ds)}: correct the dataset's name (schema, "
            "spelling, case) or connection in the catalog, or remove the dataset if the "
            "table was dropped on purpose"
        )
    named = _named_columns(catalog, ds)
    missing = sorted(c for c in named if c not in table.c)
    if missing:
        return (
            f"column(s) {', '.join(missing)} named in the catalog for {ds.name!r} are not in "
            f"the table (it has: {', '.join(c.name for c in table.columns)}): correct the "
            "catalog's column names to the table's"
        )
    unmatchable = sorted(
        f"{name} ({table.c[name].type})"
        for columns in ds.holds_subject.values()
        for name in columns
        if isinstance(table.c[name].type, _UNMATCHABLE)
    )
    if unmatchable:
        return (
            f"identifier column(s) {', '.join(unmatchable)} of {ds.name!r} have a type no "
            "identifier can be matched in (text or integer): the column changed type, or the "
            "catalog names the wrong column; correct holds_subject in the catalog"
        )
    return None


def drift_gaps(catalog: Catalog, warehouse: Warehouse) -> list[Gap]:
    """A blocking gap for each drifted dataset that may hold the subject's rows: those with
    identifier columns, references, or rows others reference (the ones locate searches)."""
    referenced = {ref.dataset for d in catalog.datasets for ref in d.references}
    gaps = []
    for ds in catalog.datasets:
        if not (ds.holds_subject or ds.references or ds.name in referenced):
            continue
        problem = catalog_drift(catalog, warehouse, ds)
        if problem is not None:
            gaps.append(Gap(kind=GapKind.CATALOG_DRIFT, dataset=ds.ref, detail=problem))
    return gaps


def _lakehouse_drift(catalog: Catalog, warehouse: Warehouse, ds: DatasetSpec) -> str | None:
    """What a lakehouse table lacks of the columns the catalog names in it."""
    table = warehouse.lakehouse_table(ds)
    columns = table.columns()
    missing = sorted(c for c in _named_columns(catalog, ds) if c not in columns)
    if missing:
        return (
            f"column(s) {', '.join(missing)} named in the catalog for {ds.name!r} are not in "
            f"the lakehouse table (it has: {', '.join(columns)}): correct the catalog's "
            "column names to the table's"
        )
    matchable = table.matchable()
    held = sorted({c for cs in ds.holds_subject.values() for c in cs if not matchable.get(c)})
    if held:
        return (
            f"column(s) {', '.join(held)} of lakehouse table {ds.name!r} hold binary, nested "
            "or other values an identifier cannot be compared to: the subject would be found "
            "in none of them. Declare the column that holds the identifier as text or a "
            "number (a view or a flattened copy), or remove it from holds_subject"
        )
    return None


def _named_columns(catalog: Catalog, ds: DatasetSpec) -> set[str]:
    named = {c for columns in ds.holds_subject.values() for c in columns}
    named |= {ref.column for ref in ds.references}
    named |= {ref.key for d in catalog.datasets for ref in d.references if ref.dataset == ds.name}
    if ds.aggregate is not None:
        named |= set(ds.aggregate.quasi_identifiers)
        if ds.aggregate.count_column is not None:
            named.add(ds.aggregate.count_column)
    return named


def _similar(warehouse: Warehouse, ds: DatasetSpec) -> str:
    assert ds.connection is not None
    try:
        names = list(warehouse.schema(ds.connection))
    except ErasureError:
        return ""
    close = difflib.get_close_matches(ds.name, names, n=3, cutoff=0.75)
    return f" (similar: {', '.join(close)})" if close else ""
