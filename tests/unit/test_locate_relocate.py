"""Relocating a subject from parked identities and reference keys, after their rows are gone."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.actions.erase_rows import erase_rows
from erasure.catalog import Catalog
from erasure.errors import CatalogError, SubjectError
from erasure.locate import Identity, Location, locate, parked_location, relocate
from erasure.model import DatasetRef, SubjectRef
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate


def W(name: str) -> DatasetRef:
    """A dataset of the test estate (namespace w) by name."""
    return DatasetRef("w", name)


CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
  phone: {normalise: e164, default_region: GB}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: w, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: [email, alt_email], customer_id: id, phone: phone},
     references: [{column: address_id, dataset: crm.addresses, key: id}]}
  - {namespace: w, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
  - {namespace: w, name: crm.addresses, connection: warehouse, kind: table}
  - {namespace: w, name: crm.newsletter, connection: warehouse, kind: table,
     holds_subject: {email: address}}
"""

ROWS = [
    "CREATE TABLE crm.addresses (id INTEGER PRIMARY KEY, street TEXT)",
    "INSERT INTO crm.addresses VALUES (1, 'shared'), (2, 'alone'), (3, 'other')",
    "CREATE TABLE crm.customers (id TEXT PRIMARY KEY, email TEXT, alt_email TEXT, phone TEXT,"
    " address_id INTEGER)",
    "INSERT INTO crm.customers VALUES"
    " (' C1 ', '  Alice@Example.COM', NULL, '020 7946 0958', 1),"
    " ('C2', 'bob@example.com', NULL, '+44 20 7946 0000', 1),"
    " ('C3', 'carol@example.com', 'alice@example.com', NULL, 3),"
    " ('C4', 'dan@example.com', NULL, '07700 900123', 2)",
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT)",
    "INSERT INTO crm.orders VALUES (1, 'C1'), (2, 'C1'), (3, 'C2'), (4, 'C3'), (5, 'C4'),"
    " (6, 'C4')",
    "CREATE TABLE crm.newsletter (address TEXT)",
    "INSERT INTO crm.newsletter VALUES ('ALICE@example.com'), ('dan@example.com')",
]


@pytest.fixture
def estate(tmp_path: Path) -> tuple[Catalog, Warehouse]:
    return make_estate(tmp_path, CATALOG, ROWS)


def subject(id_type: str, value: str) -> SubjectRef:
    return SubjectRef(type=id_type, value=SecretStr(value))


def summary(location: Location) -> dict[str, tuple[int, int, int, list[str]]]:
    """What a plan and the act step see: rows, shared rows and referrers, columns."""
    return {
        ref.name: (hit.rows, hit.shared_rows, hit.shared_referrers, hit.columns)
        for ref, hit in sorted(location.located.items())
    }


def run(warehouse: Warehouse, statement: str) -> None:
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text(statement))


def test_parked_location_keeps_every_identity_and_the_reference_keys(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    identities, reference_keys = parked_location(
        locate(catalog, warehouse, subject("email", "alice@example.com"))
    )
    assert identities == [
        Identity("customer_id", "C1"),
        Identity("customer_id", "C3"),
        Identity("email", "alice@example.com"),
        Identity("email", "carol@example.com"),
        Identity("phone", "+442079460958"),
    ]
    assert reference_keys == {"w/crm.addresses": ["1", "3"]}  # by identity, namespace/name


def test_relocate_finds_what_locate_found_while_the_rows_are_there(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    for who in (subject("email", "alice@example.com"), subject("customer_id", "C2")):
        found = locate(catalog, warehouse, who)
        again = relocate(catalog, warehouse, *parked_location(found))
        assert summary(again) == summary(found)
        assert again.identities == found.identities


def test_after_the_customer_row_is_deleted_orders_and_address_are_still_found(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    identities, reference_keys = parked_location(
        locate(catalog, warehouse, subject("email", "dan@example.com"))
    )
    run(warehouse, "DELETE FROM crm.customers WHERE id = 'C4'")

    # Without the customer row, a fresh locate by email no longer reaches orders or address.
    fresh = locate(catalog, warehouse, subject("email", "dan@example.com"))
    assert set(fresh.located) == {W("crm.newsletter")}

    again = relocate(catalog, warehouse, identities, reference_keys)
    assert summary(again) == {
        "crm.addresses": (1, 0, 0, ["id"]),
        "crm.newsletter": (1, 0, 0, ["address"]),
        "crm.orders": (2, 0, 0, ["customer_id"]),
    }
    assert again.located[W("crm.addresses")].via == "reference:crm.customers.address_id"
    assert again.located[W("crm.orders")].via == "parked:customer_id"
    # The rebuilt predicates drive a retried erase exactly as the original ones would have.
    evidence = erase_rows(catalog, warehouse, again, catalog.by_name("crm.orders").ref)
    assert (evidence.rows_before, evidence.rows_deleted, evidence.rows_after) == (2, 2, 0)
    assert W("crm.orders") not in relocate(catalog, warehouse, identities, reference_keys).located


def test_a_shared_address_stays_shared_after_the_subjects_row_is_gone(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    identities, reference_keys = parked_location(
        locate(catalog, warehouse, subject("customer_id", "C2"))
    )
    run(warehouse, "DELETE FROM crm.customers WHERE id = 'C2'")

    addresses = relocate(catalog, warehouse, identities, reference_keys).located[W("crm.addresses")]
    # Alice still lives at Bob's address: one shared row, one other referrer, never deleted.
    assert (addresses.rows, addresses.shared_rows, addresses.shared_referrers) == (1, 1, 1)


def test_a_phone_identity_is_matched_whatever_the_stored_format(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    again = relocate(catalog, warehouse, [Identity("phone", "+447700900123")], {})
    assert summary(again) == {"crm.customers": (1, 0, 0, ["phone"])}


def test_keys_that_are_not_of_the_column_type_match_nothing(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    run(warehouse, "DELETE FROM crm.customers WHERE id = 'C4'")  # nobody else points at 2
    again = relocate(catalog, warehouse, [], {"crm.addresses": ["two", "2"]})
    assert summary(again) == {"crm.addresses": (1, 0, 0, ["id"])}
    assert relocate(catalog, warehouse, [], {"crm.addresses": ["nine"]}).located == {}


def test_a_parked_type_the_catalog_dropped_is_refused_without_echo(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    with pytest.raises(SubjectError, match="no longer declares") as err:
        relocate(catalog, warehouse, [Identity("passport", "P-SECRET-1")], {})
    assert "SECRET" not in str(err.value)


def test_a_dataset_referenced_by_several_key_columns_is_refused(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(
        tmp_path,
        CATALOG.replace(
            "holds_subject: {customer_id: customer_id}}",
            "holds_subject: {customer_id: customer_id},"
            " references: [{column: ship_to, dataset: crm.addresses, key: street}]}",
        ),
        [*ROWS[:4], "CREATE TABLE crm.orders (id INTEGER, customer_id TEXT, ship_to TEXT)"],
    )
    with pytest.raises(CatalogError, match="several key columns"):
        relocate(catalog, warehouse, [], {"crm.addresses": ["1"]})
