"""Erasure requests: the form as submitted, its validation, and the records the registry keeps.

A request is keyed by `request_ref` and names its subject by a keyed hash only. The raw
identifier and the DPO's free-text notes stay secret (`ErasureRequest`) until they are *parked*
(`ParkedSecret`): sealed under a request-scoped key named `HMAC(pepper_v, "request:" ||
request_ref)` (`request_key_hash`), so neither the identifier nor the request ref appears in a
Vault path. The status machine and the Art. 12(3) month arithmetic live here too;
`erasure.registry` keeps all of it in the erasure store.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)

from erasure.errors import ErasureError
from erasure.locate import Identity
from erasure.model import DatasetRef, SubjectRef
from erasure.pseudonym import Pepper, subject_hash

REQUEST_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$"
_REQUEST_REF = re.compile(REQUEST_REF_PATTERN)
_IDENTIFIER_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_MAX_IDENTIFIER = 512
_MAX_NOTES = 4000
# The identifier type the request-scoped key is hashed under: no catalog type may use it.
REQUEST_KEY_TYPE = "request"
_SECRET_FORMAT = 1


# What the Airflow plugin leaves in dag_run.conf and the audit log in place of the identifier
# and notes once they are parked (see erasure.registry).
SCRUBBED = "[parked in Vault]"


class RequestError(ErasureError):
    """An erasure request is invalid, unknown, or asked to do what its state forbids."""


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


class RequestStatus(StrEnum):
    REGISTERED = "registered"
    PLANNED = "planned"
    ACTING = "acting"
    AWAITING_DPO = "awaiting_dpo"
    VERIFYING = "verifying"
    COMPLETE = "complete"
    COMPLETE_WITH_EXEMPTIONS = "complete_with_exemptions"
    FAILED = "failed"


CLOSED_STATUSES = frozenset({RequestStatus.COMPLETE, RequestStatus.COMPLETE_WITH_EXEMPTIONS})

_S = RequestStatus
# Where each status may go next. Completion only from verifying: nothing is reported complete
# that was not verified. A failed request resumes at any step but completion.
NEXT_STATUSES: dict[RequestStatus, frozenset[RequestStatus]] = {
    _S.REGISTERED: frozenset({_S.PLANNED, _S.FAILED}),
    _S.PLANNED: frozenset({_S.ACTING, _S.AWAITING_DPO, _S.FAILED}),
    _S.ACTING: frozenset({_S.AWAITING_DPO, _S.VERIFYING, _S.FAILED}),
    _S.AWAITING_DPO: frozenset({_S.ACTING, _S.VERIFYING, _S.FAILED}),
    _S.VERIFYING: frozenset(
        {_S.COMPLETE, _S.COMPLETE_WITH_EXEMPTIONS, _S.ACTING, _S.AWAITING_DPO, _S.FAILED}
    ),
    _S.FAILED: frozenset({_S.PLANNED, _S.ACTING, _S.AWAITING_DPO, _S.VERIFYING}),
    _S.COMPLETE: frozenset(),
    _S.COMPLETE_WITH_EXEMPTIONS: frozenset(),
}


class ActionStatus(StrEnum):
    WAITING = "waiting"  # for an earlier action of the same request (lineage or key order)
    PENDING = "pending"  # started
    DONE = "done"
    FAILED = "failed"


# ---------------------------------------------------------------------------------------------
# The request as submitted

# What each field allows, for error messages (never the value that was given).
_ALLOWED: dict[str, str] = {
    "request_ref": "3-64 characters: letters, digits, '.', '_' or '-', starting with a letter "
    "or digit",
    "identifier_type": "an identifier type of the catalog, such as 'email' (letters, digits, "
    "'_', '.', '-')",
    "identifier": f"a non-empty text of at most {_MAX_IDENTIFIER} characters",
    "received_on": "a date (YYYY-MM-DD), not in the future",
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
        if not _REQUEST_REF.match(value):
            raise ValueError(f"must be {_ALLOWED['request_ref']}")
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
        raw = value.get_secret_value()
        if not raw.strip() or len(raw) > _MAX_IDENTIFIER:
            raise ValueError(f"must be {_ALLOWED['identifier']}")
        return value

    @field_validator("notes")
    @classmethod
    def _check_notes(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        if len(raw) > _MAX_NOTES:
            raise ValueError(f"must be {_ALLOWED['notes']}")
        return value if raw.strip() else None

    @field_validator("received_on")
    @classmethod
    def _check_received(cls, value: date) -> date:
        # One day of slack: the DPO's "today" may be tomorrow in UTC.
        if value > datetime.now(UTC).date() + timedelta(days=1):
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


def _describe(exc: ValidationError) -> str:
    """One clause per bad field: its name and what is allowed, never the value given."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        loc = err.get("loc") or ()
        field = str(loc[0]) if loc else ""
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            # The key itself could be pasted data: name it only if it looks like a field name.
            safe = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", field)
            name = f"unknown field {field!r}" if safe else "an unknown field"
            parts.append(f"{name}; allowed: {', '.join(_ALLOWED)}")
        elif err.get("type") == "missing":
            parts.append(f"{field}: required ({_ALLOWED.get(field, 'see the request form')})")
        elif err.get("type") == "value_error":
            parts.append(f"{field}: {message}")
        else:
            parts.append(f"{field}: {message}; expected {_ALLOWED.get(field, 'a valid value')}")
    return "invalid erasure request: " + "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# The parked secret


class ParkedSecret(BaseModel):
    """What only the request key opens: the identifier, the notes, and what locate expanded
    them to (identities, reference keys), so a retry can rebuild its predicates after the rows
    that led to them are gone. Never log it: its repr is redacted."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    identifier: SecretStr
    notes: SecretStr | None = None
    identities: list[Identity] = Field(default_factory=list)  # (type, normalised value)
    reference_keys: dict[str, list[str]] = Field(default_factory=dict)  # dataset -> key values

    @field_validator("identities", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [
                {"type": v[0], "value": v[1]} if isinstance(v, list | tuple) and len(v) == 2 else v
                for v in value
            ]
        return value

    def __repr__(self) -> str:
        return (
            f"ParkedSecret(identifier=<redacted>, notes={'<redacted>' if self.notes else None}, "
            f"identities={len(self.identities)}, reference_keys={sorted(self.reference_keys)})"
        )

    __str__ = __repr__

    def to_bytes(self) -> bytes:
        """The format-versioned JSON document the registry seals under the request key."""
        document = {
            "format": _SECRET_FORMAT,
            "identifier": self.identifier.get_secret_value(),
            "notes": self.notes.get_secret_value() if self.notes is not None else None,
            "identities": sorted([i.type, i.value] for i in self.identities),
            "reference_keys": {k: sorted(v) for k, v in sorted(self.reference_keys.items())},
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ParkedSecret:
        """Read a decrypted parked secret; RequestError if it is not one this code can read."""
        try:
            document = json.loads(data)
            if document.pop("format", None) != _SECRET_FORMAT:
                raise ValueError("unknown format")
            return cls.model_validate(document)
        except (ValueError, TypeError, ValidationError):
            raise RequestError(
                "the parked secret decrypted but is not a parked request this code can read"
            ) from None


# ---------------------------------------------------------------------------------------------
# Records


class Registration(BaseModel):
    """What `register` did: created the request, or found it already there (and whose it is)."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    subject_hash: str
    created: bool  # False: the ref was registered before; owner_run_id handles it
    owner_run_id: str
    status: RequestStatus


class RegisteredRequest(BaseModel):
    """A request as the registry holds it: keyed hash, dates, status; never the identifier."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    subject_hash: str
    identifier_type: str
    pepper_version: int
    legal_ground: LegalGround
    received_on: date
    due_on: date
    extended_until: date | None
    extension_reason: str | None
    status: RequestStatus
    run_id: str
    dry_run: bool
    created_at: datetime
    updated_at: datetime
    scrubbed_at: datetime | None
    secrets_destroyed_at: datetime | None

    @property
    def effective_due_on(self) -> date:
        """The deadline in force: the extension if granted, else the original due date."""
        return self.extended_until or self.due_on

    @property
    def closed(self) -> bool:
        return self.status in CLOSED_STATUSES


class ActionRecord(BaseModel):
    """One (dataset, action) of a request in the action log."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    dataset: str  # namespace/name
    action: str
    status: ActionStatus
    evidence: dict[str, Any]
    attempts: int
    updated_at: datetime


# ---------------------------------------------------------------------------------------------
# Names and dates


def request_key_hash(pepper: Pepper, request_ref: str) -> str:
    """The request-scoped key's name: HMAC of `request:<ref>`, so no ref text reaches Vault."""
    return subject_hash(pepper, REQUEST_KEY_TYPE, request_ref)


def add_months(day: date, months: int) -> date:
    """`day` plus calendar months, clamped to the month's end (31 Jan + 1 = 28/29 Feb)."""
    index = day.month - 1 + months
    year, month = day.year + index // 12, index % 12 + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def dataset_label(dataset: DatasetRef | str) -> str:
    """How the action log names a dataset: `namespace/name`."""
    return dataset.qualified if isinstance(dataset, DatasetRef) else dataset
