"""The act and verify steps on the demo estate in a real PostgreSQL database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.actions.rebuild import RebuildFailed, rebuild
from erasure.catalog import Catalog, SqlRebuild
from erasure.locate import locate, parked_location
from erasure.model import Action, DatasetRef
from erasure.planner import make_plan, rebuild_order
from erasure.sample.seed import build_demo
from erasure.verify import recount
from erasure.warehouse import Warehouse
from tests.unit.actions.support import (
    assert_no_subject_values,
    count,
    demo_subject,
    demo_trigger,
    erase_all,
    proven_by,
    rebuild_all,
)

LTV = DatasetRef("warehouse", "marts.customer_ltv")

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A database of our own on the local server, dropped afterwards."""
    name = f"erasure_actions_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(f"{SERVER}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError:
        admin.dispose()
        pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    try:
        yield f"{SERVER}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def estate(tmp_path: Path, postgres_url: str) -> Iterator[tuple[Catalog, Warehouse]]:
    catalog = build_demo(tmp_path / "estate", url=postgres_url)
    warehouse = Warehouse(catalog)
    yield catalog, warehouse
    warehouse.dispose()


def test_erase_rebuild_verify_on_postgres(estate: tuple[Catalog, Warehouse]) -> None:
    catalog, warehouse = estate
    subject = demo_subject()
    plan = make_plan(catalog, subject, warehouse=warehouse)
    location = locate(catalog, warehouse, subject)
    tables = ("crm.customers", "crm.orders", "crm.addresses", "ops.stock_levels")
    before = {t: count(warehouse, t) for t in tables}
    others = {
        "crm.customers": count(warehouse, "crm.customers", "id <> 'C0001'"),
        "crm.orders": count(warehouse, "crm.orders", "customer_id <> 'C0001'"),
    }

    erased = erase_all(catalog, warehouse, location, plan)

    assert [(e.dataset, e.rows_deleted, e.rows_after) for e in erased] == [
        ("crm.orders", 3, 0),
        ("events.activity", 3, 0),  # the lakehouse tables: with their history
        ("orders_ledger", 3, 0),
        ("crm.customers", 1, 0),
    ]
    in_sql = [e for e in erased if e.history is None]
    assert [e.dataset for e in in_sql] == ["crm.orders", "crm.customers"]
    assert all("%(" in (e.statement or "") for e in in_sql)  # psycopg placeholders
    again = erase_all(catalog, warehouse, location, plan)
    assert all(e.already_done and e.rows_deleted == 0 for e in again)

    runs: list[str] = []
    order = rebuild_order(plan)
    rebuilt = rebuild_all(
        catalog, warehouse, plan, trigger_dag=demo_trigger(catalog, warehouse, runs)
    )
    assert [r.dataset for r in rebuilt] == [ref.name for ref in order]
    sql_rebuilt = [r.dataset for r in rebuilt if r.method == "sql"]
    assert sql_rebuilt == [
        "marts.customer_ltv",
        "marts.popular_products",
        "marts.customer_segments",
        "marts.segment_history",
    ]
    assert [r.run_id for r in rebuilt if r.method == "dag"] == runs

    recounts = recount(
        catalog, warehouse, *parked_location(location), plan, fresh_write=proven_by(rebuilt)
    )
    assert {r.dataset for r in recounts} == {
        i.dataset.name for i in plan.items if i.action in (Action.ERASE_ROWS, Action.REBUILD)
    }
    assert all(r.ok and r.found == 0 for r in recounts)

    assert count(warehouse, "ops.stock_levels") == before["ops.stock_levels"]
    assert count(warehouse, "crm.addresses") == before["crm.addresses"]  # 2a: escalated
    assert count(warehouse, "crm.customers") == before["crm.customers"] - 1
    assert count(warehouse, "crm.orders") == before["crm.orders"] - 3
    for table, rows in others.items():
        assert count(warehouse, table) == rows  # every other customer's rows are untouched
    assert count(warehouse, "marts.customer_ltv") == before["crm.customers"] - 1

    evidence = "".join(e.model_dump_json() for e in [*erased, *again, *rebuilt, *recounts])
    assert_no_subject_values(evidence)


def test_failed_rebuild_keeps_the_old_table_and_a_retry_succeeds(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    subject = demo_subject()
    location = locate(catalog, warehouse, subject)
    plan = make_plan(catalog, subject, warehouse=warehouse)
    erase_all(catalog, warehouse, location, plan)
    good = catalog.by_name("marts.customer_ltv").rebuild
    assert good is not None and good.sql is not None
    broken = with_rebuild(catalog, "marts.customer_ltv", [*good.sql, "SELECT 1 / 0"])
    broken_warehouse = Warehouse(broken)
    ltv_rows = count(warehouse, "marts.customer_ltv")

    with pytest.raises(RebuildFailed, match="statement 2 of 2") as failed:
        rebuild(broken, broken_warehouse, LTV, trigger_dag=None)

    assert "22012" in str(failed.value)  # SQLSTATE division_by_zero, and no driver text
    assert_no_subject_values(str(failed.value))
    assert count(warehouse, "marts.customer_ltv") == ltv_rows  # the old table, subject in it
    assert count(warehouse, "marts.customer_ltv", "customer_id = 'C0001'") == 1
    broken_warehouse.dispose()

    retried = rebuild(catalog, warehouse, LTV, trigger_dag=None)

    assert retried.rows_after == ltv_rows - 1
    assert count(warehouse, "marts.customer_ltv", "customer_id = 'C0001'") == 0


def with_rebuild(catalog: Catalog, name: str, statements: list[str]) -> Catalog:
    """The same catalog with one dataset's rebuild SQL replaced."""
    datasets = [
        ds.model_copy(update={"rebuild": SqlRebuild(sql=statements)}) if ds.name == name else ds
        for ds in catalog.datasets
    ]
    return Catalog.model_validate(
        {
            **catalog.model_dump(),
            "datasets": [d.model_dump() for d in datasets],
            "base_dir": catalog.base_dir,
        }
    )
