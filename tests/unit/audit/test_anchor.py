"""The chain head published outside the store: whoever owns the store cannot make a cut, a
wipe or a re-signed tail verify, and the auditor needs to have kept nothing.

The store here is SQLite and the board is in memory; tests/integration/audit/test_anchor_vault.py
runs the same attacks against a real OpenBao board.
"""

from __future__ import annotations

import sqlite3

import pytest

from erasure.audit.anchor import AnchorError, anchor_of
from erasure.audit.records import RecordError, RecordLedger
from erasure.errors import VaultError
from erasure.store import Store
from tests.unit.audit.support import (
    OTHER_SUBJECT,
    LocalSigner,
    MemoryAnchorBoard,
    received_body,
    record_request,
)
from tests.unit.audit.test_tamper_sqlite import HEAD_TRIGGERS, RECORD_TRIGGERS, drop


@pytest.fixture
def board() -> MemoryAnchorBoard:
    return MemoryAnchorBoard()


@pytest.fixture
def anchored(store: Store, signer: LocalSigner, board: MemoryAnchorBoard) -> RecordLedger:
    """REQ-A at seq 1-4, REQ-B at 5-8, each append anchored on `board`."""
    ledger = RecordLedger(store, signer, board)
    record_request(ledger, "REQ-2026-000A")
    record_request(ledger, "REQ-2026-000B")
    return ledger


def cut_to(tamper: sqlite3.Connection, seq: int) -> None:
    """What the store's owner can do: drop the guards, delete the tail, rewind the head."""
    drop(tamper, *RECORD_TRIGGERS, *HEAD_TRIGGERS)
    tamper.execute("DELETE FROM completion_records WHERE seq > ?", (seq,))
    if seq == 0:
        tamper.execute("UPDATE completion_chain_head SET seq = 0, record_hash = ?", ("0" * 64,))
        return
    (last,) = tamper.execute(
        "SELECT record_hash FROM completion_records WHERE seq = ?", (seq,)
    ).fetchone()
    tamper.execute("UPDATE completion_chain_head SET seq = ?, record_hash = ?", (seq, last))


def test_every_append_publishes_the_head(anchored: RecordLedger, board: MemoryAnchorBoard) -> None:
    history = board.history()
    assert [a.seq for a in history.anchors] == list(range(1, 9))
    head_seq, head_hash = anchored.head()
    assert (history.anchors[-1].seq, history.anchors[-1].record_hash) == (head_seq, head_hash)
    report = anchored.verify()
    assert report.ok, report.summary()
    assert (report.anchor_heads, report.anchored_seq) == (8, 8)
    assert report.summary().endswith(
        "matches the 8 head(s) published at memory/anchors/chain-head (newest seq 8)"
    )


def test_a_cut_tail_with_the_head_rewound_is_caught(
    anchored: RecordLedger,
    store: Store,
    signer: LocalSigner,
    board: MemoryAnchorBoard,
    tamper: sqlite3.Connection,
) -> None:
    cut_to(tamper, 4)  # REQ-B never happened, as far as the store says
    assert RecordLedger(store, signer).verify().ok  # invisible from inside the store
    report = anchored.verify()
    assert not report.ok
    assert report.first_problem is not None
    # Named once, by the newest head it cut away, with the count of the others.
    assert (report.first_problem.seq, report.first_problem.problem) == (8, "anchor")
    assert report.summary() == (
        "chain BROKEN at seq 8: seq 8 was published as the chain head at "
        "memory/anchors/chain-head ("
        f"{board.history().anchors[7].published_at:%Y-%m-%d %H:%M:%S} UTC), but it is no "
        "longer in the store: the chain was cut back or wiped after it (that head's "
        "signature verifies) (3 more anchor(s) like it)"
    )


def test_a_wiped_store_is_caught(anchored: RecordLedger, tamper: sqlite3.Connection) -> None:
    cut_to(tamper, 0)
    report = anchored.verify()
    assert not report.ok and report.records == 0
    assert report.first_problem is not None and report.first_problem.problem == "anchor"


def test_a_re_signed_tail_cannot_be_published_and_is_caught(
    anchored: RecordLedger,
    store: Store,
    signer: LocalSigner,
    board: MemoryAnchorBoard,
    tamper: sqlite3.Connection,
) -> None:
    """The attacker owns the store and holds the signer: cuts REQ-B and signs another tail.
    Its head cannot be published over the one published for that seq, and verify names the
    record that differs from it, and every head the cut removed."""
    cut_to(tamper, 4)
    forger = RecordLedger(store, signer, board)
    with pytest.raises(AnchorError, match=r"seq 5 was published at .* as another record"):
        forger.append("REQ-2026-000F", OTHER_SUBJECT, "received", received_body("REQ-2026-000F"))
    report = anchored.verify()
    assert not report.ok
    problems = {(p.seq, p.problem) for p in report.problems}
    assert (5, "anchor") in problems  # seq 5 is not the record published for it
    assert (8, "anchor") in problems  # and 6..8 are gone


def test_a_published_head_written_again_is_caught(
    anchored: RecordLedger, board: MemoryAnchorBoard
) -> None:
    """Vault's root writes seq 8 again (no shipped policy lets anyone): a head is written
    once, so a second write is tampering whatever it says."""
    real = board.history().anchors[-1]
    board.force(real)
    report = anchored.verify()
    assert not report.ok
    assert "the head published for seq 8 was written 2 times" in report.summary()


def test_a_removed_head_is_caught(anchored: RecordLedger, board: MemoryAnchorBoard) -> None:
    board.remove(8)
    report = anchored.verify()
    assert not report.ok
    assert report.summary().startswith(
        "chain BROKEN at the published anchors: the head published for seq 8 was destroyed"
    )


def test_an_anchor_the_chain_does_not_hold_is_caught(
    anchored: RecordLedger, board: MemoryAnchorBoard
) -> None:
    """An anchor naming a hash the chain never had (a forged or foreign head)."""
    real = board.history().anchors[-1]
    board.force(anchor_of(9, "a" * 64, real.signature, real.signing_key_version))
    report = anchored.verify()
    assert report.first_problem is not None
    assert (report.first_problem.seq, report.first_problem.problem) == (9, "anchor")
    assert "that head's signature does not verify either" in report.first_problem.detail


def test_records_without_any_published_head_fail(
    store: Store, signer: LocalSigner, board: MemoryAnchorBoard
) -> None:
    record_request(RecordLedger(store, signer), "REQ-2026-000A")  # before anchoring existed
    ledger = RecordLedger(store, signer, board)
    report = ledger.verify()
    assert not report.ok
    assert "no chain head was ever published" in report.summary()
    assert "`erasure audit anchor`" in report.summary()
    assert ledger.anchor_head() is True
    assert ledger.anchor_head() is False  # already there
    assert ledger.verify().ok


def test_a_failed_publish_is_caught_up_by_the_next_append(
    store: Store, signer: LocalSigner, board: MemoryAnchorBoard
) -> None:
    ledger = RecordLedger(store, signer, board)
    ledger.append("REQ-2026-000A", OTHER_SUBJECT, "received", received_body("REQ-2026-000A"))
    board.failing = True
    with pytest.raises(VaultError):
        ledger.append("REQ-2026-000B", OTHER_SUBJECT, "received", received_body("REQ-2026-000B"))
    assert ledger.head()[0] == 2  # the record stands; only its anchor is missing
    report = ledger.verify()
    assert report.ok and "seq 2..2 not yet anchored" in report.summary()
    board.failing = False
    assert ledger.anchor_head() is True
    assert ledger.verify().anchored_seq == 2


def test_verify_without_a_board_says_it_did_not_compare(
    anchored: RecordLedger, store: Store, signer: LocalSigner
) -> None:
    report = RecordLedger(store, signer).verify()
    assert report.ok and report.anchor_location is None
    assert "NOT compared with the heads published outside the store" in report.summary()


def test_anchor_head_needs_a_board(store: Store, signer: LocalSigner) -> None:
    with pytest.raises(RecordError, match="no anchor board is configured"):
        RecordLedger(store, signer).anchor_head()


def test_a_head_not_signed_by_the_ledgers_key_is_never_published(
    anchored: RecordLedger, store: Store, board: MemoryAnchorBoard
) -> None:
    """A record forged into the store under another key (seq 9) is not published: a head
    published cannot be taken back, and would stand above every true append."""
    RecordLedger(store, LocalSigner()).append(
        "REQ-2026-000X", OTHER_SUBJECT, "received", received_body("REQ-2026-000X")
    )
    with pytest.raises(RecordError, match="does not verify as signed by this ledger's key"):
        anchored.anchor_head()
    assert board.history().newest is not None and board.history().newest.seq == 8
