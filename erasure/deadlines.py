"""Art. 12(3) deadlines: which open requests are due soon, and which are overdue."""

from __future__ import annotations

from datetime import date
from enum import StrEnum

from pydantic import BaseModel

from erasure.registry.requests import RegisteredRequest, RequestBook

DUE_SOON_DAYS = 7  # the desk marks, and the deadlines DAG lists, requests due within a week


class Deadline(StrEnum):
    """Where a request stands against its deadline (the extension included)."""

    OVERDUE = "overdue"
    DUE_SOON = "due_soon"  # within DUE_SOON_DAYS, not yet overdue
    ON_TIME = "on_time"
    CLOSED = "closed"  # complete: the deadline no longer runs
    NONE = "none"  # a dry run, or a submission not registered: no deadline of its own


def deadline_of(request: RegisteredRequest, today: date, within_days: int) -> Deadline:
    """The one rule for overdue and due soon, for the desk and the deadlines DAG alike."""
    if request.closed:
        return Deadline.CLOSED
    if request.effective_due_on < today:
        return Deadline.OVERDUE
    if (request.effective_due_on - today).days <= within_days:
        return Deadline.DUE_SOON
    return Deadline.ON_TIME


class DeadlineReport(BaseModel):
    due_soon: list[str]  # request refs due within the window, not yet overdue
    overdue: list[str]
    lines: list[str]  # one per request, as the deadlines DAG logs them


def deadline_report(requests: RequestBook, today: date, within_days: int) -> DeadlineReport:
    """Open requests due within `within_days`, and those already overdue (dry runs aside)."""
    due = [r for r in requests.due_within(today, within_days) if not r.dry_run]
    overdue = [r.request_ref for r in due if deadline_of(r, today, within_days) is Deadline.OVERDUE]
    lines = [
        f"{r.request_ref}: {r.status.value}, due {r.effective_due_on.isoformat()}"
        + (" (extended)" if r.extended_until else "")
        + (
            f" OVERDUE by {(today - r.effective_due_on).days} day(s)"
            if r.request_ref in overdue
            else f", {(r.effective_due_on - today).days} day(s) left"
        )
        for r in due
    ]
    return DeadlineReport(
        due_soon=[r.request_ref for r in due if r.request_ref not in overdue],
        overdue=overdue,
        lines=lines,
    )
