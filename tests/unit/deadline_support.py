"""A registered request with the dates a deadline test needs (tests of deadlines and the desk)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from erasure.registry.requests import RegisteredRequest, RequestStatus
from erasure.submission import LegalGround

TODAY = date(2027, 3, 10)


def request(due_on: date, **fields: Any) -> RegisteredRequest:
    now = datetime(2027, 3, 1, tzinfo=UTC)
    values: dict[str, Any] = {
        "request_ref": "DSR-1",
        "subject_hash": "ab" * 32,
        "identifier_type": "email",
        "pepper_version": 1,
        "legal_ground": LegalGround("art17_1_b"),
        "received_on": date(2027, 2, 1),
        "due_on": due_on,
        "extended_until": None,
        "extension_reason": None,
        "status": RequestStatus.ACTING,
        "run_id": "erasure-DSR-1",
        "dry_run": False,
        "created_at": now,
        "updated_at": now,
        "submission_destroyed_at": None,
        "secrets_destroyed_at": None,
    }
    return RegisteredRequest(**{**values, **fields})
