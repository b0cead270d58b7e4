"""The DPO's desk: every request, its Art. 12(3) deadline, the prompts awaiting her, what failed,
and the one remedy that works from where each stands.

Built from the registry and from what the orchestrator reports of each request's run (the
adapter reads Airflow and passes `RunFacts` in; this module does not know Airflow). A request
whose run has a prompt waiting shows as awaiting the DPO, whatever step the registry last
recorded; one whose run ended or was deleted while the registry still has it open shows as
such, never as acting. A submission whose run has not registered it yet, or whose run refused
it at register, is on the desk too: it has a reference and a run, and no registry row.
Entries are keyed by request reference and subject hash; nothing here can hold an identifier.
Below the requests, the restore replays on record (`erasure.replay`): when, which table, how
many rows were erased again, and for which requests.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import date, datetime
from enum import StrEnum

from pydantic import BaseModel, ValidationError

from erasure.audit.records import CompletionRecord, RecordKind
from erasure.deadlines import DUE_SOON_DAYS, Deadline, deadline_of
from erasure.model import DagRun, DatasetRef
from erasure.reconcile import ENDED, awaits_its_run
from erasure.registry.interventions import Intervention
from erasure.registry.requests import RegisteredRequest, RequestStatus
from erasure.replay import ReplayBody


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
    # The registry has it open, and its run ended (success, failed) or was deleted: the
    # reconciler records it failed soon (`erasure.reconcile`).
    RUN_ENDED = "run_ended"


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


class RunFacts(DagRun):
    """What the orchestrator knows of one request's run."""

    request_ref: str
    prompts: list[PendingPrompt] = []
    failed: list[FailedTask] = []


class RemedyKind(StrEnum):
    """What moves an entry on: the one thing that works from where it stands."""

    NONE = "none"  # nothing to do: closed, a dry run with its plan, or its run is at work
    CLEAR_TASKS = "clear_tasks"  # clear the failed tasks (with downstream): each step resumes
    CLEAR_RUN = "clear_run"  # the run ended with no failed task: clear the run's tasks
    RESUME = "resume"  # a failed request's run was deleted: start it again under its id
    AWAIT_RECONCILE = "await_reconcile"  # run deleted, request open: recorded failed, then RESUME
    RESUBMIT = "resubmit"  # refused at register, copy destroyed: a corrected request, same ref
    NEW_REQUEST = "new_request"  # the identifier is destroyed: a new request, a new reference


class Remedy(BaseModel):
    """The remedy the desk offers an entry, and why that one."""

    kind: RemedyKind
    reason: str


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
    remedy: Remedy
    # States of its current run or tasks a person set by hand (erasure_airflow.listener):
    # who, when.
    interventions: Sequence[Intervention] = ()


class DeskCounts(BaseModel):
    total: int
    open: int  # registered, not closed, not a dry run
    awaiting_dpo: int  # requests with at least one prompt waiting
    prompts: int
    overdue: int
    due_soon: int
    failed: int  # entries with a remedy to apply: failed, refused, or their run ended
    dry_runs: int
    closed: int


class ReplayOnDesk(BaseModel):
    """A restore replay on record: a restored table's erased subjects erased again."""

    replay_ref: str
    replayed_at: datetime
    dataset: DatasetRef | None  # None: its body could not be read (see its evidence pack)
    rows_erased: int
    cited: list[str | None]  # the requests whose tombstones matched; None: no request's
    verified: bool
    record_seq: int


class Desk(BaseModel):
    today: date
    due_soon_days: int
    status: DeskStatus | None  # the filter, None: every request
    counts: DeskCounts  # over every request, whatever the filter
    entries: list[DeskEntry]
    replays: list[ReplayOnDesk] = []  # newest first


def build_desk(
    requests: Iterable[RegisteredRequest],
    runs: Iterable[RunFacts],
    today: date,
    *,
    sealed: Collection[str] = frozenset(),
    interventions: Iterable[Intervention] = (),
    status: DeskStatus | None = None,
    due_soon_days: int = DUE_SOON_DAYS,
    replays: Iterable[CompletionRecord] = (),
) -> Desk:
    """The desk: registered requests with their run's facts, then unregistered submissions
    (`sealed`: the references whose sealed submission is still kept, `intake.sealed_refs`),
    each with the `interventions` on its current run; and the `replayed` records among
    `replays`."""
    by_hand: dict[str, list[Intervention]] = {}
    for intervention in interventions:
        by_hand.setdefault(intervention.run_id, []).append(intervention)
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
        entry = _registered(request, by_run.get(request.run_id), today, due_soon_days)
        entries.append(entry.model_copy(update={"interventions": by_hand.get(request.run_id, [])}))
    for ref, run in latest_of_ref.items():
        if ref not in registered:
            entries.append(_unregistered(run, sealed=ref in sealed))
    entries.sort(key=_urgency)
    return Desk(
        today=today,
        due_soon_days=due_soon_days,
        status=status,
        counts=_counts(entries),
        entries=[e for e in entries if status is None or e.status is status],
        replays=replays_on_desk(replays),
    )


def replays_on_desk(records: Iterable[CompletionRecord]) -> list[ReplayOnDesk]:
    """The `replayed` records among `records`, newest first."""
    shown = []
    for record in records:
        if record.kind is not RecordKind.REPLAYED:
            continue
        try:
            body: ReplayBody | None = ReplayBody.model_validate(record.body)
        except ValidationError:
            body = None
        shown.append(
            ReplayOnDesk(
                replay_ref=record.request_ref,
                replayed_at=record.created_at,
                dataset=body.dataset if body is not None else None,
                rows_erased=body.rows_erased if body is not None else 0,
                cited=[c.request_ref for c in body.cited] if body is not None else [],
                verified=body is not None and body.verification.passed,
                record_seq=record.seq,
            )
        )
    return sorted(shown, key=lambda r: r.record_seq, reverse=True)


def _queued(run: RunFacts) -> float:
    return run.queued_at.timestamp() if run.queued_at is not None else 0.0


def _registered(
    request: RegisteredRequest, run: RunFacts | None, today: date, due_soon_days: int
) -> DeskEntry:
    closed = request.closed
    deadline = Deadline.NONE if request.dry_run else deadline_of(request, today, due_soon_days)
    status = DeskStatus(request.status.value)
    if awaits_its_run(request):
        if run is None or run.state in ENDED:
            status = DeskStatus.RUN_ENDED  # the registry has not heard yet: it is not acting
        elif run.prompts:
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
        remedy=registered_remedy(request, run),
    )


def _unregistered(run: RunFacts, *, sealed: bool) -> DeskEntry:
    remedy = submission_remedy(run, sealed=sealed)
    refused = remedy.kind is RemedyKind.RESUBMIT
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
        remedy=remedy,
    )


def registered_remedy(request: RegisteredRequest, run: RunFacts | None) -> Remedy:
    """What resumes a registered request, from its status and its run's facts (None: the run
    was deleted). A cleared or restarted run reruns its steps from the action log: that needs
    the parked identifier (verify looks again with it), unless it is a dry run."""
    if request.closed:
        return _none("complete: nothing to resume")
    if request.dry_run_done:
        return _none("a dry run ends with its plan: nothing to resume")
    identifier_gone = not request.dry_run and request.secrets_destroyed_at is not None
    failed = request.status is RequestStatus.FAILED
    if run is not None and run.failed:
        return Remedy(
            kind=RemedyKind.CLEAR_TASKS,
            reason="clear each failed task with downstream once its cause is fixed: the "
            "request resumes where it stopped, nothing is done twice",
        )
    if run is not None and run.state not in ENDED:
        return _none("its run is at work" + (" again (cleared or resumed)" if failed else ""))
    if identifier_gone:
        return Remedy(
            kind=RemedyKind.NEW_REQUEST,
            reason="its identifier was destroyed as completion began, so its run cannot verify "
            "again: submit a new request for the subject under a new reference",
        )
    if run is not None:
        return Remedy(
            kind=RemedyKind.CLEAR_RUN,
            reason=f"its run ended {run.state} with no failed task: clear the run's tasks to "
            "resume it",
        )
    if failed:
        return Remedy(
            kind=RemedyKind.RESUME,
            reason="its run was deleted: start it again under its own run id to resume it",
        )
    return Remedy(
        kind=RemedyKind.AWAIT_RECONCILE,
        reason="its run was deleted: the reconciler records the request failed within minutes, "
        "then its run can be started again here",
    )


def submission_remedy(run: RunFacts, *, sealed: bool) -> Remedy:
    """What moves an unregistered submission on: while its sealed copy is kept, its own run
    (cleared if it failed); once register refused it and destroyed the copy, a corrected
    request (the desk accepts its reference again and gives it the next run id)."""
    if sealed:
        if run.failed:
            return Remedy(
                kind=RemedyKind.CLEAR_TASKS,
                reason="register failed for a reason a retry mends (its sealed copy is kept): "
                "clear it once the service is back",
            )
        if run.state in ENDED:
            return Remedy(
                kind=RemedyKind.CLEAR_RUN,
                reason=f"its run ended {run.state} before registering it (its sealed copy is "
                "kept): clear the run's tasks",
            )
        return _none("its run registers it")
    if run.failed or run.state in ENDED:
        return Remedy(
            kind=RemedyKind.RESUBMIT,
            reason="register refused it and destroyed its sealed copy (the failed task's log "
            "says why), so clearing the run cannot succeed: submit a corrected request",
        )
    return _none("its run registers it")


def _none(reason: str) -> Remedy:
    return Remedy(kind=RemedyKind.NONE, reason=reason)


_GROUP = {
    Deadline.OVERDUE: 0,
    Deadline.DUE_SOON: 1,
    Deadline.ON_TIME: 2,
    Deadline.NONE: 3,
    Deadline.CLOSED: 4,
}


def _urgency(entry: DeskEntry) -> tuple[int, int, date, str]:
    """Overdue first, then due soon, on time, unregistered and dry runs, closed; by due date."""
    waiting = 0 if entry.prompts or _needs_remedy(entry) else 1
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
        failed=sum(1 for e in entries if _needs_remedy(e)),
        dry_runs=sum(1 for e in entries if e.dry_run),
        closed=sum(1 for e in entries if e.deadline is Deadline.CLOSED),
    )


def _needs_remedy(entry: DeskEntry) -> bool:
    return entry.remedy.kind is not RemedyKind.NONE
