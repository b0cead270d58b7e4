"""A request as its completion records tell it: its status, when it took effect, what failed.

A request's status is its *last* outcome record (`completed` or `failed`): a request that
failed, was resumed as the runbook says and then completed is complete, and its failure is
listed as an earlier one. Two things no record says come from the request registry: a dry
run ends when its plan is saved and writes nothing more (`dry_run`), and a failed request
that was resumed is moving again before any record says so (`in_progress`). The records page
and `GET /erasure/api/v1/requests` both read a request's status here, so they never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from erasure.audit.records import CompletionRecord, RecordError, RecordKind, RecordStatus
from erasure.errors import describe_invalid
from erasure.model import REQUEST_REF
from erasure.registry.requests import RegisteredRequest, RequestStatus


class OutcomeStatus(StrEnum):
    """A request's status on record: its completed record's status, or one derived."""

    COMPLETE = RecordStatus.COMPLETE.value
    COMPLETE_WITH_EXEMPTIONS = RecordStatus.COMPLETE_WITH_EXEMPTIONS.value
    FAILED = RecordStatus.FAILED.value
    IN_PROGRESS = "in_progress"
    DRY_RUN = "dry_run"  # ended with its plan: nothing erased
    # A restore replay's reference (erasure.replay): no request of its own; it cites those.
    REPLAYED = RecordKind.REPLAYED.value


class FailureOnRecord(BaseModel):
    """A `failed` record: when, and the reason `workflow.fail` wrote in its body."""

    model_config = ConfigDict(frozen=True)

    seq: int
    failed_at: datetime
    reason: str


class RequestOutcome(BaseModel):
    """Where a request stands on record."""

    model_config = ConfigDict(frozen=True)

    status: OutcomeStatus
    effective_erasure_date: date | None = None  # a completed request's, from its record
    failures: list[FailureOnRecord] = []  # every failure on record, oldest first

    @property
    def failure(self) -> FailureOnRecord | None:
        """The failure a failed request stands at (None if no record of it was written)."""
        return self.failures[-1] if self.status is OutcomeStatus.FAILED and self.failures else None

    @property
    def earlier_failures(self) -> list[FailureOnRecord]:
        """The failures the request was resumed from."""
        return self.failures[:-1] if self.status is OutcomeStatus.FAILED else self.failures


def outcome_of(
    records: Sequence[CompletionRecord], registered: RegisteredRequest | None = None
) -> RequestOutcome:
    """The request's outcome from its records (chain order), and what only the registry knows."""
    if records and all(r.kind is RecordKind.REPLAYED for r in records):
        return RequestOutcome(status=OutcomeStatus.REPLAYED)
    failures = [
        FailureOnRecord(seq=r.seq, failed_at=r.created_at, reason=str(r.body.get("reason", "")))
        for r in records
        if r.kind is RecordKind.FAILED
    ]
    last = next(
        (r for r in reversed(records) if r.kind in (RecordKind.COMPLETED, RecordKind.FAILED)),
        None,
    )
    # A completion is final: a failure signed after it (a run forced to failed while complete
    # was finishing) does not undo it.
    completed = next(
        (r for r in records if r.kind is RecordKind.COMPLETED and r.status is not None), None
    )
    if completed is not None and completed.status is not None:
        return RequestOutcome(
            status=OutcomeStatus(completed.status.value),
            effective_erasure_date=_effective_date(completed.body),
            failures=failures,
        )
    if registered is None:
        status = OutcomeStatus.IN_PROGRESS if last is None else OutcomeStatus.FAILED
    elif registered.dry_run_done:
        status = OutcomeStatus.DRY_RUN
    elif registered.status is RequestStatus.FAILED:
        status = OutcomeStatus.FAILED
    else:  # never failed, or failed and resumed: its run is moving again
        status = OutcomeStatus.IN_PROGRESS
    return RequestOutcome(status=status, failures=failures)


def _effective_date(body: Mapping[str, Any]) -> date | None:
    try:
        return date.fromisoformat(str(body["effective_erasure_date"]))
    except (KeyError, ValueError):
        return None  # the ledger states it on every completed record it writes


class RequestOnRecord(BaseModel):
    """One request as the auditor sees it: its records in chain order and their outcome."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    subject_hash: str
    records: list[CompletionRecord]
    outcome: RequestOutcome
    dry_run: bool  # as registered (a dry run in progress is in_progress)

    @property
    def last_record(self) -> CompletionRecord:
        return self.records[-1]


def requests_on_record(
    records: Iterable[CompletionRecord], registry: Mapping[str, RegisteredRequest]
) -> list[RequestOnRecord]:
    """Every request with records, in the order of its first record; `registry` by reference."""
    shown = []
    for ref, mine in by_request(records).items():
        registered = registry.get(ref)
        shown.append(
            RequestOnRecord(
                request_ref=ref,
                subject_hash=mine[0].subject_hash,
                records=mine,
                outcome=outcome_of(mine, registered),
                dry_run=registered is not None and registered.dry_run,
            )
        )
    return shown


def by_request(records: Iterable[CompletionRecord]) -> dict[str, list[CompletionRecord]]:
    """Records grouped by request, each group in chain order."""
    grouped: dict[str, list[CompletionRecord]] = {}
    for record in records:
        grouped.setdefault(record.request_ref, []).append(record)
    return grouped


# ---------------------------------------------------------------------------------------------
# The auditor's filter

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_REF_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\*$")  # REQUEST_REF's first characters


class FilterError(RecordError):
    """A filter over the requests on record is malformed; it names the parameter, never the
    value given (an identifier typed into the wrong box must not be shown back)."""


class RequestFilter(BaseModel):
    """Which requests to show: by status, by the day of their last record, by reference."""

    model_config = ConfigDict(frozen=True)

    status: OutcomeStatus | None = None
    since: date | None = None  # last record on or after this day (UTC)
    until: date | None = None  # last record on or before this day (UTC)
    ref: str | None = None  # a request reference, or a prefix of one ending in *

    @classmethod
    def parse(
        cls,
        *,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        ref: str | None = None,
    ) -> RequestFilter:
        """The filter from query parameters (blank: not filtered); FilterError if malformed."""
        try:
            return cls.model_validate(
                {"status": status, "since": since, "until": until, "ref": ref}
            )
        except ValidationError as exc:
            raise FilterError(describe_invalid(exc, locations=True)) from None

    @field_validator("status", mode="before")
    @classmethod
    def _known_status(cls, value: object) -> object:
        value = _blank_is_none(value)
        if value is not None and value not in set(OutcomeStatus):
            raise ValueError("use one of " + ", ".join(OutcomeStatus))
        return value

    @field_validator("since", "until", mode="before")
    @classmethod
    def _day(cls, value: object) -> object:
        value = _blank_is_none(value)
        if isinstance(value, str):
            day = _day_of(value)
            if day is None:
                raise ValueError("a date as YYYY-MM-DD, e.g. 2026-11-30")
            return day
        return value

    @field_validator("ref", mode="before")
    @classmethod
    def _ref(cls, value: object) -> object:
        value = _blank_is_none(value)
        if isinstance(value, str) and not (REQUEST_REF.match(value) or _REF_PREFIX.match(value)):
            raise ValueError(
                "a request reference (3-64 letters, digits and ._- starting with a letter or "
                "digit), or its first characters followed by *"
            )
        return value

    @model_validator(mode="after")
    def _ordered(self) -> RequestFilter:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since is after until: no day is in that window")
        return self

    def matches(self, request: RequestOnRecord) -> bool:
        """Whether `request` is one the filter asks for."""
        day = request.last_record.created_at.date()
        return (
            (self.status is None or request.outcome.status is self.status)
            and (self.since is None or day >= self.since)
            and (self.until is None or day <= self.until)
            and (self.ref is None or _ref_matches(self.ref, request.request_ref))
        )


def _blank_is_none(value: object) -> object:
    if isinstance(value, str):
        value = value.strip()
    return value or None


def _day_of(text: str) -> date | None:
    if not _DAY.match(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:  # 2026-13-01
        return None


def _ref_matches(wanted: str, ref: str) -> bool:
    return ref.startswith(wanted[:-1]) if wanted.endswith("*") else ref == wanted
