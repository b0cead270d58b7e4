"""Find the subject: every dataset holding their rows, by normalised value, with identity
expansion through datasets that carry several identifier types, and one-way references.

Values found along the way live in memory only; what leaves this module (RootHit) carries
types, column names and counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import SubjectError, WarehouseError
from erasure.model import RootHit, SubjectRef
from erasure.pseudonym import normalise
from erasure.warehouse import Warehouse

# Phone numbers are stored in any format; the SQL prefilter compares trailing digits and the
# exact E.164 comparison happens on the few candidates in Python.
_PHONE_SUFFIX_DIGITS = 7


@dataclass(frozen=True)
class Identity:
    """One normalised identifier value of the subject (never logged or serialised)."""

    type: str
    value: str

    def __repr__(self) -> str:
        return f"Identity(type={self.type!r}, value=<redacted>)"


@dataclass
class Located:
    """A dataset holding the subject, with the predicate that selects exactly their rows."""

    dataset: DatasetSpec
    identifier_type: str
    columns: list[str]
    predicate: sa.ColumnElement[bool]
    rows: int
    via: str
    shared_referrers: int = 0
    shared_rows: int = 0

    def hit(self) -> RootHit:
        return RootHit(
            dataset=self.dataset.ref.as_dict(),
            identifier_type=self.identifier_type,
            columns=self.columns,
            rows=self.rows,
            via=self.via,
            shared_referrers=self.shared_referrers,
        )


@dataclass
class Location:
    """Everything found for one subject."""

    identities: set[Identity] = field(default_factory=set)
    located: dict[str, Located] = field(default_factory=dict)  # by dataset name

    def roots(self) -> list[RootHit]:
        return [self.located[name].hit() for name in sorted(self.located)]


def delete_statement(warehouse: Warehouse, located: Located) -> str:
    """The DELETE that erases the subject's rows, as SQL text with placeholders, no values."""
    statement = sa.delete(_table(warehouse, located.dataset)).where(located.predicate)
    engine = warehouse.engine(located.dataset.connection or "")
    sql = statement.compile(engine, compile_kwargs={"render_postcompile": True})
    return " ".join(str(sql).split())


def normalise_subject(catalog: Catalog, subject: SubjectRef) -> Identity:
    """The request's identifier in canonical form; SubjectError names the allowed types."""
    spec = catalog.identifiers.get(subject.type)
    if spec is None:
        raise SubjectError(
            f"identifier type {subject.type!r} is not in the catalog; "
            f"allowed: {', '.join(sorted(catalog.identifiers))}"
        )
    value = normalise(
        spec.normalise, subject.value.get_secret_value(), default_region=spec.default_region
    )
    return Identity(subject.type, value)


def locate(catalog: Catalog, warehouse: Warehouse, subject: SubjectRef) -> Location:
    """Find every row of the subject, expanding identity until nothing new appears."""
    start = normalise_subject(catalog, subject)
    location = Location(identities={start})
    pending = [start]
    origin: dict[Identity, str] = {start: "request"}
    holders = [ds for ds in catalog.datasets if ds.holds_subject]
    while pending:
        identity = pending.pop()
        for ds in holders:
            columns = ds.holds_subject.get(identity.type)
            if not columns or warehouse.table(ds) is None:
                continue
            with warehouse.connect(ds) as conn:
                table = _table(warehouse, ds)
                predicate = match_identity(conn, catalog, table, columns, identity)
                rows = _count(conn, table, predicate, ds)
                if rows == 0:
                    continue
                _merge(location, ds, identity.type, columns, predicate, rows, origin[identity])
                for found in _other_identities(conn, catalog, table, ds, predicate):
                    if found not in location.identities:
                        location.identities.add(found)
                        origin[found] = f"identity:{ds.name}.{found.type}"
                        pending.append(found)
    _follow_references(catalog, warehouse, location)
    for hit in location.located.values():
        if hit.rows < 0:
            with warehouse.connect(hit.dataset) as conn:
                hit.rows = _count(conn, _table(warehouse, hit.dataset), hit.predicate, hit.dataset)
    return location


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


def match_identity(
    conn: Connection,
    catalog: Catalog,
    table: sa.Table,
    columns: list[str],
    identity: Identity,
) -> sa.ColumnElement[bool]:
    """A parameterised predicate selecting the rows whose columns equal the identity."""
    spec = catalog.identifiers[identity.type]
    ds_name = table.fullname
    clauses: list[sa.ColumnElement[bool]] = []
    for name in columns:
        col = table.c.get(name)
        if col is None:
            raise WarehouseError(f"table {ds_name!r}: column {name!r} from the catalog is missing")
        # Casting a text column would defeat its index; only other types need it.
        text_col = col if isinstance(col.type, sa.String) else sa.cast(col, sa.String)
        if spec.normalise == "e164":
            clauses.append(_phone_match(conn, table, col, identity.value, spec.default_region))
        elif spec.normalise in ("email", "lower"):
            clauses.append(
                sa.func.lower(sa.func.trim(text_col)) == sa.bindparam(None, identity.value)
            )
        else:
            clauses.append(sa.func.trim(text_col) == sa.bindparam(None, identity.value))
    return sa.or_(*clauses)


def _phone_match(
    conn: Connection,
    table: sa.Table,
    col: sa.Column[object],
    e164: str,
    region: str | None,
) -> sa.ColumnElement[bool]:
    """Rows whose phone normalises to `e164`, found by a digit-suffix prefilter."""
    suffix = "%" + "%".join(e164[-_PHONE_SUFFIX_DIGITS:])
    candidates = conn.execute(
        sa.select(col).where(sa.cast(col, sa.String).like(sa.bindparam(None, suffix))).distinct()
    ).scalars()
    exact: list[object] = []
    for stored in candidates:
        try:
            if normalise("e164", str(stored), default_region=region) == e164:
                exact.append(stored)
        except SubjectError:
            continue  # an unparseable stored number cannot be this subject's
    if not exact:
        return sa.false()
    return col.in_(exact)


def _count(
    conn: Connection, table: sa.Table, predicate: sa.ColumnElement[bool], ds: DatasetSpec
) -> int:
    try:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(table).where(predicate)
            ).scalar_one()
        )
    except sa.exc.DBAPIError:
        raise WarehouseError(
            f"dataset {ds.name!r}: counting the subject's rows failed; check the catalog's "
            "holds_subject columns against the table"
        ) from None


def _merge(
    location: Location,
    ds: DatasetSpec,
    id_type: str,
    columns: list[str],
    predicate: sa.ColumnElement[bool],
    rows: int,
    via: str,
) -> None:
    """Record a hit; a second identity for the same dataset widens its predicate."""
    current = location.located.get(ds.name)
    if current is None:
        location.located[ds.name] = Located(ds, id_type, list(columns), predicate, rows, via)
        return
    current.predicate = sa.or_(current.predicate, predicate)
    current.columns = sorted(set(current.columns) | set(columns))
    current.rows = -1  # two identities may select overlapping rows: recounted at the end


def _other_identities(
    conn: Connection,
    catalog: Catalog,
    table: sa.Table,
    ds: DatasetSpec,
    predicate: sa.ColumnElement[bool],
) -> Iterable[Identity]:
    """Values of the dataset's other identifier columns on the subject's rows."""
    for id_type, columns in ds.holds_subject.items():
        spec = catalog.identifiers[id_type]
        for name in columns:
            col = _column(table, ds, name)
            for value in conn.execute(sa.select(col).where(predicate).distinct()).scalars():
                if value is None:
                    continue
                try:
                    yield Identity(
                        id_type,
                        normalise(spec.normalise, str(value), default_region=spec.default_region),
                    )
                except SubjectError:
                    continue  # a malformed stored value names nobody


def _follow_references(catalog: Catalog, warehouse: Warehouse, location: Location) -> None:
    """Rows the subject's rows point at become roots too; shared ones are counted."""
    for name in sorted(location.located):
        holder = location.located[name]
        for ref in holder.dataset.references:
            target = catalog.by_name(ref.dataset)
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
            if not keys:
                continue
            with warehouse.connect(target) as conn:
                dst = _table(warehouse, target)
                predicate = _column(dst, target, ref.key).in_(keys)
                rows = _count(conn, dst, predicate, target)
            if rows == 0:
                continue
            shared_rows, referrers = _other_referrers(
                catalog, warehouse, location, target, ref.key, keys
            )
            via = f"reference:{holder.dataset.name}.{ref.column}"
            existing = location.located.get(target.name)
            if existing is None:
                location.located[target.name] = Located(
                    target, "reference", [ref.key], predicate, rows, via, referrers, shared_rows
                )
            else:
                existing.predicate = sa.or_(existing.predicate, predicate)
                existing.shared_referrers += referrers
                existing.shared_rows += shared_rows


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
    for ds in catalog.datasets:
        for ref in ds.references:
            if ref.dataset != target.name or ref.key != key or warehouse.table(ds) is None:
                continue
            with warehouse.connect(ds) as conn:
                table = _table(warehouse, ds)
                col = _column(table, ds, ref.column)
                own = location.located.get(ds.name)
                others: sa.ColumnElement[bool] = col.in_(keys)
                if own is not None:
                    # NULL-safe: a row whose identifier is NULL is somebody else's
                    others = sa.and_(others, sa.not_(sa.func.coalesce(own.predicate, sa.false())))
                rows = conn.execute(
                    sa.select(col, sa.func.count()).where(others).group_by(col)
                ).all()
            for value, count in rows:
                shared.add(value)
                referrers += int(count)
    return len(shared), referrers
