"""The canonical form of a completion record: what `record_hash` is the SHA-256 of.

`record_hash` is the lowercase hex SHA-256 of the UTF-8 bytes of

    json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

where `doc` is the JSON object of every record field except `record_hash` and `signature`,
plus a format tag:

    {"body": {...}, "created_at": "2026-11-29T12:00:00.000000Z", "format": RECORD_FORMAT,
     "kind": "completed", "prev_hash": "<64 hex>", "request_ref": "...", "seq": 7,
     "signing_key_version": 1, "status": "complete" | null, "subject_hash": "<64 hex>"}

Keys are sorted by code point at every level, no whitespace, non-ASCII characters are written
as themselves, integers in decimal, other numbers as Python's shortest round-trip repr, and
`created_at` is UTC with exactly six fractional digits and a `Z`. The body is normalised to
plain JSON (dates as ISO strings) before hashing and stored in that form. The first record's
`prev_hash` is GENESIS_HASH (64 zeros). The signature is Vault transit's Ed25519 signature of
the ASCII bytes of `record_hash`, written `vault:v<signing_key_version>:<base64>`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from erasure.store.schema import GENESIS_HASH

__all__ = [
    "GENESIS_HASH",
    "RECORD_FORMAT",
    "canonical_json",
    "canonical_time",
    "hash_document",
    "sha256_hex",
]

RECORD_FORMAT = "erasure.completion-record/1"


def canonical_json(value: Any) -> bytes:
    """The canonical JSON bytes of `value` (see the module docstring)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256."""
    return hashlib.sha256(data).hexdigest()


def canonical_time(value: datetime) -> str:
    """UTC, six fractional digits, `Z`: one spelling per instant."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def hash_document(
    *,
    seq: int,
    request_ref: str,
    subject_hash: str,
    kind: str,
    status: str | None,
    created_at: datetime,
    body: Mapping[str, Any],
    prev_hash: str,
    signing_key_version: int,
) -> dict[str, Any]:
    """Every hashed field of a record, in plain JSON types."""
    return {
        "format": RECORD_FORMAT,
        "seq": seq,
        "request_ref": request_ref,
        "subject_hash": subject_hash,
        "kind": kind,
        "status": status,
        "created_at": canonical_time(created_at),
        "body": dict(body),
        "prev_hash": prev_hash,
        "signing_key_version": signing_key_version,
    }
