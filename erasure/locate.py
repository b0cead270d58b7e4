"""Find the subject: every dataset holding their rows, by normalised value, with identity
expansion through datasets that carry several identifier types, and one-way references.

Whether a stored value is the subject's is decided by `erasure.matching`, the same decision
erase, verify and the CRM ingest filter use. Values found along the way live in memory only;
what leaves this module (RootHit, SubjectSearch) carries types, column names and counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, BindParameter

from erasure.actions.transaction import statement_text
from erasure.catalog import Catalog, DatasetSpec
from erasure.drift import catalog_drift
from erasure.errors import CatalogError, SubjectError, WarehouseError
from erasure.matching import Matcher, exact_predicate, near_misses, require_exact_dialect
from erasure.model import (
    DatasetRef,
    Identity,
    NearMissCount,
    RootHit,
    SearchedColumns,
    SubjectRef,
    SubjectSearch,
)
from erasure.pseudonym import normalise
from erasure.warehouse import Warehouse, count_rows


@dataclass
class Located:
    """A dataset holding the subject, with the predicate that selects exactly their rows."""

    dataset: DatasetSpec
    identifier_type: str
    columns: list[str]
    predicate: sa.ColumnElement[bool]
    rows: int  # -1: widened by a second identity or reference, recounted before returning
    via: str
    shared_referrers: int = 0
    shared_rows: int = 0
    reference: sa.ColumnElement[bool] | None = None  # the rows found through a reference
    reference_key: str | None = None  # the key column that reference compares

    def hit(self) -> RootHit:
        return RootHit(
            dataset=self.dataset.ref,
            identifier_type=self.identifier_type,
            columns=self.columns,
            rows=self.rows,
            via=self.via,
            shared_referrers=self.shared_referrers,
        )


@dataclass
class Location:
    """Everything found for one subject; for a subject found nowhere, where it was looked for."""

    identities: set[Identity] = field(default_factory=set)
    located: dict[DatasetRef, Located] = field(default_factory=dict)
    search: SubjectSearch | None = None  # set by locate() when nothing was found

    def roots(self) -> list[RootHit]:
        return [self.located[ref].hit() for ref in sorted(self.located)]


def delete_statement(warehouse: Warehouse, located: Located) -> str:
    """The DELETE that erases the subject's rows, as SQL text with placeholders, no values."""
    statement = sa.delete(_table(warehouse, located.dataset)).where(located.predicate)
    return statement_text(statement, warehouse.engine(located.dataset.connection or "").dialect)


def normalise_subject(catalog: Catalog, subject: SubjectRef) -> Identity:
    """The request's identifier in canonical form; SubjectError names the allowed types."""
    spec = catalog.identifiers.get(subject.type)
    if spec is None:
        # Not echoed: a mis-filled form may carry the identifier in the type field.
        raise SubjectError(
            "identifier_type is not an identifier type of the catalog; allowed: "
            + ", ".join(sorted(catalog.identifiers))
        )
    value = normalise(
        spec.normalise, subject.value.get_secret_value(), default_region=spec.default_region
    )
    return Identity(subject.type, value)


def locate(catalog: Catalog, warehouse: Warehouse, subject: SubjectRef) -> Location:
    """Find every row of the subject, expanding identity until nothing new appears."""
    start = normalise_subject(catalog, subject)
    location = Location(identities={start})
    pending = [(start, "request")]
    while pending:
        identity, via = pending.pop()
        for hit, conn, table in _hits(catalog, warehouse, identity, via):
            _add(location, hit)
            for found in _other_identities(conn, catalog, table, hit):
                if found not in location.identities:
                    location.identities.add(found)
                    pending.append((found, f"identity:{hit.dataset.name}.{found.type}"))
    _follow_references(catalog, warehouse, location)
    _consolidate(catalog, warehouse, location)
    if not location.located:
        location.search = _search(catalog, warehouse, start)
    return location


def match_identity(
    conn: Connection,
    catalog: Catalog,
    table: sa.Table,
    columns: list[str],
    identity: Identity,
    dataset: DatasetSpec | None = None,
) -> sa.ColumnElement[bool]:
    """A parameterised predicate selecting the rows whose columns hold the identity."""
    return _match(conn, catalog, table, identity.type, columns, {identity.value}, dataset)


def _match(
    conn: Connection,
    catalog: Catalog,
    table: sa.Table,
    id_type: str,
    columns: list[str],
    values: set[str],
    dataset: DatasetSpec | None = None,
) -> sa.ColumnElement[bool]:
    clauses = []
    for name in columns:
        col = table.c.get(name)
        if col is None:
            raise WarehouseError(
                f"table {table.fullname!r}: column {name!r} from the catalog is missing"
            )
        matcher = _matcher(catalog, dataset, name, id_type)
        clauses.append(exact_predicate(conn, table, col, matcher, values))
    return sa.or_(*clauses)


def _matcher(catalog: Catalog, ds: DatasetSpec | None, column: str, id_type: str) -> Matcher:
    if ds is None:
        return Matcher.of(catalog, id_type)
    return Matcher.for_column(catalog, ds, column, id_type)


def _hits(
    catalog: Catalog, warehouse: Warehouse, identity: Identity, via: str
) -> Iterator[tuple[Located, Connection, sa.Table]]:
    """Each dataset holding `identity`, with its connection open while the caller looks on."""
    for ds in catalog.datasets:
        columns = ds.holds_subject.get(identity.type)
        if not columns:
            continue
        if ds.connection is None:
            continue  # held outside reach: the plan asks its owner (rule 2c)
        require_exact_dialect(warehouse.url(ds.connection), f"dataset {ds.name!r}")
        if catalog_drift(catalog, warehouse, ds) is not None:
            continue  # not as the catalog says: a blocking gap of the plan (erasure.drift)
        with warehouse.connect(ds) as conn:
            table = _table(warehouse, ds)
            predicate = match_identity(conn, catalog, table, columns, identity, ds)
            rows = _count(conn, table, predicate, ds)
            if rows:
                yield Located(ds, identity.type, list(columns), predicate, rows, via), conn, table


def _add(location: Location, hit: Located) -> None:
    """Record a hit; a dataset found again (another identity, a reference) widens its predicate."""
    current = location.located.get(hit.dataset.ref)
    if current is None:
        location.located[hit.dataset.ref] = hit
        return
    current.predicate = sa.or_(current.predicate, hit.predicate)
    if hit.reference_key is not None:
        if current.reference_key not in (None, hit.reference_key):
            _single_key(hit.dataset.name, {current.reference_key or "", hit.reference_key})
        current.reference_key = hit.reference_key
    if hit.reference is not None:
        current.reference = (
            hit.reference if current.reference is None else sa.or_(current.reference, hit.reference)
        )
    current.columns = sorted(set(current.columns) | set(hit.columns))
    current.shared_referrers += hit.shared_referrers
    current.shared_rows += hit.shared_rows
    current.rows = -1  # the two may select overlapping rows


def _consolidate(catalog: Catalog, warehouse: Warehouse, location: Location) -> None:
    """One predicate per dataset: every identity of each type it holds, in one IN per
    column, or'ed with the rows a reference found; counted again where it was widened."""
    by_type: dict[str, set[str]] = {}
    for identity in location.identities:
        by_type.setdefault(identity.type, set()).add(identity.value)
    for hit in location.located.values():
        held = [
            (id_type, columns)
            for id_type, columns in sorted(hit.dataset.holds_subject.items())
            if by_type.get(id_type)
        ]
        if not held and hit.rows >= 0:
            continue  # found by one reference only: its predicate is already that
        with warehouse.connect(hit.dataset) as conn:
            table = _table(warehouse, hit.dataset)
            parts = [
                _match(conn, catalog, table, t, cols, by_type[t], hit.dataset) for t, cols in held
            ]
            if hit.reference is not None:
                parts.append(hit.reference)
            hit.predicate = sa.or_(*parts)
            hit.rows = _count(conn, table, hit.predicate, hit.dataset)


def _search(catalog: Catalog, warehouse: Warehouse, identity: Identity) -> SubjectSearch:
    """Where an identifier found nowhere was looked for, and how many rows nearly match it."""
    searched: list[SearchedColumns] = []
    misses: list[NearMissCount] = []
    for ds in catalog.datasets:
        columns = ds.holds_subject.get(identity.type)
        if not columns or ds.connection is None or catalog_drift(catalog, warehouse, ds):
            continue
        searched.append(SearchedColumns(dataset=ds.ref, columns=list(columns)))
        with warehouse.connect(ds) as conn:
            table = _table(warehouse, ds)
            for name in columns:
                matcher = Matcher.for_column(catalog, ds, name, identity.type)
                counts = near_misses(conn, _column(table, ds, name), matcher, identity.value)
                misses.extend(
                    NearMissCount(dataset=ds.ref, column=name, kind=kind, rows=rows)
                    for kind, rows in sorted(counts.items())
                )
    return SubjectSearch(identifier_type=identity.type, searched=searched, near_misses=misses)


def _table(warehouse: Warehouse, ds: DatasetSpec) -> sa.Table:
    table = warehouse.table(ds)
    if table is None:
        raise WarehouseError(f"dataset {ds.name!r}: table does not exist in the warehouse")
    return table


def _column(table: sa.Table, ds: DatasetSpec, name: str) -> sa.Column[object]:
    if name not in table.c:
        raise WarehouseError(
            f"dataset {ds.name!r}: column {name!r} named in the catalog does not exist; "
            f"columns are: {', '.join(c.name for c in table.columns)}"
        )
    return table.c[name]


def _count(
    conn: Connection, table: sa.Table, predicate: sa.ColumnElement[bool], ds: DatasetSpec
) -> int:
    try:
        return count_rows(conn, table, predicate)
    except sa.exc.DBAPIError:
        raise WarehouseError(
            f"dataset {ds.name!r}: counting the subject's rows failed; check the catalog's "
            "holds_subject columns against the table"
        ) from None


def _other_identities(
    conn: Connection, catalog: Catalog, table: sa.Table, hit: Located
) -> Iterable[Identity]:
    """Values of the dataset's other identifier columns on the subject's rows."""
    for id_type, columns in hit.dataset.holds_subject.items():
        for name in columns:
            matcher = Matcher.for_column(catalog, hit.dataset, name, id_type)
            col = _column(table, hit.dataset, name)
            for value in conn.execute(sa.select(col).where(hit.predicate).distinct()).scalars():
                canonical = matcher.canonical(value)
                if canonical is not None:  # a malformed stored value names nobody
                    yield Identity(id_type, canonical)


def _follow_references(catalog: Catalog, warehouse: Warehouse, location: Location) -> None:
    """Rows the subject's rows point at become roots too; shared ones are counted."""
    for dataset in sorted(location.located):
        holder = location.located[dataset]
        for ref in holder.dataset.references:
            target = catalog.target_of(ref)
            if warehouse.table(target) is None:
                continue
            with warehouse.connect(holder.dataset) as conn:
                src = _table(warehouse, holder.dataset)
                keys = [
                    k
                    for k in conn.execute(
                        sa.select(_column(src, holder.dataset, ref.column))
                        .where(holder.predicate)
                        .distinct()
                    ).scalars()
                    if k is not None
                ]
            via = f"reference:{holder.dataset.name}.{ref.column}"
            _add_reference(catalog, warehouse, location, target, ref.key, keys, via)


def _add_reference(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    target: DatasetSpec,
    key: str,
    keys: list[object],
    via: str,
) -> None:
    """The rows of `target` whose `key` is one of `keys`, with who else points at them."""
    if not keys or warehouse.table(target) is None:
        return
    with warehouse.connect(target) as conn:
        dst = _table(warehouse, target)
        predicate = _column(dst, target, key).in_(keys)
        rows = _count(conn, dst, predicate, target)
    if rows == 0:
        return
    shared_rows, referrers = _other_referrers(catalog, warehouse, location, target, key, keys)
    _add(
        location,
        Located(
            target, "reference", [key], predicate, rows, via, referrers, shared_rows, predicate, key
        ),
    )


def _other_referrers(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    target: DatasetSpec,
    key: str,
    keys: list[object],
) -> tuple[int, int]:
    """(shared rows, rows of other subjects referencing them) across every referring dataset."""
    shared: set[object] = set()
    referrers = 0
    for ds, ref in catalog.referrers(target):
        if ref.key != key or warehouse.table(ds) is None:
            continue
        with warehouse.connect(ds) as conn:
            table = _table(warehouse, ds)
            col = _column(table, ds, ref.column)
            own = location.located.get(ds.ref)
            others: sa.ColumnElement[bool] = col.in_(keys)
            if own is not None:
                # NULL-safe: a row whose identifier is NULL is somebody else's
                others = sa.and_(others, sa.not_(sa.func.coalesce(own.predicate, sa.false())))
            rows = conn.execute(sa.select(col, sa.func.count()).where(others).group_by(col)).all()
        for value, count in rows:
            shared.add(value)
            referrers += int(count)
    return len(shared), referrers


# ---------------------------------------------------------------------------------------------
# Relocating a subject from what was parked at plan time (erasure.registry.secrets)


def parked_location(location: Location) -> tuple[list[Identity], dict[str, list[str]]]:
    """What to park so `relocate` can rebuild this location after rows are gone: every
    identity found, and for each reference root (by `namespace/name`) the key values it was
    located by, as text."""
    identities = sorted(location.identities, key=lambda i: (i.type, i.value))
    reference_keys: dict[str, list[str]] = {}
    for ref, hit in sorted(location.located.items()):
        if hit.reference is None or hit.reference_key is None:
            continue
        values = _in_values(hit.reference, hit.dataset.name, hit.reference_key)
        if values:
            reference_keys[ref.qualified] = sorted(values)
    return identities, reference_keys


def relocate(
    catalog: Catalog,
    warehouse: Warehouse,
    identities: Iterable[Identity],
    reference_keys: Mapping[str, Iterable[str]],
) -> Location:
    """The subject's rows found again from parked identities and reference keys, without
    expanding through rows (they may be deleted already): predicates, recounted rows and
    shared-referrer counts, as `locate()` returns them. Datasets with no rows left are absent."""
    location = Location(identities=set(identities))
    for identity in location.identities:
        if identity.type not in catalog.identifiers:
            raise SubjectError(
                f"a parked identity has type {identity.type!r}, which the catalog no longer "
                f"declares; allowed: {', '.join(sorted(catalog.identifiers))}. Restore the "
                "type in the catalog, or re-plan"
            )
    for identity in sorted(location.identities, key=lambda i: (i.type, i.value)):
        for found in _hits(catalog, warehouse, identity, f"parked:{identity.type}"):
            _add(location, found[0])
    for target_name in sorted(reference_keys):
        _relocate_reference(catalog, warehouse, location, target_name, reference_keys[target_name])
    _consolidate(catalog, warehouse, location)
    return location


def _relocate_reference(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    target_name: str,
    values: Iterable[str],
) -> None:
    """Locate the referenced rows by their parked keys and count who else points at them."""
    target = catalog.by_name(target_name)  # `namespace/name`, or a name parked before that
    referrers = sorted(
        ((ds.name, ref.column, ref.key) for ds, ref in catalog.referrers(target)),
    )
    key = _single_key(target.name, {k for _, _, k in referrers})
    if key is None or warehouse.table(target) is None:
        return
    keys = _typed(_column(_table(warehouse, target), target, key), values)
    holder, holder_column, _ = referrers[0]
    via = f"reference:{holder}.{holder_column}"
    _add_reference(catalog, warehouse, location, target, key, keys, via)


def _single_key(target: str, keys: set[str]) -> str | None:
    """The one key column references use into `target`; parked keys cannot say which of
    several columns a value belongs to, so the catalog must use one."""
    if len(keys) > 1:
        raise CatalogError(
            f"dataset {target!r} is referenced through several key columns "
            f"({', '.join(sorted(keys))}); parked reference keys need one key column per "
            "referenced dataset: reference it by one key"
        )
    return next(iter(keys), None)


def _in_values(predicate: sa.ColumnElement[bool], table_name: str, key: str) -> set[str]:
    """The values of every `<key> IN (...)` on `table_name` in a located predicate."""
    found: set[str] = set()
    for element in visitors.iterate(predicate):
        if not (
            isinstance(element, BinaryExpression)
            and element.operator is operators.in_op
            and isinstance(element.left, sa.Column)
            and element.left.name == key
            and isinstance(element.left.table, sa.Table)
            and element.left.table.fullname.lower() == table_name
            and isinstance(element.right, BindParameter)
        ):
            continue
        found.update(str(v) for v in element.right.value or () if v is not None)
    return found


def _typed(column: sa.Column[object], values: Iterable[str]) -> list[object]:
    """Parked key texts back as the column's Python type, so the IN compares like with like."""
    try:
        python_type: type[object] | None = column.type.python_type
    except NotImplementedError:
        python_type = None
    out: list[object] = []
    for text in values:
        if python_type is None or python_type is str:
            out.append(text)
            continue
        try:
            if python_type is bool:
                out.append(text in ("True", "true", "1"))
            elif python_type is datetime:
                out.append(datetime.fromisoformat(text))
            elif python_type is date:
                out.append(date.fromisoformat(text))
            else:
                out.append(python_type(text))  # type: ignore[call-arg]
        except (TypeError, ValueError):
            continue  # not of the column's type: it cannot match a row there
    return out
