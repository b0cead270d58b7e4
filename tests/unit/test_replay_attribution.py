"""erasure/replay_attribution.py: which completed requests a replay's tombstones stand for.

Signed records in a real SQLite store; bodies as the workflow writes them (the tombstone
step's evidence, the plan's artefacts, the DPO's rulings by identity or, older, by name).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from erasure.audit.records import RecordLedger
from erasure.model import DatasetRef
from erasure.replay_attribution import Verdict, attribute
from erasure.store import open_store
from tests.unit.audit.support import LocalSigner, completion_body, received_body

TABLE = DatasetRef("warehouse", "crm.customers")
ELSEWHERE = DatasetRef("warehouse", "crm.invoices")  # no request erased it
KEY = (1, "a" * 64)
OTHER_KEY = (2, "b" * 64)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[RecordLedger]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        yield RecordLedger(store, LocalSigner())


def signed(
    ledger: RecordLedger,
    ref: str,
    keys: list[tuple[int, str]],
    *,
    action: str | None = "erase_rows",
    ruling: dict[str, Any] | None = None,
) -> int:
    """A completed request that tombstoned `keys`; `action` on crm.customers (None: it did
    nothing there) and `ruling` among its rulings. Its record's seq."""
    body = completion_body()
    body["artefacts"] = [a for a in body["artefacts"] if a["dataset"] != TABLE.name]
    if action is not None:
        body["artefacts"].append(
            {"dataset": TABLE.name, "namespace": TABLE.namespace, "kind": "table",
             "action": action, "rule": "2", "reason": "root", "evidence": {}, "upstreams": []}
        )  # fmt: skip
    if ruling is not None:
        body["rulings"].append(
            {"author": "M. Okafor (DPO)", "decided_at": "2026-11-21T08:30:00+00:00",
             "justification": "see the ticket", **ruling}
        )  # fmt: skip
    body["tombstone"] = {
        "tombstones": [
            {"pepper_version": v, "subject_hash": h, "identifier_type": "email", "new": True}
            for v, h in keys
        ]
    }
    status = "complete_with_exemptions" if (ruling or {}).get("exemption") else "complete"
    ledger.append(ref, keys[0][1], "received", received_body(ref))
    return ledger.append(ref, keys[0][1], "completed", body, status=status).seq


def test_every_request_that_erased_the_table_is_cited_and_one_that_did_not_is_not(
    ledger: RecordLedger,
) -> None:
    signed(ledger, "REQ-NOT-HELD", [KEY], action=None)
    first = signed(ledger, "REQ-1", [KEY, OTHER_KEY])
    again = signed(ledger, "REQ-2", [KEY], action="rebuild")
    ledger.append("REQ-RUNNING", "c" * 64, "received", received_body("REQ-RUNNING"))

    found = attribute(ledger, TABLE)

    verdict = found.of(KEY)
    assert verdict.verdict is Verdict.ERASE
    assert [(d.request_ref, d.completion.seq) for d in verdict.requests] == [
        ("REQ-1", first),
        ("REQ-2", again),
    ]
    assert found.of((1, "c" * 64)).verdict is Verdict.NOT_COMPLETED  # in flight: no record
    assert attribute(ledger, ELSEWHERE).of(KEY).verdict is Verdict.NOT_ERASED_HERE


def test_a_ruling_that_kept_the_table_holds_its_rows_until_a_later_request_erases_them(
    ledger: RecordLedger,
) -> None:
    kept = {"dataset": TABLE.as_dict(), "option": "retain_exemption", "exemption": "e"}
    signed(ledger, "REQ-HOLD", [KEY], action=None, ruling=kept)
    assert attribute(ledger, TABLE).of(KEY).verdict is Verdict.RETAINED
    assert attribute(ledger, TABLE).row([KEY, OTHER_KEY]) is Verdict.RETAINED

    signed(ledger, "REQ-AFTER", [KEY])
    assert attribute(ledger, TABLE).of(KEY).verdict is Verdict.ERASE


def test_rulings_by_name_and_a_deleted_row_count_as_the_requests_do(
    ledger: RecordLedger,
) -> None:
    by_identity = {"dataset": TABLE.as_dict(), "option": "delete_row"}
    signed(ledger, "REQ-ROW", [KEY], action=None, ruling=by_identity)
    by_name = {"dataset": TABLE.name, "option": "non_personal"}  # an older ruling's form
    signed(ledger, "REQ-NP", [OTHER_KEY], action=None, ruling=by_name)

    found = attribute(ledger, TABLE)

    assert [d.request_ref for d in found.of(KEY).requests] == ["REQ-ROW"]
    assert found.of(KEY).verdict is Verdict.ERASE
    assert found.of(OTHER_KEY).verdict is Verdict.RETAINED
    # A ruling naming its table by identity is not about a same-named one elsewhere; one by
    # name alone is about every table of that name.
    lake = attribute(ledger, DatasetRef("lake", TABLE.name))
    assert lake.of(KEY).verdict is Verdict.NOT_ERASED_HERE
    assert lake.of(OTHER_KEY).verdict is Verdict.RETAINED
