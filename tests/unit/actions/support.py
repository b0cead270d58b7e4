"""Helpers for the act/verify tests: foreign keys on SQLite, the demo's DAGs, leak checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from pydantic import SecretStr

from erasure.actions.erase_rows import erase_rows
from erasure.actions.erased import ErasureEvidence
from erasure.actions.rebuild import (
    RebuildEvidence,
    RunOutcome,
    TriggerDag,
    empty_before_rebuild,
    fresh_write_proof,
    rebuild,
)
from erasure.catalog import Catalog
from erasure.locate import Location
from erasure.model import (
    Action,
    Cycle,
    CycleKind,
    DatasetRef,
    Plan,
    PlanItem,
    SubjectRef,
    SubjectSummary,
)
from erasure.planner import rebuild_order
from erasure.sample.seed import DEMO_SUBJECT
from erasure.verify import FreshWrite
from erasure.warehouse import Warehouse

# Everything that identifies the demo subject, in any form the estate stores or derives it.
DEMO_VALUES = (
    "alice.smith@example.com",
    "Alice.Smith@Example.com",
    "a.smith@work.example",
    "C0001",
    "Alice Smith",
    "020 7946 0958",
    "+442079460958",
)

# The demo's rebuild DAGs and the artefacts each re-materialises from the estate's SQL.
DEMO_DAGS = {
    "build_marts": ["marts.orders_daily"],
    "build_reports": ["reports.monthly_revenue"],
}


def demo_subject() -> SubjectRef:
    return SubjectRef(type=DEMO_SUBJECT[0], value=SecretStr(DEMO_SUBJECT[1]))


def enforce_foreign_keys(warehouse: Warehouse) -> None:
    """Make SQLite check foreign keys on every connection (Postgres always does)."""
    engine = warehouse.engine("warehouse")
    if engine.dialect.name != "sqlite":
        return
    engine.dispose()  # connections made before the listener would not have the pragma

    @sa.event.listens_for(engine, "connect")
    def _pragma(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA foreign_keys=ON")


def count(warehouse: Warehouse, table: str, where: str = "1 = 1", **params: Any) -> int:
    with warehouse.engine("warehouse").connect() as conn:
        return int(
            conn.execute(
                sa.text(f"SELECT COUNT(*) FROM {table} WHERE {where}"), params
            ).scalar_one()
        )


def demo_trigger(catalog: Catalog, warehouse: Warehouse, runs: list[str]) -> TriggerDag:
    """A stand-in for the Airflow adapter running a demo DAG in process (as under dag.test):
    its declared SQL, executed here."""

    def trigger(dag_id: str, ready_at: datetime) -> RunOutcome:
        engine = warehouse.engine("warehouse")
        with engine.begin() as conn:
            for name in DEMO_DAGS[dag_id]:
                select = (catalog.base_dir / "sql" / f"{name}.sql").read_text()
                select = "\n".join(
                    ln for ln in select.splitlines() if not ln.lstrip().startswith("--")
                )
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
                conn.execute(sa.text(f"CREATE TABLE {name} AS {select}"))
        run_id = f"manual__{dag_id}__{len(runs)}"
        runs.append(run_id)
        return RunOutcome(run_id=run_id, state="success", in_process=True)

    return trigger


def proven_by(rebuilt: list[RebuildEvidence]) -> FreshWrite:
    """Verify's proof of a fresh write, from the evidence of the rebuilds just done (no
    lineage store: what the rebuild did itself)."""
    done = {e.dataset: e.model_dump(mode="json") for e in rebuilt}

    def proof(item: PlanItem) -> str | None:
        evidence = done.get(item.dataset.name)
        now = datetime.now(UTC)
        return None if evidence is None else fresh_write_proof(item, evidence, _none, now)

    return proof


def _none(dataset: DatasetRef, after: datetime, until: datetime) -> list[dict[str, Any]]:
    return []


def assert_no_subject_values(text: str, values: tuple[str, ...] = DEMO_VALUES) -> None:
    lowered = text.lower()
    for value in values:
        assert value.lower() not in lowered, "a subject identifier leaked into a message"


def item(name: str, action: Action, upstreams: list[str] | None = None) -> PlanItem:
    return PlanItem(
        dataset={"namespace": "warehouse", "name": name},
        kind="table",
        action=action,
        rule="5" if action is Action.REBUILD else "2",
        reason="test",
        upstreams=upstreams or [],
    )


def plan_of(items: list[PlanItem], feedback: list[list[str]] | None = None) -> Plan:
    """A hand-made plan (no lineage needed) with the given items and feedback cycles."""
    return Plan(
        subject=SubjectSummary(type="email"),
        roots=[],
        items=items,
        coverage=1.0,
        gaps=[],
        cycles=[
            Cycle(kind=CycleKind.FEEDBACK, datasets=[DatasetRef("warehouse", n) for n in sorted(c)])
            for c in feedback or []
        ],
        lineage_snapshot="test",
        created_at=datetime.now(UTC),
    )


def erase_all(
    catalog: Catalog, warehouse: Warehouse, location: Location, plan: Plan
) -> list[ErasureEvidence]:
    """Every erase_rows item of the plan, in its order, as the DAG's tasks run them."""
    return [
        erase_rows(catalog, warehouse, location, item.dataset)
        for item in plan.items
        if item.action is Action.ERASE_ROWS
    ]


def rebuild_all(
    catalog: Catalog, warehouse: Warehouse, plan: Plan, *, trigger_dag: TriggerDag | None
) -> list[RebuildEvidence]:
    """Every rebuild item in checked lineage order, each as its rebuild task does: a feedback
    loop emptied once, before its first member."""
    emptied: set[DatasetRef] = set()
    evidence = []
    for ref in rebuild_order(plan):
        emptied.update(empty_before_rebuild(catalog, warehouse, plan, ref))
        done = rebuild(catalog, warehouse, ref, trigger_dag=trigger_dag)
        evidence.append(done.model_copy(update={"emptied_first": ref in emptied}))
    return evidence


def names(refs: list[DatasetRef]) -> list[str]:
    return [ref.name for ref in refs]
