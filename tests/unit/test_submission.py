"""Erasure requests as submitted and parked: each bad field named with what is allowed, never
echoed; the parked secret's identities; the Art. 12(3) month arithmetic."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from erasure.errors import RequestError
from erasure.model import Identity
from erasure.registry.requests import add_months
from erasure.registry.secrets import ParkedSecret
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
        ("identifier_type", CANARY, "identifier type of the catalog"),
        ("identifier", "   ", "non-empty text"),
        ("received_on", "yesterday-ish", "a date (YYYY-MM-DD)"),
        ("received_on", (date.today() + timedelta(days=5)).isoformat(), "not in the future"),
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


# ---------------------------------------------------------------------------------------------
# The parked secret


def test_parked_identities_accept_plain_pairs() -> None:
    parked = ParkedSecret(identifier=SecretStr("x"), identities=[("email", "a@b.c")])
    assert parked.identities == [Identity("email", "a@b.c")]


# ---------------------------------------------------------------------------------------------
# Deadlines


@pytest.mark.parametrize(
    ("day", "months", "expected"),
    [
        (date(2026, 1, 31), 1, date(2026, 2, 28)),
        (date(2028, 1, 31), 1, date(2028, 2, 29)),
        (date(2026, 11, 30), 2, date(2027, 1, 30)),
        (date(2026, 12, 15), 1, date(2027, 1, 15)),
    ],
)
def test_add_months_clamps_to_the_end_of_the_month(day: date, months: int, expected: date) -> None:
    assert add_months(day, months) == expected
