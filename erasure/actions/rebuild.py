"""Rule 5: re-materialise a derived artefact from its cleaned upstreams, in lineage order.

How an artefact is rebuilt is its catalog `rebuild:` target, a kind (erasure.catalog.
REBUILD_TARGETS). The built-in kinds act here: `sql` drops the table and runs the catalog's
statements in one transaction (a failure leaves the previous table, a retry starts over);
`dag` has the artefact's Airflow DAG run through a callable the adapter supplies and waits
for it (one run may serve several requests: erasure.actions.coalesce); `producer` does so
with the DAG the plan found last wrote it; `dbt` runs the model with the dbt CLI
(erasure.actions.dbt_run); `view` (every dataset of kind view) is computed on read and needs
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa
import sqlglot
from pydantic import Field
from sqlglot import exp

from erasure.actions.transaction import transaction
from erasure.catalog import (
    REBUILD_TARGETS,
    Catalog,
    DagRebuild,
    DatasetKind,
    DatasetSpec,
    ProducerRebuild,
    SqlRebuild,
    ViewRebuild,
)
from erasure.errors import CatalogError, RebuildFailed, describe_failure
from erasure.model import DagRun, DatasetRef, Evidence, Plan, PlanItem
from erasure.planner import feedback_cycles, rebuild_order
from erasure.progress import Suspended
from erasure.warehouse import Warehouse, count_rows, split_name


class RunOutcome(DagRun):
    """How a triggered DAG run ended, as the Airflow adapter reports it after waiting (only
    "success" counts)."""

    triggered_for: str | None = None  # the request whose rebuild triggered the run
    # The rebuild task executed the run itself (dag.test: the embedded demo), so its end is
    # this system's own observation, not a state someone could set in Airflow.
    in_process: bool = False


class TriggerDag(Protocol):
    """Runs a rematerialisation DAG for a rebuild whose upstreams were clean by `ready_at`:
    returns how a run that started after then ended, or raises AwaitingRun once it joined or
    started one (the adapter then waits for the run outside any worker slot and calls the
    step again with a TriggerDag that returns the outcome)."""

    def __call__(self, dag_id: str, ready_at: datetime) -> RunOutcome: ...


class AwaitingRun(Suspended):
    """The rebuild's DAG run was started and is waited for elsewhere (Airflow's triggerer)."""

    def __init__(self, dag_id: str, run_id: str) -> None:
        super().__init__(f"waiting for DAG {dag_id!r} run {run_id!r} to finish")
        self.dag_id = dag_id
        self.run_id = run_id


class RebuildEvidence(Evidence):
    """What one rebuild did, for the completion record."""

    dataset: str
    method: str  # the rebuild target's kind: sql, dag, view, or a plug-in's
    dag_id: str | None = None
    run_id: str | None = None
    # dag method: the run served every request whose erasures were done before it started
    run_triggered_for: str | None = None  # the request whose rebuild triggered it
    run_started_at: datetime | None = None
    upstreams_done_at: datetime | None = None  # this request's, before the run started
    run_in_process: bool = Field(default=False, exclude_if=lambda v: not v)
    statements: int = 0  # catalog statements run (sql method)
    dbt_node: str | None = Field(default=None, exclude_if=lambda v: v is None)  # dbt method
    dropped_first: bool = False  # the previous table was dropped inside the transaction
    emptied_first: bool = False  # feedback-cycle member emptied before any member was rebuilt
    rows_after: int | None = None  # None: the artefact is not a table we can count
    detail: str
    rebuilt_at: datetime
    # A lakehouse table's: every snapshot before the rebuild expired, its files removed.
    history: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)


@dataclass(frozen=True)
class RebuildContext:
    """What a rebuild target's factory gets besides its config."""

    warehouse: Warehouse
    dataset: DatasetSpec
    trigger_dag: TriggerDag | None  # None outside Airflow
    ready_at: datetime  # when what the plan puts before this rebuild was done
    planned: Mapping[str, Any] = field(default_factory=dict)  # the plan item's evidence


def rebuild(
    catalog: Catalog,
    warehouse: Warehouse,
    dataset: DatasetRef,
    *,
    trigger_dag: TriggerDag | None,
    ready_at: datetime | None = None,
    planned: Mapping[str, Any] | None = None,
) -> RebuildEvidence:
    """Re-materialise one artefact by its catalog target, from sources cleaned by `ready_at`
    (default: now), as the plan decided (`planned`: its item's evidence); raises
    RebuildFailed on failure."""
    ds = catalog.require(dataset)
    if planned is not None and not catalog.described_as_planned(dataset, planned):
        raise RebuildFailed(
            f"dataset {ds.name!r} is described otherwise than when the plan was made (its "
            "dbt manifest, a catalog default or its own entry changed): re-plan"
        )
    # A view is recomputed on read whatever else its entry says.
    target = ViewRebuild() if ds.kind is DatasetKind.VIEW else ds.rebuild
    if target is None:
        raise RebuildFailed(
            f"dataset {ds.name!r} has no 'rebuild' in the catalog: it cannot be rebuilt; "
            "re-plan (it escalates) or declare how it is rebuilt (dag_id, sql, select or "
            "{kind: producer})"
        )
    context = RebuildContext(
        warehouse, ds, trigger_dag, ready_at or datetime.now(UTC), dict(planned or {})
    )
    evidence = REBUILD_TARGETS.build(target, context)
    if not isinstance(evidence, RebuildEvidence):
        raise RebuildFailed(
            f"the {target.kind!r} rebuild target of {ds.name!r} returned no RebuildEvidence; "
            "fix the package that provides that kind"
        )
    if ds.lakehouse is not None:
        # The run wrote a new snapshot; the ones before it still serve the old rows.
        table = warehouse.lakehouse_table(ds)
        with warehouse.holding(table):
            history = table.expire_history()
        evidence = evidence.model_copy(update={"history": history.model_dump(mode="json")})
    return evidence


# ---------------------------------------------------------------------------------------------
# The built-in rebuild targets


def rebuild_view(target: ViewRebuild, context: RebuildContext) -> RebuildEvidence:
    return RebuildEvidence(
        dataset=context.dataset.name,
        method=target.kind,
        detail="a view is computed on read from its cleaned upstreams: nothing to rebuild",
        rebuilt_at=datetime.now(UTC),
    )


def empty_before_rebuild(
    catalog: Catalog, warehouse: Warehouse, plan: Plan, dataset: DatasetRef
) -> list[DatasetRef]:
    """Empty `dataset`'s feedback cycle if it is the first of its members to be rebuilt.

    The later members are rebuilt from what the earlier ones have just written: emptying the
    cycle again for each of them would throw that away (and with it everyone's rows).
    """
    members = feedback_cycles(plan).get(dataset)
    if members is None:
        return []
    order = [r for r in rebuild_order(plan) if r in members]
    return _empty(catalog, warehouse, order) if order[0] == dataset else []


def _empty(catalog: Catalog, warehouse: Warehouse, refs: list[DatasetRef]) -> list[DatasetRef]:
    emptied: list[DatasetRef] = []
    for ref in refs:
        ds = catalog.require(ref)
        if not ds.materialised or ds.connection is None or warehouse.table(ds) is None:
            continue  # a view or a missing table holds nothing to carry back
        with warehouse.connect(ds) as conn:
            try:
                with transaction(conn):
                    conn.execute(sa.delete(plain_table(ds)))
            except sa.exc.DBAPIError as exc:
                raise RebuildFailed(
                    f"dataset {ds.name!r}: emptying it before its feedback cycle is rebuilt "
                    f"failed ({describe_failure(exc)}); nothing was rebuilt, retry"
                ) from None
        emptied.append(ref)
    return emptied


def rebuild_by_sql(target: SqlRebuild, context: RebuildContext) -> RebuildEvidence:
    warehouse, ds, statements = context.warehouse, context.dataset, target.sql
    if ds.connection is None:
        raise CatalogError(f"dataset {ds.name!r} is rebuilt by SQL but names no connection")
    drop_first = _creates_without_dropping(ds.name, statements, warehouse.dialect(ds.connection))
    schema, name = split_name(ds.name)
    drop = sa.schema.DropTable(sa.Table(name, sa.MetaData(), schema=schema), if_exists=True)
    with warehouse.connect(ds) as conn:
        step = 0  # which statement failed, for the message (0: the drop)
        try:
            with transaction(conn):
                if drop_first:
                    conn.execute(drop)
                for statement in statements:
                    step += 1
                    conn.execute(sa.text(statement))
                rows = count_rows(conn, plain_table(ds))
        except sa.exc.DBAPIError as exc:
            where = f"statement {step} of {len(statements)}" if step else "dropping the old table"
            raise RebuildFailed(
                f"dataset {ds.name!r}: rebuild SQL failed at {where} ({describe_failure(exc)}); "
                "rolled back, the previous table is unchanged. Fix the catalog's rebuild.sql "
                "and retry"
            ) from None
        finally:
            warehouse.forget_tables()  # the table was replaced: cached reflections are stale
    return RebuildEvidence(
        dataset=ds.name,
        method=target.kind,
        statements=len(statements),
        dropped_first=drop_first,
        rows_after=rows,
        detail="re-created from its cleaned upstreams by the catalog's SQL in one transaction",
        rebuilt_at=datetime.now(UTC),
    )


def rebuild_by_dag(target: DagRebuild, context: RebuildContext) -> RebuildEvidence:
    warehouse, ds, dag_id, trigger_dag = (
        context.warehouse,
        context.dataset,
        target.dag_id,
        context.trigger_dag,
    )
    if trigger_dag is None:
        raise RebuildFailed(
            f"dataset {ds.name!r} is rebuilt by DAG {dag_id!r}: pass trigger_dag (the Airflow "
            "adapter supplies one that triggers the DAG and waits for its run)"
        )
    outcome = trigger_dag(dag_id, context.ready_at)
    warehouse.forget_tables()
    if not outcome.succeeded:
        raise RebuildFailed(
            f"dataset {ds.name!r}: DAG {dag_id!r} run {outcome.run_id!r} ended in state "
            f"{outcome.state!r}, not success; fix the run (see its logs in Airflow) and retry"
        )
    if outcome.started_at is not None and outcome.started_at < context.ready_at:
        raise RebuildFailed(
            f"dataset {ds.name!r}: DAG {dag_id!r} run {outcome.run_id!r} started at "
            f"{outcome.started_at.isoformat()}, before this request's upstreams were clean "
            f"({context.ready_at.isoformat()}): it may have read the subject's rows. Clear the "
            "task: the rebuild triggers a run that starts after"
        )
    rows = None
    if ds.connection is not None and warehouse.table(ds) is not None:
        with warehouse.connect(ds) as conn:
            rows = count_rows(conn, plain_table(ds))
    return RebuildEvidence(
        dataset=ds.name,
        method=target.kind,
        dag_id=dag_id,
        run_id=outcome.run_id,
        run_triggered_for=outcome.triggered_for,
        run_started_at=outcome.started_at,
        upstreams_done_at=context.ready_at,
        run_in_process=outcome.in_process,
        rows_after=rows,
        detail=f"re-materialised by DAG {dag_id!r}, run {outcome.run_id!r} succeeded",
        rebuilt_at=datetime.now(UTC),
    )


def rebuild_by_producer(target: ProducerRebuild, context: RebuildContext) -> RebuildEvidence:
    """The DAG the plan found last wrote the artefact, run as a `dag` rebuild; the catalog's
    policy is asked again (it may have changed since the plan)."""
    dag_id = context.planned.get("dag_id")
    if not isinstance(dag_id, str) or not target.allows(dag_id):
        raise RebuildFailed(
            f"dataset {context.dataset.name!r} is rebuilt by its producer, but the plan names "
            "no DAG the catalog's rebuild policy allows now (its `dags` changed since the "
            "plan?): re-plan"
        )
    evidence = rebuild_by_dag(DagRebuild(dag_id=dag_id), context)
    return evidence.model_copy(update={"method": target.kind})


# A completion reported further ahead of the verifier's clock than this is not believed.
CLOCK_SKEW = timedelta(minutes=5)

# Runs that reported COMPLETE writing a dataset in (after, until] (LineageStore.completed_writes).
CompletedWrites = Callable[[DatasetRef, datetime, datetime], list[dict[str, Any]]]


def fresh_write_proof(
    item: PlanItem,
    evidence: Mapping[str, Any],
    completed_writes: CompletedWrites,
    now: datetime,
) -> str | None:
    """What proves a rebuilt artefact with no column to search was written afresh from its
    cleaned sources, or None. Never a run state a person can set in Airflow's UI or API:

    - `view`: computed on read, it holds nothing of its own;
    - `sql`: this request ran the catalog's statements itself, after its sources were clean;
    - `dbt`: this request started `dbt run` itself after its sources were clean, and dbt ran
      the artefact's model alone, writing its relation the planned way, and reported it a
      success (erasure.actions.dbt_run);
    - `dag` run in process (the embedded demo): the rebuild task executed the run itself;
    - `dag` (and `producer`): the last OpenLineage COMPLETE writing the artefact is a task of
      that DAG (its events name it), from a run whose START came after its sources were
      clean, reading at least one of them (the lineage the plan walked).
    """
    method = evidence.get("method")
    if method == "view":
        return "a view: computed on read from its cleaned sources, it holds no rows"
    if method == "dbt" and evidence.get("dbt_node") and _started_after_clean(evidence):
        return (
            f"rebuilt by dbt (invocation {evidence.get('run_id') or 'unknown'}), which this "
            f"request started at {evidence['run_started_at']}, after its sources were clean "
            f"({evidence['upstreams_done_at']}), and which ran {evidence['dbt_node']} alone, "
            "writing this relation, and reported it a success"
        )
    if method == "sql" and evidence.get("statements"):
        return (
            f"rebuilt by {evidence['statements']} catalog statement(s) this request ran at "
            f"{evidence['rebuilt_at']}, after its sources were clean"
        )
    ready = evidence.get("upstreams_done_at")
    if ready is None:
        return None
    if evidence.get("run_in_process"):
        return (
            f"the rebuild task ran DAG {evidence['dag_id']} itself (run {evidence['run_id']}), "
            f"after its sources were clean ({ready})"
        )
    ready_at = datetime.fromisoformat(str(ready))
    sources = {u.qualified for u in item.upstreams}
    dag_id = evidence.get("dag_id")
    writes = completed_writes(item.dataset, ready_at, now + CLOCK_SKEW)
    if not dag_id or not writes:
        return None
    # The last write is what the artefact holds: it must be a task of the DAG the rebuild
    # triggered (its events name that DAG: `airflow_dag`), from a run begun after the sources
    # were clean (its START), reading one of them. A run under way before, or another job's
    # write after, may have put the subject's rows back.
    last = writes[-1]
    started = last.get("started_at")
    read = sources & set(last["inputs"])
    if last.get("dag_id") != dag_id or started is None or started < ready_at:
        return None
    if not read and sources:
        return None
    return (
        f"OpenLineage COMPLETE of {last['job']} run {last['run_id']} at "
        f"{last['completed_at'].isoformat()}, a task of DAG {dag_id} begun at "
        f"{started.isoformat()}, after its sources were clean ({ready_at.isoformat()}), "
        f"reading {', '.join(sorted(read)) or 'no input'}; the last write of it"
    )


def _started_after_clean(evidence: Mapping[str, Any]) -> bool:
    started, ready = evidence.get("run_started_at"), evidence.get("upstreams_done_at")
    if started is None or ready is None:
        return False
    return datetime.fromisoformat(str(started)) >= datetime.fromisoformat(str(ready))


def _creates_without_dropping(name: str, statements: list[str], dialect: str) -> bool:
    """Whether the statements CREATE the table without dropping it first (we drop it then).

    Statements that only refill an existing table (DELETE + INSERT) keep it: dropping it
    would make them fail.
    """
    for statement in statements:
        try:
            parsed = sqlglot.parse_one(statement, read=dialect)
        except sqlglot.errors.ParseError:
            continue
        if isinstance(parsed, exp.Drop) and _names(parsed, name):
            return False
        if isinstance(parsed, exp.Create) and _names(parsed, name):
            return not bool(parsed.args.get("replace"))
    return False


def _names(statement: exp.Expression, name: str) -> bool:
    target = statement.this
    if isinstance(target, exp.Schema):
        target = target.this
    if not isinstance(target, exp.Table):
        return False
    written = ".".join(p.name for p in target.parts).lower()
    return written == name


def plain_table(ds: DatasetSpec) -> sa.TableClause:
    schema, table = split_name(ds.name)
    return sa.table(table, schema=schema)
