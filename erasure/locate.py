"""Find the subject: every dataset holding their rows, by normalised value, with identity
expansion through datasets that carry several identifier types, and one-way references.

Identities belong to one person (rule 2b): an expanded value is searched by only when it
is the subject's alone. A value that rows of other people also hold (a household phone), a
row other people's rows point at, or a second value of a one-per-person type (two customer
ids) is held back: the rows reached only through it are counted (`Withheld`), never located.

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

from erasure.catalog import Catalog, DatasetSpec
from erasure.drift import catalog_drift
from erasure.errors import CatalogError, SubjectError, WarehouseError
from erasure.locate_lakehouse import LakehouseLocated, locate_lakehouse
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
from erasure.warehouse import Warehouse, count_rows, statement_text


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
class HeldBack:
    """Why the expanded values of one identifier type were not searched by, in counts."""

    identifier_type: str
    values: int  # distinct values held back
    one_per_person: bool  # a type naming one person each, reached with several values
    other_rows: dict[DatasetRef, int] = field(default_factory=dict)  # other people's rows
    other_persons: int | None = None  # distinct one-per-person values on those rows
    other_referrers: int = 0  # other people's rows pointing at rows holding the values


@dataclass
class Withheld:
    """Rows of one dataset reached only through held-back values (rule 2b): not the
    subject's on locate's authority, so the DPO decides; counted, never erased."""

    dataset: DatasetSpec
    rows: int
    columns: list[str]
    identifier_types: list[str]


@dataclass
class Location:
    """Everything found for one subject; for a subject found nowhere, where it was looked for."""

    identities: set[Identity] = field(default_factory=set)
    located: dict[DatasetRef, Located] = field(default_factory=dict)
    search: SubjectSearch | None = None  # set by locate() when nothing was found
    held_back: dict[str, HeldBack] = field(default_factory=dict)  # by identifier type
    withheld: dict[DatasetRef, Withheld] = field(default_factory=dict)
    # Lakehouse tables holding the subject now or in their history (erasure.locate_lakehouse).
    lakehouse: dict[DatasetRef, LakehouseLocated] = field(default_factory=dict)

    def roots(self) -> list[RootHit]:
        hits = {ref: hit.hit() for ref, hit in self.lakehouse.items()}
        hits.update((ref, hit.hit()) for ref, hit in self.located.items())
        return [hits[ref] for ref in sorted(hits)]

    @property
    def root_refs(self) -> list[DatasetRef]:
        """Every dataset found holding the subject: warehouse tables and lakehouse tables."""
        return sorted(set(self.located) | set(self.lakehouse))


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
    ambiguous: set[str] = set()
    while True:  # again when a one-per-person type turns out to have several values
        location, held, more = _expand(catalog, warehouse, start, ambiguous)
        if not more:
            break
        ambiguous |= more
    _follow_references(catalog, warehouse, location)
    _consolidate(catalog, warehouse, location)
    _withhold(catalog, warehouse, location, held)
    location.lakehouse = locate_lakehouse(catalog, warehouse, location.identities)
    if not location.located and not location.lakehouse:
        location.search = _search(catalog, warehouse, start)
    return location


def _expand(
    catalog: Catalog, warehouse: Warehouse, start: Identity, ambiguous: set[str]
) -> tuple[Location, set[Identity], set[str]]:
    """Search by the request, then by every expanded value that is the subject's alone.

    Returns the location, the values held back, and the one-per-person types found to have
    several values after one of them was already searched by (the caller starts again)."""
    location = Location(identities={start})
    vias = {start: "request"}
    searched: set[Identity] = set()
    candidates: set[Identity] = set()
    while True:
        for identity in sorted(location.identities - searched, key=_order_key):
            searched.add(identity)
            for hit, conn, table in _hits(catalog, warehouse, identity, vias[identity]):
                _add(location, hit)
                for found in _other_identities(conn, catalog, table, hit):
                    if found not in location.identities and found not in candidates:
                        candidates.add(found)
                        vias[found] = f"identity:{hit.dataset.name}.{found.type}"
        pending = candidates - location.identities
        accept, restart = _one_per_person(catalog, location, pending, start, ambiguous)
        if restart:
            return location, pending, restart
        if not accept:  # the person's own keys first: the rows they claim are not others'
            accept = {
                i
                for i in pending
                if not _is_one_per_person(catalog, i.type)
                and not _others(catalog, warehouse, location, i.type, {i.value}).shared
            }
        if not accept:
            return location, pending, set()
        location.identities |= accept


def _order_key(identity: Identity) -> tuple[str, str]:
    return identity.type, identity.value


def _is_one_per_person(catalog: Catalog, id_type: str) -> bool:
    spec = catalog.identifiers.get(id_type)
    return spec is not None and spec.one_per_person


def _one_per_person(
    catalog: Catalog,
    location: Location,
    pending: set[Identity],
    start: Identity,
    ambiguous: set[str],
) -> tuple[set[Identity], set[str]]:
    """(values to accept, types to start again without): a one-per-person type is accepted
    when the subject's rows carry exactly one value of it, and none of it otherwise."""
    accept: set[Identity] = set()
    restart: set[str] = set()
    for id_type in sorted({i.type for i in pending}):
        if not _is_one_per_person(catalog, id_type):
            continue
        mine = {i for i in location.identities if i.type == id_type}
        values = mine | {i for i in pending if i.type == id_type}
        if id_type not in ambiguous and len(values) == 1:
            accept |= values
        elif mine - {start} and id_type not in ambiguous:
            restart.add(id_type)  # one was searched by already: undo it
    return accept, restart


@dataclass
class _Others:
    """Other people's rows holding one expanded value, counted (values stay in memory)."""

    rows: dict[DatasetRef, int] = field(default_factory=dict)
    persons: set[Identity] = field(default_factory=set)
    referrers: int = 0

    @property
    def shared(self) -> bool:
        return bool(self.rows) or self.referrers > 0


def _others(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    id_type: str,
    values: set[str],
) -> _Others:
    """Who else holds any of `values`: rows of datasets naming people by several identifier
    types that none of the subject's identities match, and rows of others pointing at rows
    holding one."""
    others = _Others()
    for ds in catalog.datasets:
        columns = ds.holds_subject.get(id_type)
        if not columns or not _reachable(catalog, warehouse, ds):
            continue
        referred = [(d, r) for d, r in catalog.referrers(ds) if _reachable(catalog, warehouse, d)]
        if len(ds.holds_subject) < 2 and not referred:
            continue  # one identifier type, nobody points here: the rows cannot tell people apart
        with warehouse.connect(ds) as conn:
            table = _table(warehouse, ds)
            holding = _match(conn, catalog, table, id_type, columns, values)
            if len(ds.holds_subject) > 1:
                theirs = sa.and_(holding, _not_subjects(conn, catalog, table, ds, location))
                rows = _count(conn, table, theirs, ds)
                if rows:
                    others.rows[ds.ref] = rows
                    others.persons |= set(_keys_of(conn, catalog, table, ds, theirs))
            keys = {
                r.key: [
                    k
                    for k in conn.execute(
                        sa.select(_column(table, ds, r.key)).where(holding).distinct()
                    ).scalars()
                    if k is not None
                ]
                for _, r in referred
            }
        for referrer, ref in referred:
            if not keys[ref.key]:
                continue
            with warehouse.connect(referrer) as conn:
                table = _table(warehouse, referrer)
                pointing = sa.and_(
                    _column(table, referrer, ref.column).in_(keys[ref.key]),
                    _not_subjects(conn, catalog, table, referrer, location),
                )
                others.referrers += _count(conn, table, pointing, referrer)
    return others


def _reachable(catalog: Catalog, warehouse: Warehouse, ds: DatasetSpec) -> bool:
    """Whether locate can count in `ds`: connected, and as the catalog describes it (what is
    not is a question of its own: rule 2c, or a drift gap)."""
    return ds.connection is not None and catalog_drift(catalog, warehouse, ds) is None


def _not_subjects(
    conn: Connection, catalog: Catalog, table: sa.Table, ds: DatasetSpec, location: Location
) -> sa.ColumnElement[bool]:
    """Rows none of the subject's identities match (NULL-safe: a NULL names nobody)."""
    by_type: dict[str, set[str]] = {}
    for identity in location.identities:
        by_type.setdefault(identity.type, set()).add(identity.value)
    parts = [
        _match(conn, catalog, table, t, cols, by_type[t])
        for t, cols in sorted(ds.holds_subject.items())
        if by_type.get(t)
    ]
    if not parts:
        return sa.true()
    return sa.not_(sa.func.coalesce(sa.or_(*parts), sa.false()))


def _keys_of(
    conn: Connection,
    catalog: Catalog,
    table: sa.Table,
    ds: DatasetSpec,
    where: sa.ColumnElement[bool],
) -> Iterator[Identity]:
    """The one-per-person values on the rows `where` selects: who those rows are."""
    for id_type, columns in sorted(ds.holds_subject.items()):
        if not _is_one_per_person(catalog, id_type):
            continue
        matcher = Matcher.of(catalog, id_type)
        for name in columns:
            query = sa.select(_column(table, ds, name)).where(where).distinct()
            for value in conn.execute(query).scalars():
                canonical = matcher.canonical(value)
                if canonical is not None:
                    yield Identity(id_type, canonical)


def _withhold(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    held: set[Identity],
) -> None:
    """Count, per type, why the held-back values were not searched by, and per dataset the
    rows reached only through them (rows the subject's identities or references select are
    the subject's, and stay located)."""
    by_type: dict[str, set[str]] = {}
    for identity in held:
        by_type.setdefault(identity.type, set()).add(identity.value)
    for id_type, values in sorted(by_type.items()):
        others = _others(catalog, warehouse, location, id_type, values)
        countable = any(_is_one_per_person(catalog, t) for t in catalog.identifiers)
        location.held_back[id_type] = HeldBack(
            identifier_type=id_type,
            values=len(values),
            one_per_person=_is_one_per_person(catalog, id_type),
            other_rows=dict(others.rows),
            other_persons=len(others.persons) if countable else None,
            other_referrers=others.referrers,
        )
    if not by_type:
        return
    for ds in catalog.datasets:
        held_types = sorted(t for t in ds.holds_subject if t in by_type)
        if not held_types or not _reachable(catalog, warehouse, ds):
            continue
        with warehouse.connect(ds) as conn:
            table = _table(warehouse, ds)
            reached = sa.or_(
                *(
                    _match(conn, catalog, table, t, ds.holds_subject[t], by_type[t])
                    for t in held_types
                )
            )
            located = location.located.get(ds.ref)
            if located is not None:
                reached = sa.and_(reached, sa.not_(sa.func.coalesce(located.predicate, sa.false())))
            rows = _count(conn, table, reached, ds)
        if rows:
            location.withheld[ds.ref] = Withheld(
                dataset=ds,
                rows=rows,
                columns=sorted({c for t in held_types for c in ds.holds_subject[t]}),
                identifier_types=held_types,
            )


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


# At most this many rows per dataset are read for personal data, and this many values kept.
_TERM_ROWS = 100
_MAX_TERMS = 500
_MIN_TERM = 4  # characters: a shorter value is a house number or a code, not the person


@dataclass
class PersonalData:
    """The personal data on the subject's rows that free text must not carry: the values of
    `pii_columns` that are not identifiers, and apart from them the values of columns whose
    name says they are names (erasure.free_text reads each part of a name too)."""

    values: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def personal_data(warehouse: Warehouse, location: Location) -> PersonalData:
    """What `PersonalData` says, read from the located rows (sealed with the identities)."""
    values: set[str] = set()
    names: set[str] = set()
    for ref in sorted(location.located):
        hit = location.located[ref]
        identifying = {c for cols in hit.dataset.holds_subject.values() for c in cols}
        columns = [c for c in hit.dataset.pii_columns if c not in identifying]
        if not columns or hit.rows == 0:
            continue
        with warehouse.connect(hit.dataset) as conn:
            table = _table(warehouse, hit.dataset)
            # A pii column gone from the table holds nothing to read (drift names it).
            columns = [c for c in columns if c in table.c]
            if not columns:
                continue
            selected = [table.c[c] for c in columns]
            rows = conn.execute(sa.select(*selected).where(hit.predicate).limit(_TERM_ROWS)).all()
        for row in rows:
            for name, value in zip(columns, row, strict=True):
                text = " ".join(value.split()) if isinstance(value, str) else ""
                if len(text) >= _MIN_TERM:  # "3", "UK": refusing them refuses "Art. 17(3)"
                    (names if "name" in name.lower() else values).add(text)
    return PersonalData(values=sorted(values)[:_MAX_TERMS], names=sorted(names)[:_MAX_TERMS])


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
    location.lakehouse = locate_lakehouse(
        catalog, warehouse, location.identities, via="parked", history=False
    )
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
