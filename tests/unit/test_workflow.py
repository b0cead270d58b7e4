"""The door (`erasure.workflow`): the steps after registration, through their public functions,
on a small SQLite estate with its keys, peppers and signatures in a real OpenBao.

Requests are registered through the registry's own API (as tests/unit/registry does), not
through `workflow.register`, whose input is the submission's shape. What is checked here is
what a DPO or an auditor would notice: the plan a run acts on is fixed, each action waits for
what must come before it and runs once, nothing is verified that was not done, nothing is
complete that was not verified, and completion leaves the identifier nowhere.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure import workflow
from erasure.audit.outcome import OutcomeStatus, outcome_of
from erasure.audit.records import RecordKind, RecordStatus
from erasure.config import Settings
from erasure.errors import NotYet, RequestError, ShredError, StepError, VerificationFailed
from erasure.free_text import NamesSubject
from erasure.keys.vault import EmbeddedOpenBao
from erasure.locate import normalise_subject
from erasure.model import Action, DatasetRef
from erasure.progress import UpstreamFailed
from erasure.pseudonym import subject_hash
from erasure.registry.action_log import ActionStatus
from erasure.registry.requests import RequestStatus
from erasure.rulings import DpoAnswer, Exemption, RulingOption
from erasure.services import Services
from erasure.submission import ErasureRequest
from tests.unit.estate import make_estate

pytestmark = pytest.mark.vault

CANARY = "Workflow.Canary.4c9e2a7f15@Example.org"
CANARY_NORMALISED = CANARY.lower()
CANARY_ID = "CUST-wf-canary-81f0d3a6"  # the subject's customer id, found through the email
OTHER_ID = "CUST-wf-other-2be7c490"
REF = "REQ-WF-0001"

CATALOG = """
version: 1
k_threshold: 2
identifiers: {email: {normalise: email}, customer_id: {normalise: strip}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: [email], customer_id: id}}
  - {namespace: w, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
  - {namespace: w, name: marts.order_totals, connection: warehouse, kind: table,
     rebuild: {sql: "CREATE TABLE marts.order_totals AS SELECT o.customer_id AS customer_id,
                     SUM(o.amount) AS total FROM crm.orders AS o GROUP BY o.customer_id"}}
  - {namespace: w, name: agg.customers_by_region, connection: warehouse, kind: table,
     aggregate: {quasi_identifiers: [region], count_column: n}}
  - {namespace: w, name: archive.events, kind: file, storage: immutable,
     encryption: per_subject, retention_days: 365}
  - {namespace: w, name: backup.crm_nightly, kind: backup, storage: immutable,
     retention_days: 30}
lineage:
  sql: [{path: "sql/*.sql"}]
"""
LINEAGE_SQL = {
    "agg.customers_by_region": "SELECT c.region AS region, COUNT(*) AS n FROM crm.customers AS c"
    " GROUP BY c.region",
    "archive.events": "SELECT c.id AS customer_id, c.email AS payload FROM crm.customers AS c",
    "backup.crm_nightly": "SELECT c.id AS id, c.email AS email FROM crm.customers AS c",
}
ROWS = [
    "CREATE TABLE crm.customers (id TEXT PRIMARY KEY, email TEXT, region TEXT)",
    f"INSERT INTO crm.customers VALUES ('{CANARY_ID}', '{CANARY.upper()}', 'north'),"
    f" ('{OTHER_ID}', 'bo@example.org', 'north'), ('C3', 'cy@example.org', 'south'),"
    " ('C4', 'di@example.org', 'south')",
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY,"
    " customer_id TEXT REFERENCES customers (id), amount INTEGER)",
    f"INSERT INTO crm.orders VALUES (1, '{CANARY_ID}', 10), (2, '{CANARY_ID}', 20),"
    f" (3, '{OTHER_ID}', 5), (4, 'C3', 7)",
    "CREATE TABLE marts.order_totals AS SELECT customer_id, SUM(amount) AS total"
    " FROM crm.orders GROUP BY customer_id",
    "CREATE TABLE agg.customers_by_region (region TEXT, n INTEGER)",
    "INSERT INTO agg.customers_by_region VALUES ('north', 2), ('south', 2)",
]

CUSTOMERS = DatasetRef("w", "crm.customers")
ORDERS = DatasetRef("w", "crm.orders")
TOTALS = DatasetRef("w", "marts.order_totals")
BY_REGION = DatasetRef("w", "agg.customers_by_region")
ARCHIVE = DatasetRef("w", "archive.events")
BACKUP = DatasetRef("w", "backup.crm_nightly")


@pytest.fixture
def estate(tmp_path: Path) -> Path:
    """The catalog, its lineage files and the warehouse (SQLite, one file per schema)."""
    (tmp_path / "sql").mkdir()
    for name, sql in LINEAGE_SQL.items():
        (tmp_path / "sql" / f"{name}.sql").write_text(sql)
    _catalog, warehouse = make_estate(tmp_path, CATALOG, ROWS)
    warehouse.dispose()
    return tmp_path


def open_services(estate: Path, openbao: EmbeddedOpenBao, **settings: Any) -> Services:
    """Services over the estate, with Vault mounts of its own on the shared OpenBao."""
    mounts = uuid.uuid4().hex[:10]
    base = Settings.model_construct(
        catalog_path=estate / "catalog.yaml",
        store_url=f"sqlite:///{estate}/erasure.db",
        vault_kv_mount=f"kv-{mounts}",
        vault_transit_mount=f"transit-{mounts}",
        **settings,
    )
    return Services.open(Settings(**openbao.settings(base).model_dump()))


@pytest.fixture
def svc(estate: Path, openbao: EmbeddedOpenBao) -> Iterator[Services]:
    with open_services(estate, openbao) as services:
        # The archive's writer sealed each customer's events under a key of their own.
        pepper = services.peppers.current()
        for customer in (CANARY_ID, OTHER_ID):
            services.keystore.create(subject_hash(pepper, "customer_id", customer), ARCHIVE.name)
        yield services


def _request(ref: str = REF, identifier: str = CANARY, **fields: Any) -> ErasureRequest:
    return ErasureRequest.parse(
        {
            "request_ref": ref,
            "identifier_type": "email",
            "identifier": identifier,
            "received_on": date.today().isoformat(),
            "legal_ground": "art17_1_a",
            **fields,
        }
    )


def register(svc: Services, ref: str = REF, identifier: str = CANARY, **fields: Any) -> None:
    """Register as the register step does, through the registry's API: normalised, parked."""
    request = _request(ref, identifier, **fields)
    identity = normalise_subject(svc.catalog, request.subject)
    svc.registrar.register(request, identity, catalog=svc.catalog, run_id=f"erasure-{ref}")


def answer(option: RulingOption, **fields: Any) -> DpoAnswer:
    """The DPO's answer as the adapter hands it over: she holds the DPO role."""
    return DpoAnswer(
        option=option,
        author_id="dana",
        author_name="Dana DPO",
        decided_at=datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
        author_roles=frozenset({"DPO"}),
        **fields,
    )


RETAIN_BACKUP = answer(
    RulingOption.RETAIN_EXEMPTION,
    exemption=Exemption.B,
    justification="statutory backup, beyond use until it expires; restores pass the tombstones",
)


def count(svc: Services, sql: str) -> int:
    with svc.warehouse.engine("warehouse").connect() as conn:
        return int(conn.execute(sa.text(sql)).scalar_one())


def act(svc: Services, ref: str = REF) -> None:
    """The act step as the DAG wires it, in the plan's order, the escalation ruled."""
    plan = svc.plans.get(ref, 1)
    workflow.tombstone(svc, ref)
    for dataset in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, dataset)
    for dataset in workflow.items_for(plan, Action.CRYPTO_SHRED):
        workflow.shred(svc, ref, dataset)
    for dataset in workflow.items_for(plan, Action.REBUILD):
        workflow.rebuild_artefact(svc, ref, dataset, None)
    for dataset in workflow.items_for(plan, Action.AGGREGATE_OK):
        workflow.confirm_aggregate(svc, ref, dataset)
    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset, RETAIN_BACKUP)


# ---------------------------------------------------------------------------------------------
# plan


def test_the_plan_classifies_every_artefact_and_is_fixed_for_the_run(svc: Services) -> None:
    register(svc)
    plan = workflow.plan_request(svc, REF)

    assert [(i.dataset.name, i.action) for i in plan.items] == [
        ("crm.orders", Action.ERASE_ROWS),  # children before parents (the foreign key)
        ("crm.customers", Action.ERASE_ROWS),
        ("archive.events", Action.CRYPTO_SHRED),
        ("marts.order_totals", Action.REBUILD),
        ("agg.customers_by_region", Action.AGGREGATE_OK),
        ("backup.crm_nightly", Action.ESCALATE),
        ("suppression_list", Action.INSERT_TOMBSTONE),
    ]
    assert svc.requests.require(REF).status is RequestStatus.PLANNED
    assert CANARY_NORMALISED not in plan.model_dump_json().lower()
    assert CANARY_ID.lower() not in plan.model_dump_json().lower()
    # The DPO is asked once, on record, about what awaits her.
    [escalated] = [r for r in svc.ledger.show(REF) if r.kind is RecordKind.ESCALATED]
    assert [a["dataset"]["name"] for a in escalated.body["awaiting_dpo"]] == [BACKUP.name]
    assert [i.dataset for i in workflow.pending_escalations(svc, REF)] == [BACKUP]

    # A row that appears later does not change the plan this run acts on.
    with svc.warehouse.engine("warehouse").begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO crm.orders VALUES (9, '{CANARY_ID}', 99)")
    assert workflow.plan_request(svc, REF) == plan
    assert svc.plans.versions(REF) == [1]
    assert len([r for r in svc.ledger.show(REF) if r.kind is RecordKind.ESCALATED]) == 1


def test_no_step_runs_on_a_request_that_was_not_planned(svc: Services) -> None:
    register(svc)
    with pytest.raises(RequestError, match="no plan version 1"):
        workflow.tombstone(svc, REF)
    with pytest.raises(RequestError, match="no plan version 1"):
        workflow.erase(svc, REF, ORDERS)
    with pytest.raises(StepError, match="is registered: the verify step runs only from"):
        workflow.verify(svc, REF)
    with pytest.raises(StepError, match="not verified; nothing is reported complete"):
        workflow.complete(svc, REF)
    with pytest.raises(RequestError, match="no erasure request 'REQ-WF-NOPE'"):
        workflow.plan_request(svc, "REQ-WF-NOPE")
    assert svc.requests.require(REF).status is RequestStatus.REGISTERED
    assert count(svc, "SELECT COUNT(*) FROM crm.orders") == 4


# ---------------------------------------------------------------------------------------------
# act


def test_each_action_waits_for_what_must_come_before_it(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)

    with pytest.raises(NotYet, match="must be in place before these rows are erased") as early:
        workflow.erase(svc, REF, CUSTOMERS)  # the parent, before the tombstone and its children
    assert "erase_rows crm.orders" in str(early.value)
    assert "insert_tombstone suppression_list" in str(early.value)
    assert svc.action_log.status(REF, CUSTOMERS, Action.ERASE_ROWS) is ActionStatus.WAITING
    with pytest.raises(NotYet, match=r"erase_rows crm\.orders must be done before it is rebuilt"):
        workflow.rebuild_artefact(svc, REF, TOTALS, None)
    with pytest.raises(NotYet, match="erased before k is confirmed"):
        workflow.confirm_aggregate(svc, REF, BY_REGION)
    assert count(svc, "SELECT COUNT(*) FROM crm.customers") == 4  # nothing acted out of order

    workflow.tombstone(svc, REF)
    with pytest.raises(NotYet, match=r"erase_rows crm\.orders must be in place"):
        workflow.erase(svc, REF, CUSTOMERS)
    workflow.erase(svc, REF, ORDERS)
    workflow.erase(svc, REF, CUSTOMERS)
    assert count(svc, "SELECT COUNT(*) FROM crm.customers") == 3
    assert count(svc, f"SELECT COUNT(*) FROM crm.customers WHERE id = '{OTHER_ID}'") == 1
    assert count(svc, "SELECT COUNT(*) FROM crm.orders") == 2


def test_a_step_for_an_item_the_plan_does_not_have_is_refused(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    with pytest.raises(StepError, match=r"has no erase_rows item for 'w/marts\.order_totals'"):
        workflow.erase(svc, REF, TOTALS)  # derived: rebuilt, never erased in place
    with pytest.raises(StepError, match=r"has no crypto_shred item for 'w/backup\.crm_nightly'"):
        workflow.shred(svc, REF, BACKUP)
    assert svc.action_log.list(REF) == []


def test_a_wait_is_bounded_and_then_names_what_never_finished(
    estate: Path, openbao: EmbeddedOpenBao
) -> None:
    with open_services(estate, openbao, upstream_wait_timeout_seconds=1) as svc:
        register(svc)
        workflow.plan_request(svc, REF)
        with pytest.raises(NotYet):
            workflow.erase(svc, REF, ORDERS)
        time.sleep(1.2)
        with pytest.raises(UpstreamFailed, match="insert_tombstone suppression_list did not "
                           "finish within 1 s"):  # fmt: skip
            workflow.erase(svc, REF, ORDERS)
        assert count(svc, "SELECT COUNT(*) FROM crm.orders") == 4


def test_an_action_runs_once_and_a_retry_returns_what_it_did(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    workflow.tombstone(svc, REF)
    first = workflow.erase(svc, REF, ORDERS)
    assert first.model_dump()["rows_deleted"] == 2

    with svc.warehouse.engine("warehouse").begin() as conn:  # a sync brought one back
        conn.exec_driver_sql(f"INSERT INTO crm.orders VALUES (9, '{CANARY_ID}', 99)")
    again = workflow.erase(svc, REF, ORDERS)
    assert again == first  # the recorded evidence: a retried task does not act twice
    assert count(svc, f"SELECT COUNT(*) FROM crm.orders WHERE customer_id = '{CANARY_ID}'") == 1
    [logged] = [a for a in svc.action_log.list(REF) if a.dataset == ORDERS]
    assert (logged.status, logged.attempts) == (ActionStatus.DONE, 1)
    assert workflow.tombstone(svc, REF) == workflow.tombstone(svc, REF)


def test_shred_destroys_only_the_subjects_keys_and_proves_it(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    pepper = svc.peppers.current()
    mine = subject_hash(pepper, "customer_id", CANARY_ID)
    theirs = subject_hash(pepper, "customer_id", OTHER_ID)

    workflow.shred(svc, REF, ARCHIVE)
    assert not svc.keystore.exists(mine)
    assert svc.keystore.exists(theirs)
    # No key name holds the identifier: only keyed hashes.
    names = " ".join(svc.keystore.list_key_names()).lower()
    assert CANARY_ID.lower() not in names and "canary" not in names


def test_a_subject_without_a_per_subject_key_is_a_question_not_a_shred(
    svc: Services,
) -> None:
    # The archive is written under per-subject keys, but none exists for this subject: a
    # shred would destroy nothing and prove nothing, so the DPO decides (rule 3a).
    svc.keystore.shred(subject_hash(svc.peppers.current(), "customer_id", CANARY_ID))
    register(svc)
    plan = workflow.plan_request(svc, REF)
    assert workflow.items_for(plan, Action.CRYPTO_SHRED) == []
    [item] = [i for i in plan.items if i.dataset == ARCHIVE]
    assert (item.action, item.rule, item.evidence["keys_found"]) == (Action.ESCALATE, "3a", 0)
    with pytest.raises(StepError, match="must choose one of"):
        workflow.rule(svc, REF, ARCHIVE, answer(RulingOption.NON_PERSONAL, justification="x"))
    ruled = workflow.rule(
        svc,
        REF,
        ARCHIVE,
        answer(RulingOption.NOT_HELD, justification="archive owner: never exported for them"),
    )
    assert ruled.subject_found is False


def test_a_key_gone_between_plan_and_shred_fails_the_shred(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    svc.keystore.shred(subject_hash(svc.peppers.current(), "customer_id", CANARY_ID))
    with pytest.raises(ShredError, match="no per-subject key of the subject exists"):
        workflow.shred(svc, REF, ARCHIVE)
    assert svc.action_log.status(REF, ARCHIVE, Action.CRYPTO_SHRED) is not ActionStatus.DONE


def test_a_key_left_in_place_fails_verify_whatever_the_plan_says(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    act(svc)
    pepper = svc.peppers.current()
    svc.keystore.create(subject_hash(pepper, "email", CANARY_NORMALISED), ARCHIVE.name)
    with pytest.raises(VerificationFailed, match="key destroyed: STILL PRESENT"):
        workflow.verify(svc, REF)


# ---------------------------------------------------------------------------------------------
# rule


def test_only_a_dpo_rules_with_an_option_on_offer_and_without_naming_the_subject(
    svc: Services,
) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    with pytest.raises(StepError, match="who holds none of the roles DPO: only a DPO rules"):
        workflow.rule(svc, REF, BACKUP, RETAIN_BACKUP.model_copy(update={"author_roles": None}))
    with pytest.raises(StepError, match="must choose one of"):
        workflow.rule(svc, REF, BACKUP, answer(RulingOption.NOT_HELD, justification="checked"))
    with pytest.raises(NamesSubject, match="justification contains the subject's"):
        workflow.rule(
            svc,
            REF,
            BACKUP,
            answer(RulingOption.NON_PERSONAL, justification=f"{CANARY_ID} never used it"),
        )
    with pytest.raises(StepError, match="is incomplete"):  # retain without the exemption cited
        workflow.rule(svc, REF, BACKUP, answer(RulingOption.RETAIN_EXEMPTION, justification="x"))
    assert workflow.pending_escalations(svc, REF) != []

    ruled = workflow.rule(svc, REF, BACKUP, RETAIN_BACKUP)
    assert workflow.pending_escalations(svc, REF) == []
    # Answered once: a second answer returns the first ruling, it does not replace it.
    later = answer(RulingOption.NON_PERSONAL, justification="changed my mind about the backup")
    assert workflow.rule(svc, REF, BACKUP, later) == ruled
    [ruling] = svc.rulings.for_request(REF)
    assert (ruling.option, ruling.exemption) == (RulingOption.RETAIN_EXEMPTION, Exemption.B)


# ---------------------------------------------------------------------------------------------
# verify and complete


def test_verify_fails_until_every_promise_of_the_plan_is_kept(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    with pytest.raises(VerificationFailed, match="erase_rows done") as early:
        workflow.verify(svc, REF)
    failures = early.value.recounts  # every failed check, as the record of the verify lists it
    assert "crm.orders (recount: 2 row(s) of the subject)" in failures
    assert "suppression_list/email (tombstone: missing)" in failures
    assert "backup.crm_nightly (escalate done: None)" in failures

    act(svc)
    # A second desk submission of the reference that its run has not opened yet.
    leftover = svc.submissions.seal(_request(REF))
    with pytest.raises(VerificationFailed, match="sealed submission destroyed"):
        workflow.verify(svc, REF)  # a sealed copy of the identifier is still kept
    svc.submissions.destroy(leftover)
    result = workflow.verify(svc, REF)
    assert result.passed, result.failures()
    assert result.replan_version == max(svc.plans.versions(REF))
    assert svc.requests.require(REF).status is RequestStatus.VERIFYING


def test_rows_that_came_back_fail_verify_and_a_cleared_erase_acts_again(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    act(svc)
    with svc.warehouse.engine("warehouse").begin() as conn:  # a restore brought them back
        conn.exec_driver_sql(f"INSERT INTO crm.customers VALUES ('{CANARY_ID}', NULL, 'north')")
        conn.exec_driver_sql(f"INSERT INTO crm.orders VALUES (9, '{CANARY_ID}', 99)")

    with pytest.raises(VerificationFailed, match=r"found again in crm\.orders, crm\.customers"):
        workflow.verify(svc, REF)
    assert svc.action_log.status(REF, ORDERS, Action.ERASE_ROWS) is ActionStatus.FAILED
    assert svc.action_log.status(REF, CUSTOMERS, Action.ERASE_ROWS) is ActionStatus.FAILED
    redone = workflow.erase(svc, REF, ORDERS)  # reopened: the cleared task acts
    assert redone.model_dump()["rows_deleted"] == 1
    workflow.erase(svc, REF, CUSTOMERS)
    assert count(svc, f"SELECT COUNT(*) FROM crm.orders WHERE customer_id = '{CANARY_ID}'") == 0
    assert count(svc, f"SELECT COUNT(*) FROM crm.customers WHERE id = '{CANARY_ID}'") == 0
    assert workflow.verify(svc, REF).passed


def test_complete_signs_the_record_then_forgets_the_identifier(svc: Services, estate: Path) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    # Reached before anything was done (verify marked success by hand): it waits, signs nothing.
    with pytest.raises(NotYet, match="complete waits for them, then verifies"):
        workflow.complete(svc, REF)
    assert not svc.ledger.show(REF)[1:]  # the received record only
    act(svc)

    record = workflow.complete(svc, REF)  # no verify step passed: it verifies, itself
    assert svc.action_log.status(REF, workflow.VERIFICATION, "verify") is ActionStatus.DONE
    assert (record.kind, record.status) == (
        RecordKind.COMPLETED,
        RecordStatus.COMPLETE_WITH_EXEMPTIONS,  # the backup is retained under Art. 17(3)(b)
    )
    assert svc.requests.require(REF).status is RequestStatus.COMPLETE_WITH_EXEMPTIONS
    assert svc.ledger.verify().ok
    assert workflow.complete(svc, REF).record_hash == record.record_hash  # once
    with pytest.raises(RequestError, match="no longer holds the identifier"):
        svc.secrets.unpark(REF)
    # The tombstone stays: the subject is kept out of every future sync.
    pepper = svc.peppers.current()
    assert svc.suppression.contains(subject_hash(pepper, "email", CANARY_NORMALISED), 1)
    assert svc.suppression.contains(subject_hash(pepper, "customer_id", CANARY_ID), 1)
    # Neither the store nor the warehouse nor Vault's key names hold the subject any more.
    for db in estate.glob("*.db"):
        text = db.read_bytes().decode("latin-1").lower()
        assert CANARY_NORMALISED not in text and CANARY_ID.lower() not in text, db.name
    assert "canary" not in " ".join(svc.keystore.list_key_names()).lower()
    assert "canary" not in record.model_dump_json().lower()


def test_complete_looks_again_and_signs_nothing_that_stopped_being_true(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    act(svc)
    assert workflow.verify(svc, REF).passed
    workflow.fail(svc, REF, "the run was marked failed by hand", f"erasure-{REF}")
    with svc.warehouse.engine("warehouse").begin() as conn:  # a restore after the verify
        conn.exec_driver_sql(f"INSERT INTO crm.customers VALUES ('{CANARY_ID}', NULL, 'north')")
        conn.exec_driver_sql(f"INSERT INTO crm.orders VALUES (9, '{CANARY_ID}', 99)")

    with pytest.raises(VerificationFailed, match=r"crm\.orders \(recount: 1 row"):
        workflow.complete(svc, REF)
    assert not [r for r in svc.ledger.show(REF) if r.kind is RecordKind.COMPLETED]
    workflow.erase(svc, REF, ORDERS)  # reopened by the look complete took
    workflow.erase(svc, REF, CUSTOMERS)
    record = workflow.complete(svc, REF)  # its failed look on record: it looks again, itself
    assert record.kind is RecordKind.COMPLETED
    # On record it is complete, with the failure it was resumed from listed as earlier.
    outcome = outcome_of(svc.ledger.show(REF), svc.requests.require(REF))
    assert outcome.status is OutcomeStatus.COMPLETE_WITH_EXEMPTIONS
    assert outcome.effective_erasure_date is not None
    assert [f.reason for f in outcome.earlier_failures] == ["the run was marked failed by hand"]
    [check] = [
        c
        for c in record.body["verification"]["checks"]
        if c["target"] == "crm.orders" and c["check"] == "recount"
    ]
    assert check["passed"]


def test_a_dry_run_plans_changes_nothing_and_keeps_no_identifier(svc: Services) -> None:
    register(svc, dry_run="true")
    plan = workflow.plan_request(svc, REF)
    assert ORDERS in workflow.items_for(plan, Action.ERASE_ROWS)
    assert count(svc, "SELECT COUNT(*) FROM crm.orders") == 4
    assert svc.requests.require(REF).secrets_destroyed_at is not None
    with pytest.raises(RequestError, match="no longer holds the identifier"):
        svc.secrets.unpark(REF)
    assert svc.suppression.count() == 0
    assert svc.ledger.show(REF) == []  # the plan step signs nothing: its end is the registry's
    assert outcome_of(svc.ledger.show(REF), svc.requests.require(REF)).status is (
        OutcomeStatus.DRY_RUN
    )


# ---------------------------------------------------------------------------------------------
# fail and extend


def test_a_failure_is_recorded_for_the_owning_run_only_and_the_plan_step_resumes(
    svc: Services,
) -> None:
    register(svc)
    workflow.fail(svc, REF, "run manual__other: task failed", "manual__other")
    assert svc.requests.require(REF).status is RequestStatus.REGISTERED
    workflow.fail(svc, REF, "run erasure-REQ-WF-0001: task failed", f"erasure-{REF}")
    assert svc.requests.require(REF).status is RequestStatus.FAILED
    [failed] = [r for r in svc.ledger.show(REF) if r.kind is RecordKind.FAILED]
    assert failed.status is RecordStatus.FAILED

    workflow.plan_request(svc, REF)  # cleared: the failed request resumes at its plan
    assert svc.requests.require(REF).status is RequestStatus.PLANNED
    workflow.fail(svc, "REQ-WF-NEVER", "nothing", "erasure-REQ-WF-NEVER")  # unknown: no-op


def test_an_extension_is_one_or_two_months_with_a_reason_that_names_nobody(
    svc: Services,
) -> None:
    register(svc)
    workflow.plan_request(svc, REF)  # the plan pins the customer id the email expands to
    with pytest.raises(StepError, match="1 or 2 months"):
        workflow.extend(svc, REF, 3, "a large estate", "dana")
    with pytest.raises(NamesSubject, match="reason contains the subject's customer_id"):
        workflow.extend(svc, REF, 2, f"{CANARY_ID} has 14 backups to search", "dana")
    due = svc.requests.require(REF).due_on

    until = workflow.extend(svc, REF, 2, "14 backups to restore and search", "dana")
    assert until > due and (until.year * 12 + until.month) - (due.year * 12 + due.month) == 2
    [extended] = [r for r in svc.ledger.show(REF) if r.kind is RecordKind.EXTENDED]
    assert extended.body["extended_until"] == until.isoformat()
    assert extended.body["reason"] == "14 backups to restore and search"
    assert extended.body["by"] == "dana"  # the DPO who asked, signed with it
