"""The demo's lakehouse tables (Iceberg `events.activity`, Delta `orders_ledger`) erased with
their history through the workflow, on SQLite and Postgres stores and warehouses: every
snapshot and version read afterwards, and every file on disk, by pyiceberg, delta-rs and
pyarrow directly, not through erasure.lakehouse; found in history only, kept by a tag, put
back in the history behind the erasure's back."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.expressions import EqualTo

from erasure import workflow
from erasure.audit.records import RecordKind, RecordStatus
from erasure.errors import VerificationFailed
from erasure.lakehouse.iceberg import IcebergTable
from erasure.model import Action, DatasetRef
from erasure.sample.lake import DELTA_TABLE, ICEBERG_TABLE, iceberg_catalog
from erasure.services import Services
from tests.integration.workflow_support import (
    ANSWERS,
    CONF,
    NOT_HELD,
    act_without_dpo,
    answer,
    item_named,
    register,
    run_request,
)
from tests.unit.lakehouse.iceberg_support import delete_as_spark
from tests.unit.lakehouse.support import files_holding as files_read_holding

pytestmark = [pytest.mark.integration, pytest.mark.vault]

ALICE = "alice.smith@example.com"
STORED = "Alice.Smith@Example.com"  # as the CRM wrote it, and the export copied it


def lake(svc: Services) -> Path:
    return svc.catalog.base_dir


def alice_id(svc: Services) -> str:
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    rows = table.scan().to_arrow().to_pylist()
    return next(str(r["customer_id"]) for r in rows if r["email"].strip().lower() == ALICE)


def iceberg_rows(svc: Services, customer_id: str) -> dict[int, int]:
    """Per snapshot the table keeps (branches and tags too): rows of `customer_id`."""
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    found = {}
    for snapshot in table.snapshots():
        scan = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        found[snapshot.snapshot_id] = scan.column("customer_id").to_pylist().count(customer_id)
    return found


def delta_rows(svc: Services, customer_id: str) -> dict[int, int]:
    """Per version of the ledger that can still be loaded: rows of `customer_id`."""
    path = str(lake(svc) / "lake" / "delta" / DELTA_TABLE)
    found = {}
    for entry in DeltaTable(path).history():
        version = int(entry["version"])
        try:
            table = DeltaTable(path, version=version).to_pyarrow_table()
        except Exception:  # a version whose files are gone is no history
            continue
        found[version] = table.column("customer_id").to_pylist().count(customer_id)
    return found


def files_holding(root: Path, needle: str) -> list[str]:
    """Files under `root` holding `needle`: Parquet read as rows, anything else as bytes."""
    holding = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            text = json.dumps(pq.read_table(path).to_pylist(), default=str)
        else:
            text = path.read_bytes().decode("utf-8", "replace")
        if needle in text:
            holding.append(str(path.relative_to(root)))
    return holding


def everyone(svc: Services) -> tuple[int, int]:
    iceberg = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    ledger = DeltaTable(str(lake(svc) / "lake" / "delta" / DELTA_TABLE))
    return iceberg.scan().to_arrow().num_rows, ledger.to_pyarrow_table().num_rows


def test_a_completed_request_leaves_the_subject_in_no_snapshot_version_or_file(
    svc: Services,
) -> None:
    subject = alice_id(svc)
    assert any(iceberg_rows(svc, subject).values()) and any(delta_rows(svc, subject).values())
    activity_before, ledger_before = everyone(svc)
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    mine = iceberg_rows(svc, subject)[table.current_snapshot().snapshot_id]

    record = run_request(svc, CONF)

    assert record.kind is RecordKind.COMPLETED
    assert not any(iceberg_rows(svc, subject).values())
    assert not any(delta_rows(svc, subject).values())
    assert files_holding(lake(svc) / "lake", subject) == []
    assert files_holding(lake(svc) / "lake", STORED) == []
    activity_after, ledger_after = everyone(svc)
    assert activity_after == activity_before - mine  # everybody else is still there
    assert 0 < ledger_after < ledger_before
    artefacts = {a["dataset"]: a for a in record.body["artefacts"]}
    for name, table_format in (("events.activity", "iceberg"), ("orders_ledger", "delta")):
        history = artefacts[name]["evidence"]["history"]
        assert history["format"] == table_format
        assert history["snapshots_after"] == 1 and history["snapshots_expired"] >= 1
    checks = {c["target"]: c for c in record.body["verification"]["checks"]}
    assert checks["events.activity"]["passed"]
    assert STORED not in json.dumps(record.body) and subject not in json.dumps(record.body)


def test_a_subject_deleted_but_never_expired_is_found_in_the_history(svc: Services) -> None:
    subject = alice_id(svc)
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    table.delete(EqualTo("customer_id", subject))  # a delete as a job would do it
    assert iceberg_rows(svc, subject)[table.current_snapshot().snapshot_id] == 0
    assert any(iceberg_rows(svc, subject).values())  # time travel still returns her

    run_request(svc, CONF)

    plan = svc.plans.get(CONF["request_ref"], 1)
    item = next(i for i in plan.items if i.dataset.name == "events.activity")
    assert item.action is Action.ERASE_ROWS
    assert item.evidence["rows_before"] == 0 and item.evidence["history_rows"] > 0
    assert not any(iceberg_rows(svc, subject).values())


def test_a_delete_by_another_engine_keeping_her_bounds_beside_live_files_leaves_none(
    svc: Services,
) -> None:
    """Spark's delete keeps the removed files in a manifest beside the files kept, as DELETED
    entries with their bounds: "Alice.Smith@Exam", her address cut to 16 characters as the
    CRM stored it, where the request knows her as alice.smith@example.com."""
    subject = alice_id(svc)
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    table.delete(EqualTo("customer_id", subject))
    delete_as_spark(table, set())  # the delete's manifests merged into one, as Spark's are
    head = table.refresh().current_snapshot()
    [mixed] = head.manifests(table.io)
    assert mixed.existing_files_count and mixed.deleted_files_count

    record = run_request(svc, CONF)

    assert record.kind is RecordKind.COMPLETED
    assert not any(iceberg_rows(svc, subject).values())
    # Read by format (manifests are compressed Avro): "Alice.Smith@" in no bound either.
    assert files_read_holding(lake(svc) / "lake", STORED[:12]) == []


def test_a_tag_keeping_the_subject_goes_to_the_dpo_and_nothing_completes_without_her(
    svc: Services,
) -> None:
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    first = table.snapshots()[0].snapshot_id
    table.manage_snapshots().create_tag(first, "audit-2025").commit()
    ref = CONF["request_ref"]
    register(svc, CONF, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)

    item = next(i for i in plan.items if i.dataset.name == "events.activity")
    assert item.action is Action.ESCALATE and item.rule == "2d"
    assert item.evidence["refs"] == ["audit-2025"] and "audit-2025" in item.reason
    assert item in workflow.pending_escalations(svc, ref)
    act_without_dpo(svc, ref)
    with pytest.raises(workflow.StepError):
        workflow.require_rulings(svc, ref)
    retained = answer(
        "Retain under an Art. 17(3) exemption",
        exemption="e",
        justification="Tagged for the audit of 2025; kept under legal claims until it closes.",
    )
    workflow.rule(svc, ref, item.dataset, retained)
    for other in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, other.dataset, ANSWERS[other.dataset.name])
    workflow.verify(svc, ref)
    record = workflow.complete(svc, ref)

    assert record.status is RecordStatus.COMPLETE_WITH_EXEMPTIONS
    ruling = next(r for r in record.body["rulings"] if r["dataset"]["name"] == "events.activity")
    assert ruling["option"] == "retain_exemption" and ruling["exemption"] == "e"
    assert table.refresh().refs()["audit-2025"].snapshot_id == first  # the DPO kept it


def test_the_subject_put_back_into_the_history_after_the_erasure_fails_verify(
    svc: Services,
) -> None:
    subject = alice_id(svc)
    ref = CONF["request_ref"]
    register(svc, CONF, f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    act_without_dpo(svc, ref)
    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset, ANSWERS[item.dataset.name])
    # A late writer appends her row again and a cleanup deletes it: gone now, not from history.
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    schema = table.schema().as_arrow()
    row = {"customer_id": subject, "email": STORED, "event": "login", "hour": 9}
    table.append(pa.Table.from_pylist([row], schema=schema))
    table.delete(EqualTo("customer_id", subject))

    with pytest.raises(VerificationFailed) as failed:
        workflow.verify(svc, ref)
    assert "events.activity" in str(failed.value) and "history" in str(failed.value)
    assert "file(s) on disk: data/" in str(failed.value)  # where to look, by path
    assert STORED not in str(failed.value) and subject not in str(failed.value)


def test_a_mailbox_another_customer_shares_erases_nobody_there_and_goes_to_the_dpo(
    svc: Services,
) -> None:
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    row = {"customer_id": "C9999", "email": STORED, "event": "login", "hour": 9}
    table.append(pa.Table.from_pylist([row], schema=table.schema().as_arrow()))
    ref = CONF["request_ref"]
    register(svc, CONF, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)

    item = next(i for i in plan.items if i.dataset.name == "events.activity")
    assert item.action is Action.ESCALATE and item.rule == "2b"
    assert item.evidence["other_rows"] == 1
    not_hers = answer(
        "Confirm the subject is not held",
        justification="The family mailbox rows belong to her husband's account.",
    )
    record = run_request(svc, CONF, {"events.activity": not_hers})

    assert record.kind is RecordKind.COMPLETED
    assert iceberg_rows(svc, "C9999")[table.refresh().current_snapshot().snapshot_id] == 1


def test_a_tag_named_after_the_subject_is_kept_out_of_the_plan(svc: Services) -> None:
    table = iceberg_catalog(lake(svc)).load_table(ICEBERG_TABLE)  # type: ignore[attr-defined]
    first = table.snapshots()[0].snapshot_id
    table.manage_snapshots().create_tag(first, f"dsar-{ALICE}").commit()
    ref = CONF["request_ref"]
    register(svc, CONF, f"erasure-{ref}")
    plan = workflow.plan_request(svc, ref)

    item = next(i for i in plan.items if i.dataset.name == "events.activity")
    assert item.rule == "2d" and item.evidence["refs"] == ["(a name not repeated)"]
    assert ALICE not in plan.model_dump_json().casefold()
    assert ALICE not in svc.plans.get(ref, 1).model_dump_json().casefold()


def test_a_second_request_after_the_first_finds_no_file_the_first_removed_unreadable(
    svc: Services,
) -> None:
    run_request(svc, CONF)
    second = {**CONF, "request_ref": "REQ-2026-0002", "identifier_type": "customer_id"}
    record = run_request(svc, {**second, "identifier": "C0005"})

    assert record.kind is RecordKind.COMPLETED
    assert not any(iceberg_rows(svc, "C0005").values())
    assert not any(delta_rows(svc, "C0005").values())


def test_two_erasures_of_one_table_at_once_take_turns_and_both_verify(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers erasing two people from one Iceberg table at the same time: the second
    waits for the first's hold (else its commit is refused, or its staged files, holding the
    first person, are on disk when the first one's verify reads them)."""
    alice = alice_id(svc)
    first, second = CONF, {**CONF, "request_ref": "REQ-2026-0002"}
    second.update(identifier_type="customer_id", identifier="C0005")
    activity: dict[str, DatasetRef] = {}
    for conf in (first, second):
        ref = str(conf["request_ref"])
        register(svc, conf, f"erasure-{ref}")
        workflow.plan_request(svc, ref)
        workflow.tombstone(svc, ref)
        activity[ref] = item_named(svc, ref, ICEBERG_TABLE)
        plan = svc.plans.get(ref, 1)
        for name in workflow.items_for(plan, Action.ERASE_ROWS):  # what goes first
            if name == activity[ref]:
                break
            workflow.erase(svc, ref, name)
    events: list[str] = []
    first_inside, second_started = threading.Event(), threading.Event()
    real_delete = IcebergTable.delete_rows

    def delete_rows(self: IcebergTable, *args: Any, **kwargs: Any) -> Any:
        name = threading.current_thread().name
        events.append(f"{name} deletes")
        if name == "first":
            first_inside.set()
            second_started.wait(10)
            time.sleep(1)  # the second worker is inside its erase by now, or waiting
        return real_delete(self, *args, **kwargs)

    monkeypatch.setattr(IcebergTable, "delete_rows", delete_rows)
    failures: list[BaseException] = []

    def erase(name: str, conf: dict[str, Any]) -> None:
        ref = str(conf["request_ref"])
        try:
            with Services.open(svc.settings) as worker:  # a worker of its own
                if name == "second":
                    first_inside.wait(30)
                    second_started.set()
                worker_evidence = workflow.erase(worker, ref, activity[ref])
                events.append(f"{name} erased {worker_evidence.rows_deleted}")
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [
        threading.Thread(target=erase, args=(n, c), name=n)
        for n, c in (("first", first), ("second", second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert not failures, failures
    assert events[:2] == ["first deletes", "first erased 3"], events
    assert events[2:] == ["second deletes", "second erased 3"], events
    monkeypatch.undo()
    for conf in (first, second):
        ref = str(conf["request_ref"])
        act_without_dpo(svc, ref)
        given = {**ANSWERS, "subject_search": NOT_HELD}
        for item in workflow.pending_escalations(svc, ref):
            workflow.rule(svc, ref, item.dataset, given[item.dataset.name])
        workflow.verify(svc, ref)
    for subject in (alice, "C0005"):
        assert not any(iceberg_rows(svc, subject).values())
        assert files_holding(lake(svc) / "lake", subject) == []
