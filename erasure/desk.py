"""The DPO's desk: every request, its Art. 12(3) deadline, the prompts awaiting her, what failed.

Built from the registry and from what the orchestrator reports of each request's run (the
adapter reads Airflow and passes `RunFacts` in; this module does not know Airflow). A request
whose run has a prompt waiting shows as awaiting the DPO, whatever step the registry last
recorded. A
submission whose run has not registered it yet, or whose run refused it at register, is on
the desk too: it has a reference and a run, and no registry row. Entries are keyed by request
reference and subject hash; nothing here can hold an identifier.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime
from enum import StrEnum

from pydantic import BaseModel

from erasure.deadlines import DUE_SOON_DAYS, Deadline, deadline_of
from erasure.registry.requests import RegisteredRequest, RequestStatus


class DeskStatus(StrEnum):
    """A registered request's status, or where an unregistered submission stands."""

    SUBMITTED = "submitted"  # sealed; its run has not registered it yet
    REFUSED = "refused"  # its run refused the submission at register: nothing registered
    REGISTERED = RequestStatus.REGISTERED.value
    PLANNED = RequestStatus.PLANNED.value
    ACTING = RequestStatus.ACTING.value
    AWAITING_DPO = RequestStatus.AWAITING_DPO.value
    VERIFYING = RequestStatus.VERIFYING.value
    COMPLETE = RequestStatus.COMPLETE.value
    COMPLETE_WITH_EXEMPTIONS = RequestStatus.COMPLETE_WITH_EXEMPTIONS.value
    FAILED = RequestStatus.FAILED.value


class PendingPrompt(BaseModel):
    """A DPO prompt of the run that waits for her answer."""

    task_id: str
    map_index: int
    subject: str  # "Erasure: decide on crm.addresses": a dataset, never a person
    waiting_since: datetime | None = None
    assigned_to: list[str] = []


class FailedTask(BaseModel):
    """A task of the run that failed for good (retries spent): clearing it resumes the request."""

    task_id: str
    map_index: int = -1
    label: str | None = None  # the mapped task's name, e.g. "rebuild marts.orders_daily"
    try_number: int = 0
    ended_at: datetime | None = None


class RunFacts(BaseModel):
    """What the orchestrator knows of one request's run."""

    run_id: str
    request_ref: str
    state: str  # queued, running, success, failed
    queued_at: datetime | None = None
    prompts: list[PendingPrompt] = []
    failed: list[FailedTask] = []


class DeskEntry(BaseModel):
    """One request on the desk."""

    request_ref: str
    status: DeskStatus
    subject_hash: str | None  # None: not registered yet (or refused)
    identifier_type: str | None
    received_on: date | None
    due_on: date | None
    extended_until: date | None
    extension_reason: str | None
    effective_due_on: date | None
    days_left: int | None  # negative: overdue by that many days
    deadline: Deadline
    dry_run: bool
    run_id: str | None
    run_state: str | None
    prompts: Sequence[PendingPrompt]
    failed: Sequence[FailedTask]


class DeskCounts(BaseModel):
    total: int
    open: int  # registered, not closed, not a dry run
    awaiting_dpo: int  # requests with at least one prompt waiting
    prompts: int
    overdue: int
    due_soon: int
    failed: int  # requests with a task failed for good, or refused at register
    dry_runs: int
    closed: int


class Desk(BaseModel):
    today: date
    due_soon_days: int
    status: DeskStatus | None  # the filter, None: every request
    counts: DeskCounts  # over every request, whatever the filter
    entries: list[DeskEntry]


def build_desk(
    requests: Iterable[RegisteredRequest],
    runs: Iterable[RunFacts],
    today: date,
    *,
    status: DeskStatus | None = None,
    due_soon_days: int = DUE_SOON_DAYS,
) -> Desk:
    """The desk: registered requests with their run's facts, then unregistered submissions."""
    by_run: dict[str, RunFacts] = {}
    latest_of_ref: dict[str, RunFacts] = {}
    for run in runs:
        by_run[run.run_id] = run
        seen = latest_of_ref.get(run.request_ref)
        if seen is None or _queued(run) >= _queued(seen):
            latest_of_ref[run.request_ref] = run
    entries = []
    registered = set()
    for request in requests:
        registered.add(request.request_ref)
        entries.append(_registered(request, by_run.get(request.run_id), today, due_soon_days))
    for ref, run in latest_of_ref.items():
        if ref not in registered:
            entries.append(_unregistered(run))
    entries.sort(key=_urgency)
    return Desk(
        today=today,
        due_soon_days=due_soon_days,
        status=status,
        counts=_counts(entries),
        entries=[e for e in entries if status is None or e.status is status],
    )


def _queued(run: RunFacts) -> float:
    return run.queued_at.timestamp() if run.queued_at is not None else 0.0


def _registered(
    request: RegisteredRequest, run: RunFacts | None, today: date, due_soon_days: int
) -> DeskEntry:
    closed = request.closed
    deadline = Deadline.NONE if request.dry_run else deadline_of(request, today, due_soon_days)
    status = DeskStatus(request.status.value)
    if run is not None and run.prompts and not closed and status is not DeskStatus.FAILED:
        status = DeskStatus.AWAITING_DPO  # the run knows first: a prompt is waiting for her
    return DeskEntry(
        request_ref=request.request_ref,
        status=status,
        subject_hash=request.subject_hash,
        identifier_type=request.identifier_type,
        received_on=request.received_on,
        due_on=request.due_on,
        extended_until=request.extended_until,
        extension_reason=request.extension_reason,
        effective_due_on=request.effective_due_on,
        days_left=None if closed or request.dry_run else (request.effective_due_on - today).days,
        deadline=deadline,
        dry_run=request.dry_run,
        run_id=request.run_id,
        run_state=run.state if run is not None else None,
        prompts=run.prompts if run is not None else [],
        failed=run.failed if run is not None else [],
    )


def _unregistered(run: RunFacts) -> DeskEntry:
    refused = run.state == "failed" or bool(run.failed)
    return DeskEntry(
        request_ref=run.request_ref,
        status=DeskStatus.REFUSED if refused else DeskStatus.SUBMITTED,
        subject_hash=None,
        identifier_type=None,
        received_on=None,
        due_on=None,
        extended_until=None,
        extension_reason=None,
        effective_due_on=None,
        days_left=None,
        deadline=Deadline.NONE,
        dry_run=False,
        run_id=run.run_id,
        run_state=run.state,
        prompts=[],
        failed=run.failed,
    )


_GROUP = {
    Deadline.OVERDUE: 0,
    Deadline.DUE_SOON: 1,
    Deadline.ON_TIME: 2,
    Deadline.NONE: 3,
    Deadline.CLOSED: 4,
}


def _urgency(entry: DeskEntry) -> tuple[int, int, date, str]:
    """Overdue first, then due soon, on time, unregistered and dry runs, closed; by due date."""
    waiting = 0 if entry.prompts or entry.failed else 1
    return (_GROUP[entry.deadline], waiting, entry.effective_due_on or date.max, entry.request_ref)


def _counts(entries: list[DeskEntry]) -> DeskCounts:
    return DeskCounts(
        total=len(entries),
        open=sum(
            1
            for e in entries
            if e.subject_hash and not e.dry_run and e.deadline is not Deadline.CLOSED
        ),
        awaiting_dpo=sum(1 for e in entries if e.prompts),
        prompts=sum(len(e.prompts) for e in entries),
        overdue=sum(1 for e in entries if e.deadline is Deadline.OVERDUE),
        due_soon=sum(1 for e in entries if e.deadline is Deadline.DUE_SOON),
        failed=sum(
            1
            for e in entries
            if e.failed or e.status in (DeskStatus.FAILED, DeskStatus.REFUSED)
        ),
        dry_runs=sum(1 for e in entries if e.dry_run),
        closed=sum(1 for e in entries if e.deadline is Deadline.CLOSED),
    )
