"""erasure/desk.py: the desk from the registry and the orchestrator's facts of each run."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from erasure.deadlines import Deadline
from erasure.desk import (
    DeskEntry,
    DeskStatus,
    FailedTask,
    PendingPrompt,
    RemedyKind,
    RunFacts,
    build_desk,
)
from erasure.errors import RequestError
from erasure.reconcile import find_limbo, resume_ticket
from erasure.registry.requests import RegisteredRequest, RequestStatus
from tests.unit.deadline_support import TODAY, request

QUEUED = datetime(2027, 3, 9, tzinfo=UTC)


def run(ref: str, state: str = "running", **facts: object) -> RunFacts:
    return RunFacts.model_validate(
        {"run_id": f"erasure-{ref}", "request_ref": ref, "state": state, "queued_at": QUEUED}
        | facts
    )


def test_a_waiting_prompt_puts_the_request_before_the_dpo() -> None:
    prompt = PendingPrompt(task_id="dpo_decides", map_index=0, subject="Erasure: decide on x")
    desk = build_desk(
        [request(date(2027, 4, 1), request_ref="DSR-1", run_id="erasure-DSR-1")],
        [run("DSR-1", prompts=[prompt])],
        TODAY,
    )
    (entry,) = desk.entries
    assert entry.status is DeskStatus.AWAITING_DPO and entry.prompts == [prompt]
    assert entry.days_left == 22 and entry.deadline is Deadline.ON_TIME
    assert desk.counts.awaiting_dpo == 1 and desk.counts.prompts == 1


def test_most_urgent_first_and_counts_over_the_whole_desk() -> None:
    requests = [
        request(date(2027, 4, 30), request_ref="LATER", run_id="erasure-LATER"),
        request(date(2027, 3, 12), request_ref="SOON", run_id="erasure-SOON"),
        request(date(2027, 3, 1), request_ref="LATE", run_id="erasure-LATE"),
        request(
            date(2027, 3, 1),
            request_ref="DONE",
            run_id="erasure-DONE",
            status=RequestStatus.COMPLETE,
        ),
        request(date(2027, 3, 1), request_ref="DRY", run_id="erasure-DRY", dry_run=True),
    ]
    runs = [run(r.request_ref) for r in requests]
    desk = build_desk(requests, runs, TODAY)
    assert [e.request_ref for e in desk.entries] == ["LATE", "SOON", "LATER", "DRY", "DONE"]
    assert desk.entries[3].days_left is None  # a dry run has no deadline of its own
    filtered = build_desk(requests, runs, TODAY, status=DeskStatus.COMPLETE)
    assert [e.request_ref for e in filtered.entries] == ["DONE"]
    assert filtered.counts == desk.counts
    assert (desk.counts.overdue, desk.counts.due_soon, desk.counts.open) == (1, 1, 3)
    assert (desk.counts.dry_runs, desk.counts.closed) == (1, 1)


def test_a_submission_not_registered_is_submitted_then_refused_and_its_latest_run_counts() -> None:
    failed = FailedTask(task_id="register", try_number=1)
    first = run("NEW", state="failed", failed=[failed])
    again = run("NEW", state="running").model_copy(
        update={"run_id": "erasure-NEW-2", "queued_at": datetime(2027, 3, 10, tzinfo=UTC)}
    )
    (only,) = build_desk([], [first], TODAY).entries
    assert only.status is DeskStatus.REFUSED and only.failed == [failed]
    assert only.subject_hash is None and only.deadline is Deadline.NONE
    (latest,) = build_desk([], [first, again], TODAY).entries
    assert latest.status is DeskStatus.SUBMITTED and latest.run_id == "erasure-NEW-2"


def test_a_registered_request_hides_the_refused_runs_of_its_reference() -> None:
    refused = run("DSR-1", state="failed", failed=[FailedTask(task_id="register")])
    registered = request(date(2027, 4, 1), request_ref="DSR-1", run_id="erasure-DSR-1-2")
    ok = refused.model_copy(update={"run_id": "erasure-DSR-1-2", "state": "running", "failed": []})
    (entry,) = build_desk([registered], [refused, ok], TODAY).entries
    assert entry.run_id == "erasure-DSR-1-2" and entry.failed == []


# ---------------------------------------------------------------------------------------------
# The remedy each entry is offered, over every combination of what the desk can be told


RUN_STATES = (None, "queued", "running", "success", "failed")  # None: the run was deleted
ACTIVE = frozenset({"queued", "running"})
TASKS = ("none failed", "one failed", "a prompt waiting")
REGISTRY = (None, *RequestStatus)  # None: a submission not registered (yet)


def situation(
    status: RequestStatus | None, dry_run: bool, kept: bool, run_state: str | None, tasks: str
) -> tuple[RegisteredRequest | None, DeskEntry]:
    """One request (or submission) as the desk is told of it; `kept`: its parked identifier
    (registered) or its sealed submission (not registered) is still held."""
    facts: dict[str, Any] = {}
    if tasks == "one failed":
        facts["failed"] = [FailedTask(task_id="erase_rows", map_index=0, try_number=3)]
    if tasks == "a prompt waiting":
        facts["prompts"] = [PendingPrompt(task_id="dpo_decides", map_index=0, subject="x")]
    facts_of_run = run("DSR-1", run_state, **facts) if run_state is not None else None
    registered = None
    if status is not None:
        destroyed = None if kept else datetime(2027, 3, 5, tzinfo=UTC)
        registered = request(
            date(2027, 4, 1), status=status, dry_run=dry_run, secrets_destroyed_at=destroyed
        )
    sealed = {"DSR-1"} if status is None and kept else set()
    requests = [registered] if registered else []
    runs = [facts_of_run] if facts_of_run else []
    (entry,) = build_desk(requests, runs, TODAY, sealed=sealed).entries
    return registered, entry


COMBINATIONS = [
    c
    for c in itertools.product(REGISTRY, (False, True), (True, False), RUN_STATES, TASKS)
    # A deleted run has no tasks; a submission has no dry run flag on the desk, and no entry
    # without its run.
    if not (c[3] is None and c[4] != "none failed")
    and not (c[0] is None and (c[1] or c[3] is None))
]


class _Book:
    """The registry as `erasure.reconcile` reads it, holding one request."""

    def __init__(self, record: RegisteredRequest) -> None:
        self._record = record

    def list(self) -> list[RegisteredRequest]:
        return [self._record]

    def require(self, ref: str) -> RegisteredRequest:
        return self._record


@pytest.mark.parametrize(("status", "dry_run", "kept", "run_state", "tasks"), COMBINATIONS)
def test_each_entry_is_offered_the_one_remedy_that_works(
    status: RequestStatus | None, dry_run: bool, kept: bool, run_state: str | None, tasks: str
) -> None:
    registered, entry = situation(status, dry_run, kept, run_state, tasks)
    kind = entry.remedy.kind
    failed = tasks == "one failed"
    ended = run_state is None or run_state not in ACTIVE
    if registered is None:
        # Clearing reruns register, which opens the sealed copy: only while it is kept. Once
        # register destroyed it (refused), the desk takes the reference again: resubmit.
        if kept:
            expected = (
                RemedyKind.CLEAR_TASKS if failed
                else RemedyKind.CLEAR_RUN if ended
                else RemedyKind.NONE
            )  # fmt: skip
        else:
            expected = RemedyKind.RESUBMIT if failed or ended else RemedyKind.NONE
        assert kind is expected
        refused = kind is RemedyKind.RESUBMIT
        assert entry.status is (DeskStatus.REFUSED if refused else DeskStatus.SUBMITTED)
        return
    run_gone = run_state is None
    if registered.closed or registered.dry_run_done:
        assert kind is RemedyKind.NONE  # done: a failed task of its run needs nothing
        return
    book: Any = _Book(registered)
    # What the reconciler will record failed is what the desk shows as its run having ended.
    limbo = find_limbo(book, lambda run_id: run_state, now=registered.updated_at + timedelta(1))
    assert (entry.status is DeskStatus.RUN_ENDED) == bool(limbo)
    if status is not RequestStatus.FAILED:
        assert (entry.status is DeskStatus.RUN_ENDED) == ended, "an ended run is not acting"
    if tasks == "a prompt waiting" and not ended and status is not RequestStatus.FAILED:
        assert entry.status is DeskStatus.AWAITING_DPO
    if kind is RemedyKind.RESUME:  # the resume route's own precondition lets it through
        assert resume_ticket(book, "DSR-1")[0] == registered.run_id
    if kind is RemedyKind.AWAIT_RECONCILE:
        with pytest.raises(RequestError):  # the resume route refuses it until it is failed
            resume_ticket(book, "DSR-1")
    identifier_gone = not dry_run and not kept
    if failed:
        expected = RemedyKind.CLEAR_TASKS  # the failed task reruns its own step only
    elif not ended:
        expected = RemedyKind.NONE  # its run is at work
    elif identifier_gone:
        expected = RemedyKind.NEW_REQUEST  # a whole run again would verify without it
    elif not run_gone:
        expected = RemedyKind.CLEAR_RUN
    elif status is RequestStatus.FAILED:
        expected = RemedyKind.RESUME
    else:
        expected = RemedyKind.AWAIT_RECONCILE  # the resume route takes failed requests only
    assert kind is expected, entry.remedy.reason


def test_restore_replays_are_listed_newest_first_with_their_table_rows_and_requests(
    tmp_path: Path,
) -> None:
    from erasure.audit.records import RecordLedger
    from erasure.model import DatasetRef
    from erasure.replay import NO_SUBJECT, CitedRequest, ReplayBody, ReplayVerification
    from erasure.store import open_store
    from tests.unit.audit.support import SUBJECT, LocalSigner, received_body

    def body(ref: str, rows: dict[str, int], passed: bool = True) -> ReplayBody:
        at = datetime(2027, 3, 9, 10, tzinfo=UTC)
        return ReplayBody(
            replay_ref=ref,
            dataset=DatasetRef("warehouse", "crm.customers"),
            identifier_columns={"email": ["email"]},
            pepper_versions=[1, 2],
            tombstones_checked=8,
            rows_erased=sum(rows.values()),
            cited=[CitedRequest(request_ref=r, rows=n, tombstones=[]) for r, n in rows.items()],
            attempts=[],
            verification=ReplayVerification(
                checked_at=at,
                passed=passed,
                rows_read=10,
                tombstoned_rows_remaining=0,
                others_before=10,
                others_after=10,
            ),
            replayed_at=at,
        )

    first, second = "REPLAY-20270309T100000-aaaaaa", "REPLAY-20270309T110000-bbbbbb"
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        ledger = RecordLedger(store, LocalSigner())
        ledger.append("DSR-1", SUBJECT, "received", received_body("DSR-1"))
        ledger.append(first, NO_SUBJECT, "replayed", body(first, {"DSR-1": 2, "DSR-2": 1}))
        ledger.append(second, NO_SUBJECT, "replayed", body(second, {}))
        desk = build_desk([], [], TODAY, replays=ledger.list())

    assert [r.replay_ref for r in desk.replays] == [second, first]
    older = desk.replays[1]
    assert older.dataset == DatasetRef("warehouse", "crm.customers") and older.rows_erased == 3
    assert older.cited == ["DSR-1", "DSR-2"] and older.verified and older.record_seq == 2
    assert desk.replays[0].rows_erased == 0 and desk.replays[0].cited == []
    assert desk.entries == [] and desk.counts.total == 0  # a replay is no request of the desk's
