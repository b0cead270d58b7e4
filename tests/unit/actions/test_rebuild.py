from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.actions.rebuild import (
    CompletedWrites,
    RebuildFailed,
    RunOutcome,
    TriggerDag,
    empty_before_rebuild,
    fresh_write_proof,
    rebuild,
)
from erasure.catalog import Catalog
from erasure.locate import locate
from erasure.model import Action, DatasetRef, PlanItem, SubjectRef
from erasure.planner import make_plan, rebuild_order
from erasure.warehouse import Warehouse
from tests.unit.actions.support import count, erase_all, item, names, plan_of, rebuild_all
from tests.unit.estate import make_estate

CATALOG = """
version: 1
identifiers:
  customer_id: {{normalise: strip}}
connections:
  warehouse: {{url: "sqlite:///wh.db"}}
datasets:
  - {{namespace: warehouse, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {{customer_id: customer_id}}}}
  - namespace: warehouse
    name: marts.totals
    connection: warehouse
    kind: table
    rebuild:
      sql:
{totals_sql}
  - {{namespace: warehouse, name: marts.daily, connection: warehouse, kind: table,
     rebuild: {{dag_id: build_daily}}}}
  - {{namespace: warehouse, name: marts.recent, connection: warehouse, kind: view}}
  - {{namespace: warehouse, name: marts.notes, connection: warehouse, kind: table}}
  - namespace: warehouse
    name: marts.refilled
    connection: warehouse
    kind: table
    rebuild:
      sql:
        - DELETE FROM marts.refilled
        - INSERT INTO marts.refilled (customer_id) SELECT customer_id FROM crm.orders
"""

TOTALS = (
    "CREATE TABLE marts.totals AS SELECT customer_id, SUM(amount) AS total "
    "FROM crm.orders GROUP BY customer_id"
)
BROKEN = "INSERT INTO marts.no_such_table VALUES (1)"

ROWS = [
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT, amount INTEGER)",
    "INSERT INTO crm.orders VALUES (1, 'C1', 10), (2, 'C2', 20), (3, 'C3', 30)",
    TOTALS,
    "CREATE TABLE marts.daily (n INTEGER)",
    "CREATE VIEW marts.recent AS SELECT * FROM daily WHERE n > 1",
    "CREATE TABLE marts.refilled (customer_id TEXT, note TEXT DEFAULT 'kept')",
]


def catalog_text(*totals: str) -> str:
    return CATALOG.format(totals_sql="\n".join(f"        - {s!r}" for s in totals))


def estate(tmp_path: Path, *totals: str) -> tuple[Catalog, Warehouse]:
    return make_estate(tmp_path, catalog_text(*(totals or (TOTALS,))), ROWS)


def totals(warehouse: Warehouse) -> dict[str, int]:
    with warehouse.engine("warehouse").connect() as conn:
        return dict(conn.execute(sa.text("SELECT customer_id, total FROM marts.totals")).all())


def test_sql_rebuild_recreates_the_table_from_cleaned_upstreams(tmp_path: Path) -> None:
    catalog, warehouse = estate(tmp_path)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("DELETE FROM crm.orders WHERE customer_id = 'C1'"))

    done = rebuild(catalog, warehouse, catalog.by_name("marts.totals").ref, trigger_dag=None)

    assert (done.method, done.statements, done.dropped_first, done.rows_after) == (
        "sql",
        1,
        True,
        2,
    )
    assert totals(warehouse) == {"C2": 20, "C3": 30}


def test_failing_statement_leaves_the_old_table_and_a_retry_succeeds(tmp_path: Path) -> None:
    # SQLite DDL is transactional only inside an explicit BEGIN: the drop and the create of
    # the first statement must both be undone when the second statement fails.
    catalog, warehouse = estate(tmp_path, TOTALS, BROKEN)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("DELETE FROM crm.orders WHERE customer_id = 'C1'"))

    with pytest.raises(RebuildFailed, match=r"statement 2 of 2 .*previous table is unchanged"):
        rebuild(catalog, warehouse, catalog.by_name("marts.totals").ref, trigger_dag=None)
    assert totals(warehouse) == {"C1": 10, "C2": 20, "C3": 30}

    fixed, fixed_warehouse = make_estate(tmp_path, catalog_text(TOTALS), [])
    rebuild(fixed, fixed_warehouse, fixed.by_name("marts.totals").ref, trigger_dag=None)
    assert totals(fixed_warehouse) == {"C2": 20, "C3": 30}


def test_refill_statements_keep_the_table(tmp_path: Path) -> None:
    # DELETE + INSERT rebuilds refill the existing table: dropping it would break them.
    catalog, warehouse = estate(tmp_path)

    done = rebuild(catalog, warehouse, catalog.by_name("marts.refilled").ref, trigger_dag=None)

    assert (done.dropped_first, done.statements, done.rows_after) == (False, 2, 3)
    assert count(warehouse, "marts.refilled", "note = 'kept'") == 3


def test_dag_rebuild_reports_the_run_and_fails_unless_it_succeeded(tmp_path: Path) -> None:
    catalog, warehouse = estate(tmp_path)
    asked: list[str] = []

    def succeeds(dag_id: str, ready_at: datetime) -> RunOutcome:
        asked.append(dag_id)
        return RunOutcome(run_id="manual__1", state="success")

    done = rebuild(catalog, warehouse, catalog.by_name("marts.daily").ref, trigger_dag=succeeds)
    assert (done.method, done.dag_id, done.run_id, done.rows_after) == (
        "dag",
        "build_daily",
        "manual__1",
        0,
    )
    assert asked == ["build_daily"]

    def fails(dag_id: str, ready_at: datetime) -> RunOutcome:
        return RunOutcome(run_id="manual__2", state="failed")

    with pytest.raises(RebuildFailed, match=r"DAG 'build_daily' run 'manual__2' .* 'failed'"):
        rebuild(catalog, warehouse, catalog.by_name("marts.daily").ref, trigger_dag=fails)
    with pytest.raises(RebuildFailed, match="pass trigger_dag"):
        rebuild(catalog, warehouse, catalog.by_name("marts.daily").ref, trigger_dag=None)


def test_dag_rebuild_cites_the_run_and_refuses_one_that_started_before_the_sources_were_clean(
    tmp_path: Path,
) -> None:
    """A run another request triggered serves this one only if it started after this request's
    upstreams were clean; the evidence records both times and whose run it was."""
    catalog, warehouse = estate(tmp_path)
    daily = catalog.by_name("marts.daily").ref
    ready_at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def ran(started_at: datetime) -> TriggerDag:
        def trigger(dag_id: str, ready: datetime) -> RunOutcome:
            assert ready == ready_at
            return RunOutcome(
                run_id="erasure-rebuild-build_daily-3",
                state="success",
                started_at=started_at,
                triggered_for="REQ-OTHER",
            )

        return trigger

    after = ready_at + timedelta(seconds=5)
    done = rebuild(catalog, warehouse, daily, trigger_dag=ran(after), ready_at=ready_at)
    assert (done.run_id, done.run_triggered_for) == ("erasure-rebuild-build_daily-3", "REQ-OTHER")
    assert (done.run_started_at, done.upstreams_done_at) == (after, ready_at)

    before = ready_at - timedelta(milliseconds=1)
    with pytest.raises(RebuildFailed, match="before this request's upstreams were clean"):
        rebuild(catalog, warehouse, daily, trigger_dag=ran(before), ready_at=ready_at)


def test_view_needs_nothing_and_unrebuildable_is_refused(tmp_path: Path) -> None:
    catalog, warehouse = estate(tmp_path)

    view = rebuild(catalog, warehouse, catalog.by_name("marts.recent").ref, trigger_dag=None)
    assert view.method == "view" and "computed on read" in view.detail
    with pytest.raises(RebuildFailed, match="no 'rebuild'"):
        rebuild(catalog, warehouse, catalog.by_name("marts.notes").ref, trigger_dag=None)


def test_rebuild_order_keeps_the_planners_order_and_checks_it() -> None:
    ordered = plan_of(
        [
            item("crm.orders", Action.ERASE_ROWS),
            item("marts.a", Action.REBUILD, ["crm.orders"]),
            item("marts.b", Action.REBUILD, ["marts.a"]),
        ]
    )
    assert names(rebuild_order(ordered)) == ["marts.a", "marts.b"]

    swapped = plan_of(
        [item("marts.b", Action.REBUILD, ["marts.a"]), item("marts.a", Action.REBUILD)]
    )
    with pytest.raises(RebuildFailed, match=r"'marts.b' before its upstream\(s\) marts.a"):
        rebuild_order(swapped)


def test_feedback_cycle_members_may_read_each_other_but_all_must_be_rebuilt() -> None:
    loop = [
        item("marts.seg", Action.REBUILD, ["marts.hist"]),
        item("marts.hist", Action.REBUILD, ["marts.seg"]),
    ]
    assert names(rebuild_order(plan_of(loop, [["marts.seg", "marts.hist"]]))) == [
        "marts.seg",
        "marts.hist",
    ]

    half = [loop[0], item("marts.hist", Action.ESCALATE, ["marts.seg"])]
    with pytest.raises(RebuildFailed, match=r"marts\.hist are neither erased nor rebuilt"):
        rebuild_order(plan_of(half, [["marts.seg", "marts.hist"]]))


LOOP_CATALOG = """
version: 1
identifiers:
  customer_id: {normalise: strip}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: warehouse, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
  - namespace: warehouse
    name: marts.seen
    connection: warehouse
    kind: table
    rebuild:
      sql: >-
        CREATE TABLE marts.seen AS SELECT customer_id FROM crm.orders
        UNION SELECT customer_id FROM marts.seen_history
  - namespace: warehouse
    name: marts.seen_history
    connection: warehouse
    kind: table
    rebuild:
      sql: CREATE TABLE marts.seen_history AS SELECT customer_id FROM marts.seen
"""

LOOP_ROWS = [
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT)",
    "INSERT INTO crm.orders VALUES (1, 'C1'), (2, 'C2')",
    "CREATE TABLE marts.seen_history (customer_id TEXT)",
    "INSERT INTO marts.seen_history VALUES ('C1'), ('C2')",
    "CREATE TABLE marts.seen AS SELECT customer_id FROM crm.orders",
    # the subject's erasure, already done at the source:
    "DELETE FROM crm.orders WHERE customer_id = 'C1'",
]

LOOP_PLAN = plan_of(
    [
        item("crm.orders", Action.ERASE_ROWS),
        item("marts.seen", Action.REBUILD, ["crm.orders", "marts.seen_history"]),
        item("marts.seen_history", Action.REBUILD, ["marts.seen"]),
    ],
    [["marts.seen", "marts.seen_history"]],
)


def test_feedback_loop_is_emptied_first_or_it_carries_the_subject_back(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(tmp_path, LOOP_CATALOG, LOOP_ROWS)

    # Rebuilt in order without emptying, last run's history puts the subject back.
    for ref in rebuild_order(LOOP_PLAN):
        rebuild(catalog, warehouse, ref, trigger_dag=None)
    assert count(warehouse, "marts.seen", "customer_id = 'C1'") == 1

    done = rebuild_all(catalog, warehouse, LOOP_PLAN, trigger_dag=None)

    assert [(d.dataset, d.emptied_first) for d in done] == [
        ("marts.seen", True),
        ("marts.seen_history", True),
    ]
    for table in ("marts.seen", "marts.seen_history"):
        assert count(warehouse, table, "customer_id = 'C1'") == 0
        assert count(warehouse, table, "customer_id = 'C2'") == 1


def emptied(catalog: Catalog, warehouse: Warehouse, name: str) -> list[str]:
    """What emptying LOOP_PLAN before rebuilding `name` emptied."""
    return names(empty_before_rebuild(catalog, warehouse, LOOP_PLAN, DatasetRef("warehouse", name)))


def test_the_loop_is_emptied_before_its_first_member_only(tmp_path: Path) -> None:
    """Task by task (as the DAG rebuilds), a second emptying would lose the first rebuild."""
    catalog, warehouse = make_estate(tmp_path, LOOP_CATALOG, LOOP_ROWS)

    assert emptied(catalog, warehouse, "marts.seen") == [
        "marts.seen",
        "marts.seen_history",
    ]
    rebuild(catalog, warehouse, catalog.by_name("marts.seen").ref, trigger_dag=None)
    assert emptied(catalog, warehouse, "marts.seen_history") == []
    rebuild(catalog, warehouse, catalog.by_name("marts.seen_history").ref, trigger_dag=None)
    assert emptied(catalog, warehouse, "crm.orders") == []

    for table in ("marts.seen", "marts.seen_history"):
        assert count(warehouse, table, "customer_id = 'C1'") == 0
        assert count(warehouse, table, "customer_id = 'C2'") == 1


def test_emptying_skips_missing_tables(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(tmp_path, LOOP_CATALOG, LOOP_ROWS[:4])

    assert emptied(catalog, warehouse, "marts.seen") == ["marts.seen_history"]
    assert count(warehouse, "marts.seen_history") == 0


def test_a_history_that_names_its_subjects_keeps_everyone_elses(tmp_path: Path) -> None:
    """Declared under holds_subject, the loop's history loses the subject's rows only: C3, no
    longer in any order, stays in it (emptying the loop would have lost C3 for good)."""
    history = "marts.seen_history\n    connection: warehouse\n    kind: table\n"
    catalog_text = LOOP_CATALOG.replace(
        history, history + "    holds_subject: {customer_id: customer_id}\n"
    )
    assert catalog_text != LOOP_CATALOG
    rows = [*LOOP_ROWS[:5], "INSERT INTO marts.seen_history VALUES ('C3')"]
    catalog, warehouse = make_estate(tmp_path, catalog_text, rows)
    subject = SubjectRef(type="customer_id", value=SecretStr("C1"))
    location = locate(catalog, warehouse, subject)
    plan = make_plan(catalog, subject, warehouse=warehouse, location=location)
    actions = {i.dataset.name: i.action for i in plan.items}
    assert actions["marts.seen_history"] is Action.ERASE_ROWS
    assert actions["marts.seen"] is Action.REBUILD

    erase_all(catalog, warehouse, location, plan)
    done = rebuild_all(catalog, warehouse, plan, trigger_dag=None)

    assert [(d.dataset, d.emptied_first) for d in done] == [("marts.seen", True)]
    for table in ("marts.seen", "marts.seen_history"):
        assert count(warehouse, table, "customer_id = 'C1'") == 0
        assert count(warehouse, table, "customer_id = 'C3'") == 1


# ---------------------------------------------------------------------------------------------
# what proves a rebuilt artefact with no column to search was written afresh

READY = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
NOW = READY + timedelta(hours=1)
DAILY = DatasetRef("warehouse", "marts.orders_daily")
ORDERS_REF = DatasetRef("warehouse", "crm.orders")
DAILY_ITEM = PlanItem(
    dataset=DAILY, kind="table", action=Action.REBUILD, rule="5", reason="r", upstreams=[ORDERS_REF]
)
DAG_EVIDENCE = {
    "method": "dag",
    "dag_id": "build_marts",
    "run_id": "manual__1",
    "upstreams_done_at": READY.isoformat(),
}


def _writes(*runs: tuple[Any, ...]) -> CompletedWrites:
    """Runs (completed at, inputs[, started at[, DAG]]) as the store reports them, earliest
    first; a run starts when it completes and is a task of build_marts unless it says
    otherwise."""

    def completed_writes(dataset: DatasetRef, after: datetime, until: datetime) -> list[Any]:
        assert dataset == DAILY
        return sorted(
            (
                {"job": "airflow/build_marts.rematerialise", "run_id": f"r{n}",
                 "completed_at": run[0], "inputs": run[1],
                 "started_at": run[2] if len(run) > 2 else run[0],
                 "dag_id": run[3] if len(run) > 3 else "build_marts"}
                for n, run in enumerate(runs)
                if after < run[0] <= until
            ),
            key=lambda r: r["completed_at"],
        )  # fmt: skip

    return completed_writes


@pytest.mark.parametrize(
    ("runs", "proven"),
    [
        ((), False),  # the run state says success; nothing the producer reported
        (((READY - timedelta(minutes=1), [ORDERS_REF.qualified]),), False),  # before the erasure
        (((READY + timedelta(minutes=5), ["warehouse/crm.other"]),), False),  # not the sources
        (((NOW + timedelta(hours=2), [ORDERS_REF.qualified]),), False),  # from the future
        (((READY + timedelta(minutes=5), [ORDERS_REF.qualified]),), True),
        # a run under way before the sources were clean read the subject's rows
        (
            ((READY + timedelta(minutes=5), [ORDERS_REF.qualified], READY - timedelta(minutes=1)),),
            False,
        ),
        # another job's write (an append, a Spark job) is no run of the DAG triggered
        (((READY + timedelta(minutes=5), [ORDERS_REF.qualified], READY, None),), False),
        # a task of another DAG whose name shares the prefix (`build_marts.nightly`)
        (
            ((READY + timedelta(minutes=5), [ORDERS_REF.qualified], READY, "build_marts.nightly"),),
            False,
        ),
        # no START: when the run began is not known
        (((READY + timedelta(minutes=5), [ORDERS_REF.qualified], None),), False),
        # a fresh write, then a run begun before the sources were clean finishing after it:
        # the table holds what the stale run wrote
        (
            (
                (READY + timedelta(minutes=5), [ORDERS_REF.qualified]),
                (
                    READY + timedelta(minutes=9),
                    [ORDERS_REF.qualified],
                    READY - timedelta(minutes=5),
                ),
            ),
            False,
        ),
    ],
)
def test_a_dag_rebuild_is_proven_only_by_its_own_lineage_after_the_erasure(
    runs: tuple[tuple[Any, ...], ...], proven: bool
) -> None:
    proof = fresh_write_proof(DAILY_ITEM, DAG_EVIDENCE, _writes(*runs), NOW)
    assert (proof is not None) is proven
    if proven:
        assert proof is not None and "OpenLineage COMPLETE" in proof and "crm.orders" in proof


def test_what_this_system_did_itself_proves_a_fresh_write() -> None:
    nothing = _writes()
    assert fresh_write_proof(DAILY_ITEM, {"method": "view"}, nothing, NOW)
    sql = {"method": "sql", "statements": 1, "rebuilt_at": NOW.isoformat()}
    assert fresh_write_proof(DAILY_ITEM, sql, nothing, NOW)
    assert fresh_write_proof(DAILY_ITEM, {**sql, "statements": 0}, nothing, NOW) is None
    in_process = {**DAG_EVIDENCE, "run_in_process": True}
    assert "ran DAG build_marts itself" in str(
        fresh_write_proof(DAILY_ITEM, in_process, nothing, NOW)
    )
