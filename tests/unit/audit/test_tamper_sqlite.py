"""Append-only for real on SQLite, and `verify` naming the first bad record after tampering.

Whoever holds the database file can drop the triggers; these tests do exactly that, then show
that the hash chain, the sequence, the signatures and the chain head still give it away.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlalchemy as sa

from erasure.audit.canonical import canonical_json, hash_document, sha256_hex
from erasure.audit.chain import Anchor
from erasure.audit.records import RecordLedger
from erasure.store import Store
from erasure.store.schema import completion_chain_head, completion_records
from tests.unit.audit.support import OTHER_SUBJECT, LocalSigner, received_body, record_request

RECORD_TRIGGERS = ("completion_records_no_update", "completion_records_no_delete")
HEAD_TRIGGERS = ("completion_chain_head_forward_only", "completion_chain_head_no_delete")


def three_requests(ledger: RecordLedger) -> None:
    """12 records: REQ-A at 1-4, REQ-B at 5-8 (with the tape exemption), REQ-C at 9-12."""
    record_request(ledger, "REQ-2026-000A")
    record_request(ledger, "REQ-2026-000B", with_tape=True)
    record_request(ledger, "REQ-2026-000C")


def drop(conn: sqlite3.Connection, *triggers: str) -> None:
    for name in triggers:
        conn.execute(f"DROP TRIGGER {name}")


# -- the application's own connection is refused -------------------------------------------


def test_update_through_the_application_connection_is_refused(
    ledger: RecordLedger, store: Store
) -> None:
    three_requests(ledger)
    with (
        pytest.raises(sa.exc.IntegrityError, match="append-only: UPDATE refused"),
        store.engine.begin() as conn,
    ):
        conn.execute(
            completion_records.update()
            .where(completion_records.c.seq == 6)
            .values(body='{"redacted":true}')
        )
    assert ledger.verify().ok


def test_delete_through_the_application_connection_is_refused(
    ledger: RecordLedger, store: Store
) -> None:
    three_requests(ledger)
    with (
        pytest.raises(sa.exc.IntegrityError, match="append-only: DELETE refused"),
        store.engine.begin() as conn,
    ):
        conn.execute(
            completion_records.delete().where(completion_records.c.request_ref == "REQ-2026-000B")
        )
    with (
        pytest.raises(sa.exc.IntegrityError, match="append-only: DELETE refused"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_records.delete())
    assert len(ledger.list()) == 12


def test_an_insert_that_does_not_extend_the_head_is_refused(
    ledger: RecordLedger, store: Store
) -> None:
    three_requests(ledger)
    [fifth] = [r for r in ledger.list() if r.seq == 5]
    forged = {
        **fifth.model_dump(),
        "seq": 13,
        "body": "{}",
        "record_hash": "f" * 64,
        "prev_hash": fifth.prev_hash,  # a second successor of seq 4: a fork
    }
    with (
        pytest.raises(sa.exc.IntegrityError, match="must extend the chain head"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_records.insert().values(**forged))


def test_the_head_cannot_be_moved_back_or_deleted(ledger: RecordLedger, store: Store) -> None:
    three_requests(ledger)
    with (
        pytest.raises(sa.exc.IntegrityError, match="only moves forward"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_chain_head.update().values(seq=4))
    with (
        pytest.raises(sa.exc.IntegrityError, match="cannot be deleted"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_chain_head.delete())


# -- tampering past the triggers --------------------------------------------------------------


def test_an_edited_middle_record_is_named(ledger: RecordLedger, tamper: sqlite3.Connection) -> None:
    three_requests(ledger)
    drop(tamper, *RECORD_TRIGGERS)
    # Someone makes REQ-B look as if fewer orders had existed.
    body = json.loads(
        tamper.execute("SELECT body FROM completion_records WHERE seq = 8").fetchone()[0]
    )
    body["artefacts"][1]["evidence"]["rows_before"] = 2
    tamper.execute(
        "UPDATE completion_records SET body = ? WHERE seq = 8",
        (canonical_json(body).decode(),),
    )
    report = ledger.verify()
    assert not report.ok
    first = report.first_problem
    assert first is not None
    assert (first.seq, first.request_ref, first.problem) == (8, "REQ-2026-000B", "hash_mismatch")
    assert report.summary().startswith("chain BROKEN at seq 8 (request REQ-2026-000B)")


def test_an_edit_with_a_recomputed_hash_fails_the_signature(
    ledger: RecordLedger, tamper: sqlite3.Connection
) -> None:
    three_requests(ledger)
    drop(tamper, *RECORD_TRIGGERS)
    row = tamper.execute(
        "SELECT seq, request_ref, kind, status, body, prev_hash, signing_key_version "
        "FROM completion_records WHERE seq = 6"
    ).fetchone()
    seq, ref, kind, status, body, prev, version = row
    # The forger re-points REQ-B at another subject and recomputes the hash, but cannot sign.
    record = next(r for r in ledger.list() if r.seq == 6)
    forged_hash = sha256_hex(
        canonical_json(
            hash_document(
                seq=seq,
                request_ref=ref,
                subject_hash=OTHER_SUBJECT,
                kind=kind,
                status=status,
                created_at=record.created_at,
                body=json.loads(body),
                prev_hash=prev,
                signing_key_version=version,
            )
        )
    )
    tamper.execute(
        "UPDATE completion_records SET subject_hash = ?, record_hash = ? WHERE seq = 6",
        (OTHER_SUBJECT, forged_hash),
    )
    report = ledger.verify()
    problems = [(p.seq, p.problem) for p in report.problems]
    assert problems[0] == (6, "bad_signature")
    assert (7, "broken_link") in problems  # the next record still points at the real hash


def test_a_deleted_middle_record_is_named_as_a_gap(
    ledger: RecordLedger, tamper: sqlite3.Connection
) -> None:
    three_requests(ledger)
    drop(tamper, *RECORD_TRIGGERS)
    tamper.execute("DELETE FROM completion_records WHERE seq = 7")
    report = ledger.verify()
    first = report.first_problem
    assert first is not None and (first.seq, first.problem) == (7, "missing")
    assert "jumps from seq 6 to 8" in first.detail
    assert [(p.seq, p.problem) for p in report.problems][1] == (8, "broken_link")


def test_a_cut_off_tail_is_caught_by_the_head(
    ledger: RecordLedger, tamper: sqlite3.Connection
) -> None:
    three_requests(ledger)
    drop(tamper, *RECORD_TRIGGERS)
    tamper.execute("DELETE FROM completion_records WHERE seq >= 9")  # REQ-C never happened
    report = ledger.verify()
    first = report.first_problem
    assert first is not None and (first.seq, first.problem) == (9, "missing")
    assert "9..12 are missing at the end" in first.detail


def test_a_tail_cut_with_the_head_rewound_is_caught_by_an_anchor(
    ledger: RecordLedger, tamper: sqlite3.Connection
) -> None:
    three_requests(ledger)
    report = ledger.verify()
    # What the auditor noted last quarter.
    anchor = Anchor(report.head_seq, report.head_hash, source="is the head noted last quarter")
    drop(tamper, *RECORD_TRIGGERS, *HEAD_TRIGGERS)
    tamper.execute("DELETE FROM completion_records WHERE seq >= 9")
    eighth = tamper.execute("SELECT record_hash FROM completion_records WHERE seq = 8").fetchone()
    tamper.execute("UPDATE completion_chain_head SET seq = 8, record_hash = ?", eighth)
    assert ledger.verify().ok  # a perfect cut, invisible from inside the database ...
    anchored = ledger.verify(anchors=[anchor])
    assert not anchored.ok  # ... but not to an auditor who kept the head
    assert anchored.first_problem is not None
    assert (anchored.first_problem.seq, anchored.first_problem.problem) == (12, "anchor")


def test_a_record_signed_by_another_key_is_named(
    store: Store, ledger: RecordLedger, tamper: sqlite3.Connection
) -> None:
    three_requests(ledger)
    impostor = RecordLedger(store, LocalSigner())  # a key that is not the Vault key
    impostor.append("REQ-2026-000D", OTHER_SUBJECT, "received", received_body())
    report = ledger.verify()
    first = report.first_problem
    assert first is not None and (first.seq, first.problem) == (13, "bad_signature")
