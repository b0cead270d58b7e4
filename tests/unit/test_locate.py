from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from erasure.errors import SubjectError
from erasure.locate import locate
from erasure.model import DatasetRef, SubjectRef
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
  - {namespace: w, name: crm.stock, connection: warehouse, kind: table}
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
    "INSERT INTO crm.orders VALUES (1, 'C1'), (2, 'C1'), (3, 'C2'), (4, 'C3'), (5, 'C4')",
    "CREATE TABLE crm.newsletter (address TEXT)",
    "INSERT INTO crm.newsletter VALUES ('ALICE@example.com'), ('zed@example.com')",
    "CREATE TABLE crm.stock (sku TEXT)",
]


def subject(id_type: str, value: str) -> SubjectRef:
    return SubjectRef(type=id_type, value=SecretStr(value))


@pytest.fixture
def estate(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_estate(tmp_path, CATALOG, ROWS)


def test_normalised_match_and_identity_expansion(estate) -> None:  # type: ignore[no-untyped-def]
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("email", "alice@example.com"))
    rows = {ref.name: hit.rows for ref, hit in found.located.items()}
    # Alice's own row (by email, differently cased and padded) and Carol's row whose
    # alt_email is Alice's: both name the same person, so both customer ids expand to orders.
    assert rows == {"crm.customers": 2, "crm.orders": 3, "crm.newsletter": 1, "crm.addresses": 2}
    assert found.located[W("crm.orders")].via == "identity:crm.customers.customer_id"
    assert found.located[W("crm.customers")].via == "request"
    assert {i.type for i in found.identities} == {"email", "customer_id", "phone"}


def test_reference_counts_other_referrers_and_expands_no_further(estate) -> None:  # type: ignore[no-untyped-def]
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("customer_id", "C4"))
    addresses = found.located[W("crm.addresses")]
    assert (addresses.rows, addresses.shared_rows, addresses.shared_referrers) == (1, 0, 0)
    found = locate(catalog, warehouse, subject("customer_id", "C2"))
    addresses = found.located[W("crm.addresses")]
    # Bob's household address is also Alice's: one shared row, one other referrer.
    assert (addresses.rows, addresses.shared_rows, addresses.shared_referrers) == (1, 1, 1)
    assert addresses.via == "reference:crm.customers.address_id"
    assert W("crm.newsletter") not in found.located


def test_phone_found_whatever_the_stored_format(estate) -> None:  # type: ignore[no-untyped-def]
    catalog, warehouse = estate
    found = locate(catalog, warehouse, subject("phone", "+447700900123"))
    assert found.located[W("crm.customers")].rows == 1
    assert found.located[W("crm.orders")].rows == 1


def test_unknown_subject_is_found_nowhere(estate) -> None:  # type: ignore[no-untyped-def]
    catalog, warehouse = estate
    assert locate(catalog, warehouse, subject("email", "nobody@example.com")).located == {}


def test_bad_identifiers_are_refused_without_echoing_them(estate) -> None:  # type: ignore[no-untyped-def]
    catalog, warehouse = estate
    with pytest.raises(SubjectError, match="allowed: customer_id, email, phone") as err:
        locate(catalog, warehouse, subject("passport", "X123SECRET"))
    assert "X123SECRET" not in str(err.value)
    with pytest.raises(SubjectError) as err:
        locate(catalog, warehouse, subject("email", "not-an-email-SECRET"))
    assert "SECRET" not in str(err.value)
