"""An erasure request as the DPO submits it: the form, its validation, the legal grounds.

The identifier and the free-text notes stay secret (`SecretStr`) until the registry parks
them (`erasure.registry.secrets`); errors name the field and what it allows, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SecretStr,
    ValidationError,
    field_validator,
)

from erasure.errors import RequestError, invalid_fields
from erasure.model import REPLAY_REF_PREFIX, REQUEST_REF, SubjectRef

_IDENTIFIER_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_MAX_IDENTIFIER = 512
_MAX_NOTES = 4000
GDPR_APPLIES_FROM = date(2018, 5, 25)  # Art. 99(2)


# ---------------------------------------------------------------------------------------------
# Vocabulary


class LegalGround(StrEnum):
    """Art. 17(1) grounds for erasure."""

    ART17_1_A = "art17_1_a"
    ART17_1_B = "art17_1_b"
    ART17_1_C = "art17_1_c"
    ART17_1_D = "art17_1_d"
    ART17_1_E = "art17_1_e"
    ART17_1_F = "art17_1_f"


LEGAL_GROUNDS: dict[LegalGround, str] = {
    LegalGround.ART17_1_A: "Art. 17(1)(a): no longer necessary for the purposes collected",
    LegalGround.ART17_1_B: "Art. 17(1)(b): consent withdrawn, no other legal ground",
    LegalGround.ART17_1_C: "Art. 17(1)(c): objection under Art. 21",
    LegalGround.ART17_1_D: "Art. 17(1)(d): unlawfully processed",
    LegalGround.ART17_1_E: "Art. 17(1)(e): erasure required by a legal obligation",
    LegalGround.ART17_1_F: "Art. 17(1)(f): a child's data collected for information society "
    "services (Art. 8(1))",
}


# ---------------------------------------------------------------------------------------------
# The request as submitted

# What each field allows, for error messages (never the value that was given).
_ALLOWED: dict[str, str] = {
    "request_ref": "3-64 characters: letters, digits, '.', '_' or '-', starting with a letter "
    "or digit",
    "identifier_type": "an identifier type of the catalog, such as 'email' (letters, digits, "
    "'_', '.', '-')",
    "identifier": f"a non-empty text of at most {_MAX_IDENTIFIER} characters",
    "received_on": "a date (YYYY-MM-DD) from 2018-05-25 (when the GDPR began to apply) up to today",
    "legal_ground": "one of " + ", ".join(g.value for g in LegalGround),
    "notes": f"a text of at most {_MAX_NOTES} characters, or nothing",
    "dry_run": "true or false",
}


class ErasureRequest(BaseModel):
    """An Art. 17 request as the DPO submits it; the identifier and notes stay secret."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    request_ref: str
    identifier_type: str
    identifier: SecretStr
    received_on: date
    legal_ground: LegalGround
    notes: SecretStr | None = None  # free text may name people: parked, never stored in clear
    dry_run: bool = False

    @field_validator("request_ref")
    @classmethod
    def _check_ref(cls, value: str) -> str:
        if not REQUEST_REF.match(value):
            raise ValueError(f"must be {_ALLOWED['request_ref']}")
        if value.upper().startswith(REPLAY_REF_PREFIX):
            raise ValueError(
                f"must not begin with {REPLAY_REF_PREFIX!r}: that prefix is reserved for the "
                "records of restore replays (erasure restore replay); give another reference"
            )
        return value

    @field_validator("identifier_type")
    @classmethod
    def _check_type(cls, value: str) -> str:
        if not _IDENTIFIER_TYPE.match(value):
            raise ValueError(f"must be {_ALLOWED['identifier_type']}")
        return value

    @field_validator("identifier")
    @classmethod
    def _check_identifier(cls, value: SecretStr) -> SecretStr:
        identifier_problem(value.get_secret_value())
        return value

    @field_validator("notes")
    @classmethod
    def _check_notes(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        if len(raw) > _MAX_NOTES:
            raise ValueError(f"must be {_ALLOWED['notes']}")
        _refuse_lone_surrogates(raw)
        return value if raw.strip() else None

    @field_validator("received_on")
    @classmethod
    def _check_received(cls, value: date) -> date:
        # One day of slack: the DPO's "today" may be tomorrow in UTC. No Art. 17 request
        # predates the GDPR: an older date is a typo that would make the request overdue.
        if not GDPR_APPLIES_FROM <= value <= datetime.now(UTC).date() + timedelta(days=1):
            raise ValueError(f"must be {_ALLOWED['received_on']}")
        return value

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ErasureRequest:
        """Validate a submitted request (e.g. dag_run.conf); RequestError names each bad field."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise RequestError(_describe(exc)) from None

    @property
    def subject(self) -> SubjectRef:
        return SubjectRef(type=self.identifier_type, value=self.identifier)


def identifier_problem(raw: str) -> None:
    """ValueError saying what a typed identifier must be (never what it is): not blank, at
    most 512 characters, valid Unicode text. Its fit to its type is `identifier_types`'."""
    if not raw.strip() or len(raw) > _MAX_IDENTIFIER:
        raise ValueError(f"must be {_ALLOWED['identifier']}")
    _refuse_lone_surrogates(raw)


def _refuse_lone_surrogates(text: str) -> None:
    # A JSON escape such as \ud800 with no partner decodes to text no encoding can write: it
    # could be neither hashed nor sealed. (Format and bidi characters are valid text: the
    # normaliser drops them, as it does in stored values.)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "must be valid Unicode text: it holds a lone surrogate (an escape such as "
            "\\ud800 without its pair); type or paste it again"
        ) from None


def _describe(exc: ValidationError) -> str:
    """One clause per bad field: its name and what is allowed, never the value given."""
    parts = []
    for problem in invalid_fields(exc):
        field = str(problem.loc[0]) if problem.loc else ""
        if problem.kind == "extra_forbidden":
            # The key itself could be pasted data: name it only if it looks like a field name.
            safe = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", field)
            name = f"unknown field {field!r}" if safe else "an unknown field"
            parts.append(f"{name}; allowed: {', '.join(_ALLOWED)}")
        elif problem.kind == "missing":
            parts.append(f"{field}: required ({_ALLOWED.get(field, 'see the request form')})")
        elif problem.kind == "value_error":
            parts.append(f"{field}: {problem.message}")
        else:
            expected = _ALLOWED.get(field, "a valid value")
            parts.append(f"{field}: {problem.message}; expected {expected}")
    return "invalid erasure request: " + "; ".join(parts)
