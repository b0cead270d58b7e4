"""Measure k-anonymity of an aggregate live: the smallest group decides.

An aggregate may stay (`aggregate_ok`) only with numbers: k required, the minimum group size
measured, how many groups and how many fall below k, over which quasi-identifiers, on which
version of the table, by which query.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from pydantic import BaseModel

from erasure.catalog import DatasetSpec
from erasure.errors import WarehouseError
from erasure.warehouse import Warehouse


class KAnonymity(BaseModel):
    """The measured evidence for one aggregate."""

    k: int
    min_group_size: int | None  # None for an empty aggregate
    groups: int
    groups_below_k: int  # below k, or of unknown size (a NULL count)
    quasi_identifiers: list[str]
    count_column: str
    table_version: str  # digest of the rows measured: the numbers hold for exactly this content
    query: str

    @property
    def passes(self) -> bool:
        return self.groups_below_k == 0 and (
            self.min_group_size is None or self.min_group_size >= self.k
        )


def measure_k(warehouse: Warehouse, ds: DatasetSpec, k: int) -> KAnonymity:
    """Minimum group size of `ds` over its count column, with the rows below `k` counted."""
    assert ds.aggregate is not None and ds.aggregate.count_column is not None
    table = warehouse.table(ds)
    if table is None:
        raise WarehouseError(f"aggregate {ds.name!r}: table does not exist in the warehouse")
    names = [*ds.aggregate.quasi_identifiers, ds.aggregate.count_column]
    missing = [n for n in names if n not in table.c]
    if missing:
        raise WarehouseError(
            f"aggregate {ds.name!r}: columns {missing} from the catalog are not in the table; "
            f"columns are: {', '.join(c.name for c in table.columns)}"
        )
    count = table.c[ds.aggregate.count_column]
    stats = sa.select(
        sa.func.min(count),
        sa.func.count(),
        # A group of unknown size (NULL count) cannot be shown to reach k: it counts below.
        sa.func.sum(sa.case((count.is_(None) | (count < sa.bindparam("k", k)), 1), else_=0)),
    ).select_from(table)
    rows = sa.select(*(table.c[n] for n in names)).order_by(*(table.c[n] for n in names))
    with warehouse.connect(ds) as conn:
        min_size, groups, below = conn.execute(stats).one()
        digest = hashlib.sha256()
        for row in conn.execute(rows):
            digest.update(repr(tuple(row)).encode())
    engine = warehouse.engine(ds.connection or "")
    query = str(stats.compile(engine, compile_kwargs={"literal_binds": True}))
    return KAnonymity(
        k=k,
        min_group_size=None if min_size is None else int(min_size),
        groups=int(groups),
        groups_below_k=int(below or 0),
        quasi_identifiers=list(ds.aggregate.quasi_identifiers),
        count_column=ds.aggregate.count_column,
        table_version=f"sha256:{digest.hexdigest()[:16]}",
        query=" ".join(query.split()),
    )
