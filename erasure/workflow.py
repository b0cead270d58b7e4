"""The steps of an erasure (DESIGN section 1) as functions over models.

The CLI, the DAG and the plugin all go through here, so that none of them holds decisions.
Every step is idempotent on the request reference: what is done is in the action log, and a
retried step returns the recorded evidence instead of acting twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError

from erasure.actions.erase_rows import erase_rows
from erasure.actions.rebuild import RunOutcome, empty_before_rebuild, rebuild
from erasure.actions.transaction import describe_failure, transaction
from erasure.audit.records import CompletionRecord, RecordKind, RecordStatus
from erasure.catalog import Catalog
from erasure.errors import ErasureError, RebuildFailed, VerificationFailed
from erasure.kanon import measure_k
from erasure.lineage.openlineage import RunEvent
from erasure.lineage.sources import build_lineage
from erasure.lineage.store import LineageStore
from erasure.locate import Identity, Location, locate, normalise_subject, parked_location, relocate
from erasure.model import Action, DatasetRef, Plan, PlanItem, SubjectRef, SubjectSummary
from erasure.planner import DEFAULT_MAX_NODES, SUPPRESSION_LIST, plan_erasure
from erasure.pseudonym import Pepper, subject_hash
from erasure.requests import (
    SCRUBBED,
    ActionRecord,
    ActionStatus,
    ErasureRequest,
    ParkedSecret,
    RegisteredRequest,
    Registration,
    RequestStatus,
    dataset_label,
)
from erasure.rulings import OPTION_LABELS, Ruling, RulingOption
from erasure.services import Services
from erasure.suppression import Tombstone
from erasure.verify import recount
from erasure.warehouse import Warehouse, split_name

log = logging.getLogger(__name__)

TriggerDag = Callable[[str], RunOutcome]

# The DPO's choices on an escalated artefact, by the label the Airflow prompt shows.
DPO_OPTIONS: dict[str, RulingOption] = {label: option for option, label in OPTION_LABELS.items()}

# The verification is logged like an action, so `complete` reads what `verify` found.
_VERIFICATION = DatasetRef("erasure", "verification")
_VERIFY = "verify"


class StepError(ErasureError):
    """A step cannot run at all; the message says what must happen first."""


class NotYet(StepError):
    """A step must wait for others of the same run (lineage or foreign-key order): retry soon."""


# ---------------------------------------------------------------------------------------------
# Planning without a request (CLI `plan`, `demo`)


def summarise_subject(
    catalog: Catalog, subject: SubjectRef, pepper: Pepper | None
) -> SubjectSummary:
    """The subject as documents may show it: type, and the keyed hash when a pepper is at hand."""
    identity = normalise_subject(catalog, subject)
    if pepper is None:
        return SubjectSummary(type=subject.type)
    return SubjectSummary(
        type=subject.type,
        hash=subject_hash(pepper, identity.type, identity.value),
        pepper_version=pepper.version,
    )


def make_plan(
    catalog: Catalog,
    subject: SubjectRef,
    *,
    pepper: Pepper | None = None,
    warehouse: Warehouse | None = None,
    location: Location | None = None,
    events: Sequence[RunEvent] = (),
    max_nodes: int = DEFAULT_MAX_NODES,
    now: datetime | None = None,
    lineage_store: LineageStore | None = None,
    as_of: datetime | None = None,
) -> Plan:
    """Locate the subject, build the lineage the catalog names, and decide every artefact.

    With `lineage_store` the lineage is the store's projection (sources synced first);
    `as_of` pins it to an instant (None: the current lineage).
    """
    summary = summarise_subject(catalog, subject, pepper)
    own = warehouse is None
    warehouse = warehouse or Warehouse(catalog)
    try:
        location = location or locate(catalog, warehouse, subject)
        lineage = build_lineage(catalog, warehouse, events, store=lineage_store, as_of=as_of)
        return plan_erasure(
            catalog, warehouse, location, lineage, summary, max_nodes=max_nodes, now=now
        )
    finally:
        if own:
            warehouse.dispose()


# ---------------------------------------------------------------------------------------------
# 1. register


def register(svc: Services, conf: Mapping[str, Any], run_id: str) -> Registration:
    """Validate the submitted request, hash and park its identifier; idempotent on the ref.

    A cleared and rerun run finds its conf already scrubbed: it resumes the request it owns.
    """
    if conf.get("identifier") == SCRUBBED:
        record = _request(svc, str(conf.get("request_ref")))
        return Registration(
            request_ref=record.request_ref,
            subject_hash=record.subject_hash,
            created=False,
            owner_run_id=record.run_id,
            status=record.status,
        )
    request = ErasureRequest.parse(conf)
    registration = svc.registry.register(request, catalog=svc.catalog, run_id=run_id)
    # Its owner's retry also writes the `received` record if the first attempt did not.
    if registration.created or (
        registration.owner_run_id == run_id
        and not any(r.kind is RecordKind.RECEIVED for r in svc.ledger.show(request.request_ref))
    ):
        record = _request(svc, request.request_ref)
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
                "run_id": run_id,
            },
            forbidden=_forbidden(request.identifier.get_secret_value()),
        )
    return registration


# ---------------------------------------------------------------------------------------------
# 2-3. locate and plan


def plan_request(svc: Services, ref: str, *, now: datetime | None = None) -> Plan:
    """Locate the subject, pin what was found (encrypted), and fix the plan the run acts on."""
    record = _request(svc, ref)
    if 1 in svc.registry.plan_versions(ref):
        plan = svc.registry.plan(ref, 1)
        if _before_acting(svc, record):  # a retry: finish what the first attempt began
            _after_plan(svc, record, plan, now)
        return plan
    parked = svc.registry.unpark(ref)
    subject = SubjectRef(type=record.identifier_type, value=parked.identifier)
    location = locate(svc.catalog, svc.warehouse, subject)
    identities, reference_keys = parked_location(location)
    svc.registry.update_parked(
        ref, parked.model_copy(update={"identities": identities, "reference_keys": reference_keys})
    )
    pepper = svc.pepper(record.pepper_version)
    now = now or datetime.now(UTC)
    plan = make_plan(
        svc.catalog,
        subject,
        pepper=pepper,
        warehouse=svc.warehouse,
        location=location,
        now=now,
        lineage_store=LineageStore(svc.store),
        as_of=now,  # the plan pins the lineage as of the moment it decides
    )
    svc.registry.save_plan(ref, plan, 1)
    _after_plan(svc, record, plan, now)
    return plan


def _before_acting(svc: Services, record: RegisteredRequest) -> bool:
    """Whether nothing but the plan step (and the standing rulings it cites) ran yet."""
    if record.status in (RequestStatus.REGISTERED, RequestStatus.PLANNED):
        return True
    return record.status is RequestStatus.FAILED and all(
        a.action == Action.ESCALATE.value for a in svc.registry.actions(record.request_ref)
    )


def _after_plan(svc: Services, record: RegisteredRequest, plan: Plan, now: datetime | None) -> None:
    """What follows the saved plan; each part skips what an earlier attempt already did."""
    ref = record.request_ref
    _advance(svc, ref, RequestStatus.PLANNED)
    if record.dry_run:
        # Changes nothing, cites no ruling, and keeps no identifier: the plan is the answer.
        if record.secrets_destroyed_at is None:
            svc.registry.destroy_secrets(ref)
        return
    for item in plan.items:
        if item.action is Action.ESCALATE and not _ruled(svc, ref, item.dataset):
            _apply_standing_ruling(svc, ref, item, (now or datetime.now(UTC)).date())
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


def items_for(plan: Plan, action: Action) -> list[str]:
    """Dataset names of the plan's items with `action`, in plan (execution) order."""
    return [item.dataset["name"] for item in plan.items if item.action is action]


def pending_escalations(svc: Services, ref: str) -> list[PlanItem]:
    """Escalated items no ruling (standing or the DPO's) has resolved yet."""
    plan = svc.registry.plan(ref, 1)
    return [
        item
        for item in plan.items
        if item.action is Action.ESCALATE
        and svc.registry.action_status(ref, _ref(item), Action.ESCALATE) is not ActionStatus.DONE
    ]


def escalation_prompt(item: PlanItem) -> dict[str, str]:
    """The subject and body of the DPO's prompt for one escalated artefact (no identifier)."""
    lines = [
        f"**Artefact** `{item.dataset['name']}` ({item.kind}, "
        f"namespace `{item.dataset['namespace']}`)",
        f"**Why it escalates** (rule {item.rule}): {item.reason}",
    ]
    if item.upstreams:
        lines.append("**Derived from**: " + ", ".join(f"`{u}`" for u in item.upstreams))
    for key, value in sorted(item.evidence.items()):
        if key != "gaps":
            lines.append(f"- {key}: {value}")
    lines.append(
        "Choose what happens to this artefact and justify it; a standing ruling applies to "
        "later requests for this dataset until the date you give."
    )
    return {"subject": f"Erasure: decide on {item.dataset['name']}", "body": "\n\n".join(lines)}


# ---------------------------------------------------------------------------------------------
# 4. act


def erase(svc: Services, ref: str, dataset: str) -> dict[str, Any]:
    """Delete the subject's rows from one root, children before parents."""
    plan, item = _item(svc, ref, dataset, Action.ERASE_ROWS)
    done = _done(svc, ref, item)
    if done is not None:
        return done
    tombstoned = svc.registry.action_status(ref, SUPPRESSION_LIST, Action.INSERT_TOMBSTONE)
    if tombstoned is not ActionStatus.DONE:
        raise NotYet(
            f"request {ref}: the tombstone must be in place before rows are erased, or the "
            "nightly CRM sync loads them again; waiting for it"
        )
    earlier = items_for(plan, Action.ERASE_ROWS)
    _require_done(svc, ref, plan, earlier[: earlier.index(dataset)], "erased before it")
    return _run(
        svc, ref, item, lambda: erase_rows(svc.catalog, svc.warehouse, _relocate(svc, ref), dataset)
    )


def rebuild_artefact(
    svc: Services, ref: str, dataset: str, trigger_dag: TriggerDag | None
) -> dict[str, Any]:
    """Re-materialise one derived artefact after every upstream the plan touches."""
    plan, item = _item(svc, ref, dataset, Action.REBUILD)
    done = _done(svc, ref, item)
    if done is not None:
        return done
    # Upstreams first; inside a feedback cycle, the members in plan order instead.
    position = {i.dataset["name"]: n for n, i in enumerate(plan.items)}
    before = [
        i.dataset["name"]
        for i in plan.items
        if i.action in (Action.ERASE_ROWS, Action.REBUILD)
        and (
            position[i.dataset["name"]] < position[dataset]
            if _same_cycle(plan, i.dataset["name"], dataset)
            else i.dataset["name"] in item.upstreams
        )
    ]
    _require_done(svc, ref, plan, before, "done before it is rebuilt")

    def act() -> BaseModel:
        emptied = empty_before_rebuild(svc.catalog, svc.warehouse, plan, dataset)
        try:
            evidence = rebuild(svc.catalog, svc.warehouse, dataset, trigger_dag=trigger_dag)
        except RebuildFailed as exc:
            if not emptied:
                raise
            raise RebuildFailed(
                f"{exc}. Its feedback loop ({', '.join(emptied)}) was emptied first and stays "
                "empty for everyone until this rebuild succeeds: fix the cause and clear the task"
            ) from None
        return evidence.model_copy(
            update={"emptied_first": dataset in emptied or evidence.emptied_first}
        )

    return _run(svc, ref, item, act)


def shred(svc: Services, ref: str, dataset: str) -> dict[str, Any]:
    """Destroy every per-subject key of the subject's identifiers, and prove each is gone."""
    _plan, item = _item(svc, ref, dataset, Action.CRYPTO_SHRED)
    done = _done(svc, ref, item)
    if done is not None:
        return done

    def act() -> dict[str, Any]:
        keys = []
        earlier = _shredded_for_others(svc, ref, item)
        for key_hash in _identity_hashes(svc, ref):
            if svc.keystore.exists(key_hash):
                keys.append(svc.cipher.shred(key_hash).model_dump(mode="json"))
            elif svc.keystore.key_id(key_hash) in earlier:
                # The subject's key also sealed another dataset and went with it: cite that.
                keys.append(earlier[svc.keystore.key_id(key_hash)])
        now = datetime.now(UTC)
        expiry = max(
            (date.fromisoformat(k["snapshot_expiry_date"]) for k in keys),
            default=now.date() + timedelta(days=svc.settings.vault_snapshot_retention_days),
        )
        return {
            "dataset": dataset,
            "keys": keys,
            "keys_shredded": sum(1 for k in keys if not k["already_absent"]),
            "identifiers_checked": len(_identity_hashes(svc, ref)),
            "snapshot_expiry_date": expiry.isoformat(),
            "shredded_at": now.isoformat(),
        }

    return _run(svc, ref, item, act)


def _shredded_for_others(svc: Services, ref: str, item: PlanItem) -> dict[str, dict[str, Any]]:
    """Keys this request's other crypto-shreds destroyed, by key id, as this shred cites them."""
    cited: dict[str, dict[str, Any]] = {}
    for action in svc.registry.actions(ref):
        if (
            action.action == Action.CRYPTO_SHRED.value
            and action.status is ActionStatus.DONE
            and action.dataset != dataset_label(_ref(item))
        ):
            for key in action.evidence.get("keys", []):
                if not key["already_absent"]:
                    cited[key["key_id"]] = {
                        **key,
                        "already_absent": True,
                        "destroyed_with": action.dataset,
                    }
    return cited


def confirm_aggregate(svc: Services, ref: str, dataset: str) -> dict[str, Any]:
    """Measure k again once the roots are erased, and record the numbers."""
    plan, item = _item(svc, ref, dataset, Action.AGGREGATE_OK)
    done = _done(svc, ref, item)
    if done is not None:
        return done
    _require_done(
        svc, ref, plan, items_for(plan, Action.ERASE_ROWS), "erased before k is confirmed"
    )
    ds = svc.catalog.by_name(dataset)

    def act() -> dict[str, Any]:
        svc.warehouse.forget_tables()
        measured = measure_k(svc.warehouse, ds, svc.catalog.k_for(ds))
        if not measured.passes:
            raise StepError(
                f"aggregate {dataset!r} no longer passes k={measured.k} (smallest group "
                f"{measured.min_group_size}): re-plan the request so the DPO decides on it"
            )
        return {"at_plan": item.evidence, "at_act": measured.model_dump()}

    return _run(svc, ref, item, act)


def rule(svc: Services, ref: str, dataset: str, answer: Mapping[str, Any]) -> dict[str, Any]:
    """Record the DPO's answer to one escalation (from the Airflow prompt) and carry it out."""
    _plan, item = _item(svc, ref, dataset, Action.ESCALATE)
    done = _done(svc, ref, item)
    if done is not None:
        return done
    chosen = list(answer.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in DPO_OPTIONS:
        raise StepError(f"the answer on {dataset!r} must choose one of: {', '.join(DPO_OPTIONS)}")
    params = dict(answer.get("params_input") or {})
    user = dict(answer.get("responded_by_user") or {})
    try:
        ruling = Ruling.for_dataset(
            _ref(item),
            request_ref=ref,
            option=DPO_OPTIONS[chosen[0]],
            author_id=str(user.get("id") or "unknown"),
            author_name=str(user.get("name") or user.get("id") or "unknown"),
            justification=str(params.get("justification") or "").strip(),
            exemption=params.get("exemption") or None,
            scheduled_by=params.get("scheduled_by") or None,
            standing_until=params.get("standing_until") or None,
            decided_at=_as_datetime(answer.get("responded_at")),
        )
    except ValidationError as exc:
        problems = "; ".join(
            str(e.get("msg", "")).removeprefix("Value error, ")
            for e in exc.errors(include_input=False)
        )
        raise StepError(
            f"the DPO's answer on {dataset!r} is incomplete ({problems}): clear its "
            "dpo_decides prompt and the tasks after it, and answer again"
        ) from None
    return _carry_out(svc, ref, item, ruling)


def tombstone(svc: Services, ref: str) -> dict[str, Any]:
    """Suppress every identifier of the subject in future CRM syncs (hashes only)."""
    pepper = svc.pepper(_request(svc, ref).pepper_version)
    _plan, item = _item(svc, ref, SUPPRESSION_LIST.name, Action.INSERT_TOMBSTONE)
    done = _done(svc, ref, item)
    if done is not None:
        return done

    def act() -> dict[str, Any]:
        stones = []
        for identity in sorted(_identities(svc, ref), key=lambda i: (i.type, i.value)):
            stone = Tombstone.for_subject(pepper, identity.type, identity.value, request_ref=ref)
            new = svc.suppression.add(stone)
            stones.append(
                {
                    "subject_hash": stone.subject_hash,
                    "identifier_type": stone.identifier_type,
                    "pepper_version": stone.pepper_version,
                    "new": new,
                }
            )
        return {"tombstones": stones}

    return _run(svc, ref, item, act)


# ---------------------------------------------------------------------------------------------
# 5. verify


def verify(
    svc: Services, ref: str, *, require_scrubbed: bool = True, now: datetime | None = None
) -> dict[str, Any]:
    """The second look: recount, keys gone, tombstones present, escalations ruled, re-plan."""
    now = now or datetime.now(UTC)
    record = _request(svc, ref)
    plan = svc.registry.plan(ref, 1)
    if _request(svc, ref).status is RequestStatus.PLANNED:
        _advance(svc, ref, RequestStatus.ACTING)  # a plan with nothing to act on but a tombstone
    _advance(svc, ref, RequestStatus.VERIFYING)
    parked = svc.registry.unpark(ref)
    location = _relocate(svc, ref)
    subject = SubjectRef(type=record.identifier_type, value=parked.identifier)
    checks: list[dict[str, Any]] = []
    for count in recount(svc.catalog, svc.warehouse, subject, location, plan, check=False):
        checks.append(
            _check(count.dataset, "recount", f"{count.found} row(s) of the subject", count.ok)
        )
        if not count.ok:
            _reopen(svc, ref, plan, count.dataset, count.found)
    for item in plan.items:
        status = svc.registry.action_status(ref, _ref(item), item.action)
        checks.append(
            _check(
                item.dataset["name"],
                f"{item.action.value} done",
                str(status),
                status is ActionStatus.DONE,
            )
        )
    for key_hash in _identity_hashes(svc, ref):
        gone = not svc.keystore.exists(key_hash)
        checks.append(
            _check(
                svc.keystore.key_id(key_hash),
                "key destroyed",
                "absent" if gone else "STILL PRESENT",
                gone or not items_for(plan, Action.CRYPTO_SHRED),
            )
        )
    pepper = svc.pepper(record.pepper_version)
    for identity in _identities(svc, ref):
        hashed = subject_hash(pepper, identity.type, identity.value)
        present = svc.suppression.contains(hashed, pepper.version)
        checks.append(
            _check(
                f"suppression_list/{identity.type}",
                "tombstone",
                "present" if present else "missing",
                present,
            )
        )
    replan = make_plan(
        svc.catalog,
        subject,
        pepper=pepper,
        warehouse=svc.warehouse,
        location=relocate(svc.catalog, svc.warehouse, *_parked_location(parked)),
        now=now,
        lineage_store=LineageStore(svc.store),
        as_of=now,
    )
    planned = {(i.dataset["namespace"], i.dataset["name"]) for i in plan.items}
    for item in replan.items:
        if (item.dataset["namespace"], item.dataset["name"]) not in planned:
            checks.append(
                _check(
                    item.dataset["name"], "re-plan", "appeared since the plan: not handled", False
                )
            )
    for root in replan.roots:
        shared = root.shared_referrers > 0 and _ruled(svc, ref, root.dataset)
        checks.append(
            _check(
                root.dataset["name"],
                "re-locate",
                f"{root.rows} row(s) found",
                root.rows == 0 or shared,
            )
        )
    version = max(svc.registry.plan_versions(ref)) + 1
    svc.registry.save_plan(ref, replan, version)
    if require_scrubbed:
        scrubbed = _request(svc, ref).scrubbed_at is not None
        checks.append(
            _check(
                "airflow metadata",
                "identifier scrubbed",
                "yes" if scrubbed else "NOT YET",
                scrubbed,
            )
        )
    passed = all(c["passed"] for c in checks)
    result = {
        "passed": passed,
        "checked_at": now.isoformat(),
        "checks": checks,
        "replan_version": version,
    }
    status = ActionStatus.DONE if passed else ActionStatus.FAILED
    svc.registry.record_action(ref, _VERIFICATION, _VERIFY, status, result)
    if not passed:
        failed = [f"{c['target']} ({c['check']}: {c['result']})" for c in checks if not c["passed"]]
        reopened = [c["target"] for c in checks if c["check"] == "recount" and not c["passed"]]
        raise VerificationFailed(
            f"request {ref}: verification failed on {len(failed)} check(s): "
            + "; ".join(failed[:10])
            + (
                f". The subject was found again in {', '.join(reopened)}: their erase/rebuild "
                "is reopened, so clearing those tasks (with downstream) acts on them again"
                if reopened
                else ""
            ),
            failed,
        )
    return result


def _reopen(svc: Services, ref: str, plan: Plan, dataset: str, found: int) -> None:
    """Mark a done erase/rebuild as failed again, keeping its evidence: a cleared task then
    acts instead of returning what it did before the subject's rows came back."""
    for item in plan.items:
        if item.dataset["name"] != dataset or item.action not in (
            Action.ERASE_ROWS,
            Action.REBUILD,
        ):
            continue
        earlier = _done(svc, ref, item)
        if earlier is not None:
            earlier.pop("already_done", None)
            svc.registry.record_action(
                ref,
                _ref(item),
                item.action,
                ActionStatus.FAILED,
                {"error": "found again by verify", "found": found, "earlier": earlier},
            )


# ---------------------------------------------------------------------------------------------
# 6. complete


def complete(svc: Services, ref: str, *, now: datetime | None = None) -> CompletionRecord:
    """Append the signed completion record, then destroy the request key (raw identifier)."""
    now = now or datetime.now(UTC)
    record = _request(svc, ref)
    existing = [r for r in svc.ledger.show(ref) if r.kind is RecordKind.COMPLETED]
    if existing:  # a retry after the record was written: finish what that attempt began
        if record.secrets_destroyed_at is None:
            svc.registry.destroy_secrets(ref)
        if existing[0].status is not None:
            _resume_verified(svc, ref)
            _advance(svc, ref, RequestStatus(existing[0].status.value))
        return existing[0]
    verification = _verification(svc, ref)
    _resume_verified(svc, ref)
    plan = svc.registry.plan(ref, 1)
    actions = {(a.dataset, a.action): a for a in svc.registry.actions(ref)}
    artefacts = []
    for item in plan.items:
        if item.action is Action.INSERT_TOMBSTONE:
            continue
        done = actions.get((dataset_label(_ref(item)), item.action.value))
        artefacts.append(
            {
                "dataset": item.dataset["name"],
                "namespace": item.dataset["namespace"],
                "kind": item.kind,
                "action": item.action.value,
                "rule": item.rule,
                "reason": item.reason,
                "evidence": {**item.evidence, **(done.evidence if done else {})},
                "upstreams": item.upstreams,
            }
        )
    rulings = [r.model_dump(mode="json") for r in svc.rulings.for_request(ref)]
    tomb = actions.get((dataset_label(SUPPRESSION_LIST), Action.INSERT_TOMBSTONE.value))
    body = {
        "artefacts": artefacts,
        "rulings": rulings,
        "roots": [r.model_dump(mode="json") for r in plan.roots],
        "lineage": {
            "snapshot_id": plan.lineage_snapshot,
            "coverage": plan.coverage,
            "gaps": [g.model_dump(mode="json") for g in plan.gaps],
            "cycles": [c.model_dump(mode="json") for c in plan.cycles],
        },
        "verification": verification,
        "timestamps": {
            "received": datetime.combine(record.received_on, datetime.min.time(), UTC).isoformat(),
            "due": datetime.combine(record.effective_due_on, datetime.min.time(), UTC).isoformat(),
            "completed": now.isoformat(),
        },
        "tombstone": tomb.evidence if tomb else None,
        "legal_ground": record.legal_ground.value,
    }
    exemptions = any(r.get("exemption") for r in rulings)
    status = RecordStatus.COMPLETE_WITH_EXEMPTIONS if exemptions else RecordStatus.COMPLETE
    parked = svc.registry.unpark(ref)
    forbidden = _forbidden(
        parked.identifier.get_secret_value(), *(i.value for i in parked.identities)
    )
    completed = svc.ledger.append(
        ref, record.subject_hash, RecordKind.COMPLETED, body, status, forbidden=forbidden
    )
    svc.registry.destroy_secrets(ref)
    _advance(svc, ref, RequestStatus(status.value))
    return completed


def _resume_verified(svc: Services, ref: str) -> None:
    """A `complete` that failed for good left the request failed (the DAG's failure callback);
    verify passed before it, so the cleared task completes from verifying again."""
    if _request(svc, ref).status is RequestStatus.FAILED:
        _advance(svc, ref, RequestStatus.VERIFYING)


def fail(svc: Services, ref: str, reason: str, run_id: str) -> None:
    """Record that the request's own run failed (clearing the failed task resumes it)."""
    record = svc.registry.get(ref)
    if record is None or record.closed or record.run_id != run_id:
        return  # not registered, done, or another submission's failure: not this request's
    _advance(svc, ref, RequestStatus.FAILED)
    svc.ledger.append(
        ref, record.subject_hash, RecordKind.FAILED, {"reason": reason}, RecordStatus.FAILED
    )


# ---------------------------------------------------------------------------------------------
# deadlines (Art. 12(3))


def extend(svc: Services, ref: str, months: int, reason: str) -> date:
    """Extend the deadline by one or two months, once, with the reason; signed on record."""
    if months not in (1, 2):
        raise StepError("an extension is 1 or 2 months (Art. 12(3))")
    record = svc.registry.extend(ref, 1 if months == 1 else 2, reason)
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
        },
    )
    return record.extended_until


def deadlines(svc: Services, today: date, within_days: int) -> dict[str, Any]:
    """Open requests due within `within_days`, and those already overdue."""
    due = [r for r in svc.registry.due_within(today, within_days) if not r.dry_run]
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
    return {
        "due_soon": [r.request_ref for r in due if r.request_ref not in overdue],
        "overdue": overdue,
        "lines": lines,
    }


# ---------------------------------------------------------------------------------------------
# internals


def _request(svc: Services, ref: str) -> RegisteredRequest:
    record = svc.registry.get(ref)
    if record is None:
        raise StepError(f"request {ref!r} is not registered: run the register step first")
    return record


def _advance(svc: Services, ref: str, status: RequestStatus) -> None:
    if _request(svc, ref).status is not status:
        svc.registry.set_status(ref, status)


def _item(svc: Services, ref: str, dataset: str, action: Action) -> tuple[Plan, PlanItem]:
    plan = svc.registry.plan(ref, 1)
    for item in plan.items:
        if item.dataset["name"] == dataset and item.action is action:
            if _request(svc, ref).status in (RequestStatus.PLANNED, RequestStatus.FAILED):
                _advance(svc, ref, RequestStatus.ACTING)
            return plan, item
    raise StepError(f"the plan of request {ref!r} has no {action.value} item for {dataset!r}")


def _ref(item: PlanItem) -> DatasetRef:
    return DatasetRef(item.dataset["namespace"], item.dataset["name"])


def _logged(svc: Services, ref: str, item: PlanItem) -> ActionRecord | None:
    """The item's entry in the request's action log, if it ever started."""
    label = dataset_label(_ref(item))
    return next(
        (
            a
            for a in svc.registry.actions(ref)
            if a.dataset == label and a.action == item.action.value
        ),
        None,
    )


def _done(svc: Services, ref: str, item: PlanItem) -> dict[str, Any] | None:
    """The recorded evidence if this action already succeeded (a retry does not act twice)."""
    record = _logged(svc, ref, item)
    if record is None or record.status is not ActionStatus.DONE:
        return None
    return {**record.evidence, "already_done": True}


def _run(
    svc: Services, ref: str, item: PlanItem, act: Callable[[], BaseModel | dict[str, Any]]
) -> dict[str, Any]:
    reopened = _reopened(svc, ref, item)
    svc.registry.record_action(ref, _ref(item), item.action, ActionStatus.PENDING)
    try:
        result = act()
    except Exception as exc:
        svc.registry.record_action(
            ref,
            _ref(item),
            item.action,
            ActionStatus.FAILED,
            {"error": type(exc).__name__, **reopened},
        )
        raise
    evidence = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    evidence = {**evidence, **reopened}
    svc.registry.record_action(ref, _ref(item), item.action, ActionStatus.DONE, evidence)
    log.info("request %s: %s %s done", ref, item.action.value, item.dataset["name"])
    return evidence


def _reopened(svc: Services, ref: str, item: PlanItem) -> dict[str, Any]:
    """What verify found undone, with the first act's evidence: kept on record when redone."""
    record = _logged(svc, ref, item)
    if record is None:
        return {}
    if "reopened" in record.evidence:  # a redo that failed: still the same finding
        return {"reopened": record.evidence["reopened"]}
    return {"reopened": record.evidence} if "earlier" in record.evidence else {}


def _require_done(svc: Services, ref: str, plan: Plan, names: list[str], what: str) -> None:
    missing = []
    for item in plan.items:
        if (
            item.dataset["name"] in names
            and item.action in (Action.ERASE_ROWS, Action.REBUILD)
            and svc.registry.action_status(ref, _ref(item), item.action) is not ActionStatus.DONE
        ):
            missing.append(f"{item.action.value} {item.dataset['name']}")
    if missing:
        raise NotYet(f"request {ref}: {', '.join(missing)} must be {what}; waiting for it")


def _same_cycle(plan: Plan, a: str, b: str) -> bool:
    return any(a in c.datasets and b in c.datasets for c in plan.cycles)


def _parked_location(parked: ParkedSecret) -> tuple[list[Identity], dict[str, list[str]]]:
    return list(parked.identities), dict(parked.reference_keys)


def _relocate(svc: Services, ref: str) -> Location:
    """The subject's rows as pinned at plan time, found again without walking deleted rows."""
    parked = svc.registry.unpark(ref)
    if not parked.identities:
        raise StepError(f"request {ref!r} has not been planned: run the plan step first")
    svc.warehouse.forget_tables()
    return relocate(svc.catalog, svc.warehouse, *_parked_location(parked))


def _identities(svc: Services, ref: str) -> list[Identity]:
    return list(svc.registry.unpark(ref).identities)


def _identity_hashes(svc: Services, ref: str) -> list[str]:
    pepper = svc.pepper(_request(svc, ref).pepper_version)
    return sorted({subject_hash(pepper, i.type, i.value) for i in _identities(svc, ref)})


def _apply_standing_ruling(svc: Services, ref: str, item: PlanItem, today: date) -> None:
    standing = svc.rulings.standing_for(_ref(item), today)
    if standing is None:
        return
    cited = standing.model_copy(
        update={
            "id": None,
            "request_ref": ref,
            "standing_until": None,
            "decided_at": datetime.now(UTC),
            "justification": f"standing ruling #{standing.id} of request {standing.request_ref} "
            f"(until {standing.standing_until}): {standing.justification}",
        }
    )
    _carry_out(svc, ref, item, cited)


def _carry_out(svc: Services, ref: str, item: PlanItem, ruling: Ruling) -> dict[str, Any]:
    """Record a ruling; 'delete the artefact' empties a catalogued table in the warehouse."""

    def act() -> dict[str, Any]:
        recorded = _recorded(svc, ref, ruling) or svc.rulings.record(ruling)
        evidence: dict[str, Any] = {"ruling": recorded.model_dump(mode="json")}
        if recorded.option is RulingOption.DELETE_ARTEFACT:
            evidence["deletion"] = _delete_artefact(svc, item)
        record = _request(svc, ref)
        svc.ledger.append(
            ref,
            record.subject_hash,
            RecordKind.DECIDED,
            {"dataset": item.dataset, "rule": item.rule, **evidence},
        )
        return evidence

    return _run(svc, ref, item, act)


def _recorded(svc: Services, ref: str, ruling: Ruling) -> Ruling | None:
    """The same ruling if an earlier attempt at carrying it out already recorded it."""
    same = {"id", "decided_at"}  # a cited standing ruling is re-dated on each attempt
    for earlier in svc.rulings.for_request(ref):
        if earlier.model_dump(exclude=same) == ruling.model_dump(exclude=same):
            return earlier
    return None


def _delete_artefact(svc: Services, item: PlanItem) -> dict[str, Any]:
    ds = svc.catalog.dataset(_ref(item))
    if ds is None or ds.connection is None or svc.warehouse.table(ds) is None:
        return {
            "done_by": "the artefact's owner",
            "rows_deleted": None,
            "detail": "not a table this system can reach: the owner deletes it",
        }
    schema, name = split_name(ds.name)
    table = sa.table(name, schema=schema)
    with svc.warehouse.connect(ds) as conn:
        try:
            with transaction(conn):
                deleted = conn.execute(sa.delete(table)).rowcount
        except sa.exc.DBAPIError as exc:
            raise StepError(
                f"deleting artefact {ds.name!r} failed ({describe_failure(exc)})"
            ) from None
    return {"done_by": "erasure", "rows_deleted": deleted, "statement": f"DELETE FROM {ds.name}"}


def _ruled(svc: Services, ref: str, dataset: Mapping[str, str]) -> bool:
    status = svc.registry.action_status(
        ref, DatasetRef(dataset["namespace"], dataset["name"]), Action.ESCALATE
    )
    return status is ActionStatus.DONE


def _verification(svc: Services, ref: str) -> dict[str, Any]:
    for record in svc.registry.actions(ref):
        if (
            record.dataset == dataset_label(_VERIFICATION)
            and record.action == _VERIFY
            and record.status is ActionStatus.DONE
        ):
            return record.evidence
    raise StepError(
        f"request {ref}: not verified; nothing is reported complete before verify passes"
    )


def _check(target: str, check: str, result: str, passed: bool) -> dict[str, Any]:
    return {"target": target, "check": check, "result": result, "passed": bool(passed)}


def _forbidden(*values: str) -> frozenset[str]:
    return frozenset(
        v for value in values for v in {value, value.strip(), value.strip().lower()} if v
    )


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        return _as_datetime(datetime.fromisoformat(value))
    return datetime.now(UTC)
