"""Rule 2: delete the subject's rows from a mutable root, one transaction per dataset.

The rows are selected by the predicate `locate()` built (values bound as parameters, never
spliced into SQL). A second run finds nothing and says so, so a retried task is harmless.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.sql.visitors import replacement_traverse

from erasure.actions.erased import ErasureEvidence
from erasure.actions.transaction import transaction
from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import (
    EraseFailed,
    EraseRefused,
    ErasureError,
    WarehouseError,
    describe_failure,
)
from erasure.locate import Located, Location
from erasure.model import DatasetRef
from erasure.warehouse import Warehouse, count_rows, statement_text

E = TypeVar("E")


def erase_rows(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    dataset: DatasetRef,
    *,
    before_commit: Callable[[ErasureEvidence], None] | None = None,
    earlier: ErasureEvidence | None = None,
) -> ErasureEvidence:
    """Delete the located subject's rows of one dataset in one transaction; idempotent.

    `before_commit` logs the evidence before the delete commits; `earlier` is what an earlier
    try so logged: a retry that finds the rows gone (that try died after its commit) reports it.
    """
    ds = catalog.require(dataset)
    if ds.lakehouse is not None:  # its rows with its history (imported here: it uses this)
        from erasure.actions.erase_lakehouse import erase_lakehouse

        return erase_lakehouse(
            catalog, warehouse, location, dataset, before_commit=before_commit, earlier=earlier
        )
    located = location.located.get(ds.ref)
    _check_erasable(catalog, ds, located)
    if located is None and earlier is not None:
        return earlier
    if located is None:
        # locate() read the warehouse and found none of the subject's rows here: a retry
        # after the rows went, or a root that emptied itself. Nothing to delete.
        return ErasureEvidence(
            dataset=ds.name,
            rows_before=0,
            rows_deleted=0,
            rows_after=0,
            statement=None,
            executed_at=datetime.now(UTC),
            already_done=True,
        )
    return delete_located_rows(
        warehouse,
        located,
        evidence=lambda done: ErasureEvidence(
            dataset=ds.name,
            rows_before=done.rows_before,
            rows_deleted=done.rows_deleted,
            rows_after=0,
            statement=done.statement,
            executed_at=datetime.now(UTC),
            already_done=done.rows_before == 0,
        ),
        refused=lambda why: EraseFailed(
            f"dataset {ds.name!r}: deleting the subject's rows failed ({why}); rolled back, "
            "nothing deleted. If a foreign key refused it, erase the referencing dataset first "
            "(follow the plan's order)"
        ),
        before_commit=before_commit,
    )


@dataclass(frozen=True)
class Deleted:
    """What one delete of located rows did, before it commits."""

    rows_before: int
    rows_deleted: int
    statement: str  # with placeholders, never values


def delete_located_rows(
    warehouse: Warehouse,
    located: Located,
    *,
    evidence: Callable[[Deleted], E],
    refused: Callable[[str], ErasureError],
    before_commit: Callable[[E], None] | None = None,
) -> E:
    """Delete the located rows in one transaction: count them before and after (none may
    remain), log `evidence` through `before_commit` before the commit, and raise `refused`
    (with the driver's failure described, never its text) if the database refuses."""
    name = located.dataset.name
    table = warehouse.table(located.dataset)
    if table is None:
        raise WarehouseError(
            f"dataset {name!r}: table does not exist in the warehouse; re-run locate and "
            "plan before erasing"
        )
    predicate = subject_rows(table, located)
    delete = sa.delete(table).where(predicate)
    with warehouse.connect(located.dataset) as conn:
        statement = statement_text(delete, conn.dialect)
        try:
            with transaction(conn):
                before = count_rows(conn, table, predicate)
                deleted = conn.execute(delete).rowcount if before else 0
                after = count_rows(conn, table, predicate)
                if after != 0:
                    raise EraseFailed(
                        f"dataset {name!r}: {after} of the subject's row(s) remained after "
                        "the delete (a trigger or concurrent writer re-inserted them); rolled "
                        "back. Stop the writer and retry"
                    )
                result = evidence(Deleted(before, max(deleted, 0), statement))
                if before_commit is not None:
                    before_commit(result)
        except sa.exc.DBAPIError as exc:
            # `from None`: the driver's message may quote a key value and would reach logs.
            raise refused(describe_failure(exc)) from None
    return result


def subject_rows(table: sa.Table, located: Located) -> sa.ColumnElement[bool]:
    """The located predicate, re-pointed at `table` (the same table, perhaps re-reflected).

    `Warehouse.forget_tables()` (after a rebuild) yields new Table objects; a predicate still
    naming the old one would drag a second copy of the table into the FROM clause.
    """

    def swap(element: Any, **_kw: Any) -> Any:
        if (
            isinstance(element, sa.Column)
            and isinstance(element.table, sa.Table)
            and element.table is not table
            and element.table.fullname == table.fullname
        ):
            if element.name not in table.c:
                raise WarehouseError(
                    f"dataset {located.dataset.name!r}: column {element.name!r} the subject "
                    "was located by no longer exists; re-run locate"
                )
            return table.c[element.name]
        return None

    return replacement_traverse(located.predicate, {}, swap)


def _check_erasable(catalog: Catalog, ds: DatasetSpec, located: Located | None) -> None:
    if ds.storage == "immutable":
        raise EraseRefused(
            f"dataset {ds.name!r} is immutable storage: rows cannot be deleted; the plan "
            "crypto-shreds or escalates it"
        )
    if located is not None and located.shared_referrers > 0:
        raise EraseRefused(
            f"dataset {ds.name!r}: {located.shared_rows} located row(s) are also referenced by "
            f"{located.shared_referrers} row(s) of other people (rule 2a); they are escalated "
            "to the DPO and never deleted by erase_rows"
        )
    referenced = any(ref.dataset == ds.name for d in catalog.datasets for ref in d.references)
    if located is None and not ds.holds_subject and not referenced:
        raise EraseRefused(
            f"dataset {ds.name!r} neither holds the subject (no holds_subject in the catalog) "
            "nor is referenced by a dataset that does: it is no root; only erase_rows items "
            "of the plan are erased"
        )
