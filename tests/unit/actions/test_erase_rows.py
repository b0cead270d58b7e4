from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.actions.erase_rows import EraseFailed, EraseRefused, erase_rows
from erasure.catalog import Catalog
from erasure.locate import locate
from erasure.model import Action, SubjectRef
from erasure.planner import make_plan
from erasure.sample.seed import build_demo
from erasure.warehouse import Warehouse
from tests.unit.actions.support import (
    assert_no_subject_values,
    count,
    demo_subject,
    enforce_foreign_keys,
    erase_all,
    item,
    plan_of,
)
from tests.unit.estate import make_estate

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: warehouse, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: email, customer_id: id},
     references: [{column: address_id, dataset: crm.addresses, key: id}]}
  - {namespace: warehouse, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
  - {namespace: warehouse, name: crm.addresses, connection: warehouse, kind: table}
  - {namespace: warehouse, name: crm.stock, connection: warehouse, kind: table}
  - {namespace: warehouse, name: crm.archive, connection: warehouse, kind: file,
     storage: immutable, holds_subject: {email: email}}
"""

ROWS = [
    "CREATE TABLE crm.addresses (id INTEGER PRIMARY KEY, street TEXT)",
    "INSERT INTO crm.addresses VALUES (1, 'shared'), (2, 'alone')",
    "CREATE TABLE crm.customers (id TEXT PRIMARY KEY, email TEXT,"
    " address_id INTEGER REFERENCES addresses (id))",
    "INSERT INTO crm.customers VALUES ('C1', ' Alice@Example.COM', 2),"
    " ('C2', 'bob@example.com', 1), ('C3', 'carol@example.com', 1)",
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT REFERENCES customers (id))",
    "INSERT INTO crm.orders VALUES (1, 'C1'), (2, 'C1'), (3, 'C2'), (4, 'C3')",
    "CREATE TABLE crm.stock (sku TEXT)",
    "INSERT INTO crm.stock VALUES ('a'), ('b')",
    "CREATE TABLE crm.archive (email TEXT)",
    "INSERT INTO crm.archive VALUES ('alice@example.com')",
]

VALUES = ("alice@example.com", "Alice@Example.COM", "C1")


def subject(id_type: str, value: str) -> SubjectRef:
    return SubjectRef(type=id_type, value=SecretStr(value))


@pytest.fixture
def estate(tmp_path: Path) -> tuple[Catalog, Warehouse]:
    catalog, warehouse = make_estate(tmp_path, CATALOG, ROWS)
    enforce_foreign_keys(warehouse)
    return catalog, warehouse


def test_deletes_only_the_subjects_rows_and_records_the_statement(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("email", "alice@example.com"))

    orders = erase_rows(catalog, warehouse, found, catalog.by_name("crm.orders").ref)
    customers = erase_rows(catalog, warehouse, found, catalog.by_name("crm.customers").ref)

    assert (orders.rows_before, orders.rows_deleted, orders.rows_after) == (2, 2, 0)
    assert (customers.rows_before, customers.rows_deleted, customers.rows_after) == (1, 1, 0)
    assert not orders.already_done and not customers.already_done
    assert count(warehouse, "crm.orders") == 2  # Bob's and Carol's orders stay
    assert count(warehouse, "crm.customers") == 2
    assert count(warehouse, "crm.stock") == 2
    assert customers.statement is not None
    assert customers.statement.startswith("DELETE FROM crm.customers WHERE")
    assert "?" in customers.statement  # placeholders: the values travel as parameters
    assert_no_subject_values(customers.model_dump_json() + orders.model_dump_json(), VALUES)


def test_second_run_finds_nothing_and_says_already_done(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("customer_id", "C1"))
    erase_rows(catalog, warehouse, found, catalog.by_name("crm.orders").ref)

    again = erase_rows(catalog, warehouse, found, catalog.by_name("crm.orders").ref)

    assert again.already_done
    assert (again.rows_before, again.rows_deleted, again.rows_after) == (0, 0, 0)
    assert count(warehouse, "crm.orders") == 2


def test_a_fresh_location_after_the_erasure_is_already_done(
    estate: tuple[Catalog, Warehouse],
) -> None:
    # A retried task re-locates: the dataset is no longer located, which is not an error.
    catalog, warehouse = estate
    first = locate(catalog, warehouse, subject("customer_id", "C1"))
    erase_rows(catalog, warehouse, first, catalog.by_name("crm.orders").ref)
    relocated = locate(catalog, warehouse, subject("customer_id", "C1"))

    again = erase_rows(catalog, warehouse, relocated, catalog.by_name("crm.orders").ref)

    assert again.already_done and again.statement is None


def test_shared_reference_is_escalated_never_deleted(estate: tuple[Catalog, Warehouse]) -> None:
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("customer_id", "C2"))  # address 1 is shared

    with pytest.raises(EraseRefused, match=r"rule 2a") as refused:
        erase_rows(catalog, warehouse, found, catalog.by_name("crm.addresses").ref)

    assert count(warehouse, "crm.addresses") == 2
    assert_no_subject_values(str(refused.value), ("bob@example.com", "C2"))


def test_unshared_reference_target_is_erased_after_its_referrer(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("customer_id", "C1"))  # address 2 is Alice's only
    plan = plan_of(
        [
            item("crm.orders", Action.ERASE_ROWS),
            item("crm.customers", Action.ERASE_ROWS),
            item("crm.addresses", Action.ERASE_ROWS),
        ]
    )

    done = erase_all(catalog, warehouse, found, plan)

    assert [e.dataset for e in done] == ["crm.orders", "crm.customers", "crm.addresses"]
    assert [e.rows_deleted for e in done] == [2, 1, 1]
    assert count(warehouse, "crm.addresses", "id = 2") == 0


def test_immutable_and_non_root_datasets_are_refused(estate: tuple[Catalog, Warehouse]) -> None:
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("email", "alice@example.com"))

    with pytest.raises(EraseRefused, match="immutable"):
        erase_rows(catalog, warehouse, found, catalog.by_name("crm.archive").ref)
    with pytest.raises(EraseRefused, match="no root"):
        erase_rows(catalog, warehouse, found, catalog.by_name("crm.stock").ref)
    assert count(warehouse, "crm.archive") == 1


def test_foreign_key_refusal_rolls_back_and_names_no_value(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("email", "alice@example.com"))

    # Parents before children: the database refuses, and nothing is half-deleted.
    with pytest.raises(EraseFailed, match="SQLITE_CONSTRAINT_FOREIGNKEY") as failed:
        erase_rows(catalog, warehouse, found, catalog.by_name("crm.customers").ref)

    assert count(warehouse, "crm.customers") == 3
    assert_no_subject_values(str(failed.value), VALUES)


def test_rows_put_back_by_a_trigger_roll_the_delete_back(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TRIGGER crm.keep_orders AFTER DELETE ON orders BEGIN "
                "INSERT INTO orders (customer_id) VALUES (old.customer_id); END"
            )
        )
    found = locate(catalog, warehouse, subject("customer_id", "C1"))

    with pytest.raises(EraseFailed, match="remained after the delete") as failed:
        erase_rows(catalog, warehouse, found, catalog.by_name("crm.orders").ref)

    assert count(warehouse, "crm.orders") == 4  # rolled back: the original rows, no copies
    assert count(warehouse, "crm.orders", "id IN (1, 2)") == 2
    assert_no_subject_values(str(failed.value), VALUES)


def test_location_survives_a_re_reflected_table(estate: tuple[Catalog, Warehouse]) -> None:
    # A rebuild makes the warehouse forget its reflections; the located predicate must still
    # select the subject's rows of the *current* table, not join a stale copy of it.
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("customer_id", "C1"))
    warehouse.forget_tables()

    done = erase_rows(catalog, warehouse, found, catalog.by_name("crm.orders").ref)

    assert done.rows_deleted == 2
    assert count(warehouse, "crm.orders") == 2


def test_demo_estate_erases_children_first_with_foreign_keys_on(tmp_path: Path) -> None:
    catalog = build_demo(tmp_path / "estate")
    warehouse = Warehouse(catalog)
    enforce_foreign_keys(warehouse)
    subject_ref = demo_subject()
    plan = make_plan(catalog, subject_ref, warehouse=warehouse)
    found = locate(catalog, warehouse, subject_ref)
    before = {
        t: count(warehouse, t)
        for t in ("crm.customers", "crm.orders", "crm.addresses", "ops.stock_levels")
    }

    done = erase_all(catalog, warehouse, found, plan)

    assert [e.dataset for e in done] == [
        "crm.orders",
        "events.activity",
        "orders_ledger",
        "crm.customers",
    ]
    assert [e.rows_deleted for e in done] == [3, 3, 3, 1]
    assert [e.history is not None for e in done] == [False, True, True, False]
    assert count(warehouse, "crm.customers") == before["crm.customers"] - 1
    assert count(warehouse, "crm.orders") == before["crm.orders"] - 3
    assert count(warehouse, "crm.addresses") == before["crm.addresses"]  # shared: escalated
    assert count(warehouse, "ops.stock_levels") == before["ops.stock_levels"]
    assert all(e.already_done for e in erase_all(catalog, warehouse, found, plan))
    warehouse.dispose()
