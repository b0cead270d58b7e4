"""What a restore replay leaves in the datasets its table points at (catalog `references`).

Rows found only by reference hold no identifier to match, so a replay never erases them; it
counts, in its delete's transaction, the rows of each dataset its erased rows pointed at that
no row of any catalogued referrer on the same connection points at once they are gone, and
the record and the operator's output say the operator must erase them. Counts only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.catalog import Catalog, DatasetSpec, ReferenceSpec
from erasure.errors import CatalogError
from erasure.matching import exact_key
from erasure.replay_record import Attempt, ReferenceLeft
from erasure.warehouse import Warehouse, count_rows

VALUES_PER_STATEMENT = 500  # bound values per statement (SQLite before 3.32 allows 999)


@dataclass(frozen=True)
class Pointed:
    """One catalog reference of the replayed table, resolved before the transaction."""

    reference: ReferenceSpec
    dataset: DatasetSpec | None
    table: sa.Table | None
    referrers: list[tuple[ReferenceSpec, sa.Table]]  # on this connection, pointing at it too
    note: str | None  # why its rows are not counted


def referenced_tables(catalog: Catalog, warehouse: Warehouse, ds: DatasetSpec) -> list[Pointed]:
    """Each reference of `ds` with the tables to count in (reflected before the replay's
    transaction takes its locks), or why its rows cannot be counted."""
    out = []
    for ref in ds.references:
        try:
            pointed = catalog.target_of(ref)
        except CatalogError:
            out.append(Pointed(ref, None, None, [], "not in the catalog: not counted"))
            continue
        if pointed.connection != ds.connection:
            note = "on another connection than this table: not counted"
            out.append(Pointed(ref, pointed, None, [], note))
            continue
        table = warehouse.table(pointed)
        if table is None or ref.key not in table.c:
            out.append(Pointed(ref, pointed, None, [], "not in the warehouse: not counted"))
            continue
        referrers = []
        for referrer, via in catalog.referrers(pointed):
            if via.key != ref.key or referrer.connection != ds.connection:
                continue
            source = warehouse.table(referrer)
            if source is not None and via.column in source.c:
                referrers.append((via, source))
        out.append(Pointed(ref, pointed, table, referrers, None))
    return out


def references_left(
    conn: Connection,
    table: sa.Table,
    pointed_by: Mapping[str, set[Any]],
    pointed_at: Sequence[Pointed],
) -> list[ReferenceLeft]:
    """For each dataset this table points at: its rows the rows being erased pointed at that
    no row of any catalogued referrer on this connection points at once they are gone
    (counted in the delete's transaction, never read out)."""
    out = []
    for pointed in pointed_at:
        ref = pointed.reference
        if pointed.table is None or ref.column not in table.c:
            note = pointed.note or f"column {ref.column} is not in the table: not counted"
            out.append(ReferenceLeft(
                dataset=ref.dataset, column=ref.column, key=ref.key, rows_unreferenced=None,
                note=note,
            ))  # fmt: skip
            continue
        values = set(pointed_by.get(ref.column, ()))
        still: set[Any] = set()
        for via, source in pointed.referrers:
            column = source.c[via.column]
            for chunk in chunked(values - still):
                query = sa.select(column).where(exact_key(conn, column).in_(chunk)).distinct()
                still.update(conn.execute(query).scalars())
        key = pointed.table.c[ref.key]
        orphans = sum(
            count_rows(conn, pointed.table, exact_key(conn, key).in_(chunk))
            for chunk in chunked(values - still)
        )
        out.append(
            ReferenceLeft(dataset=ref.dataset, column=ref.column, key=ref.key,
                          rows_unreferenced=orphans)
        )  # fmt: skip
    return out


def references_over(attempts: Sequence[Attempt]) -> list[ReferenceLeft]:
    """Each reference's rows left over every attempt that deleted (None if any was not
    counted); the last attempt's when none deleted."""
    deleting = [a for a in attempts if a.rows_deleted] or list(attempts[-1:])
    merged: dict[tuple[str, str, str], ReferenceLeft] = {}
    for attempt in deleting:
        for left in attempt.references:
            key = (left.dataset, left.column, left.key)
            seen = merged.get(key)
            if seen is None:
                merged[key] = left
            elif seen.rows_unreferenced is None or left.rows_unreferenced is None:
                merged[key] = seen.model_copy(update={"rows_unreferenced": None})
            else:
                total = seen.rows_unreferenced + left.rows_unreferenced
                merged[key] = seen.model_copy(update={"rows_unreferenced": total})
    return [merged[k] for k in sorted(merged)]


def chunked(found: Iterable[Any]) -> Iterator[list[Any]]:
    """`found` in a stable order, VALUES_PER_STATEMENT at a time."""
    ordered = sorted(found, key=lambda v: (type(v).__name__, str(v)))
    for start in range(0, len(ordered), VALUES_PER_STATEMENT):
        yield ordered[start : start + VALUES_PER_STATEMENT]
