"""erasure/desk.py: the desk from the registry and the orchestrator's facts of each run."""

from __future__ import annotations

from datetime import UTC, date, datetime

from erasure.deadlines import Deadline
from erasure.desk import DeskStatus, FailedTask, PendingPrompt, RunFacts, build_desk
from erasure.registry.requests import RequestStatus
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
    desk = build_desk(requests, [], TODAY)
    assert [e.request_ref for e in desk.entries] == ["LATE", "SOON", "LATER", "DRY", "DONE"]
    assert desk.entries[3].days_left is None  # a dry run has no deadline of its own
    filtered = build_desk(requests, [], TODAY, status=DeskStatus.COMPLETE)
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
