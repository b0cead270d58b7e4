"""Erasure requests as submitted (`erasure.submission`): each bad field named with what is
allowed, never echoed. The parked secret and the month arithmetic are tested under registry/."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from erasure.errors import RequestError
from erasure.submission import ErasureRequest, LegalGround

CANARY = "  Zed.Canary+Registry@Example.COM "


def request(ref: str = "REQ-1", identifier: str = CANARY, **fields: Any) -> ErasureRequest:
    values: dict[str, Any] = {
        "request_ref": ref,
        "identifier_type": "email",
        "identifier": identifier,
        "received_on": date(2026, 1, 10),
        "legal_ground": "art17_1_b",
        **fields,
    }
    return ErasureRequest.parse(values)


# ---------------------------------------------------------------------------------------------
# The request as submitted


def test_request_hides_identifier_and_notes() -> None:
    req = request(notes="called from +44 20 7946 0958 about her account")
    assert CANARY not in repr(req) and CANARY not in str(req)
    assert "7946" not in repr(req)
    assert req.subject.type == "email"
    assert req.subject.value.get_secret_value() == CANARY


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("request_ref", "ab", "3-64 characters"),
        ("request_ref", CANARY, "3-64 characters"),  # the identifier pasted into the ref
        ("request_ref", "REPLAY-2026-0042", "reserved for the records of restore replays"),
        ("request_ref", "replay-20261205", "must not begin with 'REPLAY-'"),
        ("identifier_type", CANARY, "identifier type of the catalog"),
        ("identifier", "   ", "non-empty text"),
        ("received_on", "yesterday-ish", "a date (YYYY-MM-DD)"),
        ("received_on", (date.today() + timedelta(days=5)).isoformat(), "up to today"),
        ("received_on", "1900-01-01", "from 2018-05-25 (when the GDPR began to apply)"),
        ("received_on", "2018-05-24", "from 2018-05-25"),
        ("identifier", "zq.canary\ud800@example.org", "valid Unicode text: it holds a lone"),
        ("notes", "called zq.canary \udfff today", "valid Unicode text: it holds a lone"),
        ("legal_ground", "art17_2", "one of art17_1_a"),
        ("dry_run", "perhaps", "true or false"),
    ],
)
def test_invalid_fields_are_named_with_what_is_allowed_never_echoed(
    field: str, value: str, allowed: str
) -> None:
    with pytest.raises(RequestError) as err:
        request(**{field: value})
    message = str(err.value)
    assert f"{field}:" in message and allowed in message
    assert "anary" not in message
    if len(value.strip()) >= 5:
        assert value not in message


def test_missing_and_unknown_fields_are_named() -> None:
    with pytest.raises(RequestError, match="identifier: required") as err:
        ErasureRequest.parse({"request_ref": "REQ-1", "identifier_type": "email"})
    assert "received_on: required" in str(err.value)
    with pytest.raises(RequestError, match="unknown field 'identifer'"):
        request(identifer="x")
    with pytest.raises(RequestError, match="an unknown field;") as err:
        request(**{CANARY: "x"})
    assert "anary" not in str(err.value)


def test_validation_error_from_the_model_itself_does_not_echo_input() -> None:
    with pytest.raises(ValueError) as err:
        ErasureRequest(
            request_ref=CANARY,
            identifier_type="email",
            identifier=SecretStr(CANARY),
            received_on=date(2026, 1, 1),
            legal_ground=LegalGround.ART17_1_A,
        )
    assert "anary" not in str(err.value)
