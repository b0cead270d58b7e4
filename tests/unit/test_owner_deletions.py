"""Deletions only an owner can do (erasure.workflow.confirm_deletion): a system of record the
warehouse copies (rule 2c), or an artefact the DPO ruled deleted that this system cannot
reach. Each stays pending, with the request's due date, until its owner's confirmation is
recorded; verify fails and the ledger refuses a completed record until then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure import workflow
from erasure.actions.escalate import delete_artefact
from erasure.errors import StepError, VerificationFailed
from erasure.free_text import NamesSubject
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action, DatasetRef, PlanItem
from erasure.pseudonym import subject_hash
from erasure.rulings import RulingOption, options_for
from erasure.services import Services
from tests.unit.estate import make_estate
from tests.unit.test_workflow import (
    ARCHIVE,
    BACKUP,
    CANARY_ID,
    CATALOG,
    LINEAGE_SQL,
    OTHER_ID,
    REF,
    ROWS,
    answer,
    open_services,
    register,
)

pytestmark = pytest.mark.vault

CRM = DatasetRef("postgres://crm-db:5432", "crm.public.customers")
SYSTEM_OF_RECORD = """
  - {namespace: "postgres://crm-db:5432", name: crm.public.customers, kind: table,
     holds_subject: {email: [email], customer_id: id}, owner: crm-team}
"""


@pytest.fixture
def svc(tmp_path: Path, openbao: EmbeddedOpenBao) -> Iterator[Services]:
    (tmp_path / "sql").mkdir()
    for name, sql in LINEAGE_SQL.items():
        (tmp_path / "sql" / f"{name}.sql").write_text(sql)
    catalog = CATALOG.replace("lineage:\n", SYSTEM_OF_RECORD + "lineage:\n")
    _catalog, warehouse = make_estate(tmp_path, catalog, ROWS)
    warehouse.dispose()
    with open_services(tmp_path, openbao) as services:
        pepper = services.peppers.current()
        for customer in (CANARY_ID, OTHER_ID):
            services.keystore.create(subject_hash(pepper, "customer_id", customer), ARCHIVE.name)
        yield services


def _act(svc: Services) -> None:
    plan = svc.plans.get(REF, 1)
    workflow.tombstone(svc, REF)
    for action, step in (
        (Action.ERASE_ROWS, workflow.erase),
        (Action.CRYPTO_SHRED, workflow.shred),
        (Action.AGGREGATE_OK, workflow.confirm_aggregate),
    ):
        for dataset in workflow.items_for(plan, action):
            step(svc, REF, dataset)
    for dataset in workflow.items_for(plan, Action.REBUILD):
        workflow.rebuild_artefact(svc, REF, dataset, None)
    workflow.rule(svc, REF, CRM, answer(RulingOption.OWNER_ERASES, justification="CRM team"))
    workflow.rule(
        svc, REF, BACKUP, answer(RulingOption.DELETE_ARTEFACT, justification="drop the dump")
    )


def test_the_system_of_record_is_in_every_plan_as_its_owners_to_erase(svc: Services) -> None:
    register(svc)
    plan = workflow.plan_request(svc, REF)
    [item] = [i for i in plan.items if i.dataset == CRM]
    assert (item.action, item.rule, item.evidence["owner"]) == (Action.ESCALATE, "2c", "crm-team")
    assert options_for(item) == (
        RulingOption.OWNER_ERASES,
        RulingOption.NOT_HELD,
        RulingOption.RETAIN_EXEMPTION,
    )


def test_an_owners_deletion_is_pending_until_confirmed_and_the_record_says_so(
    svc: Services,
) -> None:
    register(svc)
    workflow.plan_request(svc, REF)
    _act(svc)
    due = svc.requests.require(REF).effective_due_on.isoformat()

    with pytest.raises(VerificationFailed) as pending:
        workflow.verify(svc, REF)
    assert f"crm.public.customers (owner deleted: awaiting crm-team's confirmation, due {due}" in (
        str(pending.value)
    )
    assert "backup.crm_nightly (owner deleted: awaiting" in str(pending.value)

    with pytest.raises(NamesSubject):
        workflow.confirm_deletion(svc, REF, CRM, "Chris (crm-team)", f"deleted {CANARY_ID}")
    with pytest.raises(StepError, match="say who confirmed"):
        workflow.confirm_deletion(svc, REF, CRM, "Chris (crm-team)", " ")
    with pytest.raises(StepError, match="no ruled escalation"):
        workflow.confirm_deletion(svc, REF, DatasetRef("w", "crm.orders"), "x", "y")
    workflow.confirm_deletion(svc, REF, CRM, "Chris (crm-team)", "CRM change CHG-1182")
    workflow.confirm_deletion(svc, REF, BACKUP, "Ops", "dump deleted, ticket OPS-77")

    assert workflow.verify(svc, REF).passed
    record = workflow.complete(svc, REF)
    [crm] = [a for a in record.body["artefacts"] if a["dataset"] == CRM.name]
    deletion = crm["evidence"]["deletion"]
    assert (deletion["done_by"], deletion["pending"], deletion["due_on"]) == (
        "crm-team",
        False,
        due,
    )
    assert (deletion["confirmed_by"], deletion["confirmation"]) == (
        "Chris (crm-team)",
        "CRM change CHG-1182",
    )


def test_deleting_immutable_storage_is_its_owners_never_an_emptied_table(tmp_path: Path) -> None:
    catalog_text = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: backup.dump, connection: warehouse, kind: backup, storage: immutable,
     owner: ops}
"""
    catalog, warehouse = make_estate(
        tmp_path,
        catalog_text,
        ["CREATE TABLE backup.dump (email TEXT)", "INSERT INTO backup.dump VALUES ('a@x.org')"],
    )
    item = PlanItem(
        dataset=DatasetRef("w", "backup.dump"),
        kind="backup",
        action=Action.ESCALATE,
        rule="4",
        reason="immutable",
    )
    deletion = delete_artefact(catalog, warehouse, item)
    assert deletion["done_by"] == "ops" and deletion["rows_deleted"] is None
    with warehouse.engine("warehouse").connect() as conn:  # everyone else's copy is kept
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM backup.dump").scalar_one() == 1


def test_confirming_for_an_unknown_reference_does_not_repeat_it(
    svc: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`erasure requests confirm-deletion` with an identifier typed where the reference goes."""
    from erasure.cli import main

    settings = svc.settings
    env = {
        "ERASURE_CATALOG_PATH": str(settings.catalog_path),
        "ERASURE_STORE_URL": settings.store_url,
        "ERASURE_VAULT_ADDR": str(settings.vault_addr),
        "ERASURE_VAULT_TOKEN": settings.vault_token.get_secret_value()
        if settings.vault_token
        else "",
        "ERASURE_VAULT_KV_MOUNT": settings.vault_kv_mount,
        "ERASURE_VAULT_TRANSIT_MOUNT": settings.vault_transit_mount,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for typed in (CANARY_ID, "REQ-2026-NOPE"):
        code = main(["requests", "confirm-deletion", typed, CRM.name, "--by", "crm", "--note", "x"])
        err = capsys.readouterr().err
        assert code == 2 and "no erasure request with that reference is registered" in err
        assert typed not in err
