"""The second look (DESIGN section 1, step 6): count the subject again wherever the act step
erased rows or rebuilt an artefact (every count must be 0), and check every other promise of
the plan: each action done, each per-subject key gone, each tombstone present, nothing new
found by a re-plan, the identifier gone from Airflow.

It is independent of locate: it reuses none of locate's SQL predicates. Each checked dataset
is read whole, one row per distinct combination of its identifying columns, and Python
decides which rows are the subject's (`erasure.matching`), so a blind spot of the SQL that
located and erased the rows is caught here and the request fails instead of completing.

Columns looked at: the dataset's own `holds_subject` columns; for a rebuilt artefact, every
column named like a root's identifier column (`customer_id`, `email`); for a dataset located
through a reference, its key column against the parked key values. A dataset with none of
these is *not checkable* and passes only on a proof of a fresh write; one the catalog no
longer describes (erasure.drift) fails. A check with nothing to look at never passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, Field
from sqlalchemy.engine import Connection

from erasure.catalog import Catalog, DatasetKind, DatasetSpec, shown_name
from erasure.drift import catalog_drift
from erasure.errors import CatalogError, VerificationFailed
from erasure.keys.keystore import SubjectKeyStore
from erasure.locate_lakehouse import SubjectMatch
from erasure.matching import Matcher, NearMiss, exact_key, near_miss_kind
from erasure.model import (
    LAKEHOUSE_REF_RULE,
    SHARED_IDENTITY_RULE,
    Action,
    DatasetRef,
    Evidence,
    GapKind,
    Identity,
    Plan,
    PlanItem,
)
from erasure.pseudonym import Pepper, subject_hash
from erasure.registry.action_log import ActionStatus
from erasure.suppression import SuppressionList
from erasure.warehouse import Warehouse

_CHECKED = (Action.ERASE_ROWS, Action.REBUILD)
# Actions a re-plan may newly ask for that nothing but acting again can satisfy.
_ACTED = (Action.ERASE_ROWS, Action.CRYPTO_SHRED, Action.REBUILD)
_SCAN_BATCH = 10_000

# Whether one stored value is the subject's.
_Test = Callable[[object], bool]
# What proves an artefact with nothing to search was written afresh from cleaned sources:
# a description of the proof, or None when there is none.
FreshWrite = Callable[[PlanItem], str | None]


class Check(BaseModel):
    """One check of the second look: what was looked at, how, what was found, and whether
    that is what the plan promised."""

    target: str
    check: str
    result: str
    passed: bool


class VerificationEvidence(Evidence):
    passed: bool
    checked_at: datetime
    checks: list[Check]
    replan_version: int

    def failures(self) -> list[str]:
        return [f"{c.target} ({c.check}: {c.result})" for c in self.checks if not c.passed]


def second_look(
    *,
    catalog: Catalog,
    warehouse: Warehouse,
    plan: Plan,
    replan: Plan,
    identities: Sequence[Identity],
    reference_keys: Mapping[str, Iterable[str]],
    status_of: Callable[[PlanItem], ActionStatus | None],
    ruled: Callable[[DatasetRef], bool],
    keystore: SubjectKeyStore,
    key_hashes: Sequence[str],
    suppression: SuppressionList,
    pepper: Pepper,
    submissions_held: int,
    fresh_write: FreshWrite | None = None,
    owner_deletions: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[Check], list[Recount]]:
    """Every check of the second look, and the recounts (which ones found the subject)."""
    recounts = recount(
        catalog, warehouse, identities, reference_keys, plan, check=False, fresh_write=fresh_write
    )
    checks = [
        Check(target=r.dataset, check="recount", result=r.result(), passed=r.ok) for r in recounts
    ]
    checks += _other_forms(catalog, warehouse, identities, {r.dataset for r in recounts})
    for item in plan.items:
        status = status_of(item)
        checks.append(
            Check(
                target=item.dataset.name,
                check=f"{item.action.value} done",
                result=str(status),
                passed=status is ActionStatus.DONE,
            )
        )
    for name, deletion in sorted((owner_deletions or {}).items()):
        checks.append(
            Check(
                target=name,
                check="owner deleted",
                result=f"awaiting {deletion['done_by']}'s confirmation, due {deletion['due_on']}: "
                "record it with `erasure requests confirm-deletion`"
                if deletion.get("pending")
                else f"confirmed by {deletion['confirmed_by']} at {deletion['confirmed_at']}: "
                f"{deletion['confirmation']}",
                passed=not deletion.get("pending"),
            )
        )
    # A key left in place means copies of the subject are readable, shredded or not.
    for key_hash in key_hashes:
        gone = not keystore.exists(key_hash)
        checks.append(
            Check(
                target=keystore.key_id(key_hash),
                check="key destroyed",
                result="absent" if gone else "STILL PRESENT",
                passed=gone,
            )
        )
    for identity in identities:
        present = suppression.contains(
            subject_hash(pepper, identity.type, identity.value), pepper.version
        )
        checks.append(
            Check(
                target=f"suppression_list/{identity.type}",
                check="tombstone",
                result="present" if present else "missing",
                passed=present,
            )
        )
    planned = {i.dataset for i in plan.items}
    acted = {(i.dataset, i.action) for i in plan.items}
    checks.extend(
        Check(
            target=i.dataset.name,
            check="re-plan",
            result="appeared since the plan: not handled"
            if i.dataset not in planned
            else f"now needs {i.action.value}, which the plan did not do",
            passed=False,
        )
        for i in replan.items
        if i.dataset not in planned or (i.action in _ACTED and (i.dataset, i.action) not in acted)
    )
    checks += producers_changed(plan, replan)
    checks.extend(
        Check(
            target=g.dataset.name,
            check="catalog matches the warehouse",
            result=g.detail,
            passed=False,
        )
        for g in replan.gaps
        if g.kind is GapKind.CATALOG_DRIFT and g.dataset is not None
    )
    # A lakehouse table escalated because another person's key is on the rows (2b) or a tag
    # keeps them (2d): the DPO's ruling covers the rows left there, as it does a shared row.
    held_by_ruling = {
        i.dataset
        for i in plan.items
        if i.action is Action.ESCALATE and i.rule in (SHARED_IDENTITY_RULE, LAKEHOUSE_REF_RULE)
    }
    for root in replan.roots:
        shared = (root.shared_referrers > 0 or root.dataset in held_by_ruling) and ruled(
            root.dataset
        )
        checks.append(
            Check(
                target=root.dataset.name,
                check="re-locate",
                result=f"{root.rows} row(s) found",
                passed=root.rows == 0 or shared,
            )
        )
    checks.append(
        Check(
            target="erasure desk",
            check="sealed submission destroyed",
            result="yes" if not submissions_held else f"NOT YET ({submissions_held} kept)",
            passed=not submissions_held,
        )
    )
    return checks, recounts


def producers_changed(plan: Plan, replan: Plan) -> list[Check]:
    """A failed check for each dataset the plan rebuilt by its producer whose writers the
    re-plan finds otherwise (a job that started writing it since may have put the subject
    back, or it is now written by more than one DAG)."""

    def producers(item: PlanItem) -> tuple[Any, list[str]] | None:
        if item.action is not Action.REBUILD or item.evidence.get("method") != "producer":
            return None
        return item.evidence.get("dag_id"), sorted(item.evidence.get("producer_jobs") or [])

    planned = {i.dataset: found for i in plan.items if (found := producers(i)) is not None}
    return [
        Check(
            target=i.dataset.name,
            check="re-plan",
            result="its producers changed since the plan: re-plan",
            passed=False,
        )
        for i in replan.items
        if i.dataset in planned and producers(i) != planned[i.dataset]
    ]


class Recount(BaseModel):
    """The subject's rows found in one erased or rebuilt dataset after the act step.

    A dataset with nothing to search the subject by is *not checkable*: it passes only on a
    proof of a fresh write after its sources were clean (`proof`), never on its own."""

    dataset: str
    action: Action
    expected: int = 0
    found: int
    ok: bool
    searched_by: list[str]  # how the subject was looked for; empty: nothing to search by
    problem: str | None = Field(default=None, exclude_if=lambda v: v is None)
    # Rows holding one of the subject's identifiers in another letter case than the catalog
    # says the column stores it: unexplained, so the recount fails.
    in_another_case: int = Field(default=0, exclude_if=lambda v: v == 0)
    proof: str | None = Field(default=None, exclude_if=lambda v: v is None)

    def result(self) -> str:
        if self.problem is not None:
            return self.problem
        if not self.searched_by:
            return "not checkable (no column to search the subject by): " + (
                self.proof or "no proof of a fresh write after its sources were cleaned"
            )
        if self.in_another_case:
            return (
                f"{self.found} row(s) of the subject, and {self.in_another_case} row(s) holding "
                "one of its identifiers in another letter case: if the column stores "
                "identifiers so, declare it (stored_forms in the catalog) and plan again"
            )
        return f"{self.found} row(s) of the subject"


def recount(
    catalog: Catalog,
    warehouse: Warehouse,
    identities: Iterable[Identity],
    reference_keys: Mapping[str, Iterable[str]],
    plan: Plan,
    *,
    check: bool = True,
    fresh_write: FreshWrite | None = None,
) -> list[Recount]:
    """Count the subject in every erase_rows and rebuild dataset of the plan.

    With `check` (the default) raises VerificationFailed, naming datasets and counts, when
    any recount did not pass (a count not 0, a drifted table, nothing to search and no proof
    of a fresh write); the recounts ride on the exception for the record.
    """
    warehouse.forget_tables()  # rebuilds replaced tables: read their current columns
    by_type: dict[str, set[str]] = {}
    for identity in identities:
        by_type.setdefault(identity.type, set()).add(identity.value)
    keys = {name: {str(k) for k in values} for name, values in reference_keys.items()}
    by_column = _root_identifier_columns(catalog, plan)
    recounts = []
    for item in plan.items:
        if item.action not in _CHECKED:
            continue
        ds = catalog.dataset(item.dataset)
        if ds is None:
            raise CatalogError(
                f"plan item {item.dataset.name!r} is not in the catalog: the plan was made "
                "with another catalog; re-plan"
            )
        if not catalog.described_as_planned(item.dataset, item.evidence):
            problem = (
                "described otherwise than when the plan was made (its dbt manifest, a catalog "
                "default or its own entry changed): re-plan"
            )
            recounts.append(_not_searched(ds, item.action, problem))
            continue
        counted = _recount_one(catalog, warehouse, ds, item.action, by_type, keys, by_column)
        if not counted.searched_by and counted.problem is None:
            proof = fresh_write(item) if fresh_write is not None else None
            counted = counted.model_copy(update={"proof": proof, "ok": proof is not None})
        recounts.append(counted)
    failed = [r for r in recounts if not r.ok]
    if check and failed:
        found = ", ".join(f"{r.dataset}: {r.result()}" for r in failed)
        raise VerificationFailed(
            f"{len(failed)} dataset(s) may still hold the subject after the act step "
            f"({found}). Erase or rebuild them again, or correct the catalog, then verify "
            "again",
            recounts,
        )
    return recounts


def _recount_one(
    catalog: Catalog,
    warehouse: Warehouse,
    ds: DatasetSpec,
    action: Action,
    by_type: Mapping[str, set[str]],
    reference_keys: Mapping[str, set[str]],
    by_column: Mapping[str, set[str]],
) -> Recount:
    if ds.lakehouse is not None:
        copies = by_column if action is Action.REBUILD else {}
        return _recount_lakehouse(catalog, warehouse, ds, action, by_type, copies)
    if ds.connection is None:  # not in a warehouse this system can query
        return _not_searched(ds, action)
    drift = catalog_drift(catalog, warehouse, ds)
    table = warehouse.table(ds)
    if drift is not None or table is None:
        return _not_searched(ds, action, drift or f"table {ds.name!r} not found")
    if ds.kind is DatasetKind.VIEW and not warehouse.is_view(ds):
        # A view holds no rows (its proof); a table of that name may hold the subject's.
        return _not_searched(
            ds,
            action,
            f"the catalog says {ds.name!r} is a view, but the warehouse holds it as a table, "
            "which keeps rows: catalog it as what it is (or rebuild it as a view), then "
            "verify again",
        )
    tests, near, searched = _identifier_tests(catalog, ds, by_type)
    if action is Action.REBUILD:
        for column in table.columns:
            for id_type in sorted(by_column.get(column.name, set())):
                if by_type.get(id_type):
                    matches = _is_one_of(catalog, id_type, by_type[id_type], column=column.name)
                    tests.setdefault(column.name, []).append(matches)
                    searched.append(f"identifier column: {column.name}")
    key = _reference_key(catalog, ds)
    # Parked by the referenced dataset's qualified name (locate.parked_location).
    wanted = reference_keys.get(ds.ref.qualified) or reference_keys.get(ds.name) or set()
    if key is not None and key in table.c and wanted:
        tests.setdefault(key, []).append(lambda v: v is not None and str(v) in wanted)
        searched.append(f"reference key: {key}")
    if not tests:
        return _not_searched(ds, action)
    with warehouse.connect(ds) as conn:
        found, unexplained = _count_rows(conn, table, tests, near)
    return Recount(
        dataset=ds.name,
        action=action,
        found=found,
        ok=found == 0 and unexplained == 0,
        searched_by=searched,
        in_another_case=unexplained,
    )


def _recount_lakehouse(
    catalog: Catalog,
    warehouse: Warehouse,
    ds: DatasetSpec,
    action: Action,
    by_type: Mapping[str, set[str]],
    copies: Mapping[str, set[str]],
) -> Recount:
    """A lakehouse table read again at every snapshot it keeps (branches and tags too), and
    every file under it scanned for the subject's values: what time travel or a file read
    could still return, read independently of the erasure's own bookkeeping.

    A rebuilt table with no column to search by keeps no snapshot from before its rebuild
    (those may hold rows derived from the subject), and is then proven like any other."""
    identities = [Identity(t, v) for t, values in by_type.items() for v in values]
    table = warehouse.lakehouse_table(ds)
    present = set(table.columns())
    match = SubjectMatch(catalog, ds, identities, {c: copies[c] for c in present if c in copies})
    columns = [c for c in match.columns if c in present]
    if not columns and action is Action.REBUILD:
        with warehouse.holding(table):
            kept = table.residue(match, [], {}).snapshots_checked
        if kept > 1:
            return _not_searched(
                ds,
                action,
                f"{kept - 1} snapshot(s) from before its rebuild are still kept: they may "
                "hold rows derived from the subject; rebuild it again (expires them)",
            )
        return _not_searched(ds, action)
    if not columns:
        missing = ", ".join(match.columns) or "none the subject has values of"
        return _not_searched(
            ds,
            action,
            f"the table has none of its identifier columns ({missing}): correct the catalog, "
            "then verify again",
        )
    with warehouse.holding(table):  # not while another erasure has staged its files
        residue = table.residue(match, columns, {c: set(match.identities) for c in columns})
    problem = None
    if residue.files_unreadable:
        problem = (
            f"{len(residue.files_unreadable)} file(s) under the table could not be read "
            f"({', '.join(_shown_path(f) for f in residue.files_unreadable[:5])}; a partition "
            "value in a path is not "
            "repeated): nothing shows they do not hold the subject; make them readable or "
            "remove them, then verify again"
        )
    elif residue.snapshots_unreadable:
        problem = (
            f"{len(residue.snapshots_unreadable)} snapshot(s) the table keeps could not be "
            f"read ({', '.join(residue.snapshots_unreadable[:5])}): nothing shows they do "
            "not hold the subject; repair or expire them, then verify again"
        )
    elif not residue.snapshots_checked:
        problem = "no snapshot of the table could be read: nothing was checked"
    in_snapshots = sum(residue.rows_by_snapshot.values())
    found = in_snapshots + len(residue.files_holding)
    searched = [f"identifier column: {c}" for c in columns]
    searched.append(f"{residue.snapshots_checked} snapshot(s) and {residue.files_checked} file(s)")
    if found and problem is None:
        where = [f"{n} row(s) in snapshot {s}" for s, n in sorted(residue.rows_by_snapshot.items())]
        if residue.files_holding:
            shown = ", ".join(_shown_path(f) for f in residue.files_holding[:5])
            more = ", …" if len(residue.files_holding) > 5 else ""
            where.append(f"{len(residue.files_holding)} file(s) on disk: {shown}{more}")
        problem = (
            f"the subject is still in the table's history ({'; '.join(where)}): erase it "
            "again (expires them), then verify again"
        )
    return Recount(
        dataset=ds.name,
        action=action,
        found=found,
        ok=found == 0 and problem is None,
        searched_by=searched,
        problem=problem,
    )


def _shown_path(path: str) -> str:
    """A file's path as a message may repeat it: each part a plain name (a file written
    outside the table's location may sit under a folder named after the person)."""
    parts = path.split("/")
    return "/".join(
        p if not p or _ENGINE_FILE.fullmatch(p) or shown_name(p, "") == repr(p) else "…"
        for p in parts
    )


# A file name an engine wrote (a UUID in it): `00000-0-<uuid>.parquet`, `snap-<id>-<uuid>.avro`.
_ENGINE_FILE = re.compile(
    r"[\w.-]*[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}[\w.-]*"
)


def _not_searched(ds: DatasetSpec, action: Action, problem: str | None = None) -> Recount:
    """A recount that could not search the dataset: it fails unless a fresh write is proven
    (no `problem`), or always (a `problem` with it)."""
    return Recount(
        dataset=ds.name, action=action, found=0, ok=False, searched_by=[], problem=problem
    )


def _identifier_tests(
    catalog: Catalog, ds: DatasetSpec, by_type: Mapping[str, set[str]]
) -> tuple[dict[str, list[_Test]], dict[str, list[_Test]], list[str]]:
    """For each `holds_subject` column the subject has values of a type for: whether a stored
    value is the subject's (in the column's declared form), whether it is one of theirs in
    another letter case, and how it was searched."""
    tests: dict[str, list[_Test]] = {}
    near: dict[str, list[_Test]] = {}
    searched: list[str] = []
    for id_type, columns in ds.holds_subject.items():
        values = by_type.get(id_type)
        if not values:
            continue
        for name in columns:
            tests.setdefault(name, []).append(_is_one_of(catalog, id_type, values, ds, name))
            near.setdefault(name, []).append(_in_another_case(catalog, id_type, values, ds, name))
            searched.append(f"{id_type}: {name}")
    return tests, near, searched


def _other_forms(
    catalog: Catalog,
    warehouse: Warehouse,
    identities: Iterable[Identity],
    recounted: set[str],
) -> list[Check]:
    """Every other dataset holding identifiers (those locate searched): rows that hold one of
    the subject's identifiers in another letter case than the catalog says the column stores
    it. Locate matched none of them exactly, so they are not erased: unexplained, they fail."""
    by_type: dict[str, set[str]] = {}
    for identity in identities:
        by_type.setdefault(identity.type, set()).add(identity.value)
    checks = []
    for ds in catalog.datasets:
        if ds.name in recounted or ds.connection is None or not ds.holds_subject:
            continue
        table = warehouse.table(ds)
        if table is None or catalog_drift(catalog, warehouse, ds) is not None:
            continue  # drift is the re-plan's failed check
        tests, near, _searched = _identifier_tests(catalog, ds, by_type)
        if not tests:
            continue
        with warehouse.connect(ds) as conn:
            _found, unexplained = _count_rows(conn, table, tests, near)
        checks.append(
            Check(
                target=ds.name,
                check="identifiers in another letter case",
                result=f"{unexplained} row(s) hold one of the subject's identifiers in another "
                "letter case than the catalog says: if the column stores identifiers so, "
                "declare it (stored_forms in the catalog) and plan again"
                if unexplained
                else "none",
                passed=unexplained == 0,
            )
        )
    return checks


def _count_rows(
    conn: Connection,
    table: sa.Table,
    tests: Mapping[str, list[_Test]],
    near: Mapping[str, list[_Test]] | None = None,
) -> tuple[int, int]:
    """Rows where any tested column holds the subject, and rows that do not but hold one of
    its identifiers in another letter case (`near`): every distinct combination of those
    columns read once and decided in Python (a full scan, on purpose)."""
    names = sorted(tests)
    columns = [exact_key(conn, table.c[n]) for n in names]
    query = sa.select(*columns, sa.func.count()).group_by(*columns)
    found = unexplained = 0
    near = near or {}
    for row in conn.execution_options(yield_per=_SCAN_BATCH).execute(query):
        values: tuple[Any, ...] = tuple(row)
        if any(test(values[i]) for i, name in enumerate(names) for test in tests[name]):
            found += int(values[-1])
        elif any(test(values[i]) for i, name in enumerate(names) for test in near.get(name, [])):
            unexplained += int(values[-1])
    return found, unexplained


# Near-miss kinds that are the subject's identifier as a case-changing system wrote it: a
# column the catalog does not say stores it so (stored_forms) fails the recount.
_ANOTHER_CASE = frozenset({NearMiss.CASE, NearMiss.TURKISH_I})


def _in_another_case(
    catalog: Catalog, id_type: str, values: set[str], ds: DatasetSpec, column: str
) -> _Test:
    matcher = Matcher.for_column(catalog, ds, column, id_type)
    kinds = [near_miss_kind(matcher, key) for key in matcher.target_keys(values)]
    return lambda stored: any(kind(stored) in _ANOTHER_CASE for kind in kinds)


def _is_one_of(
    catalog: Catalog,
    id_type: str,
    values: set[str],
    ds: DatasetSpec | None = None,
    column: str | None = None,
) -> _Test:
    if column is None:
        return Matcher.of(catalog, id_type).matches(values)
    if ds is None:  # a derived copy: the column may keep any form a source stored it in
        return Matcher.any_form_of(catalog, column, id_type)(values)
    return Matcher.for_column(catalog, ds, column, id_type).matches(values)


def _reference_key(catalog: Catalog, ds: DatasetSpec) -> str | None:
    """The key column other datasets reference `ds` by (one per dataset; see locate)."""
    keys = {ref.key for d in catalog.datasets for ref in d.references if ref.dataset == ds.name}
    return next(iter(keys)) if len(keys) == 1 else None


def _root_identifier_columns(catalog: Catalog, plan: Plan) -> dict[str, set[str]]:
    """Column name -> identifier types, from the holds_subject of the plan's roots."""
    by_column: dict[str, set[str]] = {}
    for root in plan.roots:
        ds = catalog.dataset(root.dataset)
        if ds is None:
            continue
        for id_type, columns in ds.holds_subject.items():
            for column in columns:
                by_column.setdefault(column, set()).add(id_type)
    return by_column
