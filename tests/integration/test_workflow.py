"""The seven steps end to end, without a scheduler: real OpenBao, real SQLite warehouse and
store, the demo estate. What the DAG wires, this drives by hand."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from erasure import workflow
from erasure.actions.coalesce import run_for
from erasure.actions.rebuild import AwaitingRun, RunOutcome
from erasure.audit.records import RecordKind, RecordStatus
from erasure.crm_ingest import ingest_crm_export
from erasure.deadlines import deadline_report
from erasure.errors import ErasureError, StoreError, VaultError, VerificationFailed
from erasure.keys.vault import EmbeddedOpenBao
from erasure.lineage import LineageStore
from erasure.model import Action
from erasure.planner import SUBJECT_SEARCH
from erasure.prompts import escalation_prompt
from erasure.registry.action_log import ActionStatus
from erasure.rulings import Ruling, RulingOption
from erasure.sample.embedded import open_demo
from erasure.sample.rematerialise import rematerialise
from erasure.services import Services
from erasure.suppression import identifier_columns
from tests.integration.workflow_support import (
    ANSWERS,
    CANARY,
    CONF,
    NOT_HELD,
    act,
    act_without_dpo,
    answer,
    down_once,
    failure_callback,
    item_named,
    register,
    rows,
    sealed,
    trigger,
)

pytestmark = [pytest.mark.integration, pytest.mark.vault]


@pytest.fixture
def svc(tmp_path: Path, openbao: EmbeddedOpenBao):  # type: ignore[no-untyped-def]
    settings = open_demo(tmp_path / "demo", openbao)
    with Services.open(settings) as services:
        yield services


def test_request_runs_end_to_end_and_leaves_no_identifier(svc: Services, tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    stock_before = rows(demo / "warehouse.ops.db", "SELECT COUNT(*) FROM stock_levels")
    customers_before = rows(demo / "warehouse.crm.db", "SELECT COUNT(*) FROM customers")

    registration = register(svc, CONF, "erasure-REQ-2026-0001")
    assert registration.created
    again = register(svc, CONF, "manual__second")
    assert (again.created, again.owner_run_id) == (False, "erasure-REQ-2026-0001")

    plan = workflow.plan_request(svc, "REQ-2026-0001")
    assert workflow.plan_request(svc, "REQ-2026-0001") == plan  # the plan acted on is fixed
    assert {workflow.items_for(plan, a)[0].name for a in (Action.ERASE_ROWS,)} == {"crm.orders"}
    with pytest.raises(VerificationFailed, match="verification failed on"):
        workflow.verify(svc, "REQ-2026-0001")
    with pytest.raises(ErasureError, match="not verified"):
        workflow.complete(svc, "REQ-2026-0001")

    act(svc, "REQ-2026-0001")
    leftover = sealed(svc, CONF)  # a second desk submission whose run has not registered yet
    with pytest.raises(VerificationFailed, match="sealed submission destroyed"):
        workflow.verify(svc, "REQ-2026-0001")  # a sealed copy of the identifier is still kept
    act(svc, "REQ-2026-0001")  # a retried run acts on nothing twice
    workflow.register(svc, leftover, "manual__third")  # its run: a duplicate, destroyed
    result = workflow.verify(svc, "REQ-2026-0001")
    assert result.passed, result.failures()
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
        svc.secrets.unpark("REQ-2026-0001")
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


def test_a_subject_found_nowhere_is_a_question_for_the_dpo_not_a_completion(
    svc: Services,
) -> None:
    conf = {**CONF, "request_ref": "REQ-2026-0002", "identifier": "alice.smith@example.co"}
    register(svc, conf, "erasure-REQ-2026-0002")
    plan = workflow.plan_request(svc, "REQ-2026-0002")
    assert plan.roots == []
    # The archive and the backup outlive the source rows: a subject found nowhere may still
    # be in them, so every plan carries them (issue 18); no key of hers: rule 3a asks.
    assert [(i.dataset.name, i.action, i.rule) for i in plan.items] == [
        ("archive.customer_events", Action.ESCALATE, "3a"),
        ("backup.crm_nightly", Action.ESCALATE, "4"),
        ("subject_search", Action.ESCALATE, "not_found"),
        ("suppression_list", Action.INSERT_TOMBSTONE, "tombstone"),
    ]
    [question] = [
        q for q in workflow.pending_escalations(svc, "REQ-2026-0002") if q.dataset == SUBJECT_SEARCH
    ]
    prompt = escalation_prompt(question)
    assert prompt.options == ["Confirm the subject is not held"]
    assert "crm.customers (email, alt_email)" in question.reason
    # Alice's address at another domain: counted as a near miss, never shown.
    assert "`crm.customers.email`: 1 row(s), same local part at another domain" in prompt.body
    assert "alice" not in prompt.body.lower()
    workflow.tombstone(svc, "REQ-2026-0002")
    archive = item_named(svc, "REQ-2026-0002", "archive.customer_events")
    workflow.rule(svc, "REQ-2026-0002", archive, ANSWERS["archive.customer_events"])
    backup = item_named(svc, "REQ-2026-0002", "backup.crm_nightly")
    workflow.rule(svc, "REQ-2026-0002", backup, ANSWERS["backup.crm_nightly"])
    with pytest.raises(VerificationFailed, match="subject_search"):
        workflow.verify(svc, "REQ-2026-0002")  # not complete while the DPO has not answered
    workflow.rule(svc, "REQ-2026-0002", SUBJECT_SEARCH, NOT_HELD)
    assert workflow.verify(svc, "REQ-2026-0002").passed
    record = workflow.complete(svc, "REQ-2026-0002")
    assert record.status is RecordStatus.COMPLETE_WITH_EXEMPTIONS  # the backup is retained
    assert record.body["subject_found"] is False
    [outcome] = [a for a in record.body["artefacts"] if a["rule"] == "not_found"]
    assert outcome["action"] == "escalate"
    assert "not_held" in [r["option"] for r in record.body["rulings"]]


def test_a_dry_run_plans_changes_nothing_and_keeps_no_identifier(svc: Services) -> None:
    conf = {**CONF, "request_ref": "REQ-2026-0003", "dry_run": True}
    register(svc, conf, "erasure-REQ-2026-0003")
    plan = workflow.plan_request(svc, "REQ-2026-0003")
    assert Action.ERASE_ROWS in {i.action for i in plan.items}
    assert svc.action_log.list("REQ-2026-0003") == []  # no ruling cited, nothing done
    with pytest.raises(ErasureError):
        svc.secrets.unpark("REQ-2026-0003")
    kinds = [r.kind for r in svc.ledger.show("REQ-2026-0003")]
    assert kinds == [RecordKind.RECEIVED]
    assert deadline_report(svc.requests, date(2027, 6, 1), 7).overdue == []


def test_a_failure_is_recorded_only_for_the_run_that_owns_the_request(svc: Services) -> None:
    register(svc, {**CONF, "request_ref": "REQ-2026-0004"}, "erasure-REQ-2026-0004")
    workflow.fail(svc, "REQ-2026-0004", "a resubmission failed", "manual__someone-else")
    assert svc.requests.get("REQ-2026-0004").status.value == "registered"  # type: ignore[union-attr]
    workflow.fail(svc, "REQ-2026-0004", "register failed", "erasure-REQ-2026-0004")
    assert svc.requests.get("REQ-2026-0004").status.value == "failed"  # type: ignore[union-attr]
    assert svc.ledger.show("REQ-2026-0004")[-1].kind is RecordKind.FAILED


def nightly_crm_sync(svc: Services) -> None:
    """The crm_ingest DAG's load: the CRM's export still lists everyone, the subject too."""
    customers = svc.catalog.by_name("crm.customers")
    ingest_crm_export(
        svc.settings.crm_export or "",
        engine=svc.warehouse.engine("warehouse"),
        table=customers.name,
        identifier_columns=identifier_columns(svc.catalog, customers),
        peppers=svc.peppers.all_versions(),
        suppression=svc.suppression,
    )


def test_the_nightly_crm_sync_while_the_dpo_decides_brings_nobody_back(
    svc: Services, tmp_path: Path
) -> None:
    """Rows are erased at once, the DPO may answer days later: the subject is tombstoned
    before any row goes, so the sync in between keeps them out and verify passes."""
    ref = "REQ-2026-0009"
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)
    first = workflow.items_for(plan, Action.ERASE_ROWS)[0]
    with pytest.raises(workflow.NotYet, match="tombstone"):
        workflow.erase(svc, ref, first)  # the DAG reschedules it until the tombstone is in
    workflow.tombstone(svc, ref)
    for name in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, name)
    for name in workflow.items_for(plan, Action.CRYPTO_SHRED):
        workflow.shred(svc, ref, name)
    for name in workflow.items_for(plan, Action.REBUILD):
        workflow.rebuild_artefact(svc, ref, name, trigger(svc))

    nightly_crm_sync(svc)  # 02:00, the prompts still open

    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset, ANSWERS[item.dataset.name])
    for name in workflow.items_for(plan, Action.AGGREGATE_OK):
        workflow.confirm_aggregate(svc, ref, name)
    assert workflow.verify(svc, ref).passed
    crm = tmp_path / "demo" / "warehouse.crm.db"
    assert rows(crm, "SELECT COUNT(*) FROM customers WHERE id = 'C0001'") == 0


@pytest.mark.parametrize("outage", [("ledger", "append"), ("secrets", "destroy")])
def test_a_completion_that_failed_for_good_completes_once_cleared(
    svc: Services, outage: tuple[str, str]
) -> None:
    """Vault was down through every try of `complete` (before the record was signed, or
    after), so the request was marked failed: clearing the task closes it all the same."""
    ref, run_id = "REQ-2026-0005", "erasure-REQ-2026-0005"
    conf = {**CONF, "request_ref": ref, "identifier": "nobody@example.org"}
    register(svc, conf, run_id)
    workflow.plan_request(svc, ref)
    workflow.tombstone(svc, ref)
    archive = item_named(svc, ref, "archive.customer_events")
    workflow.rule(svc, ref, archive, ANSWERS["archive.customer_events"])
    workflow.rule(
        svc, ref, item_named(svc, ref, "backup.crm_nightly"), ANSWERS["backup.crm_nightly"]
    )
    workflow.rule(svc, ref, item_named(svc, ref, "subject_search"), NOT_HELD)
    workflow.verify(svc, ref)
    down_once(getattr(svc, outage[0]), outage[1])
    with pytest.raises(VaultError):
        workflow.complete(svc, ref)
    failure_callback(svc, ref, run_id)
    assert svc.requests.get(ref).status.value == "failed"  # type: ignore[union-attr]

    record = workflow.complete(svc, ref)  # the DPO clears the failed task

    assert record.status is RecordStatus.COMPLETE_WITH_EXEMPTIONS  # the backup is retained
    assert svc.requests.get(ref).status.value == "complete_with_exemptions"  # type: ignore[union-attr]
    kinds = [r.kind for r in svc.ledger.show(ref)]
    assert kinds.count(RecordKind.COMPLETED) == 1
    with pytest.raises(ErasureError):
        svc.secrets.unpark(ref)


def test_a_dry_run_interrupted_before_its_identifier_was_destroyed_destroys_it_once_cleared(
    svc: Services,
) -> None:
    ref, run_id = "REQ-2026-0006", "erasure-REQ-2026-0006"
    register(svc, {**CONF, "request_ref": ref, "dry_run": True}, run_id)
    down_once(svc.secrets, "destroy")
    with pytest.raises(VaultError):
        workflow.plan_request(svc, ref)
    failure_callback(svc, ref, run_id)

    workflow.plan_request(svc, ref)  # the DPO clears the failed plan task

    with pytest.raises(ErasureError):
        svc.secrets.unpark(ref)  # a dry run keeps no identifier
    assert svc.requests.get(ref).status.value == "planned"  # type: ignore[union-attr]


def test_a_plan_interrupted_before_citing_a_standing_ruling_cites_it_once_cleared(
    svc: Services,
) -> None:
    embeddings = svc.catalog.by_name("ml.customer_embeddings").ref
    svc.rulings.record(
        Ruling(
            dataset=embeddings,
            request_ref=None,
            option=RulingOption.REBUILD_BY_DATE,
            scheduled_by=date(2099, 1, 1),
            author_id="dana",
            author_name="Dana DPO",
            justification="retrained every quarter",
            standing_until=date(2099, 1, 1),
            decided_at=datetime(2026, 1, 5, tzinfo=UTC),
        )
    )
    ref, run_id = "REQ-2026-0007", "erasure-REQ-2026-0007"
    register(svc, {**CONF, "request_ref": ref}, run_id)
    down_once(svc.rulings, "standing_for", StoreError("the erasure store is unreachable"))
    with pytest.raises(StoreError):
        workflow.plan_request(svc, ref)
    failure_callback(svc, ref, run_id)

    workflow.plan_request(svc, ref)  # the DPO clears the failed plan task

    pending = [i.dataset.name for i in workflow.pending_escalations(svc, ref)]
    assert "ml.customer_embeddings" not in pending  # the DPO is not asked again
    assert "crm.addresses" in pending
    kinds = [r.kind for r in svc.ledger.show(ref)]
    assert kinds.count(RecordKind.ESCALATED) == 1


def test_a_registration_interrupted_before_its_received_record_writes_it_once_cleared(
    svc: Services,
) -> None:
    ref, run_id = "REQ-2026-0008", "erasure-REQ-2026-0008"
    conf = {**CONF, "request_ref": ref}
    ticket = sealed(svc, conf)
    down_once(svc.ledger, "append")
    with pytest.raises(VaultError):
        workflow.register(svc, ticket, run_id)
    failure_callback(svc, ref, run_id)
    assert svc.submissions.held(ref) == 1  # a failure a retry mends keeps the sealed copy

    workflow.register(svc, ticket, run_id)  # cleared: the same conf, the same sealed copy
    assert svc.submissions.held(ref) == 0
    register(svc, conf, "manual__second")  # a second submission adds nothing

    received = [r for r in svc.ledger.show(ref) if r.kind is RecordKind.RECEIVED]
    assert len(received) == 1
    assert received[0].body["run_id"] == run_id


def test_a_ruling_interrupted_before_it_was_signed_is_recorded_once(svc: Services) -> None:
    ref = "REQ-2026-0010"
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    name = "recs.customer_recommendations"
    down_once(svc.ledger, "append")
    with pytest.raises(VaultError):
        workflow.rule(svc, ref, item_named(svc, ref, name), ANSWERS[name])

    workflow.rule(svc, ref, item_named(svc, ref, name), ANSWERS[name])  # record_rulings' retry

    ruled = [r.dataset.name for r in svc.rulings.for_request(ref)]
    assert ruled.count(name) == 1  # the completion record lists the DPO's decision once
    decided = [r for r in svc.ledger.show(ref) if r.kind is RecordKind.DECIDED]
    assert len(decided) == 1


def test_rows_found_again_by_verify_are_erased_again_once_cleared(
    svc: Services, tmp_path: Path
) -> None:
    """A writer outside the CRM sync puts an order of the subject back after the erasure:
    verify fails and reopens that erasure, so clearing it acts again (not the old evidence)."""
    ref = "REQ-2026-0011"
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    act(svc, ref)
    with sqlite3.connect(tmp_path / "demo" / "warehouse.crm.db") as conn:
        conn.execute("INSERT INTO orders VALUES (99001, 'C0001', 1, 12.5, '2026-12-01', '2026-12')")

    with pytest.raises(VerificationFailed, match=r"found again in crm\.orders: their erase"):
        workflow.verify(svc, ref)
    failure_callback(svc, ref, f"erasure-{ref}")  # verify failed for good
    with pytest.raises(ErasureError, match="not verified"):
        workflow.complete(svc, ref)

    orders = item_named(svc, ref, "crm.orders")
    redone = workflow.erase(svc, ref, orders)  # the cleared erase_rows task

    assert redone.rows_deleted == 1 and redone.already_done is False
    assert redone.reopened is not None and redone.reopened["found"] == 1
    assert redone.reopened["earlier"]["rows_deleted"] == 3  # the first act stays on record
    assert workflow.verify(svc, ref).passed
    record = workflow.complete(svc, ref)
    orders = next(a for a in record.body["artefacts"] if a["dataset"] == "crm.orders")
    assert orders["evidence"]["reopened"]["earlier"]["rows_deleted"] == 3


REPLICA = """
  - namespace: warehouse
    name: archive.events_replica
    connection: warehouse
    kind: file
    storage: immutable
    encryption: per_subject
    retention_days: 2555
    columns: [id, subject_hash, payload]
    owner: compliance
"""


def test_a_key_that_sealed_two_datasets_is_cited_by_the_second_shred(
    tmp_path: Path, openbao: EmbeddedOpenBao
) -> None:
    """One per-subject key seals the archive and its WORM replica: the first shred destroys
    it, the second cites that destruction instead of reporting no key at all."""
    settings = open_demo(tmp_path / "demo", openbao)
    catalog = tmp_path / "demo" / "catalog.yaml"
    text = catalog.read_text()
    catalog.write_text(
        text.replace(
            "\n  - namespace: warehouse\n    name: backup.crm_nightly",
            REPLICA + "\n  - namespace: warehouse\n    name: backup.crm_nightly",
            1,
        )
    )
    (tmp_path / "demo" / "sql" / "archive.events_replica.sql").write_text(
        "SELECT e.id AS id, e.subject_hash AS subject_hash, e.payload AS payload "
        "FROM archive.customer_events AS e"
    )
    with Services.open(settings) as svc:
        ref = "REQ-2026-0012"
        register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
        plan = workflow.plan_request(svc, ref)
        assert [r.name for r in workflow.items_for(plan, Action.CRYPTO_SHRED)] == [
            "archive.customer_events",
            "archive.events_replica",
        ]

        first = workflow.shred(svc, ref, item_named(svc, ref, "archive.customer_events"))
        second = workflow.shred(svc, ref, item_named(svc, ref, "archive.events_replica"))

    assert first.keys_shredded == 1 and second.keys_shredded == 0
    [destroyed] = first.keys
    [cited] = second.keys
    assert cited["key_id"] == destroyed["key_id"] and cited["already_absent"] is True
    assert cited["destroyed_with"] == "warehouse/archive.customer_events"
    assert second.snapshot_expiry_date == first.snapshot_expiry_date


def test_a_loop_rebuild_that_fails_says_the_loop_is_empty_and_a_clear_refills_it(
    svc: Services, tmp_path: Path
) -> None:
    ref = "REQ-2026-0013"
    marts = tmp_path / "demo" / "warehouse.marts.db"
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)
    workflow.tombstone(svc, ref)
    for name in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, name)
    workflow.rebuild_artefact(svc, ref, item_named(svc, ref, "marts.customer_ltv"), trigger(svc))
    with sqlite3.connect(marts) as conn:  # the loop's upstream goes missing (an outage)
        conn.execute("ALTER TABLE customer_ltv RENAME TO customer_ltv_away")

    with pytest.raises(ErasureError, match=r"feedback loop \(marts\.customer_segments, marts"):
        segments = item_named(svc, ref, "marts.customer_segments")
        workflow.rebuild_artefact(svc, ref, segments, trigger(svc))
    assert rows(marts, "SELECT COUNT(*) FROM segment_history") == 0  # as the error says

    with sqlite3.connect(marts) as conn:
        conn.execute("ALTER TABLE customer_ltv_away RENAME TO customer_ltv")
    for name in ("marts.customer_segments", "marts.segment_history"):  # the cleared tasks
        workflow.rebuild_artefact(svc, ref, item_named(svc, ref, name), trigger(svc))
    others = rows(marts, "SELECT COUNT(*) FROM customer_ltv")
    assert rows(marts, "SELECT COUNT(*) FROM customer_segments") == others
    assert rows(marts, "SELECT COUNT(*) FROM segment_history") == others


def test_a_dag_rebuild_waits_outside_the_task_and_resumes_with_how_its_run_ended(
    svc: Services,
) -> None:
    """What the rebuild task does in Airflow: start the run, defer, resume with the outcome."""
    ref = "REQ-2026-0014"
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)
    workflow.tombstone(svc, ref)
    for name in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, name)
    target = item_named(svc, ref, "marts.orders_daily")
    run_id = "erasure-rebuild-build_marts-1"
    started: list[str] = []

    def start(dag_id: str, ready_at: datetime) -> RunOutcome:
        started.append(dag_id)
        raise AwaitingRun(dag_id, run_id)

    with pytest.raises(AwaitingRun):
        workflow.rebuild_artefact(svc, ref, target, start)
    waiting = svc.action_log.get(ref, target, Action.REBUILD)
    assert waiting is not None and waiting.status is ActionStatus.PENDING  # not failed
    awaited = waiting.evidence["progress"]["awaiting_run"]
    assert awaited == {"dag_id": "build_marts", "run_id": run_id}

    rematerialise(svc.catalog, svc.warehouse, "build_marts")  # the run, meanwhile
    ended = RunOutcome(run_id=run_id, state="success")
    evidence = workflow.rebuild_artefact(svc, ref, target, lambda dag_id, ready_at: ended)
    assert started == ["build_marts"]  # the resume started nothing
    assert evidence.run_id == run_id and evidence.dag_id == "build_marts"
    done = svc.action_log.get(ref, target, Action.REBUILD)
    assert done is not None and done.status is ActionStatus.DONE
    assert done.attempts == 1  # the resume went on with the attempt that started the run


def test_two_requests_ready_before_a_run_starts_share_it_and_each_cites_it(
    svc: Services,
) -> None:
    """Coalesced rebuilds: REQ-A's rebuild triggers the build_marts run; REQ-B, erased while
    that run is still queued, joins it. One run, both rebuilds cite it, records stay apart."""
    from tests.unit.actions.test_coalesce import Airflow

    airflow = Airflow()
    refs = {"REQ-2026-0030": "alice.smith@example.com", "REQ-2026-0031": "bob.smith@example.com"}
    targets = {}
    for ref, email in refs.items():
        register(svc, {**CONF, "request_ref": ref, "identifier": email}, f"erasure-{ref}")
        plan = workflow.plan_request(svc, ref)
        workflow.tombstone(svc, ref)
        for name in workflow.items_for(plan, Action.ERASE_ROWS):
            workflow.erase(svc, ref, name)
        targets[ref] = item_named(svc, ref, "marts.orders_daily")

    def joins(ref: str) -> workflow.TriggerDag:
        def trigger(dag_id: str, ready_at: datetime) -> RunOutcome:
            run = run_for(svc.rematerialisations, airflow, dag_id, ref, ready_at)
            raise AwaitingRun(dag_id, run.run_id)

        return trigger

    for ref, target in targets.items():
        with pytest.raises(AwaitingRun):
            workflow.rebuild_artefact(svc, ref, target, joins(ref))
    assert airflow.started == ["erasure-rebuild-build_marts-1"]  # one run for both

    started = datetime.now(UTC)  # the scheduler starts it: after both were ready
    rematerialise(svc.catalog, svc.warehouse, "build_marts")
    ended = RunOutcome(
        run_id="erasure-rebuild-build_marts-1",
        state="success",
        started_at=started,
        triggered_for="REQ-2026-0030",
    )
    cited = {
        ref: workflow.rebuild_artefact(svc, ref, target, lambda dag_id, ready_at: ended)
        for ref, target in targets.items()
    }
    assert {e.run_id for e in cited.values()} == {"erasure-rebuild-build_marts-1"}
    for evidence in cited.values():
        assert evidence.run_triggered_for == "REQ-2026-0030"
        assert evidence.upstreams_done_at is not None
        assert evidence.upstreams_done_at <= started == evidence.run_started_at
    for ref, evidence in cited.items():  # the last erasure of its upstreams was done then
        erased = {
            a.updated_at
            for a in svc.action_log.list(ref)
            if a.action == Action.ERASE_ROWS.value and a.status is ActionStatus.DONE
        }
        assert evidence.upstreams_done_at in erased


def test_a_dag_rebuild_whose_run_failed_or_was_deleted_fails_naming_the_run(
    svc: Services,
) -> None:
    ref = "REQ-2026-0015"
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)
    workflow.tombstone(svc, ref)
    for name in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, name)
    target = item_named(svc, ref, "marts.orders_daily")
    for state in ("failed", "gone"):
        ended = RunOutcome(run_id="erasure-rebuild-build_marts-7", state=state)
        with pytest.raises(ErasureError, match=rf"ended in state '{state}', not success"):
            workflow.rebuild_artefact(svc, ref, target, lambda dag_id, ready_at, e=ended: e)
        assert svc.action_log.status(ref, target, Action.REBUILD) is ActionStatus.FAILED


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_two_requests_of_one_person_at_once_each_prove_the_key_gone(
    tmp_path: Path, openbao: EmbeddedOpenBao, request: pytest.FixtureRequest, backend: str
) -> None:
    """Both planned while the key existed; the first shreds it. The second finds it gone and
    cites the first request's destruction (checked again: the key is absent) instead of
    failing "no key of the subject exists"; both complete, the key destroyed once."""
    settings = open_demo(tmp_path / "demo", openbao)
    if backend == "postgres":
        settings = settings.model_copy(
            update={"store_url": request.getfixturevalue("postgres_schema_url")}
        )
    first, second = "REQ-2026-0101", "REQ-2026-0102"
    with Services.open(settings) as svc:
        for ref, typed in ((first, CONF["identifier"]), (second, "alice.smith@EXAMPLE.com")):
            register(svc, {**CONF, "request_ref": ref, "identifier": typed}, f"erasure-{ref}")
            workflow.plan_request(svc, ref)
        archive = item_named(svc, first, "archive.customer_events")
        destroyed = workflow.shred(svc, first, archive)
        cited = workflow.shred(svc, second, archive)
        for ref in (first, second):
            act(svc, ref)
            workflow.verify(svc, ref)
            assert workflow.complete(svc, ref).status is RecordStatus.COMPLETE_WITH_EXEMPTIONS
    assert destroyed.keys_shredded == 1 and cited.keys_shredded == 0
    [key] = cited.keys
    assert key["key_id"] == destroyed.keys[0]["key_id"] and key["already_absent"] is True
    assert key["destroyed_by_request"] == first


def test_a_file_named_after_the_subject_never_names_her_in_plan_prompts_or_records(
    svc: Services,
) -> None:
    """A DSAR export job run for her wrote a file named after her: the plan, the DPO's prompt
    and every signed record name both by a keyed hash, and the file waits for its owner."""
    ref = "REQ-2026-0031"
    written = "Alice.Smith@Example.com"  # as the export job spelt it
    export = {"namespace": "s3://dsar-exports", "name": f"2026/{written}/profile.json"}
    LineageStore(svc.store).ingest_json(
        [
            {
                "eventType": "COMPLETE",
                "eventTime": "2026-11-21T09:00:00Z",
                "producer": "https://example.com/dsar-export",
                "run": {"runId": "01937a10-0000-7000-8000-00000000d5a1"},
                "job": {"namespace": "airflow", "name": f"dsar_export.{written}"},
                "inputs": [{"namespace": "warehouse", "name": "crm.customers"}],
                "outputs": [export],
            }
        ]
    )
    register(svc, {**CONF, "request_ref": ref}, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)
    [named] = [i for i in plan.items if i.dataset.namespace == "s3://dsar-exports"]
    assert named.dataset.name.startswith("redacted:")
    assert (named.action, named.rule) == (Action.ESCALATE, "1a")
    prompt = escalation_prompt(named)
    assert named in workflow.pending_escalations(svc, ref)

    act_without_dpo(svc, ref)
    owner_erases = answer(
        "Its owner erases the person there", justification="the exports team deletes the file"
    )
    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset, ANSWERS.get(item.dataset.name, owner_erases))
    with pytest.raises(VerificationFailed, match="owner deleted"):
        workflow.verify(svc, ref)  # until the owner's deletion is confirmed
    workflow.confirm_deletion(svc, ref, named.dataset, "exports team", "file deleted, OPS-31")
    assert workflow.verify(svc, ref).passed
    record = workflow.complete(svc, ref)

    texts = {
        "plan": "\n".join(svc.plans.get(ref, v).model_dump_json() for v in svc.plans.versions(ref)),
        "prompt": prompt.subject + "\n" + prompt.body,
        "records": "\n".join(json.dumps(r.body, default=str) for r in svc.ledger.show(ref)),
        "completion record": json.dumps(record.body, default=str),
    }
    for where, text in texts.items():
        assert text.lower().count(CANARY) == 0, where
        assert named.dataset.name in text, where  # named, by its hash
