"""Identities belong to one person (rule 2b): an expanded identifier value is searched by only
when it is the subject's alone; the rows only a held-back value reaches are counted and put
to the DPO, never erased. One test per way a value can belong to someone else too."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.errors import SubjectError
from erasure.locate import Location, locate, parked_location
from erasure.model import Action, DatasetRef, Identity, Plan, PlanItem, SubjectRef
from erasure.planner import make_plan
from erasure.prompts import escalation_prompt
from erasure.rulings import RulingOption, options_for
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip, one_per_person: true}
  phone: {normalise: e164, default_region: GB}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: w, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: [email, alt_email], customer_id: id, phone: phone},
     references: [{column: address_id, dataset: crm.addresses, key: id}]}
  - {namespace: w, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
  - {namespace: w, name: crm.addresses, connection: warehouse, kind: table,
     holds_subject: {phone: landline}}
  - {namespace: w, name: crm.sms_log, connection: warehouse, kind: table,
     holds_subject: {phone: phone}}
"""

# C1 is the subject (ann@). Each test changes one thing to share one of her values.
ROWS = [
    "CREATE TABLE crm.addresses (id INTEGER PRIMARY KEY, landline TEXT)",
    "INSERT INTO crm.addresses VALUES (1, NULL), (2, NULL), (3, NULL)",
    "CREATE TABLE crm.customers (id TEXT PRIMARY KEY, email TEXT, alt_email TEXT, phone TEXT,"
    " address_id INTEGER)",
    "INSERT INTO crm.customers VALUES"
    " ('C1', 'ann@example.com', 'ann@work.example', '020 7946 0958', 1),"
    " ('C2', 'ben@example.com', NULL, '+44 20 7946 0000', 2),"
    " ('C3', 'cat@example.com', NULL, '07700 900123', 3)",
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT)",
    "INSERT INTO crm.orders VALUES (1, 'C1'), (2, 'C1'), (3, 'C2'), (4, 'C2'), (5, 'C3')",
    "CREATE TABLE crm.sms_log (phone TEXT)",
    "INSERT INTO crm.sms_log VALUES ('+442079460958'), ('+442079460000')",
]
NO_ONE_PER_PERSON = CATALOG.replace(", one_per_person: true", "")

CUSTOMERS = DatasetRef("w", "crm.customers")
ORDERS = DatasetRef("w", "crm.orders")
ADDRESSES = DatasetRef("w", "crm.addresses")
SMS = DatasetRef("w", "crm.sms_log")
ANN = SubjectRef(type="email", value=SecretStr("ann@example.com"))


def estate(tmp_path: Path, *changes: str, catalog: str = CATALOG) -> tuple[Catalog, Warehouse]:
    tmp_path.mkdir(exist_ok=True)
    return make_estate(tmp_path, catalog, ROWS + list(changes))


def rows(location: Location) -> dict[str, int]:
    return {ref.name: hit.rows for ref, hit in sorted(location.located.items())}


def erased_after(catalog: Catalog, warehouse: Warehouse, location: Location) -> set[str]:
    """Delete what locate selected, as erase_rows does; the customer ids still in the table."""
    with warehouse.engine("warehouse").begin() as conn:
        for hit in location.located.values():
            if hit.shared_referrers == 0:
                conn.execute(sa.delete(warehouse.table(hit.dataset)).where(hit.predicate))  # type: ignore[arg-type]
        return set(conn.execute(sa.text("SELECT id FROM crm.customers")).scalars())


def question(plan: Plan, ref: DatasetRef) -> PlanItem:
    return next(i for i in plan.items if i.dataset == ref and i.action is Action.ESCALATE)


def erasures(plan: Plan) -> dict[str, int]:
    return {
        i.dataset.name: i.evidence["rows_before"]
        for i in plan.items
        if i.action is Action.ERASE_ROWS
    }


def test_an_unshared_expansion_is_searched_by_as_before(tmp_path: Path) -> None:
    catalog, warehouse = estate(tmp_path)
    found = locate(catalog, warehouse, ANN)
    assert rows(found) == {
        "crm.addresses": 1,
        "crm.customers": 1,
        "crm.orders": 2,
        "crm.sms_log": 1,
    }
    assert {i.type for i in found.identities} == {"email", "customer_id", "phone"}
    assert found.withheld == {} and found.held_back == {}


def test_a_household_phone_on_another_customer_reaches_nothing_of_theirs(tmp_path: Path) -> None:
    catalog, warehouse = estate(
        tmp_path, "UPDATE crm.customers SET phone = '02079460958' WHERE id = 'C2'"
    )
    found = locate(catalog, warehouse, ANN)
    # Ann's own rows by her email and her one customer id; not Ben's row, nor his orders, and
    # not the SMS log either: a phone two people hold cannot say whose message it was.
    assert rows(found) == {"crm.addresses": 1, "crm.customers": 1, "crm.orders": 2}
    assert Identity("phone", "+442079460958") not in found.identities
    identities, _keys = parked_location(found)
    assert {i.type for i in identities} == {"email", "customer_id"}  # nothing else tombstoned
    held = found.held_back["phone"]
    assert (held.values, held.other_rows, held.other_persons) == (1, {CUSTOMERS: 1}, 1)
    assert {ref: w.rows for ref, w in found.withheld.items()} == {CUSTOMERS: 1, SMS: 1}
    assert erased_after(catalog, warehouse, found) == {"C2", "C3"}

    plan = make_plan(catalog, ANN, warehouse=warehouse)
    assert erasures(plan) == {}  # erased above; a fresh plan finds only the others' rows
    catalog, warehouse = estate(
        tmp_path / "again", "UPDATE crm.customers SET phone = '02079460958' WHERE id = 'C2'"
    )
    plan = make_plan(catalog, ANN, warehouse=warehouse)
    assert erasures(plan) == {"crm.addresses": 1, "crm.customers": 1, "crm.orders": 2}
    ask = question(plan, CUSTOMERS)
    assert ask.rule == "2b"
    assert (ask.evidence["rows"], ask.evidence["columns"]) == (1, ["phone"])
    assert ask.evidence["held_back"][0]["other_rows"] == {"crm.customers": 1}
    assert question(plan, SMS).evidence["rows"] == 1
    assert options_for(ask) == (RulingOption.NOT_HELD, RulingOption.RETAIN_EXEMPTION)
    prompt = escalation_prompt(ask)
    assert prompt.options == [
        "Confirm the subject is not held",
        "Retain under an Art. 17(3) exemption",
    ]
    assert "phone: 1 value(s) also held by other people's rows (`crm.customers`: 1)" in prompt.body
    shown = plan.model_dump_json() + prompt.model_dump_json()
    assert "7946" not in shown and "ann@" not in shown and "C2" not in shown


def test_an_expanded_email_two_customers_hold_is_held_back(tmp_path: Path) -> None:
    # Ann's work address is Cat's main address: a request by Ann's customer id.
    catalog, warehouse = estate(
        tmp_path, "UPDATE crm.customers SET email = 'ANN@work.example' WHERE id = 'C3'"
    )
    by_id = SubjectRef(type="customer_id", value=SecretStr("C1"))
    found = locate(catalog, warehouse, by_id)
    assert rows(found) == {
        "crm.addresses": 1,
        "crm.customers": 1,
        "crm.orders": 2,
        "crm.sms_log": 1,
    }
    held = found.held_back["email"]
    assert (held.values, held.other_rows, held.other_persons) == (1, {CUSTOMERS: 1}, 1)
    assert {ref: w.rows for ref, w in found.withheld.items()} == {CUSTOMERS: 1}
    assert erased_after(catalog, warehouse, found) == {"C2", "C3"}


def test_an_email_two_customers_hold_stops_the_request(tmp_path: Path) -> None:
    # Ann's address is also Ben's alt_email: two customer rows, two customer ids, one email.
    change = "UPDATE crm.customers SET alt_email = 'ann@example.com' WHERE id = 'C2'"
    catalog, warehouse = estate(tmp_path, change)
    found = locate(catalog, warehouse, ANN)
    # Both rows the email names are erased (and their phones, and addresses nobody else
    # points at); whose orders are whose the DPO decides.
    assert rows(found) == {"crm.addresses": 2, "crm.customers": 2, "crm.sms_log": 2}
    held = found.held_back["customer_id"]
    assert (held.values, held.one_per_person) == (2, True)
    assert {ref: w.rows for ref, w in found.withheld.items()} == {ORDERS: 4}
    # The email itself is two people's: nothing it matched can be told to be Ann's alone,
    # so the request stops and says to resubmit by the customer id.
    with pytest.raises(SubjectError, match="2 different customer_id values") as refused:
        make_plan(catalog, ANN, warehouse=warehouse)
    assert "Resubmit the request by the person's customer_id" in str(refused.value)

    # Without a one-per-person type the same estate expands as it always did.
    catalog, warehouse = estate(tmp_path / "old", change, catalog=NO_ONE_PER_PERSON)
    found = locate(catalog, warehouse, ANN)
    assert rows(found)["crm.orders"] == 4 and found.withheld == {}


def test_a_phone_on_an_address_other_customers_point_at_is_held_back(tmp_path: Path) -> None:
    # Ann's phone is the landline of address 2, which Ben lives at and Ann does not.
    catalog, warehouse = estate(
        tmp_path, "UPDATE crm.addresses SET landline = '020 7946 0958' WHERE id = 2"
    )
    found = locate(catalog, warehouse, ANN)
    assert found.located[ADDRESSES].rows == 1  # her own address, through her row's reference
    held = found.held_back["phone"]
    assert (held.other_rows, held.other_referrers) == ({}, 1)
    assert {ref: w.rows for ref, w in found.withheld.items()} == {ADDRESSES: 1, SMS: 1}
    with warehouse.engine("warehouse").connect() as conn:
        before = conn.execute(sa.text("SELECT COUNT(*) FROM crm.addresses")).scalar_one()
    erased_after(catalog, warehouse, found)
    with warehouse.engine("warehouse").connect() as conn:
        assert conn.execute(sa.text("SELECT id FROM crm.addresses")).scalars().all() == [2, 3]
    assert before == 3
    catalog, warehouse = estate(
        tmp_path / "plan", "UPDATE crm.addresses SET landline = '020 7946 0958' WHERE id = 2"
    )
    plan = make_plan(catalog, ANN, warehouse=warehouse)
    # Her own address is erased (nobody else points at it); Ben's is a question, with counts.
    assert erasures(plan)["crm.addresses"] == 1
    ask = question(plan, ADDRESSES)
    assert ask.evidence["held_back"][0]["other_referrers"] == 1


def test_without_a_one_per_person_type_a_shared_value_is_still_held_back(tmp_path: Path) -> None:
    catalog, warehouse = estate(
        tmp_path,
        "UPDATE crm.customers SET phone = '02079460958' WHERE id = 'C2'",
        catalog=NO_ONE_PER_PERSON,
    )
    found = locate(catalog, warehouse, ANN)
    # Her customer id is on her row alone, so it is followed; the phone is Ben's too.
    assert rows(found) == {"crm.addresses": 1, "crm.customers": 1, "crm.orders": 2}
    held = found.held_back["phone"]
    assert (held.other_rows, held.other_persons) == ({CUSTOMERS: 1}, None)  # rows, not persons
    assert erased_after(catalog, warehouse, found) == {"C2", "C3"}
