"""The steps of an erasure (DESIGN section 1): the one door the Airflow adapter and CLI use.

Each step is a few lines over typed models: it checks it may run from where the request
stands (`erasure.progress.enter`), runs its action once (`run_once`: a retried or cleared
task returns the recorded evidence instead of acting twice) and moves the request on. What
the actions do lives in `erasure.actions`, the second look in `erasure.verify`, the DPO's
prompts in `erasure.prompts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from erasure.actions.aggregate import AggregateEvidence, confirm_k
from erasure.actions.erase_rows import erase_rows
from erasure.actions.erased import ErasureEvidence
from erasure.actions.escalate import (
    DeletionRefused,
    RulingEvidence,
    carry_out,
    cited_standing_ruling,
    confirm_owner_deletion,
)
from erasure.actions.rebuild import (
    AwaitingRun,
    RebuildEvidence,
    TriggerDag,
    empty_before_rebuild,
    fresh_write_proof,
    rebuild,
)
from erasure.actions.reclaim import (
    VacuumLimits,
    VacuumPassResult,
    reclaim_after_delete,
    run_pending,
)
from erasure.actions.shred import (
    ShredEvidence,
    destroyed_by_others,
    destroyed_by_request,
    key_hashes,
    shred_keys,
)
from erasure.actions.tombstone import TombstoneEvidence, insert_tombstones
from erasure.audit.records import CompletionRecord, RecordKind, RecordStatus
from erasure.completion import completion_body
from erasure.errors import (
    EraseFailed,
    NotYet,
    RebuildFailed,
    RequestError,
    StepError,
    SubjectError,
    VerificationFailed,
    describe_invalid,
)
from erasure.free_text import NamesSubject, refuse_identifying_reference, refuse_if_named
from erasure.identifier_types import refuse_misfit
from erasure.intake import Ticket
from erasure.lineage import LineageStore
from erasure.locate import (
    Location,
    locate,
    normalise_subject,
    parked_location,
    personal_data,
    relocate,
)
from erasure.model import Action, DatasetRef, ErasedBefore, Identity, Plan, PlanItem, SubjectRef
from erasure.planner import SUPPRESSION_LIST, escalate_unkeyed, make_plan, must_precede
from erasure.progress import (
    Step,
    UpstreamFailed,
    advance,
    done,
    enter,
    progress,
    reopen,
    run_once,
    save_progress,
    wait_for,
)
from erasure.prompts import Asked, escalation_prompt
from erasure.reconcile import Limbo, RunState, find_limbo
from erasure.registry.action_log import ActionStatus
from erasure.registry.interventions import RUN
from erasure.registry.requests import (
    CLOSED_STATUSES,
    RegisteredRequest,
    Registration,
    RequestStatus,
)
from erasure.registry.vacuums import PendingVacuums
from erasure.reprove import KeyProbe, Missing, Reproof, reprove_completed
from erasure.rulings import OPTION_LABELS, DpoAnswer, Ruling, options_for
from erasure.services import Services
from erasure.submission import ErasureRequest
from erasure.verify import VerificationEvidence, second_look

__all__ = ["AwaitingRun", "NotYet", "StepError", "TriggerDag", "UpstreamFailed"]

# The verification is logged like an action, so `complete` reads what `verify` found.
VERIFICATION = DatasetRef("erasure", "verification")
_VERIFY = "verify"


# ---------------------------------------------------------------------------------------------
# 1. register


def register(svc: Services, conf: Mapping[str, Any], run_id: str) -> Registration:
    """Open the desk's sealed submission, hash and park its identifier; idempotent on the ref.

    What would put an identifier on record is refused here, before anything is kept: a
    request reference or notes naming the subject, by the identifier given or by one it
    expands to (another of the subject's identifiers the warehouse holds); so is a value that
    cannot be of the type chosen (`erasure.identifier_types`). Registered or refused, the
    sealed copy is destroyed; a cleared and rerun run finds its request registered and
    resumes it. Only a failure a retry can mend keeps the sealed copy.
    """
    ticket = Ticket.parse(conf)
    owned = svc.requests.get(ticket.request_ref)
    if owned is not None and owned.run_id == run_id:
        registration = Registration(
            request_ref=owned.request_ref,
            subject_hash=owned.subject_hash,
            created=False,
            owner_run_id=owned.run_id,
            status=owned.status,
        )
    else:
        try:
            registration = _register(svc, svc.submissions.open(ticket), run_id)
        except (RequestError, SubjectError, NamesSubject):
            svc.submissions.destroy(ticket)  # refused: nothing of the submission is kept
            raise
    if registration.owner_run_id == run_id:
        _record_receipt(svc, registration)
    svc.submissions.destroy(ticket)
    if registration.owner_run_id == run_id:
        svc.requests.mark_submission_destroyed(registration.request_ref, datetime.now(UTC))
    return registration


def _register(svc: Services, request: ErasureRequest, run_id: str) -> Registration:
    refuse_misfit(  # the desk refused it already, unless it could not read the catalog
        svc.catalog.identifiers, request.identifier_type, request.identifier.get_secret_value()
    )
    identity = normalise_subject(svc.catalog, request.subject)
    _refuse_naming(svc, request, [identity])
    if svc.requests.get(request.request_ref) is None:
        _refuse_naming(svc, request, locate(svc.catalog, svc.warehouse, request.subject).identities)
    return svc.registrar.register(request, identity, catalog=svc.catalog, run_id=run_id)


def _record_receipt(svc: Services, registration: Registration) -> None:
    """The `received` record, written once by the request's own run (its retry included)."""
    if not registration.created and any(
        r.kind is RecordKind.RECEIVED for r in svc.ledger.show(registration.request_ref)
    ):
        return
    record = svc.requests.require(registration.request_ref)
    svc.ledger.append(
        record.request_ref,
        record.subject_hash,
        RecordKind.RECEIVED,
        {
            "identifier_type": record.identifier_type,
            "pepper_version": record.pepper_version,
            "legal_ground": record.legal_ground.value,
            "received_on": record.received_on.isoformat(),
            "due_on": record.due_on.isoformat(),
            "dry_run": record.dry_run,
            "run_id": record.run_id,
        },
    )


def _refuse_naming(svc: Services, request: ErasureRequest, identities: Any) -> None:
    notes = request.notes.get_secret_value() if request.notes is not None else None
    refuse_identifying_reference(svc.catalog, request.request_ref, identities)
    refuse_if_named(svc.catalog, "notes", notes, identities)


# ---------------------------------------------------------------------------------------------
# 2-3. locate and plan


def plan_request(svc: Services, ref: str, *, now: datetime | None = None) -> Plan:
    """Locate the subject, pin what was found (encrypted), and fix the plan the run acts on."""
    record = svc.requests.require(ref)
    if 1 in svc.plans.versions(ref):
        plan = svc.plans.get(ref, 1)
        if _before_acting(svc, record):  # a retry: finish what the first attempt began
            _after_plan(svc, record, plan, now)
        return plan
    enter(svc.requests, ref, Step.PLAN)
    parked = svc.secrets.unpark(ref)
    subject = SubjectRef(type=record.identifier_type, value=parked.identifier)
    location = locate(svc.catalog, svc.warehouse, subject)
    if location.search is not None:
        erased = _erased_before(svc, ref, location.identities)
        location.search = location.search.model_copy(update={"already_erased_by": erased})
    identities, reference_keys = parked_location(location)
    personal = personal_data(svc.warehouse, location)
    found = {
        "identities": identities,
        "reference_keys": reference_keys,
        "terms": personal.values,
        "names": personal.names,
    }
    svc.secrets.update(ref, parked.model_copy(update=found))
    plan = svc.plans.save(ref, _plan(svc, record, subject, location, now), 1)
    _after_plan(svc, record, plan, now)
    return plan


def _plan(
    svc: Services,
    record: RegisteredRequest,
    subject: SubjectRef,
    location: Location,
    now: datetime | None,
) -> Plan:
    now = now or datetime.now(UTC)
    plan = make_plan(
        svc.catalog,
        subject,
        pepper=svc.peppers.version(record.pepper_version),
        warehouse=svc.warehouse,
        location=location,
        now=now,
        lineage_store=LineageStore(svc.store),
        as_of=now,  # the plan pins the lineage as of the moment it decides
    )
    identities = location.identities or {normalise_subject(svc.catalog, subject)}
    hashes = key_hashes(svc.peppers.all_versions(), identities)
    if items_for(plan, Action.CRYPTO_SHRED) and not any(svc.keystore.exists(h) for h in hashes):
        return escalate_unkeyed(plan)
    return plan


def _erased_before(svc: Services, ref: str, identities: set[Identity]) -> ErasedBefore | None:
    """The earlier request that erased a subject now found nowhere: the first whose tombstone
    of one of its identifiers is on the suppression list and whose plan found them (one that
    found nobody tombstoned the typo it was given, and erased nothing)."""
    for stone in svc.suppression.tombstones_of(identities, svc.peppers.all_versions()):
        earlier = stone.request_ref
        if earlier is None or earlier == ref or 1 not in svc.plans.versions(earlier):
            continue
        if not svc.plans.get(earlier, 1).roots:
            continue
        # A tombstone goes in before any row is erased: only a request signed complete erased.
        done = [
            r
            for r in svc.ledger.show(earlier)
            if r.kind is RecordKind.COMPLETED and r.status is not None
        ]
        if done:  # on the day it was signed complete
            return ErasedBefore(request_ref=earlier, on=done[0].created_at.date())
    return None


def _before_acting(svc: Services, record: RegisteredRequest) -> bool:
    """Whether nothing but the plan step (and the standing rulings it cites) ran yet."""
    if record.status in (RequestStatus.REGISTERED, RequestStatus.PLANNED):
        return True
    return record.status is RequestStatus.FAILED and all(
        a.action == Action.ESCALATE.value for a in svc.action_log.list(record.request_ref)
    )


def _after_plan(svc: Services, record: RegisteredRequest, plan: Plan, now: datetime | None) -> None:
    """What follows the saved plan; each part skips what an earlier attempt already did."""
    ref = record.request_ref
    advance(svc.requests, ref, RequestStatus.PLANNED)
    if record.dry_run:
        # Changes nothing, cites no ruling, and keeps no identifier: the plan is the answer.
        if record.secrets_destroyed_at is None:
            svc.secrets.destroy(ref)
        return
    today = (now or datetime.now(UTC)).date()
    for item in plan.items:
        if item.action is Action.ESCALATE and done(svc.action_log, ref, item) is None:
            cited = cited_standing_ruling(svc.rulings, ref, item, today)
            if cited is not None:
                _carry_out(svc, ref, item, cited)
    pending = pending_escalations(svc, ref)
    if pending and not any(r.kind is RecordKind.ESCALATED for r in svc.ledger.show(ref)):
        svc.ledger.append(
            ref,
            record.subject_hash,
            RecordKind.ESCALATED,
            {
                "awaiting_dpo": [
                    {"dataset": i.dataset, "kind": i.kind, "rule": i.rule, "reason": i.reason}
                    for i in pending
                ]
            },
        )


def items_for(plan: Plan, action: Action) -> list[DatasetRef]:
    """The datasets of the plan's items with `action`, in plan (execution) order."""
    return [item.dataset for item in plan.items if item.action is action]


def pending_escalations(svc: Services, ref: str) -> list[PlanItem]:
    """Escalated items no ruling (standing or the DPO's) has resolved yet."""
    plan = svc.plans.get(ref, 1)
    return [
        item
        for item in plan.items
        if item.action is Action.ESCALATE and done(svc.action_log, ref, item) is None
    ]


# ---------------------------------------------------------------------------------------------
# 4. act: one function per action; each runs once, in the plan's order


def tombstone(svc: Services, ref: str) -> TombstoneEvidence:
    """Suppress every identifier of the subject in future CRM syncs (hashes only)."""
    record, _plan, item = _act(svc, ref, SUPPRESSION_LIST, Action.INSERT_TOMBSTONE)
    pepper = svc.peppers.version(record.pepper_version)
    return run_once(
        svc.action_log,
        ref,
        item,
        TombstoneEvidence,
        lambda: insert_tombstones(svc.suppression, pepper, _identities(svc, ref), ref),
    )


def erase(svc: Services, ref: str, dataset: DatasetRef) -> ErasureEvidence:
    """Delete the subject's rows from one root, after the tombstone, children before parents."""
    _record, plan, item = _act(svc, ref, dataset, Action.ERASE_ROWS)
    _wait(svc, ref, plan, item, "in place before these rows are erased")

    def act() -> ErasureEvidence:
        noted = progress(svc.action_log, ref, item).get("erased")
        try:
            return erase_rows(
                svc.catalog,
                svc.warehouse,
                _relocate(svc, ref),
                dataset,
                before_commit=lambda e: save_progress(
                    svc.action_log, ref, item, erased=e.model_dump(mode="json")
                ),
                earlier=ErasureEvidence.model_validate(noted) if noted else None,
            )
        except EraseFailed as exc:
            raise EraseFailed(f"{exc}{_held_back(svc, ref, plan)}") from None

    return _reclaim_space(svc, ref, item, run_once(svc.action_log, ref, item, ErasureEvidence, act))


def _reclaim_space(
    svc: Services, ref: str, item: PlanItem, erased: ErasureEvidence
) -> ErasureEvidence:
    """Once the delete committed: VACUUM the table, or list it for the daily pass
    (`reclaim_pending`); on the evidence once (a retry finds it there), never after the
    request closed (its record is signed)."""
    if erased.space is not None or svc.requests.require(ref).closed:
        return erased
    space = reclaim_after_delete(
        svc.warehouse,
        svc.catalog.require(item.dataset),
        rows_deleted=erased.rows_deleted,
        request_ref=ref,
        pending=PendingVacuums(svc.store),
        limits=_vacuum_limits(svc),
        lakehouse=erased.history is not None,
    )
    erased = erased.model_copy(update={"space": space})
    svc.action_log.record(ref, item.dataset, item.action, ActionStatus.DONE, erased)
    return erased


def _held_back(svc: Services, ref: str, plan: Plan) -> str:
    """What the plan holds back from erasing (a referencing table among them is what stops a
    parent's delete): its escalations, with their reasons and whether the DPO ruled."""
    held = [
        f"{i.dataset.name} (rule {i.rule}{'' if done(svc.action_log, ref, i) else ', unruled'}: "
        f"{i.reason})"
        for i in plan.items
        if i.action is Action.ESCALATE and i.dataset.namespace != "erasure"
    ]
    return ". The plan holds back: " + "; ".join(held) if held else ""


def shred(svc: Services, ref: str, dataset: DatasetRef) -> ShredEvidence:
    """Destroy every per-subject key of the subject's identifiers, and prove each is gone."""
    _record, _plan, item = _act(svc, ref, dataset, Action.CRYPTO_SHRED)

    def destroying(key_hash: str) -> None:
        noted = progress(svc.action_log, ref, item).get("destroying", [])
        save_progress(svc.action_log, ref, item, destroying=sorted({*noted, key_hash}))

    return run_once(
        svc.action_log,
        ref,
        item,
        ShredEvidence,
        lambda: shred_keys(
            svc.cipher,
            dataset,
            _identities(svc, ref),
            svc.peppers.all_versions(),
            destroyed_by_others(svc.action_log.list(ref), dataset),
            snapshot_retention_days=svc.settings.vault_snapshot_retention_days,
            destroying=destroying,
            destroyed_earlier=progress(svc.action_log, ref, item).get("destroying", []),
            by_other_requests=lambda key_id: destroyed_by_request(
                svc.action_log.done_elsewhere(Action.CRYPTO_SHRED, key_id, ref), key_id
            ),
        ),
    )


def rebuild_artefact(
    svc: Services, ref: str, dataset: DatasetRef, trigger_dag: TriggerDag | None
) -> RebuildEvidence:
    """Re-materialise one derived artefact after every upstream the plan touches.

    A DAG target may start its run and raise AwaitingRun: the action stays pending with the
    run on record, and calling this again with a `trigger_dag` that returns the run's outcome
    finishes it (the feedback cycle emptied once, not again on the resume).
    """
    _record, plan, item = _act(svc, ref, dataset, Action.REBUILD)
    _wait(svc, ref, plan, item, "done before it is rebuilt")

    def act() -> RebuildEvidence:
        emptied = _empty_once(svc, ref, plan, item)
        try:
            evidence = rebuild(
                svc.catalog,
                svc.warehouse,
                dataset,
                trigger_dag=trigger_dag,
                ready_at=_ready_at(svc, ref, plan, item),
                planned=item.evidence,
            )
        except AwaitingRun as waiting:
            awaiting = {"dag_id": waiting.dag_id, "run_id": waiting.run_id}
            save_progress(svc.action_log, ref, item, awaiting_run=awaiting)
            raise
        except RebuildFailed as exc:
            if not emptied:
                raise
            raise RebuildFailed(
                f"{exc}. Its feedback loop ({', '.join(r.name for r in emptied)}) was emptied "
                "first and stays empty for everyone until this rebuild succeeds: fix the "
                "cause and clear the task"
            ) from None
        return evidence.model_copy(
            update={"emptied_first": dataset in emptied or evidence.emptied_first}
        )

    return run_once(svc.action_log, ref, item, RebuildEvidence, act)


def _empty_once(svc: Services, ref: str, plan: Plan, item: PlanItem) -> list[DatasetRef]:
    """Empty the item's feedback cycle if it is the cycle's first rebuild and no earlier
    attempt did (a resumed or retried rebuild must not throw away what was rebuilt since)."""
    earlier = progress(svc.action_log, ref, item).get("emptied")
    if earlier is not None:
        return [DatasetRef(**d) for d in earlier]
    emptied = empty_before_rebuild(svc.catalog, svc.warehouse, plan, item.dataset)
    if emptied:
        save_progress(
            svc.action_log,
            ref,
            item,
            emptied=[d.as_dict() for d in emptied],
            emptied_at=datetime.now(UTC).isoformat(),
        )
    return emptied


def _ready_at(svc: Services, ref: str, plan: Plan, item: PlanItem) -> datetime:
    """When the sources of `item`'s rebuild were clean for this request: the last of what the
    plan puts before it was done, its feedback cycle emptied. A rebuild verify reopened (its
    run read the subject's rows again) or with nothing before it counts from now. Kept with
    the action's progress, so a resumed or retried attempt judges its run by the same time."""
    entry = svc.action_log.get(ref, item.dataset, item.action)
    evidence = entry.evidence if entry is not None else {}
    kept = dict(evidence.get("progress") or {})
    if "ready_at" in kept:
        return datetime.fromisoformat(kept["ready_at"])
    needed = {(i.dataset, i.action.value) for i in must_precede(plan, item)}
    done_at = [
        a.updated_at
        for a in svc.action_log.list(ref)
        if (a.dataset, a.action) in needed and a.status is ActionStatus.DONE
    ]
    if "emptied_at" in kept:
        done_at.append(datetime.fromisoformat(kept["emptied_at"]))
    reopened = "earlier" in evidence or "reopened" in evidence
    ready_at = datetime.now(UTC) if reopened or not done_at else max(done_at)
    save_progress(svc.action_log, ref, item, ready_at=ready_at.isoformat())
    return ready_at


def confirm_aggregate(svc: Services, ref: str, dataset: DatasetRef) -> AggregateEvidence:
    """Measure k again once the roots are erased, and record the numbers."""
    _record, plan, item = _act(svc, ref, dataset, Action.AGGREGATE_OK)
    _wait(svc, ref, plan, item, "erased before k is confirmed")
    ds = svc.catalog.require(dataset)
    return run_once(
        svc.action_log,
        ref,
        item,
        AggregateEvidence,
        lambda: confirm_k(svc.catalog, svc.warehouse, ds, item.evidence),
    )


def rule(svc: Services, ref: str, dataset: DatasetRef, answer: DpoAnswer) -> RulingEvidence:
    """Record the DPO's answer to one escalation and carry it out."""
    _record, _plan, item = _act(svc, ref, dataset, Action.ESCALATE)
    finished = done(svc.action_log, ref, item)
    if finished is not None:  # a worker lost before its deletion's space step: finish it
        return _reclaim_deleted(svc, ref, item, RulingEvidence.model_validate(finished.evidence))
    _check_answer(svc, ref, item, answer)
    try:
        ruling = Ruling(
            dataset=item.dataset,
            request_ref=ref,
            option=answer.option,
            author_id=answer.author_id,
            author_name=answer.author_name,
            justification=answer.justification.strip(),
            exemption=answer.exemption,
            scheduled_by=answer.scheduled_by,
            standing_until=answer.standing_until,
            decided_at=answer.decided_at,
        )
    except ValidationError as exc:
        raise StepError(
            f"the DPO's answer on {dataset.name!r} is incomplete ({describe_invalid(exc)}): "
            "clear its dpo_decides prompt and the tasks after it, and answer again"
        ) from None
    return _carry_out(svc, ref, item, ruling)


def rule_on(svc: Services, asked: Asked, answer: DpoAnswer, shown: str) -> RulingEvidence:
    """Record the answer to one prompt as the ruling on the artefact that prompt asked about,
    and on nothing else: the prompt must come from the request's acting plan, and the
    question it showed (`shown`, its subject) must be that artefact's."""
    ref, name = asked.request_ref, asked.dataset.name
    plan = svc.plans.get(ref, 1)
    if asked.plan_version != 1 or asked.lineage_snapshot != plan.lineage_snapshot:
        raise StepError(
            f"the prompt on {name!r} was asked from another plan than request {ref}'s (plan "
            f"version {asked.plan_version}, lineage {asked.lineage_snapshot[:12]}): its answer "
            "is no ruling on this request. Clear the run's plan task and everything after it "
            "to ask again"
        )
    item = next((i for i in plan.items if i.dataset == asked.dataset), None)
    if item is None or escalation_prompt(item).subject != shown:
        raise StepError(
            f"the prompt answered showed {shown!r}, which is not the question on {name!r}: "
            "its answer is no ruling on it. Clear the run's plan task and everything after it "
            "to ask again"
        )
    return rule(svc, ref, asked.dataset, answer)


def ruling_on_record(svc: Services, ref: str, dataset: DatasetRef) -> RulingEvidence | None:
    """The ruling carried out on the request's escalation of `dataset`, if there is one."""
    entry = svc.action_log.get(ref, dataset, Action.ESCALATE)
    if entry is None or entry.status is not ActionStatus.DONE:
        return None
    return RulingEvidence.model_validate(entry.evidence)


def require_rulings(svc: Services, ref: str) -> int:
    """Every escalation of the plan has a ruling on record (the DPO's answer to its own prompt,
    or a standing ruling); the number of escalations. A prompt marked success or skipped by
    hand was not answered, so it is no ruling: this says which to clear and answer."""
    pending = pending_escalations(svc, ref)
    if pending:
        names = ", ".join(repr(item.dataset.name) for item in pending)
        raise StepError(
            f"request {ref}: no ruling on record for {names}: the prompt was not answered "
            "(marked success or skipped by hand, or it failed before the answer was recorded). "
            "Clear that dpo_decides prompt (with the tasks after it) and answer it"
        )
    plan = svc.plans.get(ref, 1)
    return sum(1 for item in plan.items if item.action is Action.ESCALATE)


def _check_answer(svc: Services, ref: str, item: PlanItem, answer: DpoAnswer) -> None:
    """Only a DPO rules, with an option this escalation offers, not naming the subject."""
    again = "clear its dpo_decides prompt and the tasks after it, and answer again"
    dpo_roles = set(svc.settings.dpo_roles)
    if svc.settings.require_dpo_role and not dpo_roles & set(answer.author_roles or ()):
        raise StepError(
            f"the answer on {item.dataset.name!r} was given by {answer.author_name}, who holds "
            f"none of the roles {', '.join(sorted(dpo_roles))}: only a DPO rules. A DPO {again}"
        )
    allowed = options_for(item)
    if answer.option not in allowed:
        raise StepError(
            f"the answer on {item.dataset.name!r} must choose one of: "
            + "; ".join(OPTION_LABELS[o] for o in allowed)
            + f": {again}"
        )
    _refuse_if_named(svc, ref, "justification", answer.justification)


def _carry_out(svc: Services, ref: str, item: PlanItem, ruling: Ruling) -> RulingEvidence:
    record = svc.requests.require(ref)
    carried = run_once(
        svc.action_log,
        ref,
        item,
        RulingEvidence,
        lambda: carry_out(
            ref=ref,
            subject_hash=record.subject_hash,
            item=item,
            ruling=ruling,
            rulings=svc.rulings,
            ledger=svc.ledger,
            actions=svc.action_log,
            catalog=svc.catalog,
            warehouse=svc.warehouse,
            relocate=lambda: _relocate(svc, ref),
            due_on=record.effective_due_on,
        ),
    )
    return _reclaim_deleted(svc, ref, item, carried)


def _reclaim_deleted(
    svc: Services, ref: str, item: PlanItem, ruled: RulingEvidence
) -> RulingEvidence:
    """A ruling's deletion by this system, its space reclaimed as an erasure's is."""
    deletion = ruled.deletion or {}
    ds = svc.catalog.dataset(item.dataset)
    if deletion.get("done_by") != "erasure" or "space" in deletion or ds is None:
        return ruled
    if svc.requests.require(ref).closed:
        return ruled
    space = reclaim_after_delete(
        svc.warehouse,
        ds,
        rows_deleted=int(deletion.get("rows_deleted") or 0),
        request_ref=ref,
        pending=PendingVacuums(svc.store),
        limits=_vacuum_limits(svc),
    )
    deletion = {**deletion, "space": space.model_dump(mode="json")}
    ruled = ruled.model_copy(update={"deletion": deletion})
    svc.action_log.record(ref, item.dataset, item.action, ActionStatus.DONE, ruled)
    return ruled


def _vacuum_limits(svc: Services) -> VacuumLimits:
    return VacuumLimits(
        lock_timeout_seconds=svc.settings.vacuum_lock_timeout_seconds,
        statement_timeout_seconds=svc.settings.vacuum_statement_timeout_seconds,
    )


def confirm_deletion(
    svc: Services, ref: str, dataset: DatasetRef, confirmed_by: str, note: str
) -> RulingEvidence:
    """Record that the owner of an artefact this system cannot reach deleted the person there
    (`erasure requests confirm-deletion`): who confirmed it and how; verify then passes it."""
    record = svc.requests.require(ref)
    if record.closed:
        raise StepError(f"request {ref} is {record.status.value}: nothing is pending any more")
    plan = svc.plans.get(ref, 1)
    item = next(
        (i for i in plan.items if i.dataset == dataset and i.action is Action.ESCALATE), None
    )
    entry = done(svc.action_log, ref, item) if item is not None else None
    if item is None or entry is None:
        raise StepError(
            f"request {ref} has no ruled escalation on {dataset.qualified!r}: see its plan "
            "(`erasure audit show`) for what awaits an owner"
        )
    if record.secrets_destroyed_at is None:
        _refuse_if_named(svc, ref, "note", note)
    try:
        confirmed = confirm_owner_deletion(entry.evidence, confirmed_by, note, datetime.now(UTC))
    except DeletionRefused as exc:
        raise StepError(f"request {ref}, {dataset.name}: {exc}") from None
    svc.action_log.record(ref, dataset, Action.ESCALATE, ActionStatus.DONE, confirmed)
    return RulingEvidence.model_validate(confirmed)


# ---------------------------------------------------------------------------------------------
# 5. verify


def verify(svc: Services, ref: str, *, now: datetime | None = None) -> VerificationEvidence:
    """The second look: recount, keys gone, tombstones present, escalations ruled, re-plan."""
    now = now or datetime.now(UTC)
    record = enter(svc.requests, ref, Step.VERIFY)
    plan = svc.plans.get(ref, 1)
    parked = svc.secrets.unpark(ref)
    subject = SubjectRef(type=record.identifier_type, value=parked.identifier)
    replan = _plan(svc, record, subject, _relocate(svc, ref), now)
    checks, recounts = second_look(
        catalog=svc.catalog,
        warehouse=svc.warehouse,
        plan=plan,
        replan=replan,
        identities=parked.identities,
        reference_keys=parked.reference_keys,
        status_of=lambda item: svc.action_log.status(ref, item.dataset, item.action),
        ruled=lambda dataset: (
            svc.action_log.status(ref, dataset, Action.ESCALATE) is ActionStatus.DONE
        ),
        keystore=svc.keystore,
        key_hashes=key_hashes(svc.peppers.all_versions(), parked.identities),
        suppression=svc.suppression,
        pepper=svc.peppers.version(record.pepper_version),
        submissions_held=svc.submissions.held(ref),
        fresh_write=lambda item: _fresh_write(svc, ref, item, now),
        owner_deletions={
            a.dataset.name: a.evidence["deletion"]
            for a in svc.action_log.list(ref)
            if a.action == Action.ESCALATE.value
            and a.status is ActionStatus.DONE
            and "done_by" in (a.evidence.get("deletion") or {})
            and a.evidence["deletion"]["done_by"] != "erasure"
        },
    )
    found_again = {r.dataset: r.found for r in recounts if r.found}
    for item in plan.items:
        if item.dataset.name in found_again and item.action in (Action.ERASE_ROWS, Action.REBUILD):
            reopen(svc.action_log, ref, item, found_again[item.dataset.name])
    version = max(svc.plans.versions(ref)) + 1
    svc.plans.save(ref, replan, version)
    result = VerificationEvidence(
        passed=all(c.passed for c in checks), checked_at=now, checks=checks, replan_version=version
    )
    status = ActionStatus.DONE if result.passed else ActionStatus.FAILED
    svc.action_log.record(ref, VERIFICATION, _VERIFY, status, result)
    if not result.passed:
        failed = result.failures()
        raise VerificationFailed(
            f"request {ref}: verification failed on {len(failed)} check(s): "
            + "; ".join(failed[:10])
            + (
                f". The subject was found again in {', '.join(found_again)}: their "
                "erase/rebuild is reopened, so clearing those tasks (with downstream) acts on "
                "them again"
                if found_again
                else ""
            ),
            failed,
        )
    return result


# ---------------------------------------------------------------------------------------------
# 6. complete


def complete(svc: Services, ref: str, *, now: datetime | None = None) -> CompletionRecord:
    """Verify again, destroy the request key (raw identifier), then append the signed
    completion record."""
    now = now or datetime.now(UTC)
    record = svc.requests.require(ref)
    existing = [r for r in svc.ledger.show(ref) if r.kind is RecordKind.COMPLETED]
    if existing:  # a retry after the record was written: finish what that attempt began
        if record.secrets_destroyed_at is None:
            svc.secrets.destroy(ref)
        svc.ledger.anchor_head()  # the attempt may have failed publishing the head
        if existing[0].status is not None:
            if record.status is RequestStatus.FAILED:
                enter(svc.requests, ref, Step.COMPLETE)
            advance(svc.requests, ref, RequestStatus(existing[0].status.value))
        return existing[0]
    verification = _verification(svc, ref, record)
    enter(svc.requests, ref, Step.COMPLETE)
    # The identifier goes first: a record signed before it would claim completion while the
    # system still holds it, for good if the destroy then failed and nobody cleared the task.
    if record.secrets_destroyed_at is None:
        svc.secrets.destroy(ref)
    body = completion_body(
        record,
        svc.plans.get(ref, 1),
        svc.action_log.list(ref),
        svc.rulings.for_request(ref),
        verification,
        completed=now,
        interventions=svc.interventions.for_request(ref),
        catalog=svc.catalog,
    )
    status = (
        RecordStatus.COMPLETE_WITH_EXEMPTIONS
        if any(r.exemption for r in body.rulings)
        else RecordStatus.COMPLETE
    )
    completed = svc.ledger.append(ref, record.subject_hash, RecordKind.COMPLETED, body, status)
    advance(svc.requests, ref, RequestStatus(status.value))
    return completed


def fail(svc: Services, ref: str, reason: str, run_id: str) -> None:
    """Record that the request's own run failed (clearing the failed task resumes it); once
    per failure: a request on record as failed is not recorded again until it moved on."""
    record = svc.requests.get(ref)
    if record is None or record.closed or record.run_id != run_id:
        return  # not registered, done, or another submission's failure: not this request's
    if any(r.kind is RecordKind.COMPLETED for r in svc.ledger.show(ref)):
        return  # signed complete (its registry entry closes next): a completion is final
    # The failure callback, the reconciler and two tasks failing at once may all see the
    # same failure: only the call that moves the request to failed signs the record.
    if not svc.requests.move(ref, RequestStatus.FAILED):
        return
    svc.ledger.append(
        ref, record.subject_hash, RecordKind.FAILED, {"reason": reason}, RecordStatus.FAILED
    )


# How long a sealed justification waits for its prompt's task (which opens it within
# seconds of the answer); the reconciler then purges it.
NOTE_LIFETIME = timedelta(days=7)


def reconcile(svc: Services, run_state: RunState, *, now: datetime | None = None) -> list[Limbo]:
    """Record failed every open request whose run is gone or ended without closing it (the
    parked identifier kept: clearing or restarting the run resumes it); those it found. Purge
    the sealed justifications older than NOTE_LIFETIME."""

    def forced(record: RegisteredRequest) -> str | None:
        """The last time a person set the request's run's state by hand, described."""
        marked = [  # since the request last moved: an older one was resumed from
            i
            for i in svc.interventions.for_request(record.request_ref)
            if i.run_id == record.run_id and i.target == RUN and i.at >= record.updated_at
        ]
        return marked[-1].describe() if marked else None

    found = find_limbo(svc.requests, run_state, now=now, forced=forced)
    for limbo in found:
        fail(svc, limbo.request_ref, limbo.reason, limbo.run_id)
    # A justification sealed for a prompt whose task never opened it (cleared, failed first).
    svc.submissions.purge_notes((now or datetime.now(UTC)) - NOTE_LIFETIME)
    # Last, so a Vault outage does not keep requests in limbo: a head whose publishing
    # failed is published now at last (a failure here fails the task; its retry resumes).
    svc.ledger.anchor_head()
    return found


# ---------------------------------------------------------------------------------------------
# deadlines (Art. 12(3))


def reprove(svc: Services) -> Reproof:
    """Every completed request proved again: the records verify (against the published
    heads), every request registered as completed has its completed record, its tombstones
    are still in the suppression list and every key it destroyed, its own request key
    included, is still absent (erasure.reprove; `.require()` raises on a gap)."""
    chain = svc.ledger.verify()
    completed = svc.ledger.list(kind=RecordKind.COMPLETED)
    on_record = {r.request_ref for r in completed}
    found: list[Missing] = []
    if not chain.ok:  # what the bodies below say cannot be trusted
        found.append(Missing(request_ref="(all)", what=f"the records: {chain.summary()}"))
    for registered in svc.requests.list():
        if registered.status in CLOSED_STATUSES and registered.request_ref not in on_record:
            found.append(
                Missing(
                    request_ref=registered.request_ref,
                    what="registered as completed, but no completed record is on the chain",
                )
            )

    def request_key(ref: str) -> str | None:
        registered = svc.requests.get(ref)
        if registered is None:
            found.append(Missing(request_ref=ref, what="completed on record, but not registered"))
            return None
        return svc.keystore.key_id(svc.secrets.key_hash(ref, registered.pepper_version))

    proof = reprove_completed(
        completed, svc.suppression.contains, KeyProbe(svc.vault).exists, request_key
    )
    return proof.model_copy(update={"missing": [*found, *proof.missing]})


def reclaim_pending(svc: Services, *, today: date | None = None) -> VacuumPassResult:
    """The daily pass: VACUUM each table an erasure could not, and record when it ran
    (erasure.actions.reclaim); `.require()` raises naming any past the date it was due by."""
    pending = PendingVacuums(svc.store)
    return run_pending(pending, svc.catalog, svc.warehouse, _vacuum_limits(svc), today=today)


def extend(svc: Services, ref: str, months: int, reason: str, by: str) -> date:
    """Extend the deadline by one or two months, once, with the reason and the DPO who asked
    (`by`, her login); signed on record."""
    if months not in (1, 2):
        raise StepError("an extension is 1 or 2 months (Art. 12(3))")
    if not by.strip():
        raise StepError("an extension names the DPO who asked for it: none was given")
    if svc.requests.require(ref).secrets_destroyed_at is None:
        _refuse_if_named(svc, ref, "reason", reason)
    record = svc.requests.extend(ref, 1 if months == 1 else 2, reason)
    assert record.extended_until is not None
    svc.ledger.append(
        ref,
        record.subject_hash,
        RecordKind.EXTENDED,
        {
            "due_on": record.due_on.isoformat(),
            "extended_until": record.extended_until.isoformat(),
            "months": months,
            "reason": record.extension_reason,
            "by": by,
        },
    )
    return record.extended_until


# ---------------------------------------------------------------------------------------------
# internals


def _act(
    svc: Services, ref: str, dataset: DatasetRef, action: Action
) -> tuple[RegisteredRequest, Plan, PlanItem]:
    """The request, its plan and the plan's item for (dataset, action), the act step entered."""
    plan = svc.plans.get(ref, 1)
    item = next((i for i in plan.items if i.dataset == dataset and i.action is action), None)
    if item is None:
        raise StepError(
            f"the plan of request {ref!r} has no {action.value} item for {dataset.qualified!r}"
        )
    record = svc.requests.require(ref)
    if done(svc.action_log, ref, item) is None:
        record = enter(svc.requests, ref, Step.ACT)
    return record, plan, item


def _wait(svc: Services, ref: str, plan: Plan, item: PlanItem, what: str) -> None:
    """NotYet until what must precede `item` (the planner says) is done; bounded."""
    if done(svc.action_log, ref, item) is not None:
        return
    wait_for(
        svc.action_log,
        ref,
        item,
        must_precede(plan, item),
        what,
        grace=timedelta(seconds=svc.settings.upstream_retry_grace_seconds),
        timeout=timedelta(seconds=svc.settings.upstream_wait_timeout_seconds),
    )


def _relocate(svc: Services, ref: str) -> Location:
    """The subject's rows as pinned at plan time, found again without walking deleted rows."""
    parked = svc.secrets.unpark(ref)
    if not parked.identities:
        raise StepError(f"request {ref!r} has not been planned: run the plan step first")
    svc.warehouse.forget_tables()
    return relocate(svc.catalog, svc.warehouse, parked.identities, parked.reference_keys)


def _fresh_write(svc: Services, ref: str, item: PlanItem, now: datetime) -> str | None:
    """The proof that a rebuilt artefact with nothing to search was written afresh."""
    entry = svc.action_log.get(ref, item.dataset, item.action)
    if entry is None or entry.status is not ActionStatus.DONE:
        return None
    return fresh_write_proof(item, entry.evidence, LineageStore(svc.store).completed_writes, now)


def _identities(svc: Services, ref: str) -> list[Identity]:
    return list(svc.secrets.unpark(ref).identities)


def _refuse_if_named(svc: Services, ref: str, field: str, text: str | None) -> None:
    """NamesSubject if `text` names the subject: its identities or the personal data on its
    rows, as located (erasure.free_text)."""
    if text:
        parked = svc.secrets.unpark(ref)
        refuse_if_named(
            svc.catalog, field, text, parked.identities, parked.terms, names=parked.names
        )


def _verification(svc: Services, ref: str, record: RegisteredRequest) -> VerificationEvidence:
    """The verification `complete` signs, taken again now while the identifier is held: rows
    restored, a ruling given or a failure since the verify step all leave the record true.
    Without a passed verify step (a task marked success by hand) it waits (NotYet) until
    every action of the plan is done.

    Once the identifier is destroyed (a retry of a complete that died after destroying it,
    recorded or not) nothing can be looked at again: the verification on record is signed
    only if it passed and nothing of the request changed after it."""
    entry = svc.action_log.get(ref, VERIFICATION, _VERIFY)
    request_key = svc.secrets.key_hash(ref, record.pepper_version)
    held = record.secrets_destroyed_at is None and svc.keystore.exists(request_key)
    if held and 1 in svc.plans.versions(ref):
        if entry is None or entry.status is not ActionStatus.DONE:
            # The verify task did not pass here (marked success by hand, say): what it checks
            # is checked now, once everything it checks is done; until then this step waits.
            unfinished = [
                f"{item.dataset.name} ({item.action.value})"
                for item in svc.plans.get(ref, 1).items
                if svc.action_log.status(ref, item.dataset, item.action) is not ActionStatus.DONE
            ]
            if unfinished:
                raise NotYet(
                    f"request {ref} is not verified and {len(unfinished)} action(s) of its plan "
                    f"are not done ({', '.join(unfinished[:5])}): complete waits for them, "
                    "then verifies"
                )
        return verify(svc, ref)
    if entry is None or entry.status is not ActionStatus.DONE:
        raise StepError(
            f"request {ref}: not verified; nothing is reported complete before verify passes"
        )
    later = [
        a
        for a in svc.action_log.list(ref)
        if a.updated_at > entry.updated_at and (a.dataset, a.action) != (VERIFICATION, _VERIFY)
    ]
    if later:
        raise StepError(
            f"request {ref}: {later[0].dataset.name} ({later[0].action}) changed after the "
            "verification, and the identifier is already destroyed, so it cannot be verified "
            "again: nothing is reported complete. Record what happened in the runbook and "
            "open a new request for the subject"
        )
    return VerificationEvidence.model_validate(entry.evidence)
