"""The ledger: canonical hashing, the chain, status rules, concurrency."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.audit.records import (
    GENESIS_HASH,
    CompletionRecord,
    RecordError,
    RecordKind,
    RecordLedger,
    RecordStatus,
    canonical_json,
    hash_document,
)
from erasure.store import Store, open_store
from erasure.store.schema import completion_records
from tests.unit.audit.support import (
    CANARY,
    OTHER_SUBJECT,
    REBUILD_BY,
    SUBJECT,
    TAPE_RETENTION,
    LocalSigner,
    completion_body,
    received_body,
    record_request,
)


def test_canonical_form_is_sorted_compact_utf8_json() -> None:
    value = {"b": [1, 2.5, None, True], "a": {"z": "é", "y": 'x"y'}, "c": "line\nbreak"}
    assert canonical_json(value) == (
        '{"a":{"y":"x\\"y","z":"é"},"b":[1,2.5,null,true],"c":"line\\nbreak"}'.encode()
    )
    with pytest.raises(ValueError):
        canonical_json({"coverage": float("nan")})


def test_the_hash_document_holds_every_field_but_hash_and_signature() -> None:
    doc = hash_document(
        seq=7,
        request_ref="REQ-1",
        subject_hash=SUBJECT,
        kind="received",
        status=None,
        created_at=datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        body={"x": 1},
        prev_hash=GENESIS_HASH,
        signing_key_version=2,
    )
    assert sorted(doc) == sorted(
        [
            "format",
            "seq",
            "request_ref",
            "subject_hash",
            "kind",
            "status",
            "created_at",
            "body",
            "prev_hash",
            "signing_key_version",
        ]
    )
    assert doc["created_at"] == "2026-11-29T12:00:00.000000Z"


def test_record_hash_is_sha256_of_the_canonical_form(ledger: RecordLedger) -> None:
    record = ledger.append("REQ-2026-0042", SUBJECT, "received", received_body())
    doc = {
        k: v
        for k, v in record.model_dump(mode="json").items()
        if k not in ("record_hash", "signature")
    }
    doc["format"] = "erasure.completion-record/1"
    doc["created_at"] = record.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    expected = hashlib.sha256(
        json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert record.record_hash == expected == record.computed_hash()
    assert record.prev_hash == GENESIS_HASH
    assert record.seq == 1


def test_records_chain_in_order_and_verify(ledger: RecordLedger, signer: LocalSigner) -> None:
    record_request(ledger, "REQ-2026-0042")
    record_request(ledger, "REQ-2026-0043", with_tape=True)
    records = ledger.list()
    assert [r.seq for r in records] == list(range(1, 9))
    for before, after in itertools.pairwise(records):
        assert after.prev_hash == before.record_hash
    report = ledger.verify()
    assert report.ok, report.summary()
    assert report.records == 8 and report.head_seq == 8
    assert report.head_hash == records[-1].record_hash
    assert report.summary().startswith("chain OK: 8 record(s)")
    assert signer.signed == 8


def test_rotation_keeps_old_records_verifiable(ledger: RecordLedger, signer: LocalSigner) -> None:
    ledger.append("REQ-2026-0042", SUBJECT, "received", received_body())
    signer.rotate()
    later = ledger.append("REQ-2026-0043", OTHER_SUBJECT, "received", received_body())
    assert later.signing_key_version == 2 and later.signature.startswith("vault:v2:")
    report = ledger.verify()
    assert report.ok and report.key_versions == [1, 2]


def test_a_completed_record_states_its_effective_erasure_date(ledger: RecordLedger) -> None:
    record_request(ledger, "REQ-2026-0042")
    [completed] = ledger.list(request_ref="REQ-2026-0042", kind="completed")
    assert completed.status is RecordStatus.COMPLETE
    # The DPO's retrain date is later than the shredded key's last snapshot.
    assert completed.body["effective_erasure_date"] == REBUILD_BY.isoformat()

    record_request(ledger, "REQ-2026-0043", with_tape=True)
    [with_tape] = ledger.list(request_ref="REQ-2026-0043", kind="completed")
    assert with_tape.status is RecordStatus.COMPLETE_WITH_EXEMPTIONS
    assert with_tape.body["effective_erasure_date"] == TAPE_RETENTION.isoformat()


def test_a_wrong_effective_date_is_refused(ledger: RecordLedger) -> None:
    body = completion_body()
    body["effective_erasure_date"] = "2026-11-29"  # ignores the snapshot and the retrain
    with pytest.raises(RecordError, match="implies 2027-01-15"):
        ledger.append("REQ-2026-0042", SUBJECT, "completed", body, status="complete")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b["verification"].update(passed=False), "did not pass"),
        (lambda b: b["rulings"].clear(), "no DPO ruling"),
        (
            lambda b: b["artefacts"][5]["evidence"].pop("snapshot_expiry_date"),
            "snapshot_expiry_date",
        ),
        (lambda b: b.pop("lineage"), "lineage"),
    ],
    ids=["unverified", "escalation-without-ruling", "shred-without-expiry", "no-lineage"],
)
def test_nothing_is_recorded_complete_that_is_not(
    ledger: RecordLedger, change: object, message: str
) -> None:
    body = completion_body()
    change(body)  # type: ignore[operator]
    with pytest.raises(RecordError, match=message):
        ledger.append("REQ-2026-0042", SUBJECT, "completed", body, status="complete")
    assert ledger.list() == []


def test_status_must_match_the_exemptions(ledger: RecordLedger) -> None:
    with pytest.raises(RecordError, match="complete_with_exemptions exactly when"):
        ledger.append(
            "REQ-2026-0042", SUBJECT, "completed", completion_body(with_tape=True), "complete"
        )
    with pytest.raises(RecordError, match="needs status complete"):
        ledger.append("REQ-2026-0042", SUBJECT, "completed", completion_body())
    with pytest.raises(RecordError, match="has no status"):
        ledger.append("REQ-2026-0042", SUBJECT, "received", received_body(), "complete")


def test_a_failed_record_has_status_failed(ledger: RecordLedger) -> None:
    record = ledger.append(
        "REQ-2026-0042", SUBJECT, RecordKind.FAILED, {"step": "verify", "error": "recount 1"}
    )
    assert record.status is RecordStatus.FAILED


def test_a_completed_request_takes_no_further_records(ledger: RecordLedger) -> None:
    record_request(ledger, "REQ-2026-0042")
    with pytest.raises(RecordError, match="already completed"):
        ledger.append("REQ-2026-0042", SUBJECT, "failed", {"step": "complete"})
    assert len(ledger.show("REQ-2026-0042")) == 4


def test_a_replay_takes_one_replayed_record(ledger: RecordLedger) -> None:
    ref, nobody = "REPLAY-20261205T090000-abc123", "0" * 64
    first = ledger.append(ref, nobody, RecordKind.REPLAYED, {"rows_erased": 2})
    with pytest.raises(RecordError, match=f"replay {ref} is already on record \\(record seq 1\\)"):
        ledger.append(ref, nobody, RecordKind.REPLAYED, {"rows_erased": 2})
    assert ledger.show(ref) == [first]


def test_list_filters_by_time_status_and_request(ledger: RecordLedger) -> None:
    record_request(ledger, "REQ-2026-0042")
    ledger.append("REQ-2026-0043", OTHER_SUBJECT, "received", received_body())
    ledger.append("REQ-2026-0043", OTHER_SUBJECT, "failed", {"step": "act"})
    assert [r.request_ref for r in ledger.list(status="complete")] == ["REQ-2026-0042"]
    assert [r.kind for r in ledger.list(status="failed")] == [RecordKind.FAILED]
    assert len(ledger.show("REQ-2026-0043")) == 2
    assert ledger.show("REQ-NOPE") == []
    today = datetime.now(UTC).date()
    assert len(ledger.list(since=today)) == 6
    assert ledger.list(since=today + timedelta(days=1)) == []
    with pytest.raises(RecordError, match="not a record RecordStatus"):
        ledger.list(status="done")


def test_body_dates_and_models_are_stored_as_plain_json(ledger: RecordLedger) -> None:
    record = ledger.append(
        "REQ-2026-0042",
        SUBJECT,
        "extended",
        {"new_due": date(2027, 1, 31), "reason": "complex estate", "days": 30},
    )
    assert record.body == {"new_due": "2027-01-31", "reason": "complex estate", "days": 30}
    assert ledger.show("REQ-2026-0042") == [record]


def test_a_body_that_is_not_json_is_refused(ledger: RecordLedger) -> None:
    with pytest.raises(RecordError, match="not JSON-serialisable"):
        ledger.append("REQ-2026-0042", SUBJECT, "received", {"coverage": float("inf")})


# -- the identifier guard ---------------------------------------------------------------------


def test_a_request_ref_that_looks_like_an_identifier_is_refused_unechoed(
    ledger: RecordLedger,
) -> None:
    with pytest.raises(RecordError, match="request_ref must be") as info:
        ledger.append(CANARY, SUBJECT, "received", received_body())
    assert CANARY not in str(info.value)
    with pytest.raises(RecordError, match="subject_hash must be the 64-hex"):
        ledger.append("REQ-2026-0042", CANARY, "received", received_body())


def test_the_stored_rows_hold_no_canary(ledger: RecordLedger, db_path: Path) -> None:
    record_request(ledger, "REQ-2026-0042", with_tape=True)
    raw = db_path.read_bytes().decode("utf-8", errors="replace").casefold()
    assert CANARY.casefold() not in raw


# -- signing and concurrency ------------------------------------------------------------------


def test_append_without_a_signer_is_refused(store: Store) -> None:
    with pytest.raises(RecordError, match="without the signing key"):
        RecordLedger(store).append("REQ-2026-0042", SUBJECT, "received", received_body())


def test_a_signing_failure_appends_nothing(store: Store) -> None:
    class Broken(LocalSigner):
        def sign(self, payload: bytes, key_version: int | None = None) -> tuple[str, int]:
            raise RecordError("Vault is down")

    ledger = RecordLedger(store, Broken())
    with pytest.raises(RecordError, match="Vault is down"):
        ledger.append("REQ-2026-0042", SUBJECT, "received", received_body())
    assert ledger.list() == [] and ledger.head() == (0, GENESIS_HASH)


def test_concurrent_appenders_never_fork_the_chain(db_path: Path, signer: LocalSigner) -> None:
    open_store(f"sqlite:///{db_path}").close()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            # One engine per worker, as separate processes would have (already migrated).
            with open_store(f"sqlite:///{db_path}", migrate=False) as store:
                ledger = RecordLedger(store, signer)
                for i in range(8):
                    ledger.append(f"REQ-{n:02d}-{i:02d}", SUBJECT, "received", received_body())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open_store(f"sqlite:///{db_path}") as store:
        ledger = RecordLedger(store, signer)
        assert [r.seq for r in ledger.list()] == list(range(1, 49))
        assert ledger.verify().ok


def test_a_record_read_back_equals_the_one_appended(ledger: RecordLedger, store: Store) -> None:
    appended = ledger.append("REQ-2026-0042", SUBJECT, "completed", completion_body(), "complete")
    assert ledger.show("REQ-2026-0042") == [appended]
    assert isinstance(appended, CompletionRecord)
    with store.engine.connect() as conn:
        stored = conn.execute(sa.select(completion_records.c.body)).scalar_one()
    assert stored.encode() == canonical_json(appended.body)
