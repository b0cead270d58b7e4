"""Requests in limbo: open, while the run that owns them is gone or has ended.

A run can end without its request hearing of it: marked failed or deleted from Airflow's UI
or API, a worker killed before the failure callback ran, a task marked success by hand. The
request then says `acting` (or `awaiting_dpo`, ...) for ever. `reconcile` finds each one and
records it failed (signed `failed` record, the reason naming the run), keeping the parked
identifier, so clearing the run, or starting it again under its id when it was deleted,
resumes the request where it stopped.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict

from erasure.errors import RequestError
from erasure.intake import Ticket
from erasure.registry.requests import RegisteredRequest, RequestBook, RequestStatus

# run id -> Airflow's state of that DAG run ("queued", "running", "success", "failed"), or None
# when no such run exists any more.
RunState = Callable[[str], str | None]

# A run that has just ended may still have its failure callback on the way: it says better
# what failed, so the reconciler leaves it this long.
CALLBACK_GRACE = timedelta(minutes=2)
ENDED = frozenset({"success", "failed"})


class Limbo(BaseModel):
    """An open request whose run is gone or ended, and why that leaves it in limbo."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    run_id: str
    status: RequestStatus  # where the request stood
    run_state: str | None  # None: the run is gone
    reason: str


def find_limbo(
    requests: RequestBook,
    run_state: RunState,
    *,
    now: datetime | None = None,
    grace: timedelta = CALLBACK_GRACE,
    forced: Callable[[RegisteredRequest], str | None] = lambda _record: None,
) -> list[Limbo]:
    """Open requests whose own run is gone, or ended (longer than `grace` ago, as far as the
    request last moved; at once when `forced` says who set the run's state by hand) without
    closing them."""
    now = now or datetime.now(UTC)
    found = []
    for record in requests.list():
        if not awaits_its_run(record):
            continue
        state = run_state(record.run_id)
        if state is None:
            reason = (
                f"its run {record.run_id} is gone (deleted from Airflow) while the request "
                f"was {record.status.value}: start it again under the same run id to resume"
            )
        elif state in ENDED and (by_hand := forced(record)) is not None:
            reason = (
                f"its run {record.run_id} ended {state} while the request was "
                f"{record.status.value}: {by_hand}. Clear the run's tasks to resume"
            )
        elif state in ENDED and now - _utc(record.updated_at) > grace:
            reason = (
                f"its run {record.run_id} ended {state} while the request was "
                f"{record.status.value} (marked {state} from the UI or API, or a worker lost "
                "before it could say): clear the run's tasks to resume"
            )
        else:
            continue
        found.append(
            Limbo(
                request_ref=record.request_ref,
                run_id=record.run_id,
                status=record.status,
                run_state=state,
                reason=reason,
            )
        )
    return found


def awaits_its_run(record: RegisteredRequest) -> bool:
    """Still to be finished by its run: not closed, not failed (on record already), and not
    a dry run that has its plan (a dry run ends there). The desk's "run ended" is this too."""
    if record.closed or record.status is RequestStatus.FAILED:
        return False
    return not record.dry_run_done


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def resume_ticket(requests: RequestBook, ref: str) -> tuple[str, Ticket]:
    """(run id, conf ticket) that start a failed request's run again under its own run id.

    The register step resumes a request its own run registered without opening a submission,
    so the ticket names a fresh handle that seals nothing. RequestError unless the request is
    on record as failed.
    """
    record = requests.require(ref)
    if record.status is not RequestStatus.FAILED:
        raise RequestError(
            f"the request is {record.status.value}, not failed: there is nothing to resume"
        )
    return record.run_id, Ticket(request_ref=ref, submission=f"sub-{secrets.token_hex(16)}")
