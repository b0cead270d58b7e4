"""erasure/deadlines.py: one rule for overdue and due soon, for the desk and the deadlines DAG."""

from __future__ import annotations

from datetime import date

import pytest

from erasure.deadlines import DUE_SOON_DAYS, Deadline, deadline_of
from erasure.registry.requests import RequestStatus
from tests.unit.deadline_support import TODAY, request


@pytest.mark.parametrize(
    ("due_on", "expected"),
    [
        (date(2027, 3, 9), Deadline.OVERDUE),  # the day after the deadline
        (date(2027, 3, 10), Deadline.DUE_SOON),  # due today is not overdue yet
        (date(2027, 3, 17), Deadline.DUE_SOON),  # exactly a week left
        (date(2027, 3, 18), Deadline.ON_TIME),
    ],
)
def test_overdue_is_after_the_deadline_and_due_soon_is_within_a_week(
    due_on: date, expected: Deadline
) -> None:
    assert deadline_of(request(due_on), TODAY, DUE_SOON_DAYS) is expected


def test_the_extension_is_the_deadline_in_force() -> None:
    extended = request(date(2027, 3, 1), extended_until=date(2027, 5, 1))
    assert deadline_of(extended, TODAY, DUE_SOON_DAYS) is Deadline.ON_TIME


@pytest.mark.parametrize("status", [RequestStatus.COMPLETE, RequestStatus.COMPLETE_WITH_EXEMPTIONS])
def test_a_complete_request_has_no_running_deadline(status: RequestStatus) -> None:
    assert deadline_of(request(date(2027, 1, 1), status=status), TODAY, 7) is Deadline.CLOSED
