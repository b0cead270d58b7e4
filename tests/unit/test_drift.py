"""Catalog drift (erasure.drift): a catalogued table or column the warehouse lacks is an error
the plan carries as a blocking gap and verify fails on, never "no rows of the subject here".

Each case edits the demo catalog the way drift happens: a typo or a moved table, a renamed
column, a column whose type changed under it."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from erasure.catalog import Catalog, load_catalog
from erasure.locate import locate, parked_location
from erasure.model import Action, GapKind, Plan
from erasure.planner import make_plan
from erasure.sample.seed import build_demo
from erasure.verify import recount
from erasure.warehouse import Warehouse
from tests.unit.actions.support import assert_no_subject_values, demo_subject


def _demo(tmp_path: Path, *edits: tuple[str, str]) -> tuple[Catalog, Warehouse]:
    catalog = build_demo(tmp_path / "estate")
    path = catalog.base_dir / "catalog.yaml"
    text = path.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text)
    catalog = load_catalog(path)
    return catalog, Warehouse(catalog)


def _plan(catalog: Catalog, warehouse: Warehouse) -> Plan:
    return make_plan(catalog, demo_subject(), warehouse=warehouse)


def _drift(plan: Plan, name: str) -> str:
    [gap] = [g for g in plan.gaps if g.kind is GapKind.CATALOG_DRIFT and g.dataset.name == name]
    return gap.detail


def test_a_catalogued_table_the_warehouse_lacks_stops_its_erasure(tmp_path: Path) -> None:
    catalog, warehouse = _demo(tmp_path, ("name: crm.orders\n", "name: crm.order\n"))
    plan = _plan(catalog, warehouse)

    [item] = [i for i in plan.items if i.dataset.name == "crm.order"]
    assert (item.action, item.rule) == (Action.ESCALATE, "1")
    detail = _drift(plan, "crm.order")
    assert "no such table" in detail and "similar: crm.orders" in detail
    assert "correct the dataset's name" in detail
    assert_no_subject_values(plan.model_dump_json())


def test_a_missing_identifier_column_is_drift_not_an_absence(tmp_path: Path) -> None:
    catalog, warehouse = _demo(
        tmp_path,
        ("holds_subject: {customer_id: customer_id}", "holds_subject: {customer_id: cust_id}"),
    )
    plan = _plan(catalog, warehouse)

    assert "crm.orders" not in [i.dataset.name for i in plan.items if i.action is Action.ERASE_ROWS]
    detail = _drift(plan, "crm.orders")
    assert "cust_id" in detail and "not in the table" in detail and "customer_id" in detail


def test_an_identifier_column_whose_type_holds_no_identifier_is_drift(tmp_path: Path) -> None:
    catalog, warehouse = _demo(
        tmp_path,
        ("holds_subject: {customer_id: customer_id}", "holds_subject: {customer_id: customer_ref}"),
    )
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("ALTER TABLE crm.orders ADD COLUMN customer_ref BLOB"))
    warehouse.forget_tables()

    detail = _drift(_plan(catalog, warehouse), "crm.orders")
    assert "customer_ref (BLOB)" in detail and "no identifier can be matched" in detail


def test_verify_fails_on_a_table_that_drifted_after_the_plan(tmp_path: Path) -> None:
    catalog, warehouse = _demo(tmp_path)
    subject = demo_subject()
    location = locate(catalog, warehouse, subject)
    plan = make_plan(catalog, subject, warehouse=warehouse, location=location)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("ALTER TABLE crm.orders RENAME TO orders_v2"))

    found = recount(catalog, warehouse, *parked_location(location), plan, check=False)

    [orders] = [r for r in found if r.dataset == "crm.orders"]
    assert not orders.ok
    assert "no such table" in orders.result()


def test_the_demo_catalog_matches_its_warehouse(tmp_path: Path) -> None:
    plan = _plan(*_demo(tmp_path))
    assert not [g for g in plan.gaps if g.kind is GapKind.CATALOG_DRIFT]
    assert "crm.orders" in {i.dataset.name for i in plan.items if i.action is Action.ERASE_ROWS}
