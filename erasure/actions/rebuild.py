"""Rule 5: re-materialise a derived artefact from its cleaned upstreams, in lineage order.

Three methods, picked by the catalog entry: `sql` drops the table and runs the catalog's
statements in one transaction (a failure leaves the previous table, a retry starts over);
`dag` triggers the artefact's Airflow DAG through a callable the adapter supplies and waits
for it; a `view` is computed on read and needs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

import sqlalchemy as sa
import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlalchemy.engine import Connection
from sqlglot import exp

from erasure.actions.transaction import describe_failure, transaction
from erasure.catalog import Catalog, DatasetKind, DatasetSpec
from erasure.errors import CatalogError, RebuildFailed
from erasure.model import DatasetRef, Evidence, Plan
from erasure.planner import feedback_cycles, rebuild_order
from erasure.warehouse import Warehouse, split_name


class RunOutcome(BaseModel):
    """How a triggered DAG run ended, as the Airflow adapter reports it after waiting."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    state: str  # Airflow's DagRunState value: only "success" counts

    @property
    def succeeded(self) -> bool:
        return self.state == "success"


TriggerDag = Callable[[str], RunOutcome]


class RebuildEvidence(Evidence):
    """What one rebuild did, for the completion record."""

    dataset: str
    method: Literal["sql", "dag", "view"]
    dag_id: str | None = None
    run_id: str | None = None
    statements: int = 0  # catalog statements run (sql method)
    dropped_first: bool = False  # the previous table was dropped inside the transaction
    emptied_first: bool = False  # feedback-cycle member emptied before any member was rebuilt
    rows_after: int | None = None  # None: the artefact is not a table we can count
    detail: str
    rebuilt_at: datetime


def rebuild(
    catalog: Catalog,
    warehouse: Warehouse,
    dataset: DatasetRef,
    *,
    trigger_dag: TriggerDag | None,
) -> RebuildEvidence:
    """Re-materialise one artefact by its catalog method; raises RebuildFailed on failure."""
    ds = catalog.require(dataset)
    if ds.kind is DatasetKind.VIEW:
        return RebuildEvidence(
            dataset=ds.name,
            method="view",
            detail="a view is computed on read from its cleaned upstreams: nothing to rebuild",
            rebuilt_at=datetime.now(UTC),
        )
    if ds.rebuild is None:
        raise RebuildFailed(
            f"dataset {ds.name!r} has no 'rebuild' in the catalog: it cannot be rebuilt; "
            "re-plan (it escalates) or declare its rebuild dag_id or sql"
        )
    if ds.rebuild.dag_id is not None:
        return _rebuild_by_dag(warehouse, ds, ds.rebuild.dag_id, trigger_dag)
    return _rebuild_by_sql(warehouse, ds, ds.rebuild.sql or [])


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
                    conn.execute(sa.delete(_plain_table(ds)))
            except sa.exc.DBAPIError as exc:
                raise RebuildFailed(
                    f"dataset {ds.name!r}: emptying it before its feedback cycle is rebuilt "
                    f"failed ({describe_failure(exc)}); nothing was rebuilt, retry"
                ) from None
        emptied.append(ref)
    return emptied


def _rebuild_by_sql(
    warehouse: Warehouse, ds: DatasetSpec, statements: list[str]
) -> RebuildEvidence:
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
                rows = _count(conn, _plain_table(ds))
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
        method="sql",
        statements=len(statements),
        dropped_first=drop_first,
        rows_after=rows,
        detail="re-created from its cleaned upstreams by the catalog's SQL in one transaction",
        rebuilt_at=datetime.now(UTC),
    )


def _rebuild_by_dag(
    warehouse: Warehouse, ds: DatasetSpec, dag_id: str, trigger_dag: TriggerDag | None
) -> RebuildEvidence:
    if trigger_dag is None:
        raise RebuildFailed(
            f"dataset {ds.name!r} is rebuilt by DAG {dag_id!r}: pass trigger_dag (the Airflow "
            "adapter supplies one that triggers the DAG and waits for its run)"
        )
    outcome = trigger_dag(dag_id)
    warehouse.forget_tables()
    if not outcome.succeeded:
        raise RebuildFailed(
            f"dataset {ds.name!r}: DAG {dag_id!r} run {outcome.run_id!r} ended in state "
            f"{outcome.state!r}, not success; fix the run (see its logs in Airflow) and retry"
        )
    rows = None
    if ds.connection is not None and warehouse.table(ds) is not None:
        with warehouse.connect(ds) as conn:
            rows = _count(conn, _plain_table(ds))
    return RebuildEvidence(
        dataset=ds.name,
        method="dag",
        dag_id=dag_id,
        run_id=outcome.run_id,
        rows_after=rows,
        detail=f"re-materialised by DAG {dag_id!r}, run {outcome.run_id!r} succeeded",
        rebuilt_at=datetime.now(UTC),
    )


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


def _plain_table(ds: DatasetSpec) -> sa.TableClause:
    schema, table = split_name(ds.name)
    return sa.table(table, schema=schema)


def _count(conn: Connection, table: sa.TableClause) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
