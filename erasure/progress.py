"""Where a request stands and how a step resumes: the one protocol over the action log.

Steps (`Step`) run from some request statuses only (`enter` says which and moves the request
on). Within the act step, each plan item's action runs once (`run_once`): its entry in the
action log says whether it is done (a retry returns the recorded evidence), waiting for an
earlier one (`wait_for`, bounded), started or failed. An effect inside an action that must
not happen twice is logged as progress before the action finishes (`save_progress`), and
verify reopens a done action that left the subject behind (`reopen`), so clearing its task
acts again, the first act's evidence kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from erasure.errors import ErasureError, NotYet, StepError
from erasure.model import Action, Evidence, PlanItem
from erasure.registry.action_log import ActionLog, ActionRecord, ActionStatus
from erasure.registry.requests import RegisteredRequest, RequestBook, RequestStatus

log = logging.getLogger(__name__)

E = TypeVar("E", bound=Evidence)


class UpstreamFailed(StepError):
    """What a step waits for failed for good (or never finished): the step fails, naming it."""


class Suspended(ErasureError):
    """An action started work that ends outside this process (a run it triggered): its log
    entry stays pending with the progress it saved, and calling the step again resumes it."""


class Step(StrEnum):
    PLAN = "plan"  # locate and plan (and, on a retry, what follows the saved plan)
    ACT = "act"  # tombstone, erase, shred, rebuild, confirm an aggregate, rule on an escalation
    VERIFY = "verify"
    COMPLETE = "complete"


_S = RequestStatus
# Can this step run from here: the statuses each step runs from. A failed request resumes
# at any step; closed requests run none (their steps return what was recorded).
RUNS_FROM: dict[Step, frozenset[RequestStatus]] = {
    Step.PLAN: frozenset({_S.REGISTERED, _S.PLANNED, _S.FAILED}),
    Step.ACT: frozenset({_S.PLANNED, _S.ACTING, _S.AWAITING_DPO, _S.VERIFYING, _S.FAILED}),
    Step.VERIFY: frozenset({_S.PLANNED, _S.ACTING, _S.AWAITING_DPO, _S.VERIFYING, _S.FAILED}),
    Step.COMPLETE: frozenset({_S.VERIFYING, _S.FAILED}),
}
# Where a step moves the request as it starts, from each status it moves it from.
_MOVES: dict[Step, dict[RequestStatus, list[RequestStatus]]] = {
    Step.PLAN: {_S.REGISTERED: [_S.PLANNED], _S.FAILED: [_S.PLANNED]},
    Step.ACT: {_S.PLANNED: [_S.ACTING], _S.FAILED: [_S.ACTING]},
    Step.VERIFY: {
        _S.PLANNED: [_S.ACTING, _S.VERIFYING],  # nothing to act on but a tombstone
        _S.ACTING: [_S.VERIFYING],
        _S.AWAITING_DPO: [_S.VERIFYING],
        _S.FAILED: [_S.VERIFYING],
    },
    Step.COMPLETE: {_S.FAILED: [_S.VERIFYING]},  # a complete that failed for good, cleared
}


def enter(requests: RequestBook, ref: str, step: Step) -> RegisteredRequest:
    """Check `step` may run from the request's status and move the request on."""
    record = requests.require(ref)
    if record.status not in RUNS_FROM[step]:
        raise StepError(
            f"request {ref} is {record.status.value}: the {step.value} step runs only from "
            + ", ".join(sorted(s.value for s in RUNS_FROM[step]))
        )
    for status in _MOVES[step].get(record.status, []):
        record = requests.set_status(ref, status)
    return record


def advance(requests: RequestBook, ref: str, status: RequestStatus) -> None:
    """Move the request to `status` unless it is there already."""
    if requests.require(ref).status is not status:
        requests.set_status(ref, status)


# ---------------------------------------------------------------------------------------------
# One action of the act step


def done(actions: ActionLog, ref: str, item: PlanItem) -> ActionRecord | None:
    """The item's entry if its action succeeded (a retry returns it instead of acting)."""
    record = actions.get(ref, item.dataset, item.action)
    return record if record is not None and record.status is ActionStatus.DONE else None


def run_once(
    actions: ActionLog, ref: str, item: PlanItem, evidence: type[E], act: Callable[[], E]
) -> E:
    """Run `act` unless the item's action is done; log it started, then done or failed (or
    leave it started when `act` is Suspended)."""
    finished = done(actions, ref, item)
    if finished is not None:
        return evidence.model_validate(finished.evidence)
    reopened = _reopened(actions, ref, item)
    entry = actions.get(ref, item.dataset, item.action)
    resumed = (  # the same attempt, going on after a Suspended
        entry is not None
        and entry.status is ActionStatus.PENDING
        and "suspended" in (entry.evidence.get("progress") or {})
    )
    actions.record(ref, item.dataset, item.action, ActionStatus.PENDING, new_attempt=not resumed)
    try:
        result = act()
    except Suspended as waiting:
        # Not a failure: the action resumes where it saved its progress.
        save_progress(actions, ref, item, suspended=str(waiting))
        raise
    except Exception as exc:
        kept = {"progress": p} if (p := progress(actions, ref, item)) else {}
        actions.record(
            ref,
            item.dataset,
            item.action,
            ActionStatus.FAILED,
            {"error": type(exc).__name__, **reopened, **kept},
        )
        raise
    if reopened:
        result = result.model_copy(update=reopened)
    actions.record(ref, item.dataset, item.action, ActionStatus.DONE, result)
    log.info("request %s: %s %s done", ref, item.action.value, item.dataset.name)
    return result


def progress(actions: ActionLog, ref: str, item: PlanItem) -> dict[str, Any]:
    """What an earlier attempt of this action already did and logged (see save_progress)."""
    record = actions.get(ref, item.dataset, item.action)
    return dict(record.evidence.get("progress") or {}) if record is not None else {}


def save_progress(actions: ActionLog, ref: str, item: PlanItem, **effects: Any) -> None:
    """Log an effect inside an action before the action finishes, so a retry skips it (what
    else the entry holds, e.g. what verify reopened, is kept)."""
    record = actions.get(ref, item.dataset, item.action)
    kept = dict(record.evidence) if record is not None else {}
    actions.record(
        ref,
        item.dataset,
        item.action,
        ActionStatus.PENDING,
        {**kept, "progress": {**dict(kept.get("progress") or {}), **effects}},
        new_attempt=False,
    )


def reopen(actions: ActionLog, ref: str, item: PlanItem, found: int) -> None:
    """Mark a done erase/rebuild failed again, keeping its evidence: a cleared task then acts
    instead of returning what it did before the subject's rows came back."""
    finished = done(actions, ref, item)
    if finished is None:
        return
    actions.record(
        ref,
        item.dataset,
        item.action,
        ActionStatus.FAILED,
        {"error": "found again by verify", "found": found, "earlier": finished.evidence},
    )


def _reopened(actions: ActionLog, ref: str, item: PlanItem) -> dict[str, Any]:
    """What verify found undone, with the first act's evidence: kept on record when redone."""
    record = actions.get(ref, item.dataset, item.action)
    if record is None:
        return {}
    if record.evidence.get("reopened"):  # a redo that failed: still the same finding
        return {"reopened": record.evidence["reopened"]}
    return {"reopened": record.evidence} if "earlier" in record.evidence else {}


# ---------------------------------------------------------------------------------------------
# Order within the act step


def wait_for(
    actions: ActionLog,
    ref: str,
    waiting: PlanItem,
    needed: Sequence[PlanItem],
    what: str,
    *,
    grace: timedelta,
    timeout: timedelta,
) -> None:
    """NotYet while `needed` are not all done; UpstreamFailed, naming them, once one failed
    and was not retried within `grace`, or once `waiting` waited longer than `timeout`."""
    logged = {(a.dataset, a.action): a for a in actions.list(ref)}
    stamp = datetime.now(UTC)
    missing, failed = [], []
    for item in needed:
        record = logged.get((item.dataset, item.action.value))
        if record is not None and record.status is ActionStatus.DONE:
            continue
        label = f"{item.action.value} {item.dataset.name}"
        if (
            record is not None
            and record.status is ActionStatus.FAILED
            and stamp - _utc(record.updated_at) > grace
        ):
            failed.append(label)
        else:
            missing.append(label)
    if failed:
        raise UpstreamFailed(
            f"request {ref}: {', '.join(failed)} failed and was not retried: it must be "
            f"{what}. Fix its cause and clear it with its downstream tasks"
        )
    if not missing:
        return
    own = logged.get((waiting.dataset, waiting.action.value))
    since = (
        _utc(datetime.fromisoformat(own.evidence["waiting_since"]))
        if own is not None and own.status is ActionStatus.WAITING
        else stamp
    )
    if stamp - since > timeout:
        raise UpstreamFailed(
            f"request {ref}: {', '.join(missing)} did not finish within "
            f"{int(timeout.total_seconds())} s: it must be {what}. Look at why it is stuck (a "
            "lost worker?), then clear this task"
        )
    earlier = dict(own.evidence) if own is not None else {}  # e.g. what verify reopened
    actions.record(
        ref,
        waiting.dataset,
        waiting.action,
        ActionStatus.WAITING,
        {**earlier, "waiting_for": missing, "waiting_since": since.isoformat()},
        new_attempt=False,
    )
    raise NotYet(f"request {ref}: {', '.join(missing)} must be {what}; waiting for it")


def items_done(
    actions: ActionLog, ref: str, items: Sequence[PlanItem], action: Action | None = None
) -> bool:
    """Whether every one of `items` (of `action`, if given) is done."""
    return all(
        actions.status(ref, i.dataset, i.action) is ActionStatus.DONE
        for i in items
        if action is None or i.action is action
    )


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
