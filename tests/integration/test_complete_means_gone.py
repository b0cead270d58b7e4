"""A `completed` record means no row of the subject is left anywhere the plan reached: on
customers stored the way real CRMs store them, for one-character ids, on SQLite and
Postgres; and what may not be recorded is refused when it is typed, not at completion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure import workflow
from erasure.actions.escalate import DeletionRefused
from erasure.audit.records import RecordKind, RecordStatus
from erasure.free_text import NamesSubject
from erasure.identifier_types import WrongIdentifierType
from erasure.keys.pepper import PepperMissing, PepperStore
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action
from erasure.prompts import escalation_prompt
from erasure.sample.embedded import open_demo
from erasure.services import Services
from erasure.workflow import StepError, UpstreamFailed
from tests.integration.workflow_support import CONF, answer, item_named, register, run_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]


def add_customer(svc: Services, customer_id: str, **columns: Any) -> None:
    """A customer (and two orders) stored as given, as a CRM sync would have written it."""
    row = {"id": customer_id, "email": None, "alt_email": None, "phone": None, **columns}
    with svc.warehouse.engine("warehouse").begin() as conn:
        next_order = conn.execute(sa.text("SELECT MAX(id) FROM crm.orders")).scalar_one() + 1
        conn.execute(
            sa.text(
                "INSERT INTO crm.customers (id, email, alt_email, phone, full_name, region) "
                "VALUES (:id, :email, :alt_email, :phone, 'Added Customer', 'east')"
            ),
            row,
        )
        for n in range(2):
            conn.execute(
                sa.text(
                    "INSERT INTO crm.orders (id, customer_id, product_id, amount, ordered_on, "
                    "month) VALUES (:id, :customer, 1, 42, '2026-11-02', '2026-11')"
                ),
                {"id": next_order + n, "customer": customer_id},
            )


def count(svc: Services, sql: str, **params: Any) -> int:
    with svc.warehouse.engine("warehouse").connect() as conn:
        return int(conn.execute(sa.text(sql), params).scalar_one())


def request(ref: str, id_type: str, identifier: str) -> dict[str, Any]:
    return {**CONF, "request_ref": ref, "identifier_type": id_type, "identifier": identifier}


# (stored columns, identifier type, identifier as the DPO types it)
STORED_AS_CRMS_STORE_THEM = {
    "unicode-case": ({"email": "ZOË.MÜLLER@EXAMPLE.COM"}, "email", "zoë.müller@example.com"),
    "sharp-s": ({"email": "STRAßE@EXAMPLE.DE"}, "email", "strasse@example.de"),
    "trailing-tab": ({"email": "tab.user@example.com\t"}, "email", "tab.user@example.com"),
    "no-break-space": ({"email": "\u00a0nbsp@example.com\u00a0"}, "email", "nbsp@example.com"),
    "ideographic-space": ({"email": "ideo@example.jp\u3000"}, "email", "IDEO@example.jp"),
    "zero-width": ({"email": "\ufeffzw.user@example.com\u200b"}, "email", "zw.user@example.com"),
    "decomposed": ({"email": "zoe\u0308.nfd@example.com"}, "email", "zoë.nfd@example.com"),
    "phone-national": ({"phone": "(020) 7946-1234"}, "phone", "+44 20 7946 1234"),
    "phone-00": ({"phone": "0044 20 7946 2345"}, "phone", "+442079462345"),
    "phone-annotated": ({"phone": "020 7946 3456 (home)"}, "phone", "+44 20 7946 3456"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "id_type", "identifier"),
    list(STORED_AS_CRMS_STORE_THEM.values()),
    ids=list(STORED_AS_CRMS_STORE_THEM),
)
def test_a_customer_stored_as_crms_store_them_is_gone_when_the_request_completes(
    svc: Services, stored: dict[str, str], id_type: str, identifier: str
) -> None:
    add_customer(svc, "C9001", **stored)
    customers = count(svc, "SELECT COUNT(*) FROM crm.customers")

    record = run_request(svc, request("DSR-CRM-FORMS", id_type, identifier))

    assert record.status in (RecordStatus.COMPLETE, RecordStatus.COMPLETE_WITH_EXEMPTIONS)
    assert record.body["subject_found"] is True
    assert count(svc, "SELECT COUNT(*) FROM crm.customers WHERE id = 'C9001'") == 0
    assert count(svc, "SELECT COUNT(*) FROM crm.orders WHERE customer_id = 'C9001'") == 0
    assert count(svc, "SELECT COUNT(*) FROM crm.customers") == customers - 1
    assert count(svc, "SELECT COUNT(*) FROM marts.customer_ltv WHERE customer_id = 'C9001'") == 0


@pytest.mark.parametrize(
    ("customer_id", "id_type", "identifier", "ref"),
    [
        ("1", "customer_id", "1", "DSR-SHORT-ONE"),
        ("12", "customer_id", " 12 ", "DSR-SHORT-TWELVE"),
        ("C1", "customer_id", "C1", "DSR-SHORT-CEE"),
        ("7", "email", "seven@example.org", "DSR-SHORT-SEVEN"),
    ],
)
def test_short_identifiers_complete_end_to_end(
    svc: Services, customer_id: str, id_type: str, identifier: str, ref: str
) -> None:
    """Ids of 1-3 characters collide with dates, counts and hashes as substrings: records
    are typed, so only whole-token free text is checked and these requests complete."""
    add_customer(svc, customer_id, email="seven@example.org" if customer_id == "7" else None)

    record = run_request(svc, request(ref, id_type, identifier))

    assert record.kind is RecordKind.COMPLETED
    assert count(svc, "SELECT COUNT(*) FROM crm.customers WHERE id = :i", i=customer_id) == 0
    assert count(svc, "SELECT COUNT(*) FROM crm.orders WHERE customer_id = :i", i=customer_id) == 0
    assert svc.ledger.verify().ok


def test_a_reference_naming_the_subject_is_refused_before_anything_is_kept(
    svc: Services,
) -> None:
    add_customer(svc, "C21", email="load.test@example.org")
    # By the identifier typed, and by one it expands to (the customer id behind the email).
    for ref, id_type, identifier in (
        ("DSR-LOAD-C21", "customer_id", "C21"),
        ("DSR-LOAD-C21", "email", "load.test@example.org"),
    ):
        with pytest.raises(NamesSubject, match="request_ref contains the subject's customer_id"):
            register(svc, request(ref, id_type, identifier), f"erasure-{ref}")
    assert svc.requests.list() == []
    assert svc.ledger.list() == []
    assert svc.submissions.held("DSR-LOAD-C21") == 0  # refused: the sealed copy is destroyed
    with pytest.raises(NamesSubject, match="notes contains the subject's email"):
        register(
            svc,
            {**request("DSR-LOAD-0021", "email", "load.test@example.org"),
             "notes": "asked by LOAD.TEST@example.org on the phone"},
            "erasure-DSR-LOAD-0021",
        )  # fmt: skip
    assert svc.requests.list() == []


def test_a_value_that_cannot_be_of_its_type_is_refused_at_register_too(svc: Services) -> None:
    # The desk refuses it before sealing; one that could not read the catalog leaves it here.
    with pytest.raises(WrongIdentifierType, match="choose identifier type email") as refused:
        register(
            svc,
            request("DSR-TYPED", "customer_id", "alice.smith@example.com"),
            "erasure-DSR-TYPED",
        )
    assert "alice" not in str(refused.value)
    assert svc.requests.list() == []
    assert svc.submissions.held("DSR-TYPED") == 0  # refused: the sealed copy is destroyed


def test_a_justification_naming_the_subject_is_refused_when_the_dpo_enters_it(
    svc: Services,
) -> None:
    ref = "DSR-JUSTIFY"
    register(svc, request(ref, "email", "alice.smith@example.com"), f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    named = answer(
        "Accept as non-personal", justification="cache of alice.smith@example.com expires"
    )
    with pytest.raises(NamesSubject, match="justification contains the subject's email"):
        workflow.rule(svc, ref, item_named(svc, ref, "recs.customer_recommendations"), named)
    # Nor her name, read from her located rows (crm.customers.full_name), however written.
    for text in ("Alice Smith asked", "asked by Ms Sm\u0456th", "ALICE\u200b SMITH", "A. Smith"):
        with pytest.raises(NamesSubject, match="contains the subject's personal data"):
            workflow.rule(
                svc,
                ref,
                item_named(svc, ref, "recs.customer_recommendations"),
                answer("Accept as non-personal", justification=text),
            )
    assert [r.kind for r in svc.ledger.show(ref)] == [RecordKind.RECEIVED, RecordKind.ESCALATED]
    workflow.rule(
        svc,
        ref,
        item_named(svc, ref, "recs.customer_recommendations"),
        answer("Accept as non-personal", justification="cache keyed by product, 24 h"),
    )
    assert svc.rulings.for_request(ref)[0].justification == "cache keyed by product, 24 h"


def test_a_shared_row_is_retained_or_deleted_alone_and_a_deletion_never_stands(
    svc: Services,
) -> None:
    ref = "DSR-SHARED"
    register(svc, request(ref, "email", "alice.smith@example.com"), f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    shared = next(i for i in workflow.pending_escalations(svc, ref) if i.rule == "2a")
    assert escalation_prompt(shared).options == [
        "Retain under an Art. 17(3) exemption",
        "Delete this row",
    ]
    with pytest.raises(StepError, match="must choose one of"):
        workflow.rule(svc, ref, shared.dataset, answer("Delete the artefact", justification="x"))
    addresses = count(svc, "SELECT COUNT(*) FROM crm.addresses")
    # Bob's row still points at the household address: the database refuses, nothing goes.
    with pytest.raises(DeletionRefused, match="1 other row"):
        workflow.rule(
            svc, ref, shared.dataset, answer("Delete this row", justification="moved out")
        )
    assert count(svc, "SELECT COUNT(*) FROM crm.addresses") == addresses
    with pytest.raises(StepError, match="cannot stand"):
        workflow.rule(
            svc,
            ref,
            item_named(svc, ref, "agg.customers_by_postcode"),
            answer(
                "Delete the artefact",
                justification="small groups identify people",
                standing_until="2027-06-30",
            ),
        )


def test_a_wait_on_a_failed_upstream_ends_naming_it(svc: Services) -> None:
    ref = "DSR-WAIT"
    register(svc, request(ref, "email", "alice.smith@example.com"), f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)
    workflow.tombstone(svc, ref)
    first, second = workflow.items_for(plan, Action.ERASE_ROWS)[:2]
    with pytest.raises(workflow.NotYet):
        workflow.erase(svc, ref, second)  # crm.customers waits for crm.orders
    orders = next(i for i in plan.items if i.dataset == first)
    svc.action_log.record(
        ref, orders.dataset, Action.ERASE_ROWS, "failed", {"error": "EraseFailed"}
    )
    svc.settings = svc.settings.model_copy(update={"upstream_retry_grace_seconds": 0})
    with pytest.raises(UpstreamFailed, match=f"erase_rows {first.name} failed and was not retried"):
        workflow.erase(svc, ref, second)
    # Still pending after the timeout (a lost worker): the wait ends too.
    svc.action_log.record(ref, orders.dataset, Action.ERASE_ROWS, "pending")
    svc.settings = svc.settings.model_copy(update={"upstream_wait_timeout_seconds": 1})
    waiting = next(i for i in plan.items if i.dataset == second)
    since = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    svc.action_log.record(
        ref, waiting.dataset, Action.ERASE_ROWS, "waiting", {"waiting_since": since}
    )
    with pytest.raises(UpstreamFailed, match="did not finish within 1 s"):
        workflow.erase(svc, ref, second)


def test_keys_written_under_an_older_pepper_are_shredded_and_verified(tmp_path: Path) -> None:
    """The archive was sealed under pepper v1; the request registers under v2 after a
    rotation: its shred and its verification look under every version."""
    with EmbeddedOpenBao() as bao:
        settings = open_demo(tmp_path / "demo", bao)  # archive keys named under v1
        with Services.open(settings) as svc:
            svc.peppers.rotate()
            record = run_request(svc, request("DSR-PEPPER", "email", "alice.smith@example.com"))
            actions = svc.action_log.list("DSR-PEPPER")
            shred = next(a for a in actions if a.action == "crypto_shred")
            assert svc.requests.get("DSR-PEPPER").pepper_version == 2  # type: ignore[union-attr]
            assert shred.evidence["keys_shredded"] == 1
            assert shred.evidence["pepper_versions_checked"] == [1, 2]
            destroyed = [
                c for c in record.body["verification"]["checks"] if c["check"] == "key destroyed"
            ]
            assert destroyed and all(c["passed"] for c in destroyed)


def test_a_lost_pepper_fails_closed_while_anything_is_hashed_under_it(tmp_path: Path) -> None:
    with EmbeddedOpenBao() as bao:
        settings = open_demo(tmp_path / "demo", bao)
        with Services.open(settings) as svc:
            run_request(svc, request("DSR-LOST", "email", "alice.smith@example.com"))
            kv = svc.settings.vault_kv_mount
            svc.vault.secrets.kv.v2.delete_metadata_and_all_versions(path="pepper", mount_point=kv)
        with pytest.raises(PepperMissing, match=r"4 tombstone\(s\), 1 request\(s\)"):
            Services.open(settings)
        assert not PepperStore(bao.client(), settings.vault_kv_mount).exists()  # none minted


def test_only_a_dpo_rules(svc: Services) -> None:
    ref = "DSR-ROLES"
    register(svc, request(ref, "email", "alice.smith@example.com"), f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    svc.settings = svc.settings.model_copy(update={"require_dpo_role": True})
    ruling = answer("Accept as non-personal", justification="cache keyed by product, 24 h")
    for roles in (None, frozenset({"User", "Op"})):
        with pytest.raises(StepError, match="only a DPO rules"):
            workflow.rule(
                svc, ref, item_named(svc, ref, "recs.customer_recommendations"),
                ruling.model_copy(update={"author_roles": roles}),
            )  # fmt: skip
    assert svc.rulings.for_request(ref) == []
    workflow.rule(
        svc,
        ref,
        item_named(svc, ref, "recs.customer_recommendations"),
        ruling.model_copy(update={"author_roles": frozenset({"DPO"})}),
    )
    assert len(svc.rulings.for_request(ref)) == 1
