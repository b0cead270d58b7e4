"""The second look (DESIGN section 1, step 6): count the subject again wherever the act step
erased rows or rebuilt an artefact; every count must be 0.

Three searches, any hit counts: the predicates of the original `Location` (the rows that were
there), a fresh `locate()` with the original subject (rows that arrived meanwhile), and, for
rebuilt artefacts, every column named like a root's identifier column (`customer_id`,
`email`) matched against the identity values the first location expanded to (in memory).
"""

from __future__ import annotations

import sqlalchemy as sa
from pydantic import BaseModel

from erasure.actions.erase_rows import subject_rows
from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import CatalogError, VerificationFailed
from erasure.locate import Identity, Location, locate, match_identity
from erasure.model import Action, DatasetRef, Plan, SubjectRef
from erasure.warehouse import Warehouse

_CHECKED = (Action.ERASE_ROWS, Action.REBUILD)


class Recount(BaseModel):
    """The subject's rows found in one erased or rebuilt dataset after the act step."""

    dataset: str
    action: Action
    expected: int = 0
    found: int
    ok: bool
    searched_by: list[str]  # how the subject was looked for; empty: nothing to search by


def recount(
    catalog: Catalog,
    warehouse: Warehouse,
    subject: SubjectRef,
    location: Location,
    plan: Plan,
    *,
    check: bool = True,
) -> list[Recount]:
    """Count the subject in every erase_rows and rebuild dataset of the plan.

    With `check` (the default) raises VerificationFailed, naming datasets and counts, when
    any count is not 0; the recounts ride on the exception for the record.
    """
    warehouse.forget_tables()  # rebuilds replaced tables: read their current columns
    fresh = locate(catalog, warehouse, subject)
    identities = location.identities | fresh.identities
    by_column = _identifier_columns(catalog, location)
    recounts = []
    for item in plan.items:
        if item.action not in _CHECKED:
            continue
        ds = catalog.dataset(DatasetRef(item.dataset["namespace"], item.dataset["name"]))
        if ds is None:
            raise CatalogError(
                f"plan item {item.dataset['name']!r} is not in the catalog: the plan was made "
                "with another catalog; re-plan"
            )
        recounts.append(
            _recount_one(
                catalog, warehouse, ds, item.action, location, fresh, identities, by_column
            )
        )
    failed = [r for r in recounts if not r.ok]
    if check and failed:
        found = ", ".join(f"{r.dataset}: {r.found} row(s)" for r in failed)
        raise VerificationFailed(
            f"the subject is still found in {len(failed)} dataset(s) after the act step "
            f"({found}; expected 0). Erase or rebuild them again, then verify again",
            recounts,
        )
    return recounts


def _recount_one(
    catalog: Catalog,
    warehouse: Warehouse,
    ds: DatasetSpec,
    action: Action,
    location: Location,
    fresh: Location,
    identities: set[Identity],
    by_column: dict[str, set[str]],
) -> Recount:
    table = warehouse.table(ds) if ds.connection is not None else None
    if table is None:
        # No table (dropped, or not in a warehouse we can query): no rows to hold the subject.
        return Recount(dataset=ds.name, action=action, found=0, ok=True, searched_by=[])
    searched: list[str] = []
    with warehouse.connect(ds) as conn:
        clauses: list[sa.ColumnElement[bool]] = []
        for label, found in (("original location", location), ("fresh locate", fresh)):
            located = found.located.get(ds.name)
            if located is not None:
                clauses.append(subject_rows(table, located))
                searched.append(f"{label}: {', '.join(located.columns)}")
        if action is Action.REBUILD:
            for column in table.columns:
                types = by_column.get(column.name, set())
                matching = [i for i in identities if i.type in types]
                if not matching:
                    continue
                clauses.extend(
                    match_identity(conn, catalog, table, [column.name], i) for i in matching
                )
                searched.append(f"identifier column: {column.name}")
        if not clauses:
            return Recount(dataset=ds.name, action=action, found=0, ok=True, searched_by=[])
        query = sa.select(sa.func.count()).select_from(table).where(sa.or_(*clauses))
        found_rows = int(conn.execute(query).scalar_one())
    return Recount(
        dataset=ds.name, action=action, found=found_rows, ok=found_rows == 0, searched_by=searched
    )


def _identifier_columns(catalog: Catalog, location: Location) -> dict[str, set[str]]:
    """Column name -> identifier types, from the holds_subject of the located roots."""
    by_column: dict[str, set[str]] = {}
    for name in location.located:
        for id_type, columns in catalog.by_name(name).holds_subject.items():
            for column in columns:
                by_column.setdefault(column, set()).add(id_type)
    return by_column
