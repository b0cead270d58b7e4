"""Rule 2 for a lakehouse table: the subject's rows deleted, and their history with them.

A delete leaves every older snapshot (Iceberg) or version (Delta) serving the rows, and the
files behind them on disk, until they are expired and removed. So the erasure deletes the
rows copy-on-write (no deletion vector or delete file keeps them in a data file), expires
every snapshot still holding them and removes the files only they referenced
(erasure.lakehouse). The evidence says when the last of it went: the effective date of this
artefact's erasure. A retry resumes: the delete finds nothing, the expiry what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from erasure.actions.erased import ErasureEvidence
from erasure.catalog import Catalog
from erasure.errors import EraseRefused
from erasure.lakehouse import HistoryErasure
from erasure.locate import Location
from erasure.locate_lakehouse import SubjectMatch, search_values, shown_refs
from erasure.model import DatasetRef
from erasure.warehouse import Warehouse


def erase_lakehouse(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    dataset: DatasetRef,
    *,
    before_commit: Callable[[ErasureEvidence], None] | None = None,
    earlier: ErasureEvidence | None = None,
) -> ErasureEvidence:
    """Delete the located subject's rows of one lakehouse table and expire their history;
    `before_commit` logs the evidence before the delete commits, `earlier` is what an
    earlier try so logged (its counts stand when this try finds the rows gone)."""
    ds = catalog.require(dataset)
    if ds.lakehouse is None:
        raise EraseRefused(f"dataset {ds.name!r} is no lakehouse table of the catalog")
    table = warehouse.lakehouse_table(ds)
    match = SubjectMatch(catalog, ds, location.identities)
    found = location.lakehouse.get(ds.ref)
    values = found.values if found is not None else {}
    present = set(table.columns())
    columns = [c for c in match.columns if c in present]

    def shown(history: HistoryErasure) -> HistoryErasure:
        # A tag may be named after the person: its name is kept only when it is plain.
        return history.model_copy(
            update={"refs_kept": shown_refs(history.refs_kept, match, values)}
        )

    def logged(history: HistoryErasure) -> None:
        if before_commit is not None:
            before_commit(_evidence(ds.name, table.format, values, shown(history), None))

    staged = earlier.history.get("staged", []) if earlier and earlier.history else []
    with warehouse.holding(table):
        history = table.erase(
            values,
            match,
            columns,
            before_commit=logged,
            staged_before=staged,
            # What verify searches for too: a history-only table has no values found now.
            search=search_values(values, match),
        )
    return _evidence(ds.name, table.format, values, shown(history), earlier)


def _evidence(
    name: str,
    table_format: str,
    values: dict[str, set[object]],
    history: HistoryErasure,
    earlier: ErasureEvidence | None,
) -> ErasureEvidence:
    rows_before, rows_deleted = history.rows_before, history.rows_deleted
    if earlier is not None and not rows_deleted:
        # That try logged its delete before committing and died; the rows are gone now, so
        # its count stands (as erase_rows takes an earlier try's).
        rows_before, rows_deleted = earlier.rows_before, earlier.rows_deleted
    statement = (
        f"{table_format} copy-on-write delete where "
        + " or ".join(f"{column} in ({len(v)} value(s))" for column, v in sorted(values.items()))
        if values
        else None
    )
    return ErasureEvidence(
        dataset=name,
        rows_before=rows_before,
        rows_deleted=rows_deleted,
        rows_after=history.rows_after,
        statement=statement if statement is not None else (earlier and earlier.statement),
        executed_at=datetime.now(UTC),
        already_done=history.already_done and earlier is None,
        history=history.model_dump(mode="json"),
    )
