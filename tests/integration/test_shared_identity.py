"""Identities belong to one person (rule 2b), end to end on the demo estate: the subject's
household phone is also stored on another customer's row (C0002). A request by the subject's
email erases the subject, and leaves C0002's customer row, orders, archive key and the shared
address alone; the DPO is asked, with counts, about the rows only the phone reached.

Run on SQLite and on Postgres: the same decisions, the same rows left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.audit.records import RecordStatus
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action, Plan, PlanItem
from erasure.prompts import escalation_prompt
from erasure.pseudonym import subject_hash
from erasure.rulings import RulingOption, options_for
from erasure.sample.embedded import open_demo
from erasure.services import Services
from tests.integration.workflow_support import CANARY, CONF, answer, run_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]

HOUSEHOLD_PHONE = "020 7946 0958"  # the demo subject's phone, as C0002's row now holds it too
OTHER = "C0002"
NOT_THEIRS = answer(
    "Confirm the subject is not held",
    justification="the other customer is the subject's partner; the phone is the household's",
)


@pytest.fixture(params=["sqlite", "postgres"])
def svc(
    request: pytest.FixtureRequest, tmp_path: Path, openbao: EmbeddedOpenBao
) -> Iterator[Services]:
    url = None
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
        url = request.getfixturevalue("postgres_url")
    settings = open_demo(tmp_path / "demo", openbao, url=url)
    with Services.open(settings) as services:
        with services.warehouse.engine("warehouse").begin() as conn:
            conn.execute(
                sa.text("UPDATE crm.customers SET phone = :p WHERE id = :c"),
                {"p": HOUSEHOLD_PHONE, "c": OTHER},
            )
        yield services


def other_customer(svc: Services) -> tuple[int, ...]:
    """C0002's customer row, orders, and the household address: row counts."""
    queries = (
        "SELECT COUNT(*) FROM crm.customers WHERE id = 'C0002'",
        "SELECT COUNT(*) FROM crm.orders WHERE customer_id = 'C0002'",
        "SELECT COUNT(*) FROM crm.addresses WHERE id = 1",
    )
    with svc.warehouse.engine("warehouse").connect() as conn:
        return tuple(int(conn.execute(sa.text(q)).scalar_one()) for q in queries)


def escalation(plan: Plan, name: str) -> PlanItem:
    return next(i for i in plan.items if i.dataset.name == name and i.action is Action.ESCALATE)


def test_a_household_phone_does_not_erase_the_other_customer(svc: Services) -> None:
    pepper = svc.peppers.current()
    archive_key = subject_hash(pepper, "customer_id", OTHER)
    assert svc.keystore.exists(archive_key)
    assert other_customer(svc) == (1, 3, 1)

    record = run_request(svc, CONF, {"crm.customers": NOT_THEIRS})

    assert other_customer(svc) == (1, 3, 1)  # C0002 and the shared address untouched
    assert svc.keystore.exists(archive_key)  # C0002's archive key not shredded
    assert not svc.keystore.exists(subject_hash(pepper, "customer_id", "C0001"))
    with svc.warehouse.engine("warehouse").connect() as conn:
        gone = conn.execute(
            sa.text("SELECT COUNT(*) FROM crm.orders WHERE customer_id = 'C0001'")
        ).scalar_one()
    assert gone == 0  # the subject's own orders went
    assert record.status is RecordStatus.COMPLETE_WITH_EXEMPTIONS

    plan = svc.plans.get(CONF["request_ref"], 1)
    erased = {i.dataset.name: i.evidence["rows_before"] for i in plan.items
              if i.action is Action.ERASE_ROWS}  # fmt: skip
    assert erased == {"crm.customers": 1, "crm.orders": 3, "events.activity": 3, "orders_ledger": 3}
    assert escalation(plan, "crm.addresses").rule == "2a"  # shared again, as it is
    shared = escalation(plan, "crm.customers")
    assert shared.rule == "2b"
    assert shared.evidence["rows"] == 1
    assert shared.evidence["columns"] == ["phone"]
    (held,) = shared.evidence["held_back"]
    assert (held["identifier_type"], held["values"], held["other_persons"]) == ("phone", 1, 1)
    assert held["other_rows"] == {"crm.customers": 1}
    assert options_for(shared) == (RulingOption.NOT_HELD, RulingOption.RETAIN_EXEMPTION)

    # Counts, never values: not in the plan's items, the prompt, nor the signed records
    # (whose hashes and signatures are random text: only long values are looked for there).
    prompt = escalation_prompt(shared)
    decided = " ".join(
        [i.model_dump_json() for i in plan.items] + [prompt.model_dump_json()]
    ).lower()
    signed = " ".join(
        [plan.model_dump_json(), record.model_dump_json()]
        + [r.model_dump_json() for r in svc.ledger.show(CONF["request_ref"])]
    ).lower()
    phones = ("020 7946 0958", "+442079460958", "2079460958")
    for secret in (CANARY.lower(), *phones, "c0002", "bob.smith"):
        assert secret not in decided, secret
    for secret in (CANARY.lower(), *phones, "bob.smith"):
        assert secret not in signed, secret
