"""The seven steps end to end, without a scheduler: real OpenBao, real SQLite warehouse and
store, the demo estate. What the DAG wires, this drives by hand."""

from __future__ import annotations

import sqlite3
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from erasure import workflow
from erasure.actions.rebuild import RunOutcome
from erasure.audit.records import RecordKind, RecordStatus
from erasure.demo.embedded import open_demo
from erasure.demo.rematerialise import rematerialise
from erasure.demo.seed import DEMO_SUBJECT
from erasure.errors import ErasureError, VerificationFailed
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action
from erasure.services import Services

pytestmark = [pytest.mark.integration, pytest.mark.vault]

CANARY = DEMO_SUBJECT[1]
CONF = {
    "request_ref": "REQ-2026-0001",
    "identifier_type": "email",
    "identifier": "  Alice.Smith@Example.com ",
    "received_on": "2026-11-20",
    "legal_ground": "art17_1_a",
    "notes": "Customer wrote in on 20 Nov",
}
DPO = {"id": "dana", "name": "Dana DPO"}


def answer(option: str, **params: object) -> dict[str, object]:
    base = {"justification": "", "exemption": None, "scheduled_by": None, "standing_until": None}
    return {
        "chosen_options": [option],
        "params_input": {**base, **params},
        "responded_at": datetime(2026, 11, 29, 10, 0, tzinfo=UTC).isoformat(),
        "responded_by_user": DPO,
    }


ANSWERS = {
    "crm.addresses": answer(
        "Retain under an Art. 17(3) exemption",
        exemption="e",
        justification="household address shared with a current customer",
    ),
    "agg.customers_by_postcode": answer(
        "Delete the artefact", justification="small groups identify people"
    ),
    "backup.crm_nightly": answer(
        "Retain under an Art. 17(3) exemption",
        exemption="b",
        justification="statutory backup; beyond use until it expires "
        "and restores pass through the suppression list",
    ),
    "ml.customer_embeddings": answer(
        "Rebuild or retrain by a date",
        scheduled_by="2026-12-15",
        justification="retrain in the December cycle",
        standing_until="2027-06-30",
    ),
    "recs.customer_recommendations": answer(
        "Accept as non-personal", justification="cache expires in 24 h"
    ),
}


@pytest.fixture
def svc(tmp_path: Path, openbao: EmbeddedOpenBao):  # type: ignore[no-untyped-def]
    settings = open_demo(tmp_path / "demo", openbao)
    with Services.open(settings) as services:
        yield services


def trigger(svc: Services) -> workflow.TriggerDag:
    def run(dag_id: str) -> RunOutcome:
        rematerialise(svc.catalog, svc.warehouse, dag_id)
        return RunOutcome(run_id=f"manual__{dag_id}", state="success")

    return run


def act(svc: Services, ref: str) -> None:
    plan = svc.registry.plan(ref, 1)
    for name in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, name)
    for name in workflow.items_for(plan, Action.CRYPTO_SHRED):
        workflow.shred(svc, ref, name)
    for name in workflow.items_for(plan, Action.REBUILD):
        workflow.rebuild_artefact(svc, ref, name, trigger(svc))
    for name in workflow.items_for(plan, Action.AGGREGATE_OK):
        workflow.confirm_aggregate(svc, ref, name)
    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset["name"], ANSWERS[item.dataset["name"]])
    workflow.tombstone(svc, ref)


def rows(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql).fetchone()[0])


def test_request_runs_end_to_end_and_leaves_no_identifier(svc: Services, tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    stock_before = rows(demo / "warehouse.ops.db", "SELECT COUNT(*) FROM stock_levels")
    customers_before = rows(demo / "warehouse.crm.db", "SELECT COUNT(*) FROM customers")

    registration = workflow.register(svc, CONF, "erasure-REQ-2026-0001")
    assert registration.created
    again = workflow.register(svc, CONF, "manual__second")
    assert (again.created, again.owner_run_id) == (False, "erasure-REQ-2026-0001")

    plan = workflow.plan_request(svc, "REQ-2026-0001")
    assert workflow.plan_request(svc, "REQ-2026-0001") == plan  # the plan acted on is fixed
    assert {workflow.items_for(plan, a)[0] for a in (Action.ERASE_ROWS,)} == {"crm.orders"}
    with pytest.raises(VerificationFailed, match="erase_rows done"):
        workflow.verify(svc, "REQ-2026-0001", require_scrubbed=False)
    with pytest.raises(ErasureError, match="not verified"):
        workflow.complete(svc, "REQ-2026-0001")

    act(svc, "REQ-2026-0001")
    with pytest.raises(VerificationFailed, match="identifier scrubbed"):
        workflow.verify(svc, "REQ-2026-0001")  # Airflow still holds the identifier
    act(svc, "REQ-2026-0001")  # a retried run acts on nothing twice
    svc.registry.mark_scrubbed("REQ-2026-0001", datetime.now(UTC))
    result = workflow.verify(svc, "REQ-2026-0001")
    assert result["passed"], [c for c in result["checks"] if not c["passed"]]
    record = workflow.complete(svc, "REQ-2026-0001")
    assert record.kind is RecordKind.COMPLETED
    assert record.status is RecordStatus.COMPLETE_WITH_EXEMPTIONS
    assert record.body["effective_erasure_date"] >= date(2026, 12, 15).isoformat()
    assert workflow.complete(svc, "REQ-2026-0001").record_hash == record.record_hash

    # The subject is gone, everybody else is still there.
    assert rows(demo / "warehouse.crm.db", "SELECT COUNT(*) FROM customers") == customers_before - 1
    assert rows(demo / "warehouse.ops.db", "SELECT COUNT(*) FROM stock_levels") == stock_before
    assert rows(demo / "warehouse.crm.db", "SELECT COUNT(*) FROM addresses WHERE id = 1") == 1
    # Rebuilt marts hold every other customer, the feedback loop's members included: the
    # loop is emptied once, before its first member is rebuilt, not before each member.
    for mart in ("customer_ltv", "customer_segments", "segment_history"):
        assert rows(demo / "warehouse.marts.db", f"SELECT COUNT(*) FROM {mart}") == (
            customers_before - 1
        ), mart
    assert rows(demo / "warehouse.agg.db", "SELECT COUNT(*) FROM customers_by_postcode") == 0
    # The request key is destroyed: the system no longer holds the identifier at all.
    with pytest.raises(ErasureError):
        svc.registry.unpark("REQ-2026-0001")
    assert svc.ledger.verify().ok
    # A later request for the embeddings cites the standing ruling instead of asking again.
    assert (
        svc.rulings.standing_for(
            svc.catalog.by_name("ml.customer_embeddings").ref, date(2027, 1, 1)
        )
        is not None
    )

    # The canary is nowhere but in the immutable backup, which is beyond use until it expires
    # (and that date bounds the effective erasure date): store, warehouse, Vault key names.
    for db in demo.glob("*.db"):
        text = db.read_bytes().decode("latin-1").lower()
        assert (CANARY in text) == (db.name == "warehouse.backup.db"), db.name
    backup = next(a for a in record.body["artefacts"] if a["dataset"] == "backup.crm_nightly")
    assert record.body["effective_erasure_date"] >= backup["evidence"]["retention_expiry_date"]
    assert not [k for k in svc.keystore.list_key_names() if "alice" in k.lower()]


def test_a_subject_found_nowhere_is_tombstoned_verified_and_completed(svc: Services) -> None:
    conf = {**CONF, "request_ref": "REQ-2026-0002", "identifier": "nobody@example.org"}
    workflow.register(svc, conf, "erasure-REQ-2026-0002")
    plan = workflow.plan_request(svc, "REQ-2026-0002")
    assert plan.roots == []
    assert [i.action for i in plan.items] == [Action.INSERT_TOMBSTONE]
    workflow.tombstone(svc, "REQ-2026-0002")
    svc.registry.mark_scrubbed("REQ-2026-0002", datetime.now(UTC))
    assert workflow.verify(svc, "REQ-2026-0002")["passed"]
    record = workflow.complete(svc, "REQ-2026-0002")
    assert record.status is RecordStatus.COMPLETE
    assert record.body["artefacts"] == []


def test_a_dry_run_plans_changes_nothing_and_keeps_no_identifier(svc: Services) -> None:
    conf = {**CONF, "request_ref": "REQ-2026-0003", "dry_run": True}
    workflow.register(svc, conf, "erasure-REQ-2026-0003")
    plan = workflow.plan_request(svc, "REQ-2026-0003")
    assert Action.ERASE_ROWS in {i.action for i in plan.items}
    assert svc.registry.actions("REQ-2026-0003") == []  # no ruling cited, nothing done
    with pytest.raises(ErasureError):
        svc.registry.unpark("REQ-2026-0003")
    kinds = [r.kind for r in svc.ledger.show("REQ-2026-0003")]
    assert kinds == [RecordKind.RECEIVED]
    assert workflow.deadlines(svc, date(2027, 6, 1), 7)["overdue"] == []


def test_a_failure_is_recorded_only_for_the_run_that_owns_the_request(svc: Services) -> None:
    workflow.register(svc, {**CONF, "request_ref": "REQ-2026-0004"}, "erasure-REQ-2026-0004")
    workflow.fail(svc, "REQ-2026-0004", "a resubmission failed", "manual__someone-else")
    assert svc.registry.get("REQ-2026-0004").status.value == "registered"  # type: ignore[union-attr]
    workflow.fail(svc, "REQ-2026-0004", "register failed", "erasure-REQ-2026-0004")
    assert svc.registry.get("REQ-2026-0004").status.value == "failed"  # type: ignore[union-attr]
    assert svc.ledger.show("REQ-2026-0004")[-1].kind is RecordKind.FAILED
