"""Art. 12(3) deadlines: which open requests are due soon, and which are overdue."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel

from erasure.registry.requests import RequestBook


class DeadlineReport(BaseModel):
    due_soon: list[str]  # request refs due within the window, not yet overdue
    overdue: list[str]
    lines: list[str]  # one per request, as the deadlines DAG logs them


def deadline_report(requests: RequestBook, today: date, within_days: int) -> DeadlineReport:
    """Open requests due within `within_days`, and those already overdue (dry runs aside)."""
    due = [r for r in requests.due_within(today, within_days) if not r.dry_run]
    overdue = [r.request_ref for r in due if r.effective_due_on < today]
    lines = [
        f"{r.request_ref}: {r.status.value}, due {r.effective_due_on.isoformat()}"
        + (" (extended)" if r.extended_until else "")
        + (
            f" OVERDUE by {(today - r.effective_due_on).days} day(s)"
            if r.effective_due_on < today
            else f", {(r.effective_due_on - today).days} day(s) left"
        )
        for r in due
    ]
    return DeadlineReport(
        due_soon=[r.request_ref for r in due if r.request_ref not in overdue],
        overdue=overdue,
        lines=lines,
    )
