"""The decision procedure (DESIGN section 3): one action per artefact of the closure.

Rules are tried most conservative first; the first that fires decides and records its
evidence. Nothing the lineage reaches is dropped: what no rule can clear escalates.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from graphlib import CycleError, TopologicalSorter
from typing import Any

from erasure.catalog import Catalog, DatasetKind, DatasetSpec, ProducerRebuild, shown_name
from erasure.discover import check_undeclared_holders
from erasure.drift import drift_gaps
from erasure.errors import ErasureError, LineageError, RebuildFailed, SubjectError
from erasure.kanon import measure_k
from erasure.lineage import (
    CatalogLineage,
    Closure,
    LastWriter,
    LineageStore,
    RunEvent,
    build_lineage,
    coverage,
    erasure_view,
    shrink_gaps,
)
from erasure.locate import (
    Located,
    Location,
    Withheld,
    delete_statement,
    locate,
    normalise_subject,
)
from erasure.locate_lakehouse import LakehouseLocated
from erasure.model import (
    LAKEHOUSE_REF_RULE,
    NOT_FOUND_RULE,
    OUTSIDE_REACH_RULE,
    SHARED_IDENTITY_RULE,
    SHARED_ROW_RULE,
    UNKEYED_SHRED_RULE,
    Action,
    CycleKind,
    DatasetRef,
    Gap,
    GapKind,
    Plan,
    PlanItem,
    SubjectRef,
    SubjectSearch,
    SubjectSummary,
)
from erasure.pseudonym import Pepper, subject_hash
from erasure.redacted_names import redact_subject_names
from erasure.warehouse import Warehouse

# Gap kinds that leave a dataset's derivation unknown: the dataset escalates (rule 1).
_BLOCKING_GAPS = frozenset(
    {
        GapKind.OPAQUE_PRODUCER,
        GapKind.UNPARSEABLE_SQL,
        GapKind.NO_EVENTS,
        GapKind.CATALOG_DRIFT,
        GapKind.LINEAGE_SHRANK,
    }
)

# The suppression list stands in the plan as the target of the tombstone item, the search
# itself as the target of the question a subject found nowhere raises.
SUPPRESSION_LIST = DatasetRef("erasure", "suppression_list")
SUBJECT_SEARCH = DatasetRef("erasure", "subject_search")

# Large enough that an estate of 30,000 datasets (and eight times that) walks whole; the bound
# stays so that a runaway graph still ends as a truncated closure, which escalates.
DEFAULT_MAX_NODES = 250_000

# Names a plan withholds are keyed by the request's pepper; a plan made without one (the
# CLI's `plan` without Vault) keys them by this process's own random key.
_PROCESS_NAME_KEY = secrets.token_bytes(32)

_ACTION_ORDER = {
    Action.ERASE_ROWS: 0,
    Action.CRYPTO_SHRED: 1,
    Action.REBUILD: 2,
    Action.AGGREGATE_OK: 3,
    Action.ESCALATE: 4,
    Action.INSERT_TOMBSTONE: 5,
}


@dataclass(frozen=True)
class _Context:
    catalog: Catalog
    warehouse: Warehouse
    location: Location
    closure: Closure
    gaps_by_dataset: dict[DatasetRef, list[Gap]]
    today: date
    writers: Callable[[DatasetRef], list[LastWriter]]


def summarise_subject(
    catalog: Catalog, subject: SubjectRef, pepper: Pepper | None
) -> SubjectSummary:
    """The subject as documents may show it: type, and the keyed hash when a pepper is at hand."""
    identity = normalise_subject(catalog, subject)
    if pepper is None:
        return SubjectSummary(type=subject.type)
    return SubjectSummary(
        type=subject.type,
        hash=subject_hash(pepper, identity.type, identity.value),
        pepper_version=pepper.version,
    )


def make_plan(
    catalog: Catalog,
    subject: SubjectRef,
    *,
    pepper: Pepper | None = None,
    warehouse: Warehouse | None = None,
    location: Location | None = None,
    events: Sequence[RunEvent] = (),
    max_nodes: int = DEFAULT_MAX_NODES,
    now: datetime | None = None,
    lineage_store: LineageStore | None = None,
    as_of: datetime | None = None,
) -> Plan:
    """Locate the subject, build the lineage the catalog names, and decide every artefact
    (the CLI's `plan` and `demo`, and every request's plan step).

    With `lineage_store` the lineage is the store's projection (sources synced first);
    `as_of` pins it to an instant (None: the current lineage).
    """
    summary = summarise_subject(catalog, subject, pepper)
    own = warehouse is None
    warehouse = warehouse or Warehouse(catalog)
    try:
        location = location or locate(catalog, warehouse, subject)
        lineage = build_lineage(catalog, warehouse, events, store=lineage_store, as_of=as_of)
        return plan_erasure(
            catalog,
            warehouse,
            location,
            lineage,
            summary,
            max_nodes=max_nodes,
            now=now,
            name_key=pepper.secret if pepper is not None else None,
        )
    finally:
        if own:
            warehouse.dispose()


def plan_erasure(
    catalog: Catalog,
    warehouse: Warehouse,
    location: Location,
    lineage: CatalogLineage,
    subject: SubjectSummary,
    *,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_depth: int | None = None,
    now: datetime | None = None,
    name_key: bytes | None = None,
) -> Plan:
    """Classify every artefact of the forward closure from the located roots.

    The closure is the erasure view's (`erasure_view`): every edge set whose output may still
    hold rows it wrote, not only today's. Immutable and per-subject-key datasets are in every
    plan, reached or not: an event can never take them out.

    A dataset or job whose name holds one of the subject's identities is named by a keyed
    hash under `name_key` (the request's pepper) and the dataset escalates (rule 1a).

    SubjectError when the request reaches several people by a one-per-person key: nothing
    it matched can then be told to be the subject's, so nothing is planned.
    """
    _refuse_several_people(location, subject)
    now = now or datetime.now(UTC)
    roots = location.root_refs
    view = erasure_view(catalog, lineage, now)
    closure = lineage.graph.forward_closure(
        roots,
        max_nodes=max_nodes,
        max_depth=max_depth,
        as_of=view,
        is_materialised=materialised_predicate(catalog),
    )
    reached = set(closure.datasets) | set(roots)
    always = [ds.ref for ds in catalog.datasets if _always_planned(ds) and ds.ref not in reached]
    # Counted with the closure: lineage that stops reaching them must not raise coverage.
    counted = replace(closure, datasets=list(closure.datasets) + always)
    cov, coverage_gaps = coverage(
        counted, lineage.graph, columns_of=_columns_of(catalog, warehouse)
    )
    known = {(g.kind, g.dataset) for g in lineage.gaps}
    gaps = list(lineage.gaps) + [g for g in coverage_gaps if (g.kind, g.dataset) not in known]
    gaps += drift_gaps(catalog, warehouse)
    gaps += shrink_gaps(lineage.graph, counted.datasets, view)
    for cycle in closure.cycles:
        if cycle.kind is CycleKind.ERROR:
            gaps.extend(
                Gap(
                    kind=GapKind.ERROR_CYCLE,
                    dataset=ref,
                    detail=f"cycle without a materialised node: {cycle.names()}",
                )
                for ref in cycle.datasets
            )
    if closure.truncated:
        gaps.extend(
            Gap(
                kind=GapKind.TRUNCATED,
                dataset=ref,
                detail=f"closure bounded at {max_nodes} datasets / depth {max_depth}; "
                "downstream of this dataset was not walked",
            )
            for ref in closure.truncated_at
        )
    walked = _closure_datasets(closure, roots)
    in_closure = set(walked)
    # No lineage reaches a dataset whose producer never reported: the walk cannot rule it
    # out, so every plan carries it until its producer reports or the DPO rules on it.
    # Nor can it rule out a dataset the catalog describes wrongly (drift): it may hold rows.
    unseen = list(
        dict.fromkeys(
            g.dataset
            for g in gaps
            if g.kind in (GapKind.NO_EVENTS, GapKind.CATALOG_DRIFT)
            and g.dataset is not None
            and g.dataset not in in_closure
        )
    )
    unseen += [ref for ref in always if ref not in unseen]
    in_plan = in_closure | set(unseen)
    by_dataset: dict[DatasetRef, list[Gap]] = {}
    for gap in gaps:
        if gap.dataset is not None:
            by_dataset.setdefault(gap.dataset, []).append(gap)
    # A holder only its owner can reach (a system of record the warehouse copies) is asked
    # about on every request: no lineage or search here can show it does not hold the person.
    outside = [ds.ref for ds in catalog.datasets if _outside_reach(ds) and ds.ref not in in_plan]
    ctx = _Context(catalog, warehouse, location, closure, by_dataset, now.date(), lineage.writers)
    items = [_decide(ctx, ref) for ref in walked + unseen + outside]
    items = _with_withheld(items, location)
    if location.search is not None:
        items.append(_not_found_item(location.search))
    items = _order(items, closure, warehouse, catalog)
    _refuse_spelt_alike(items)
    items, warnings = _undeclared_identifiers(catalog, warehouse, items)
    gaps += warnings
    items.append(_tombstone_item(subject))
    plan = Plan(
        subject=subject,
        roots=location.roots(),
        items=items,
        coverage=round(cov, 4),
        gaps=[g for g in gaps if g.dataset is None or g.dataset in in_plan],
        cycles=list(closure.cycles),
        truncated=closure.truncated,
        lineage_snapshot=lineage.graph.snapshot_id(),
        lineage_as_of=lineage.as_of,
        created_at=now,
    )
    return redact_subject_names(plan, catalog, location.identities, name_key or _PROCESS_NAME_KEY)


def _undeclared_identifiers(
    catalog: Catalog, warehouse: Warehouse, items: list[PlanItem]
) -> tuple[list[PlanItem], list[Gap]]:
    """A warning for each column of a mutable table the plan keeps (not rebuilt) that is
    named like an identifier the catalog does not declare there (by name: no rows are read):
    a request by that identifier would not find the person's rows in it. An aggregate
    holding such a column, or whose columns could not be read, is not shown anonymous by its
    group sizes: it escalates (rule 6). A warehouse that cannot be read adds no warning (the
    plan's own steps report it)."""
    kept = []
    for item in items:
        ds = catalog.dataset(item.dataset)
        if item.action is not Action.REBUILD and ds is not None and ds.storage == "mutable":
            kept.append(item.dataset)
    try:
        checked = check_undeclared_holders(catalog, warehouse, kept)
    except ErasureError:  # the catalog's own problem: the plan's other steps report it
        return items, []
    found = checked.findings
    by_dataset: dict[DatasetRef, list[str]] = {
        # an aggregate whose columns could not be read is not shown to hold none
        skipped.dataset: [_UNREAD]
        for skipped in checked.skipped
    }
    warnings = []
    for finding in found:
        column = shown_name(finding.column, "(not repeated)")
        by_dataset.setdefault(finding.dataset, []).append(f"{column} ({finding.identifier_type})")
        warnings.append(
            Gap(
                kind=GapKind.UNDECLARED_IDENTIFIER,
                dataset=finding.dataset,
                detail=f"column {column} looks like {finding.identifier_type} "
                f"({finding.evidence}) but holds_subject does not declare it here: a request "
                "by that identifier finds no rows here. Check it with `erasure catalog "
                "discover`",
            )
        )
    return [_not_anonymous(i, by_dataset) for i in items], warnings


_UNREAD = "(its columns could not be read)"


def _not_anonymous(item: PlanItem, columns: dict[DatasetRef, list[str]]) -> PlanItem:
    if item.action is not Action.AGGREGATE_OK or item.dataset not in columns:
        return item
    named = ", ".join(columns[item.dataset])
    keeps = (
        "its columns could not be read to show it keeps no identifier"
        if named == _UNREAD
        else f"it keeps columns named like identifiers ({named})"
    )
    return item.model_copy(
        update={
            "action": Action.ESCALATE,
            "reason": f"its groups are large enough ({item.reason}), but {keeps}: not shown "
            "anonymous, the DPO decides",
            "evidence": {**item.evidence, "identifier_like_columns": columns[item.dataset]},
        }
    )


def _refuse_spelt_alike(items: Sequence[PlanItem]) -> None:
    """Two artefacts written alike as `namespace/name` (a producer's `s3://lake` + `a/b` and
    `s3://lake/a` + `b`): the action log and the record name an artefact so, and one's
    erasure or ruling would count for the other. The plan stops and says so; the catalog
    refuses such a pair of its own entries at load."""
    seen: dict[str, DatasetRef] = {}
    for item in items:
        other = seen.setdefault(item.dataset.qualified, item.dataset)
        if other != item.dataset:
            raise LineageError(
                "two artefacts of this plan, in namespaces "
                f"{shown_name(other.namespace, '(not repeated)')} and "
                f"{shown_name(item.dataset.namespace, '(not repeated)')}, are both written "
                "'namespace/name' alike, and "
                "their erasures and rulings would be taken for one another: give one another "
                "name (its producer, or a catalog entry with that name as an alias), then "
                "re-plan"
            )


def _refuse_several_people(location: Location, subject: SubjectSummary) -> None:
    """The rows the request matched carry several values of a type that names one person (a
    customer id): the identifier is several people's (a family mailbox, a colleague's alt
    address), and erasing what it matched would erase someone else."""
    for id_type, held in sorted(location.held_back.items()):
        if held.one_per_person:
            own = sum(1 for i in location.identities if i.type == id_type)
            raise SubjectError(
                f"the requested {subject.type} reaches rows of {held.values + own} different "
                f"{id_type} values, and the catalog says one {id_type} names one person: the "
                f"{subject.type} is shared by several people, so nothing is planned or erased. "
                f"Resubmit the request by the person's {id_type} (the customer record the "
                "request is about tells which)"
            )


def _closure_datasets(closure: Closure, roots: Sequence[DatasetRef]) -> list[DatasetRef]:
    """Closure datasets in topological order; roots absent from the graph still count."""
    seen = set(closure.datasets)
    return [r for r in roots if r not in seen] + list(closure.datasets)


def _decide(ctx: _Context, ref: DatasetRef) -> PlanItem:
    """The artefact's item; one with no catalog entry of its own names what described it (a
    dbt manifest, a default) and, when it escalates for want of a rebuild, why."""
    item = _decide_entry(ctx, ref)
    described = ctx.catalog.description(ref)
    if described is None:
        return item
    update: dict[str, Any] = {"evidence": {**item.evidence, **ctx.catalog.described_as(ref)}}
    if described.note is not None and item.rule == "7":
        update["reason"] = described.note
    return item.model_copy(update=update)


def _decide_entry(ctx: _Context, ref: DatasetRef) -> PlanItem:
    ds = ctx.catalog.dataset(ref)
    upstreams = sorted(ctx.closure.upstreams.get(ref, set()), key=lambda u: (u.name, u.namespace))
    if ds is None:
        return _item(
            ref,
            "unknown",
            Action.ESCALATE,
            "1",
            "the lineage reaches this artefact but the catalog does not know it",
            {"gap": GapKind.UNCATALOGUED.value},
            upstreams,
        )
    if _outside_reach(ds):
        return _item(
            ref,
            ds.kind,
            Action.ESCALATE,
            OUTSIDE_REACH_RULE,
            f"holds people's rows ({', '.join(sorted(ds.holds_subject))}) in a system this one "
            f"cannot reach: {ds.owner} erases the person there, or confirms they are not held",
            {
                "owner": ds.owner,
                "system": ds.namespace,
                "identifier_types": sorted(ds.holds_subject),
            },
            upstreams,
        )
    in_lakehouse = ctx.location.lakehouse.get(ds.ref)
    if in_lakehouse is not None:
        return _decide_lakehouse_root(ds, in_lakehouse, upstreams)
    located = ctx.location.located.get(ds.ref)
    blocking = [
        g
        for g in ctx.gaps_by_dataset.get(ds.ref, [])
        if g.kind in _BLOCKING_GAPS | {GapKind.TRUNCATED, GapKind.ERROR_CYCLE}
    ]
    if blocking and located is None and not _shreddable(ds):
        return _item(
            ref,
            ds.kind,
            Action.ESCALATE,
            "1",
            (
                "the catalog does not describe its table: "
                if all(g.kind is GapKind.CATALOG_DRIFT for g in blocking)
                else "its derivation is not fully known: "
            )
            + "; ".join(g.detail for g in blocking),
            {"gaps": [g.model_dump(mode="json") for g in blocking]},
            upstreams,
        )
    if located is not None and ds.storage == "mutable":
        return _decide_root(ctx.warehouse, ds, located, upstreams)
    if ds.lakehouse is not None and ds.holds_subject:
        # Searched by its identifier columns, now and in its history, and not found: nothing
        # to delete; planned all the same, so verify searches it again after the erasure.
        return _decide_lakehouse_root(ds, LakehouseLocated(ds, [], [], {}, 0, 0), upstreams)
    if ds.storage == "immutable":
        return _decide_immutable(ctx, ds, upstreams)
    if ds.kind is DatasetKind.VIEW:
        return _item(
            ref,
            ds.kind,
            Action.REBUILD,
            "5",
            "a view is recomputed from its cleaned sources on every read",
            {"method": "view", "upstreams_first": [u.name for u in upstreams]},
            upstreams,
        )
    if isinstance(ds.rebuild, ProducerRebuild):
        return _decide_producer(ctx, ds, ds.rebuild, upstreams)
    if ds.rebuild is not None:
        method: dict[str, Any] = {"method": ds.rebuild.kind, **ds.rebuild.plan_detail()}
        return _item(
            ref,
            ds.kind,
            Action.REBUILD,
            "5",
            "rebuildable: re-materialise from the cleaned upstreams, after them",
            {**method, "upstreams_first": [u.name for u in upstreams]},
            upstreams,
        )
    if ds.aggregate is not None:
        return _decide_aggregate(ctx, ds, upstreams)
    return _item(
        ref,
        ds.kind,
        Action.ESCALATE,
        "7",
        f"a {ds.kind.value.replace('_', ' ')} derived from the subject's data that can "
        "be neither rebuilt nor shown to be anonymous: the DPO decides",
        {"kind": ds.kind.value, "owner": ds.owner},
        upstreams,
    )


def _decide_producer(
    ctx: _Context, ds: DatasetSpec, policy: ProducerRebuild, upstreams: list[DatasetRef]
) -> PlanItem:
    """Rule 5 by the Airflow DAG whose tasks wrote the artefact, when only tasks of that one
    DAG did and the catalog's policy lets the erasure trigger it; else rule 7, naming the
    producers (a run of one DAG leaves what another job wrote)."""
    writers = ctx.writers(ds.ref)
    kind = ds.kind.value.replace("_", " ")
    if not writers:
        return _item(
            ds.ref,
            ds.kind,
            Action.ESCALATE,
            "7",
            f"a {kind} the catalog says its producer rebuilds, but no run has reported "
            "writing it (an OpenLineage COMPLETE): nothing here can re-run it; the DPO decides",
            {"kind": ds.kind.value, "producer": None},
            upstreams,
        )
    last = writers[0]
    # Names a producer sent: kept in the plan (and the record) only as an error could
    # repeat them, since a job or run may be named after a person.
    written = {
        "producer_job": _as_sent(last.job),
        "producer_run_id": _as_sent(last.run_id),
        "last_written_at": last.completed_at.isoformat(),
        "producer_jobs": [_as_sent(w.job) for w in writers],
    }
    jobs = ", ".join(shown_name(w.job, "(a job not named)") for w in writers[:5])
    dags = {w.dag_id for w in writers}
    why = None
    if None in dags:
        why = "one of which is no Airflow task (its events name no DAG)"
    elif any(d is not None and _as_sent(d) != d for d in dags):
        why = "tasks of a DAG whose name is not repeated here (it may name a person)"
    elif len(dags) > 1:
        why = f"tasks of {len(dags)} DAGs: a run of one leaves what the others wrote"
    elif not policy.allows(last.dag_id or ""):
        why = (
            f"tasks of DAG {shown_name(last.dag_id or '', '(not repeated)')}, which the "
            f"catalog's rebuild policy does not let the erasure trigger (dags: {policy.dags})"
        )
    if why is not None:
        return _item(
            ds.ref,
            ds.kind,
            Action.ESCALATE,
            "7",
            f"a {kind} written by {len(writers)} job(s) ({jobs}, last run "
            f"{_as_sent(last.run_id)}), "
            f"{why}: the DPO decides",
            {"kind": ds.kind.value, "dag_ids": sorted(_as_sent(d or "") for d in dags), **written},
            upstreams,
        )
    return _item(
        ds.ref,
        ds.kind,
        Action.REBUILD,
        "5",
        f"rebuildable: its producer, DAG {last.dag_id}, re-materialises it from the cleaned "
        "upstreams, after them",
        {
            "method": policy.kind,
            "dag_id": last.dag_id,
            **written,
            "upstreams_first": [u.name for u in upstreams],
        },
        upstreams,
    )


_RUN_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _as_sent(name: str) -> str:
    """A job, DAG or run name a producer sent, as the plan may keep it: a plain name or a
    UUID run id as it is, anything else (it may be a person's identifier) not repeated."""
    if _RUN_ID.fullmatch(name) or shown_name(name, "") == repr(name):
        return name
    return "(not repeated)"


def _outside_reach(ds: DatasetSpec) -> bool:
    """A mutable holder of people's rows this system cannot read: only its owner can erase
    there."""
    return bool(ds.holds_subject) and not ds.reachable and ds.storage == "mutable"


def _decide_root(
    warehouse: Warehouse, ds: DatasetSpec, located: Located, upstreams: list[DatasetRef]
) -> PlanItem:
    if located.shared_referrers > 0:
        return _item(
            ds.ref,
            ds.kind,
            Action.ESCALATE,
            SHARED_ROW_RULE,
            f"{located.shared_rows} row(s) the subject points at are also referenced "
            f"by {located.shared_referrers} row(s) of other people: not deleted",
            {
                "rows": located.rows,
                "shared_rows": located.shared_rows,
                "other_referrers": located.shared_referrers,
                "via": located.via,
            },
            upstreams,
        )
    return _item(
        ds.ref,
        ds.kind,
        Action.ERASE_ROWS,
        "2",
        f"holds {located.rows} row(s) of the subject ({located.via})",
        {
            "rows_before": located.rows,
            "identifier_type": located.identifier_type,
            "columns": located.columns,
            "via": located.via,
            "statement": delete_statement(warehouse, located),
        },
        upstreams,
    )


def _decide_lakehouse_root(
    ds: DatasetSpec, found: LakehouseLocated, upstreams: list[DatasetRef]
) -> PlanItem:
    """Rule 2 for a lakehouse table: its rows deleted and every snapshot still holding them
    expired, its files removed; unless a branch or tag keeps them (kept forever unless
    someone drops it: the DPO decides, rule 2d)."""
    assert ds.lakehouse is not None
    evidence: dict[str, Any] = {
        "rows_before": found.rows,
        "history_rows": found.history_rows,
        "identifier_type": next(iter(found.identifier_types), None),
        "columns": found.columns,
        "via": found.via,
        "method": "lakehouse",
        "lakehouse": ds.lakehouse.catalog,
        "table": ds.lakehouse.table,
        "owner": ds.owner,
    }
    if found.others_rows:
        return _item(
            ds.ref,
            ds.kind,
            Action.ESCALATE,
            SHARED_IDENTITY_RULE,
            f"{found.others_rows} of the rows the subject's identifiers reach here carry another "
            "person's key, or none (a shared mailbox or phone, a guest row): which are the "
            "subject's cannot be told, so nothing is deleted here; the DPO decides",
            {**evidence, "other_rows": found.others_rows},
            upstreams,
        )
    if found.refs:
        return _item(
            ds.ref,
            ds.kind,
            Action.ESCALATE,
            LAKEHOUSE_REF_RULE,
            f"branch(es) or tag(s) {', '.join(found.refs)} of the table keep the subject's "
            "rows in a snapshot the erasure may not expire on its own (a tag is kept "
            "forever): the DPO decides whether they are dropped, or kept under an exemption",
            {**evidence, "refs": found.refs},
            upstreams,
        )
    done = "rows deleted copy-on-write, every snapshot holding them expired and their files removed"
    if found.rows:
        reason = f"holds {found.rows} row(s) of the subject ({found.via}): {done}"
    elif found.history_rows:
        reason = (
            "holds none of the subject's rows now, but its history does (a delete never "
            f"expired): {done}"
        )
    else:
        reason = (
            "its identifier columns hold none of the subject's rows, now or in its history: "
            "nothing to delete; verify searches every snapshot and file again"
        )
    return _item(ds.ref, ds.kind, Action.ERASE_ROWS, "2", reason, evidence, upstreams)


def _with_withheld(items: list[PlanItem], location: Location) -> list[PlanItem]:
    """One 2b question per dataset with rows reached only through held-back identifier
    values; where the dataset escalates already, its question carries those counts too."""
    out = list(items)
    for ref in sorted(location.withheld):
        evidence = _withheld_evidence(location, location.withheld[ref])
        escalated = next(
            (n for n, i in enumerate(out) if i.dataset == ref and i.action is Action.ESCALATE),
            None,
        )
        if escalated is not None:
            item = out[escalated]
            out[escalated] = item.model_copy(
                update={"evidence": {**item.evidence, "shared_identity": evidence}}
            )
            continue
        withheld = location.withheld[ref]
        out.append(
            _item(
                ref,
                withheld.dataset.kind,
                Action.ESCALATE,
                SHARED_IDENTITY_RULE,
                _withheld_reason(location, withheld),
                evidence,
                [],
            )
        )
    return out


def _withheld_reason(location: Location, withheld: Withheld) -> str:
    why = []
    for id_type in withheld.identifier_types:
        held = location.held_back[id_type]
        if held.one_per_person:
            why.append(
                f"the subject's rows carry {held.values + _own(location, id_type)} different "
                f"{id_type} values, and the catalog says one names one person"
            )
        else:
            rows = sum(held.other_rows.values())
            persons = "" if held.other_persons is None else f" of {held.other_persons} person(s)"
            pointed = (
                f", and rows holding it are pointed at by {held.other_referrers} row(s) of others"
                if held.other_referrers
                else ""
            )
            why.append(
                f"{held.values} {id_type} value(s) on the subject's rows are also held by "
                f"{rows} row(s){persons} the request did not match{pointed}"
            )
    return (
        f"{withheld.rows} row(s) reached only through identifier values the subject may not "
        f"own alone ({'; '.join(why)}): not deleted; the DPO decides whose they are"
    )


def _own(location: Location, id_type: str) -> int:
    return sum(1 for i in location.identities if i.type == id_type)


def _withheld_evidence(location: Location, withheld: Withheld) -> dict[str, Any]:
    """Counts, dataset names and columns: the held-back values never leave locate."""
    return {
        "rows": withheld.rows,
        "columns": withheld.columns,
        "identifier_types": withheld.identifier_types,
        "held_back": [
            {
                "identifier_type": held.identifier_type,
                "values": held.values,
                "subject_values": _own(location, held.identifier_type),
                "one_per_person": held.one_per_person,
                "other_rows": {ref.name: n for ref, n in sorted(held.other_rows.items())},
                "other_persons": held.other_persons,
                "other_referrers": held.other_referrers,
            }
            for id_type in withheld.identifier_types
            if (held := location.held_back[id_type])
        ],
    }


def _always_planned(ds: DatasetSpec) -> bool:
    """Immutable and per-subject-key datasets: every plan carries them, lineage or not."""
    return ds.storage == "immutable" or ds.encryption == "per_subject"


def _shreddable(ds: DatasetSpec) -> bool:
    """Destroying the subject's key clears it whatever wrote it: a gap cannot block that."""
    return ds.storage == "immutable" and ds.encryption == "per_subject"


def _decide_immutable(ctx: _Context, ds: DatasetSpec, upstreams: list[DatasetRef]) -> PlanItem:
    expires = (
        (ctx.today + timedelta(days=ds.retention_days)).isoformat()
        if ds.retention_days is not None
        else None
    )
    if ds.encryption == "per_subject":
        return _item(
            ds.ref,
            ds.kind,
            Action.CRYPTO_SHRED,
            "3",
            "immutable, written under per-subject keys: destroying the key makes "
            "every copy unreadable",
            {
                "retention_days": ds.retention_days,
                "last_copy_expires": expires,
                **_gap_evidence(ctx.gaps_by_dataset.get(ds.ref, [])),
            },
            upstreams,
        )
    until = expires or "an unknown date (no retention_days in the catalog)"
    return _item(
        ds.ref,
        ds.kind,
        Action.ESCALATE,
        "4",
        f"immutable and not per-subject encrypted: beyond use until {until}",
        {"retention_days": ds.retention_days, "retention_expiry_date": expires},
        upstreams,
    )


def _gap_evidence(gaps: list[Gap]) -> dict[str, Any]:
    """The dataset's gaps as evidence, when it has any (a shred clears it despite them)."""
    return {"gaps": [g.model_dump(mode="json") for g in gaps]} if gaps else {}


def _decide_aggregate(ctx: _Context, ds: DatasetSpec, upstreams: list[DatasetRef]) -> PlanItem:
    assert ds.aggregate is not None
    k = ctx.catalog.k_for(ds)
    if ds.aggregate.count_column is None:
        return _item(
            ds.ref,
            ds.kind,
            Action.ESCALATE,
            "6",
            "aggregate without a count column: its k cannot be measured",
            {"k": k, "quasi_identifiers": ds.aggregate.quasi_identifiers},
            upstreams,
        )
    measured = measure_k(ctx.warehouse, ds, k)
    evidence = measured.model_dump()
    if measured.passes:
        return _item(
            ds.ref,
            ds.kind,
            Action.AGGREGATE_OK,
            "6",
            f"k-anonymous: smallest group {measured.min_group_size} >= k={k} over "
            f"{measured.groups} groups",
            evidence,
            upstreams,
        )
    return _item(
        ds.ref,
        ds.kind,
        Action.ESCALATE,
        "6",
        f"fails k={k}: smallest group {measured.min_group_size}, "
        f"{measured.groups_below_k} of {measured.groups} groups below k",
        evidence,
        upstreams,
    )


def _item(
    ref: DatasetRef,
    kind: DatasetKind | str,
    action: Action,
    rule: str,
    reason: str,
    evidence: dict[str, Any],
    upstreams: list[DatasetRef],
) -> PlanItem:
    return PlanItem(
        dataset=ref,
        kind=str(kind.value if isinstance(kind, DatasetKind) else kind),
        action=action,
        rule=rule,
        reason=reason,
        evidence=evidence,
        upstreams=upstreams,
    )


def _not_found_item(search: SubjectSearch) -> PlanItem:
    """Found nowhere is a question, not a completion: a typo or another spelling leaves the
    subject's rows in place, so the DPO confirms the subject is not held (or resubmits)."""
    places = (
        ", ".join(f"{s.dataset.name} ({', '.join(s.columns)})" for s in search.searched)
        or "no dataset (none holds this identifier type)"
    )
    near = sum(m.rows for m in search.near_misses)
    found = f"searched {places}; {near} row(s) match it only loosely"
    erased = search.already_erased_by
    reason = (
        f"the {search.identifier_type} was found in no dataset: {found}. The identifier may "
        "be mistyped"
        if erased is None
        else f"the {search.identifier_type} was already erased by {erased.request_ref}, on "
        f"{erased.on.isoformat()}: its tombstone is on the suppression list, and it was found "
        f"in no dataset ({found})"
    )
    return _item(
        SUBJECT_SEARCH,
        "search",
        Action.ESCALATE,
        NOT_FOUND_RULE,
        reason,
        search.model_dump(mode="json"),
        [],
    )


def escalate_unkeyed(plan: Plan) -> Plan:
    """Rule 3a: the plan when the subject has no per-subject key under any pepper version.

    A crypto-shred that finds no key destroys nothing and proves nothing: either the subject
    was never written to that storage, or it was written under a key this system cannot name
    and stays readable. Neither is for the system to assume, so each crypto_shred item
    becomes a question for the DPO (the key store is checked by the caller, which holds it).
    """
    items = [
        _item(
            i.dataset,
            i.kind,
            Action.ESCALATE,
            UNKEYED_SHRED_RULE,
            "written under per-subject keys, but no key of the subject exists under any "
            "pepper version: either the subject was never written here, or it was written "
            "under a key this system cannot name and is still readable",
            {**i.evidence, "keys_found": 0},
            i.upstreams,
        )
        if i.action is Action.CRYPTO_SHRED
        else i
        for i in plan.items
    ]
    return plan.model_copy(update={"items": items})


def _tombstone_item(subject: SubjectSummary) -> PlanItem:
    return _item(
        SUPPRESSION_LIST,
        "table",
        Action.INSERT_TOMBSTONE,
        "tombstone",
        "keep the subject out of every future CRM sync",
        {"identifier_type": subject.type, "pepper_version": subject.pepper_version},
        [],
    )


def _order(
    items: list[PlanItem], closure: Closure, warehouse: Warehouse, catalog: Catalog
) -> list[PlanItem]:
    """Erasures children-first (foreign keys), rebuilds in lineage order, then the rest."""
    topo = {ref: i for i, ref in enumerate(closure.datasets)}
    erasures = [i for i in items if i.action is Action.ERASE_ROWS]
    erase_rank = _foreign_key_rank(
        [
            ds
            for i in erasures
            if (ds := catalog.dataset(i.dataset)) is not None and ds.connection is not None
        ],
        warehouse,
    )

    def key(item: PlanItem) -> tuple[int, int, str, str]:
        ref = item.dataset
        if item.action is Action.ERASE_ROWS:
            rank = erase_rank.get(ref.name, 0)
        else:
            rank = topo.get(ref, -1)
        return _ACTION_ORDER[item.action], rank, ref.name, ref.namespace

    return sorted(items, key=key)


# ---------------------------------------------------------------------------------------------
# The order the act step keeps (the plan's order, decided above): one function for it


def must_precede(plan: Plan, item: PlanItem) -> list[PlanItem]:
    """The plan items that must be done before `item` acts.

    An erasure waits for the tombstone (else the nightly CRM sync loads the rows again) and
    for the erasures before it (children before parents); a rebuild for the erasures and
    rebuilds of its upstreams, and inside a feedback cycle for the members before it (they
    read each other's previous output, so no lineage order exists between them); a k check
    for every erasure.
    """
    position = {(i.dataset, i.action): n for n, i in enumerate(plan.items)}
    mine = position[(item.dataset, item.action)]
    if item.action is Action.ERASE_ROWS:
        return [
            i
            for i in plan.items
            if i.action is Action.INSERT_TOMBSTONE
            or (i.action is Action.ERASE_ROWS and position[(i.dataset, i.action)] < mine)
        ]
    if item.action is Action.REBUILD:
        loop = feedback_cycles(plan).get(item.dataset, frozenset())
        return [
            i
            for i in plan.items
            if i.action in (Action.ERASE_ROWS, Action.REBUILD)
            and i is not item
            and (
                position[(i.dataset, i.action)] < mine
                if i.dataset in loop
                else i.dataset in item.upstreams
            )
        ]
    if item.action is Action.AGGREGATE_OK:
        return [i for i in plan.items if i.action is Action.ERASE_ROWS]
    return []


def rebuild_order(plan: Plan) -> list[DatasetRef]:
    """The plan's rebuild items in lineage order, checked: every upstream comes first.

    The order above puts them so; this refuses a plan that does not, so no artefact is
    rebuilt from an upstream still holding the subject. Members of one *feedback* cycle read
    each other's previous output, so no order puts them after one another: they are exempt,
    and every member must instead be emptied (`empty_before_rebuild`) before the first of
    them is rebuilt, or the loop would carry the subject's data back in; a member neither
    erased nor rebuilt (it escalated) leaves the loop unclean, and the plan is refused.
    """
    items = [i for i in plan.items if i.action is Action.REBUILD]
    rebuilt = {i.dataset for i in items}
    cycle_of = feedback_cycles(plan)
    erased = {i.dataset for i in plan.items if i.action is Action.ERASE_ROWS}
    for members in set(cycle_of.values()):
        stuck = sorted(r.name for r in members - rebuilt - erased)
        if stuck and members & rebuilt:
            raise RebuildFailed(
                f"feedback cycle {' -> '.join(sorted(r.name for r in members))}: member(s) "
                f"{', '.join(stuck)} are neither erased nor rebuilt, so the loop would carry "
                "the subject back into the rebuilt ones; resolve their escalation, then re-plan"
            )
    done: set[DatasetRef] = set()
    order: list[DatasetRef] = []
    for item in items:
        same_cycle = cycle_of.get(item.dataset, frozenset())
        late = [u.name for u in item.upstreams if u in rebuilt and u not in done | same_cycle]
        if late:
            raise RebuildFailed(
                f"plan orders rebuild of {item.dataset.name!r} before its upstream(s) "
                f"{', '.join(late)}: it would be rebuilt from data still holding the subject; "
                "re-plan"
            )
        done.add(item.dataset)
        order.append(item.dataset)
    return order


def feedback_cycles(plan: Plan) -> dict[DatasetRef, frozenset[DatasetRef]]:
    """Each dataset in a feedback cycle -> all members of its cycle."""
    cycle_of: dict[DatasetRef, frozenset[DatasetRef]] = {}
    for cycle in plan.cycles:
        if cycle.kind is CycleKind.FEEDBACK:
            members = frozenset(cycle.datasets)
            for ref in members:
                cycle_of[ref] = cycle_of.get(ref, frozenset()) | members
    return cycle_of


def _foreign_key_rank(datasets: list[DatasetSpec], warehouse: Warehouse) -> dict[str, int]:
    """Position of each dataset so that a table referencing another is erased before it."""
    names = {ds.name for ds in datasets}
    # Sorted: a set's order changes from process to process, and the plan must not.
    graph: dict[str, set[str]] = {name: set() for name in sorted(names)}
    for ds in datasets:
        table = warehouse.table(ds)
        if table is None:
            continue
        for fk in table.foreign_keys:
            parent = fk.column.table
            parent_name = f"{parent.schema}.{parent.name}" if parent.schema else parent.name
            if parent_name in names and parent_name != ds.name:
                graph[parent_name].add(ds.name)  # the parent waits for its children
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError:
        order = sorted(names)  # mutually referencing tables: one transaction per request then
    return {name: i for i, name in enumerate(order)}


def materialised_predicate(catalog: Catalog) -> Any:
    def is_materialised(ref: DatasetRef) -> bool:
        ds = catalog.dataset(ref)
        return ds is None or ds.materialised

    return is_materialised


def _columns_of(catalog: Catalog, warehouse: Warehouse) -> Any:
    def columns_of(ref: DatasetRef) -> list[str] | None:
        ds = catalog.dataset(ref)
        if ds is None:
            return None
        try:
            return warehouse.columns(ds)
        except ErasureError:
            return None

    return columns_of
