"""Storage guarantees on the completed record: signed with it, shown by `erasure audit show` and
in the evidence pack; a record signed before they were stated still parses, verifies and
renders, saying they were not stated."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from erasure.audit.evidence import parse_completion
from erasure.audit.export import export_json, render_html, verify_pack
from erasure.audit.records import RecordLedger, RecordStatus
from erasure.model import Action
from erasure.storage_guarantees import storage_guarantees
from tests.unit.audit.cli import Run, runner
from tests.unit.audit.support import SUBJECT, completion_body, received_body

OLD, NEW = "REQ-2026-0042", "REQ-2026-0043"
SPACE = {
    "state": "scheduled",
    "engine": "postgresql",
    "statement": "VACUUM crm.orders",
    "by": "2026-11-30",
    "reason": "not_permitted",
    "note": "not yet",
}


def with_storage(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the workflow now writes it: every artefact with its storage guarantees."""
    body = copy.deepcopy(body)
    for artefact in body["artefacts"]:
        if artefact["dataset"] == "crm.orders":
            artefact["evidence"]["space"] = SPACE
        found = storage_guarantees(
            Action(artefact["action"]), artefact["kind"], None, artefact["evidence"]
        )
        artefact["storage"] = [g.model_dump(mode="json") for g in found]
    return body


@pytest.fixture
def recorded(ledger: RecordLedger) -> RecordLedger:
    for ref, body in ((OLD, completion_body()), (NEW, with_storage(completion_body()))):
        ledger.append(ref, SUBJECT, "received", received_body(ref))
        ledger.append(ref, SUBJECT, "completed", body, RecordStatus.COMPLETE)
    return ledger


def test_the_guarantees_are_signed_with_the_record_and_an_old_record_still_verifies(
    recorded: RecordLedger,
) -> None:
    assert recorded.verify().ok
    old = recorded.show(OLD)[-1]
    assert all("storage" not in a for a in old.body["artefacts"])
    assert all(a.storage == [] for a in parse_completion(old.body).artefacts)
    new = parse_completion(recorded.show(NEW)[-1].body)
    orders = next(a for a in new.artefacts if a.dataset == "crm.orders")
    assert [g.guarantee for g in orders.storage] == ["rows_deleted", "space_reclaim_scheduled"]
    assert str(orders.storage[1].due) == "2026-11-30"
    # Evidence written before the space step: rows_deleted holds only where rows_after says 0.
    customers = next(a for a in new.artefacts if a.dataset == "crm.customers")
    assert [g.guarantee for g in customers.storage] == ["rows_deleted"]


def test_the_pack_shows_each_guarantee_and_says_when_none_were_stated(
    recorded: RecordLedger,
) -> None:
    for ref in (OLD, NEW):
        assert verify_pack(export_json(recorded, ref)).ok
    old = render_html(export_json(recorded, OLD))
    assert old.count("not stated (recorded before storage guarantees were)") == len(
        completion_body()["artefacts"]
    )
    new = render_html(export_json(recorded, NEW))
    assert "<b>space_reclaim_scheduled</b> due by 2026-11-30" in new
    assert "<b>key_destroyed</b> since 2026-11-29" in new and "<b>anonymous_aggregate</b>" in new
    assert "not stated" not in new


def test_audit_show_lists_the_guarantees_under_each_artefact(
    recorded: RecordLedger,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    db_path: Any,
) -> None:
    monkeypatch.setenv("ERASURE_STORE_URL", f"sqlite:///{db_path}")
    run: Run = runner(capsys)
    code, out, _ = run("audit", "show", NEW)
    assert code == 0
    lines = out.splitlines()
    orders = next(i for i, line in enumerate(lines) if line.strip().endswith("crm.orders"))
    assert lines[orders + 1].split() == ["storage:", "rows_deleted"]
    assert lines[orders + 2].split() == ["storage:", "space_reclaim_scheduled", "due", "by",
                                         "2026-11-30"]  # fmt: skip
    code, out, _ = run("audit", "show", OLD)
    assert code == 0 and "storage:" not in out
