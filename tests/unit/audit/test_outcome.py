"""A request's status on record (`erasure.audit.outcome`): its last outcome record, what the
registry adds (a dry run's end, a failure resumed), and the auditor's filter over requests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from erasure.audit.outcome import (
    FailureOnRecord,
    FilterError,
    OutcomeStatus,
    RequestFilter,
    RequestOnRecord,
    RequestOutcome,
    outcome_of,
    requests_on_record,
)
from erasure.audit.records import CompletionRecord, RecordKind, RecordLedger, RecordStatus
from erasure.registry.requests import RegisteredRequest, RequestBook, RequestStatus
from erasure.store import Store, open_store
from tests.unit.audit.support import (
    DELETED,
    DRY,
    OPEN,
    RESUMED,
    STOPPED,
    STUCK,
    SUBJECT,
    TAPE_RETENTION,
    LocalSigner,
    received_body,
    record_lifecycles,
)

REF = "REQ-2026-0042"
DAY_ONE = datetime(2026, 11, 2, 9, 14, tzinfo=UTC)


# ---------------------------------------------------------------------------------------------
# The derivation, over records as the ledger returns them


def record(
    seq: int, kind: RecordKind, body: dict[str, Any] | None = None, **fields: Any
) -> CompletionRecord:
    """A record of REF written `seq` days after DAY_ONE (hash and signature not checked here)."""
    return CompletionRecord(
        seq=seq,
        request_ref=REF,
        subject_hash=SUBJECT,
        kind=kind,
        created_at=DAY_ONE + timedelta(days=seq),
        body=body or {},
        prev_hash="0" * 64,
        record_hash=f"{seq:064x}",
        signature="vault:v1:AAAA",
        signing_key_version=1,
        **fields,
    )


def received() -> CompletionRecord:
    return record(1, RecordKind.RECEIVED, received_body(REF))


def failed(seq: int, reason: str) -> CompletionRecord:
    """As `workflow.fail` writes it."""
    return record(seq, RecordKind.FAILED, {"reason": reason}, status=RecordStatus.FAILED)


def completed(seq: int, status: RecordStatus, effective: date) -> CompletionRecord:
    """As `workflow.complete` writes it, the ledger having stated the effective date."""
    body = {"effective_erasure_date": effective.isoformat()}
    return record(seq, RecordKind.COMPLETED, body, status=status)


def registered(status: RequestStatus, *, dry_run: bool = False) -> RegisteredRequest:
    return RegisteredRequest(
        request_ref=REF,
        subject_hash=SUBJECT,
        identifier_type="email",
        pepper_version=1,
        legal_ground="art17_1_b",
        received_on=DAY_ONE.date(),
        due_on=DAY_ONE.date() + timedelta(days=30),
        extended_until=None,
        extension_reason=None,
        status=status,
        run_id=f"erasure-{REF}",
        dry_run=dry_run,
        created_at=DAY_ONE,
        updated_at=DAY_ONE,
        submission_destroyed_at=None,
        secrets_destroyed_at=None,
    )


def test_a_request_failed_then_completed_is_complete_with_its_failure_listed_earlier() -> None:
    records = [
        received(),
        failed(2, STOPPED),
        completed(3, RecordStatus.COMPLETE, date(2026, 12, 29)),
    ]
    for known in (None, registered(RequestStatus.COMPLETE)):
        outcome = outcome_of(records, known)
        assert outcome.status is OutcomeStatus.COMPLETE
        assert outcome.effective_erasure_date == date(2026, 12, 29)
        assert outcome.failure is None
        assert outcome.earlier_failures == [
            FailureOnRecord(seq=2, failed_at=DAY_ONE + timedelta(days=2), reason=STOPPED)
        ]


def test_two_failures_then_completion_lists_both_oldest_first() -> None:
    records = [
        received(),
        failed(2, STOPPED),
        failed(3, DELETED),
        completed(4, RecordStatus.COMPLETE, date(2026, 11, 6)),
    ]
    outcome = outcome_of(records, registered(RequestStatus.COMPLETE))
    assert outcome.status is OutcomeStatus.COMPLETE
    assert [f.reason for f in outcome.earlier_failures] == [STOPPED, DELETED]


def test_complete_with_exemptions_is_the_completed_records_status_and_date() -> None:
    records = [
        received(),
        record(2, RecordKind.ESCALATED),
        record(3, RecordKind.DECIDED),
        completed(4, RecordStatus.COMPLETE_WITH_EXEMPTIONS, date(2027, 2, 27)),
    ]
    outcome = outcome_of(records, registered(RequestStatus.COMPLETE_WITH_EXEMPTIONS))
    assert outcome.status is OutcomeStatus.COMPLETE_WITH_EXEMPTIONS
    assert outcome.effective_erasure_date == date(2027, 2, 27)
    assert outcome.failures == []


def test_a_failed_request_stands_at_its_last_failure_and_has_no_erasure_date() -> None:
    records = [received(), failed(2, STOPPED), failed(3, DELETED)]
    for known in (None, registered(RequestStatus.FAILED)):
        outcome = outcome_of(records, known)
        assert outcome.status is OutcomeStatus.FAILED
        assert outcome.effective_erasure_date is None
        assert outcome.failure is not None and outcome.failure.reason == DELETED
        assert [f.reason for f in outcome.earlier_failures] == [STOPPED]


def test_a_failed_request_resumed_is_in_progress_again_before_any_record_says_so() -> None:
    records = [received(), failed(2, STOPPED)]
    outcome = outcome_of(records, registered(RequestStatus.ACTING))
    assert outcome.status is OutcomeStatus.IN_PROGRESS
    assert outcome.failure is None
    assert [f.reason for f in outcome.earlier_failures] == [STOPPED]


def test_a_request_without_an_outcome_record_is_in_progress() -> None:
    records = [received(), record(2, RecordKind.ESCALATED)]
    for known in (None, registered(RequestStatus.AWAITING_DPO)):
        outcome = outcome_of(records, known)
        assert outcome.status is OutcomeStatus.IN_PROGRESS
        assert outcome.effective_erasure_date is None and outcome.failures == []


def test_a_dry_run_ends_with_its_plan_and_says_so() -> None:
    # A dry run writes `received` and nothing after: the registry holds its end.
    records = [received()]
    assert outcome_of(records, registered(RequestStatus.PLANNED, dry_run=True)).status is (
        OutcomeStatus.DRY_RUN
    )
    assert outcome_of(records, registered(RequestStatus.REGISTERED, dry_run=True)).status is (
        OutcomeStatus.IN_PROGRESS
    )
    assert outcome_of(records, registered(RequestStatus.PLANNED)).status is (
        OutcomeStatus.IN_PROGRESS  # a real erasure goes on from its plan
    )
    resumed = outcome_of(
        [received(), failed(2, STOPPED)], registered(RequestStatus.PLANNED, dry_run=True)
    )
    assert resumed.status is OutcomeStatus.DRY_RUN and len(resumed.earlier_failures) == 1
    failed_dry = outcome_of(
        [received(), failed(2, STOPPED)], registered(RequestStatus.FAILED, dry_run=True)
    )
    assert failed_dry.status is OutcomeStatus.FAILED


# ---------------------------------------------------------------------------------------------
# The auditor's filter


def on_record(ref: str, status: OutcomeStatus, last_day: date) -> RequestOnRecord:
    last = record(1, RecordKind.RECEIVED).model_copy(
        update={"request_ref": ref, "created_at": datetime.combine(last_day, DAY_ONE.timetz())}
    )
    return RequestOnRecord(
        request_ref=ref,
        subject_hash=SUBJECT,
        records=[last],
        outcome=RequestOutcome(status=status),
        dry_run=False,
    )


def test_the_filter_picks_requests_by_status_last_record_day_and_reference() -> None:
    shown = [
        on_record("REQ-2026-0042", OutcomeStatus.COMPLETE, date(2026, 11, 29)),
        on_record("REQ-2026-0420", OutcomeStatus.FAILED, date(2026, 11, 30)),
        on_record("REQ-2026-0043", OutcomeStatus.DRY_RUN, date(2026, 12, 1)),
        on_record("DSR-7", OutcomeStatus.COMPLETE, date(2026, 10, 1)),
    ]

    def refs(**params: str) -> list[str]:
        wanted = RequestFilter.parse(**params)
        return [r.request_ref for r in shown if wanted.matches(r)]

    assert refs() == ["REQ-2026-0042", "REQ-2026-0420", "REQ-2026-0043", "DSR-7"]
    assert refs(status="complete") == ["REQ-2026-0042", "DSR-7"]
    assert refs(status="dry_run") == ["REQ-2026-0043"]
    assert refs(since="2026-11-30") == ["REQ-2026-0420", "REQ-2026-0043"]
    assert refs(since="2026-11-29", until="2026-11-30") == ["REQ-2026-0042", "REQ-2026-0420"]
    assert refs(ref="REQ-2026-0042") == ["REQ-2026-0042"]  # exact: not REQ-2026-0420
    assert refs(ref="REQ-2026-042*") == ["REQ-2026-0420"]
    assert refs(ref="REQ-*", status="complete") == ["REQ-2026-0042"]
    assert refs(status=" ", since="", until="", ref="") == refs()  # an empty form field


CANARY = "jane.doe@example.org"


@pytest.mark.parametrize(
    ("params", "named", "accepted"),
    [
        ({"status": CANARY}, "status", "complete, complete_with_exemptions, failed, in_progress"),
        ({"status": "completed"}, "status", "dry_run"),
        ({"since": CANARY}, "since", "YYYY-MM-DD"),
        ({"until": "2026-13-01"}, "until", "YYYY-MM-DD"),
        ({"ref": CANARY}, "ref", "followed by *"),
        ({"ref": "+44 20 7946 0000"}, "ref", "letters, digits and ._-"),
    ],
)
def test_a_bad_filter_names_the_parameter_and_what_it_accepts_never_the_value(
    params: dict[str, str], named: str, accepted: str
) -> None:
    with pytest.raises(FilterError) as refused:
        RequestFilter.parse(**params)
    message = str(refused.value)
    assert message.startswith(f"{named}: ") and accepted in message
    assert params[named] not in message


def test_a_window_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(FilterError, match="since is after until"):
        RequestFilter.parse(since="2026-12-01", until="2026-11-01")


# ---------------------------------------------------------------------------------------------
# The requests on record, read from a store (SQLite and Postgres)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = (
        f"sqlite:///{tmp_path}/erasure.db"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_schema_url"))
    )
    with open_store(url) as opened:
        yield opened


def test_each_request_on_record_has_the_status_its_records_and_registry_give(
    store: Store,
) -> None:
    ledger = RecordLedger(store, LocalSigner())
    record_lifecycles(store, ledger)
    registry = {r.request_ref: r for r in RequestBook(store).list()}

    shown = {r.request_ref: r for r in requests_on_record(ledger.list(), registry)}

    assert list(shown) == [RESUMED, STUCK, DRY, OPEN]  # in the order of their first record
    resumed = shown[RESUMED]
    assert resumed.outcome.status is OutcomeStatus.COMPLETE_WITH_EXEMPTIONS
    assert resumed.outcome.effective_erasure_date == TAPE_RETENTION  # the tape, ruled on
    assert [f.reason for f in resumed.outcome.earlier_failures] == [STOPPED]
    assert [r.kind for r in resumed.records] == [
        RecordKind.RECEIVED, RecordKind.FAILED, RecordKind.COMPLETED,
    ]  # fmt: skip
    stuck = shown[STUCK].outcome
    assert stuck.status is OutcomeStatus.FAILED
    assert stuck.failure is not None and stuck.failure.reason == DELETED
    assert shown[DRY].outcome.status is OutcomeStatus.DRY_RUN and shown[DRY].dry_run
    assert shown[OPEN].outcome.status is OutcomeStatus.IN_PROGRESS
    failed_only = RequestFilter.parse(status="failed")
    assert [ref for ref, r in shown.items() if failed_only.matches(r)] == [STUCK]
