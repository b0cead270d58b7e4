"""The daily re-proof read from completed records: what it checks, and how a gap is told."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from erasure.audit.records import CompletionRecord, RecordKind, RecordStatus
from erasure.reprove import ReproofError, destroyed_keys, reprove_completed

HASH_A, HASH_B, HASH_R = "a" * 64, "b" * 64, "c" * 64
SHREDDED = f"transit:erasure-transit/keys/subject-{HASH_A}"
VERIFIED_GONE = f"kv:erasure-kv/subjects/{HASH_B}"
REQUEST_KEY = f"transit:erasure-transit/keys/subject-{HASH_R}"


def completed(ref: str, **body: Any) -> CompletionRecord:
    content: dict[str, Any] = {
        "tombstone": {
            "tombstones": [
                {"subject_hash": "d" * 64, "identifier_type": "email", "pepper_version": 2}
            ]
        },
        "artefacts": [
            {"action": "crypto_shred", "evidence": {"keys": [{"key_id": SHREDDED}]}},
            {"action": "erase_rows", "evidence": {"keys": [{"key_id": "ignored"}]}},
        ],
        "verification": {
            "checks": [
                {"check": "key destroyed", "target": VERIFIED_GONE, "passed": True},
                {"check": "recount", "target": "crm.customers", "passed": True},
            ]
        },
        **body,
    }
    return CompletionRecord(
        seq=1,
        request_ref=ref,
        subject_hash="e" * 64,
        kind=RecordKind.COMPLETED,
        status=RecordStatus.COMPLETE,
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        body=content,
        prev_hash="0" * 64,
        record_hash="f" * 64,
        signature="vault:v1:sig",
        signing_key_version=1,
    )


def test_destroyed_keys_are_the_shreds_and_the_keys_verify_found_gone() -> None:
    assert destroyed_keys(completed("REQ-1").body) == sorted([SHREDDED, VERIFIED_GONE])


def test_everything_holding_is_a_pass_with_its_counts() -> None:
    result = reprove_completed(
        [completed("REQ-1"), completed("REQ-2")],
        tombstone_present=lambda _hash, _version: True,
        key_exists=lambda _key_id: False,
        request_key=lambda ref: REQUEST_KEY if ref == "REQ-1" else None,
    )
    assert result.ok and result.require() is result
    assert (result.requests, result.tombstones, result.keys) == (2, 2, 5)


def test_a_missing_tombstone_and_a_key_back_are_named_by_request() -> None:
    result = reprove_completed(
        [completed("REQ-1"), completed("REQ-2", tombstone=None)],
        tombstone_present=lambda _hash, version: version != 2,
        key_exists=lambda key_id: None if key_id.startswith("hsm:") else key_id == SHREDDED,
        request_key=lambda _ref: "hsm:opaque",  # a kind the probe cannot read: reported too
    )
    assert [(m.request_ref, m.what) for m in result.missing] == [
        ("REQ-1", "tombstone (email, pepper version 2) is no longer in the suppression list"),
        (
            "REQ-1",
            f"key {SHREDDED} exists again in Vault (restored from a snapshot, or re-created)",
        ),
        ("REQ-1", "key hsm:opaque cannot be checked: not a kv or transit key id"),
        ("REQ-2", "its completed record cites no tombstone"),
        (
            "REQ-2",
            f"key {SHREDDED} exists again in Vault (restored from a snapshot, or re-created)",
        ),
        ("REQ-2", "key hsm:opaque cannot be checked: not a kv or transit key id"),
    ]
    with pytest.raises(ReproofError) as failed:
        result.require()
    message = str(failed.value)
    assert message.startswith("6 proof(s) of 2 completed request(s) no longer hold")
    assert "request REQ-2: its completed record cites no tombstone" in message
    assert "d" * 64 not in message  # a tombstone is named by type and version, not its hash


def test_nothing_completed_is_nothing_to_prove() -> None:
    result = reprove_completed([], lambda *_: False, lambda _k: True, lambda _r: None)
    assert result.ok and (result.requests, result.tombstones, result.keys) == (0, 0, 0)
