"""The two runs: `discover` (every table on a connection) and `check_undeclared_holders`
(the catalogued datasets a plan reaches), each through read-only connections of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import sqlalchemy as sa

from erasure.catalog import Catalog, DatasetSpec
from erasure.discover.findings import UNDECLARED, Discovery, Finding, Skipped, UndeclaredCheck
from erasure.discover.judge import _Context
from erasure.discover.proposal import _catalog_yaml
from erasure.discover.reading import _end_transaction, _Table
from erasure.discover.sampling import (
    _examinable,
    _pg_relations,
    _sample_percent,
    _sample_table,
)
from erasure.discover.tables import _tables
from erasure.discover.values import _Sample
from erasure.errors import ErasureError, describe_failure
from erasure.model import DatasetRef
from erasure.warehouse import Warehouse

DEFAULT_SAMPLE_ROWS = 1000
MAX_SAMPLE_ROWS = 100_000
DEFAULT_MIN_SHARE = 0.5


def discover(
    catalog: Catalog,
    warehouse: Warehouse,
    connection: str,
    *,
    schemas: Sequence[str] | None = None,
    exclude_schemas: Sequence[str] = (),
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    min_share: float = DEFAULT_MIN_SHARE,
) -> Discovery:
    """Columns of the tables on `connection` that look like identifiers of the catalog's types,
    each judged by its name and at most `sample_rows` rows of its table."""
    _check_bounds(sample_rows, min_share)
    context = _Context(catalog, warehouse, min_share)
    namespace = _namespace_of(catalog, connection)
    entries = {ds.name: ds for ds in catalog.datasets if ds.connection == connection}
    findings: list[Finding] = []
    kinds: dict[DatasetRef, str] = {}
    columns = 0
    try:
        conn = context.reader.open(connection)  # CatalogError, WarehouseError: said as is
        dialect = conn.dialect.name
        searched, tables = _tables(context, connection, schemas, exclude_schemas, sample_rows)
        for table in tables:
            ref, entry, described = _entry_for(catalog, entries, namespace, table)
            kinds[ref] = table.kind
            examined = [(n, k) for n, k in table.columns if _examinable(k, dialect)]
            columns += len(examined)
            sample = _sample_table(conn, table, examined, sample_rows, context)
            own = entry is not None and described is None
            for column, _ in examined:
                findings += context.judge(ref, entry, column, sample, described=described, own=own)
    finally:
        context.close()
    findings.sort(key=lambda f: (f.dataset, f.column, f.identifier_type))
    return Discovery(
        connection=connection,
        namespace=namespace,
        dialect=dialect,
        schemas=searched,
        tables=len(tables),
        columns=columns,
        sample_rows=sample_rows,
        min_share=min_share,
        findings=findings,
        notes=context.notes,
        catalog_yaml=_catalog_yaml(catalog, connection, findings, kinds),
    )


def check_undeclared_holders(
    catalog: Catalog,
    warehouse: Warehouse,
    datasets: Iterable[DatasetRef],
    *,
    sample_rows: int = 0,
    min_share: float = DEFAULT_MIN_SHARE,
) -> UndeclaredCheck:
    """Columns of the catalogued, materialised datasets among `datasets` that look like
    identifiers of the catalog's types but are not in their `holds_subject` (statuses in
    UNDECLARED), and the datasets skipped because their connection or schema could not be
    read; never raises for a warehouse. By name alone when `sample_rows` is 0 (no rows read:
    the warehouse's schema, read once per connection, is all it asks); else also by a sample
    of that many rows through read-only connections of its own."""
    if sample_rows:
        _check_bounds(sample_rows, min_share)
    context = _Context(catalog, warehouse, min_share)
    found: list[Finding] = []
    skipped: list[Skipped] = []
    unreadable: dict[str, str] = {}  # connection -> why: one failure per connection, not per table
    try:
        for ref in sorted(set(datasets)):
            ds = catalog.dataset(ref)
            # A view holds no copy of its rows; a dataset without a connection cannot be read.
            if ds is None or ds.connection is None or not ds.materialised:
                continue
            if ds.connection in unreadable:
                skipped.append(Skipped(dataset=ref, reason=unreadable[ds.connection]))
                continue
            described = catalog.description(ref)
            source = described.source if described is not None else None
            own = described is None
            try:
                columns, sample = _columns_and_sample(context, ds, sample_rows)
            except _Unreadable as exc:
                if exc.whole_connection:
                    unreadable[ds.connection] = exc.reason
                skipped.append(Skipped(dataset=ref, reason=exc.reason))
                continue
            for column in columns:
                found += context.judge(ref, ds, column, sample, described=source, own=own)
    finally:
        context.close()
    found.sort(key=lambda f: (f.dataset, f.column, f.identifier_type))
    return UndeclaredCheck(
        findings=[f for f in found if f.status in UNDECLARED],
        skipped=skipped,
        notes=context.notes,
    )


def undeclared_holders(
    catalog: Catalog,
    warehouse: Warehouse,
    datasets: Iterable[DatasetRef],
    *,
    sample_rows: int = 0,
    min_share: float = DEFAULT_MIN_SHARE,
) -> list[Finding]:
    """The findings of `check_undeclared_holders` (a dataset that cannot be read is skipped:
    call that to show which)."""
    return check_undeclared_holders(
        catalog, warehouse, datasets, sample_rows=sample_rows, min_share=min_share
    ).findings


class _Unreadable(Exception):
    """A dataset (or its whole connection) could not be read; `reason` names no value."""

    def __init__(self, reason: str, *, whole_connection: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.whole_connection = whole_connection


def _columns_and_sample(
    context: _Context, ds: DatasetSpec, sample_rows: int
) -> tuple[list[str], _Sample | None]:
    """A catalogued dataset's columns to judge, and their sample (None: by name alone)."""
    assert ds.connection is not None
    if not sample_rows:
        try:
            named = context.warehouse.columns(ds) or []
            return [n for n in named if n.isprintable()], None
        except ErasureError as exc:  # the warehouse's messages name no value
            raise _Unreadable(str(exc), whole_connection=True) from None
        except (sa.exc.SQLAlchemyError, ImportError, OSError) as exc:
            raise _Unreadable(
                f"connection {ds.connection!r}: cannot read its schema ({describe_failure(exc)})",
                whole_connection=True,
            ) from None
    try:
        conn = context.reader.open(ds.connection)
    except ErasureError as exc:
        raise _Unreadable(str(exc), whole_connection=True) from None
    table = context.reader.table(ds)
    if table is None:
        # Missing (catalog drift: the plan has a gap for it) or not readable (said in notes).
        return [], None
    examined = [
        (n, k) for n, k in table.columns if n.isprintable() and _examinable(k, conn.dialect.name)
    ]
    if not examined:
        return [], None
    if conn.dialect.name == "postgresql":
        try:
            relations = _pg_relations(conn, [table.schema or "public"], table.table)
        except sa.exc.SQLAlchemyError:
            relations = {}  # sampled by a plain LIMIT
        finally:
            _end_transaction(conn)
        relkind, _, estimate = relations.get(
            (table.schema or "public", table.table), ("", False, -1)
        )
        table = replace(table, sample_percent=_sample_percent(relkind, estimate, sample_rows))
    sample = _sample_table(conn, table, examined, sample_rows, context)
    return [name for name, _ in examined], sample


def _check_bounds(sample_rows: int, min_share: float) -> None:
    if not 1 <= sample_rows <= MAX_SAMPLE_ROWS:
        raise ValueError(f"sample_rows must be from 1 to {MAX_SAMPLE_ROWS:,}")
    if not 0 < min_share <= 1:
        raise ValueError("min_share must be above 0 and at most 1")


def _namespace_of(catalog: Catalog, connection: str) -> str:
    """The namespace most of the connection's datasets have; else the connection's name."""
    counts = Counter(ds.namespace for ds in catalog.datasets if ds.connection == connection)
    return min(counts, key=lambda n: (-counts[n], n)) if counts else connection


def _entry_for(
    catalog: Catalog, entries: Mapping[str, DatasetSpec], namespace: str, table: _Table
) -> tuple[DatasetRef, DatasetSpec | None, str | None]:
    """A table's identity, its catalog entry (its own, or the one a default or a dbt manifest
    gives it), and what described it when the entry is not its own."""
    for name in (table.name, table.bare):
        if name is not None and name in entries:
            return entries[name].ref, entries[name], None
    ref = DatasetRef(namespace, table.name)
    described = catalog.description(ref)
    if described is None:
        return ref, None, None
    return ref, catalog.dataset(ref), described.source
