from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.locate import Location, locate, parked_location
from erasure.model import Action, Plan, SubjectRef
from erasure.planner import make_plan
from erasure.sample.seed import build_demo
from erasure.verify import VerificationFailed, recount
from erasure.warehouse import Warehouse
from tests.unit.actions.support import (
    assert_no_subject_values,
    demo_subject,
    demo_trigger,
    enforce_foreign_keys,
    erase_all,
    rebuild_all,
)
from tests.unit.estate import make_estate


@dataclass
class Demo:
    catalog: Catalog
    warehouse: Warehouse
    subject: SubjectRef
    plan: Plan
    location: Location

    def act(self) -> None:
        erase_all(self.catalog, self.warehouse, self.location, self.plan)
        trigger = demo_trigger(self.catalog, self.warehouse, [])
        rebuild_all(self.catalog, self.warehouse, self.plan, trigger_dag=trigger)

    def recount(self, *, check: bool = True) -> dict[str, int]:
        found = recount(
            self.catalog, self.warehouse, *parked_location(self.location), self.plan, check=check
        )
        return {r.dataset: r.found for r in found}

    def run(self, sql: str) -> None:
        with self.warehouse.engine("warehouse").begin() as conn:
            conn.execute(sa.text(sql))


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    catalog = build_demo(tmp_path / "estate")
    warehouse = Warehouse(catalog)
    enforce_foreign_keys(warehouse)
    subject = demo_subject()
    plan = make_plan(catalog, subject, warehouse=warehouse)
    yield Demo(catalog, warehouse, subject, plan, locate(catalog, warehouse, subject))
    warehouse.dispose()


def test_after_the_act_step_every_erased_and_rebuilt_dataset_counts_zero(demo: Demo) -> None:
    demo.act()

    parked = parked_location(demo.location)
    found = recount(demo.catalog, demo.warehouse, *parked, demo.plan, check=False)

    checked = {
        i.dataset.name for i in demo.plan.items if i.action in (Action.ERASE_ROWS, Action.REBUILD)
    }
    assert {r.dataset for r in found} == checked
    searched = [r for r in found if r.searched_by]
    assert all(r.ok and r.found == 0 and r.expected == 0 for r in searched)
    # Nothing to search by: "not checkable", which fails unless a fresh write is proven.
    unsearchable = [r for r in found if not r.searched_by]
    assert {r.dataset for r in unsearchable} == {
        "marts.orders_daily",
        "marts.popular_products",
        "reports.monthly_revenue",
    }
    assert not any(r.ok for r in unsearchable)
    assert all(r.result().startswith("not checkable") for r in unsearchable)
    proven = recount(
        demo.catalog, demo.warehouse, *parked, demo.plan, fresh_write=lambda item: "proof"
    )
    assert all(r.ok for r in proven)
    by_name = {r.dataset: r for r in found}
    # derived tables are searched by the roots' identifier column names
    assert "identifier column: email" in by_name["marts.customer_ltv"].searched_by
    assert "identifier column: customer_id" in by_name["marts.segment_history"].searched_by


def test_before_the_act_step_it_names_datasets_and_counts_but_no_value(demo: Demo) -> None:
    with pytest.raises(VerificationFailed) as failed:
        demo.recount()

    message = str(failed.value)
    assert "crm.orders: 3 row(s)" in message
    assert "crm.customers: 1 row(s)" in message
    assert "marts.customer_ltv: 1 row(s)" in message
    assert_no_subject_values(message)
    assert {r.dataset for r in failed.value.recounts if not r.ok} >= {"crm.orders"}
    assert_no_subject_values("".join(r.model_dump_json() for r in failed.value.recounts))


def test_a_row_that_came_back_is_caught_in_roots_and_derived_tables(demo: Demo) -> None:
    demo.act()
    # A late CRM sync re-inserts the customer under a new email, with an order; a stray job
    # copies the subject into a mart. A fresh locate by email finds none of these rows.
    demo.run(
        "INSERT INTO crm.customers (id, email, region, address_id) "
        "VALUES ('C0001', 'new.owner@example.org', 'north', 1)"
    )
    demo.run(
        "INSERT INTO crm.orders (id, customer_id, product_id, amount, ordered_on, month) "
        "VALUES (99999, 'C0001', 1, 35, '2026-11-30', '2026-11')"
    )
    demo.run(
        "INSERT INTO marts.customer_ltv (customer_id, email, region, orders, lifetime_value) "
        "VALUES ('C9999', 'ALICE.SMITH@example.com', 'north', 0, 0)"
    )

    with pytest.raises(VerificationFailed) as failed:
        demo.recount()

    assert "crm.customers: 1 row(s)" in str(failed.value)
    assert "crm.orders: 1 row(s)" in str(failed.value)
    assert "marts.customer_ltv: 1 row(s)" in str(failed.value)
    assert_no_subject_values(str(failed.value))
    assert demo.recount(check=False)["crm.orders"] == 1  # measuring alone never raises


NOCASE_CATALOG = """
version: 1
identifiers: {customer_id: {normalise: strip}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
"""


def test_a_column_that_ignores_case_does_not_hide_the_subject_behind_another_id(
    tmp_path: Path,
) -> None:
    # `strip` ids keep case: 'c-1' is another customer. A NOCASE column groups both ids
    # together; deciding on the group's first value ('c-1') would count the subject's 0.
    catalog, warehouse = make_estate(
        tmp_path,
        NOCASE_CATALOG,
        [
            "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT COLLATE NOCASE)",
            "INSERT INTO crm.orders (customer_id) VALUES ('c-1'), ('C-1'), ('C-1')",
        ],
    )
    subject = SubjectRef(type="customer_id", value=SecretStr("C-1"))
    location = locate(catalog, warehouse, subject)
    plan = make_plan(catalog, subject, warehouse=warehouse, location=location)

    found = recount(catalog, warehouse, *parked_location(location), plan, check=False)

    assert location.located[catalog.by_name("crm.orders").ref].rows == 2
    assert [(r.dataset, r.found) for r in found] == [("crm.orders", 2)]


def test_the_subjects_identifier_in_another_letter_case_fails_the_recount(demo: Demo) -> None:
    demo.act()
    # An order system that lower-cases customer ids wrote her id as `c0001`: not her id in
    # the catalog's form, so neither locate nor the exact recount sees it as hers.
    demo.run(
        "INSERT INTO crm.customers (id, email, region, address_id) "
        "VALUES ('c0001', 'someone.else@example.org', 'north', 1)"
    )
    demo.run(
        "INSERT INTO crm.orders (id, customer_id, product_id, amount, ordered_on, month) "
        "VALUES (99998, 'c0001', 1, 35, '2026-11-30', '2026-11')"
    )
    found = recount(
        demo.catalog, demo.warehouse, *parked_location(demo.location), demo.plan, check=False
    )
    [orders] = [r for r in found if r.dataset == "crm.orders"]
    assert (orders.found, orders.in_another_case, orders.ok) == (0, 1, False)
    assert "declare it (stored_forms in the catalog)" in orders.result()
    assert_no_subject_values(orders.result())


def test_a_row_found_by_reference_is_recounted_by_its_key(tmp_path: Path) -> None:
    # C0003 lives alone at address 3: erased through the reference, and recounted by it
    # (its key parked under the dataset's qualified name), never "nothing to search by".
    catalog = build_demo(tmp_path / "estate")
    warehouse = Warehouse(catalog)
    subject = SubjectRef(type="customer_id", value=SecretStr("C0003"))
    location = locate(catalog, warehouse, subject)
    plan = make_plan(catalog, subject, warehouse=warehouse, location=location)
    found = recount(catalog, warehouse, *parked_location(location), plan, check=False)
    [addresses] = [r for r in found if r.dataset == "crm.addresses"]
    assert addresses.searched_by == ["reference key: id"]
    assert addresses.found == 1 and not addresses.ok


def test_a_view_the_warehouse_holds_as_a_table_fails_its_recount(tmp_path: Path) -> None:
    """A view holds no rows, so the erasure relies on nothing for it: but a dataset the
    catalog (or a dbt manifest) calls a view that the warehouse holds as a table keeps rows."""
    catalog, warehouse = make_estate(
        tmp_path,
        """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: people, connection: warehouse, kind: table, holds_subject: {email: email}}
  - {namespace: w, name: people_view, connection: warehouse, kind: view}
  - {namespace: w, name: people_real_view, connection: warehouse, kind: view}
lineage:
  sql: [{path: "sql/*.sql"}]
""",
        [
            "CREATE TABLE people (email TEXT)",
            "INSERT INTO people VALUES ('ann@example.com'), ('bob@example.com')",
            "CREATE TABLE people_view AS SELECT email AS contact FROM people",
            "CREATE VIEW people_real_view AS SELECT email AS contact FROM people",
        ],
    )
    (tmp_path / "sql").mkdir(exist_ok=True)
    for name in ("people_view", "people_real_view"):
        (tmp_path / "sql" / f"{name}.sql").write_text("SELECT email AS contact FROM people")
    subject = SubjectRef(type="email", value=SecretStr("ann@example.com"))
    plan = make_plan(catalog, subject, warehouse=warehouse)
    location = locate(catalog, warehouse, subject)
    erase_all(catalog, warehouse, location, plan)
    found = {
        r.dataset: r
        for r in recount(catalog, warehouse, *parked_location(location), plan, check=False)
    }
    assert found["people_view"].ok is False
    assert "the warehouse holds it as a table" in str(found["people_view"].problem)
    assert found["people_real_view"].problem is None
    warehouse.dispose()


def test_an_item_described_otherwise_since_the_plan_fails_its_recount(demo: Demo) -> None:
    demo.act()
    item = next(i for i in demo.plan.items if i.action is Action.REBUILD)
    changed = demo.plan.model_copy(
        update={
            "items": [
                i.model_copy(update={"evidence": {**i.evidence, "described_by": "a default"}})
                if i is item
                else i
                for i in demo.plan.items
            ]
        }
    )
    found = recount(
        demo.catalog, demo.warehouse, *parked_location(demo.location), changed, check=False
    )
    [counted] = [r for r in found if r.dataset == item.dataset.name]
    assert not counted.ok and "described otherwise than when the plan was made" in str(
        counted.problem
    )
