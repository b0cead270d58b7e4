"""The body of a request's `completed` record: every artefact's action and evidence, the
DPO's rulings, the roots, the pinned lineage, the verification, the dates.

The ledger checks it again before signing (`erasure.audit.evidence.parse_completion`) and
adds the effective erasure date.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from erasure.audit.evidence import StorageGuarantee
from erasure.catalog import Catalog
from erasure.model import (
    NOT_FOUND_RULE,
    Action,
    Cycle,
    ErasedBefore,
    Gap,
    Plan,
    RootHit,
    SubjectSearch,
)
from erasure.registry.action_log import ActionRecord
from erasure.registry.interventions import Intervention
from erasure.registry.requests import RegisteredRequest
from erasure.rulings import Ruling
from erasure.storage_guarantees import storage_guarantees
from erasure.verify import VerificationEvidence


class ArtefactOutcome(BaseModel):
    """One artefact of the plan: what the plan decided and what the action then did."""

    dataset: str
    namespace: str
    kind: str
    action: Action
    rule: str
    reason: str
    evidence: dict[str, Any]  # the plan's numbers, then the action's evidence over them
    upstreams: list[str]
    storage: list[StorageGuarantee]  # what holds on storage (erasure.storage_guarantees)


class LineageSummary(BaseModel):
    snapshot_id: str
    coverage: float
    gaps: list[Gap]
    cycles: list[Cycle]


class Timestamps(BaseModel):
    received: datetime
    due: datetime
    completed: datetime


class CompletionBody(BaseModel):
    artefacts: list[ArtefactOutcome]
    rulings: list[Ruling]
    roots: list[RootHit]
    lineage: LineageSummary
    verification: VerificationEvidence
    timestamps: Timestamps
    tombstone: dict[str, Any] | None
    legal_ground: str
    subject_found: bool  # False: found nowhere, and the DPO confirmed the subject is not held
    # Found nowhere because an earlier request erased them: which, and when.
    already_erased_by: ErasedBefore | None = Field(default=None, exclude_if=lambda v: v is None)
    # Run or task states a person set by hand in Airflow meanwhile: what, who, when.
    interventions: list[Intervention] = Field(default_factory=list, exclude_if=lambda v: not v)


def completion_body(
    record: RegisteredRequest,
    plan: Plan,
    actions: Sequence[ActionRecord],
    rulings: Sequence[Ruling],
    verification: VerificationEvidence,
    *,
    completed: datetime,
    interventions: Sequence[Intervention] = (),
    catalog: Catalog | None = None,
) -> CompletionBody:
    """The completed record's body for `record`, from its plan and its action log (and the
    catalog entries its storage guarantees read)."""
    logged = {(a.dataset, a.action): a for a in actions}
    artefacts, tombstone = [], None
    for item in plan.items:
        done = logged.get((item.dataset, item.action.value))
        if item.action is Action.INSERT_TOMBSTONE:
            tombstone = done.evidence if done else None
            continue
        evidence = {**item.evidence, **(done.evidence if done else {})}
        spec = catalog.dataset(item.dataset) if catalog is not None else None
        artefacts.append(
            ArtefactOutcome(
                dataset=item.dataset.name,
                namespace=item.dataset.namespace,
                kind=item.kind,
                action=item.action,
                rule=item.rule,
                reason=item.reason,
                evidence=evidence,
                upstreams=[u.name for u in item.upstreams],
                storage=storage_guarantees(item.action, item.kind, spec, evidence),
            )
        )
    return CompletionBody(
        artefacts=artefacts,
        rulings=list(rulings),
        roots=list(plan.roots),
        lineage=LineageSummary(
            snapshot_id=plan.lineage_snapshot,
            coverage=plan.coverage,
            gaps=plan.gaps,
            cycles=plan.cycles,
        ),
        verification=verification,
        timestamps=Timestamps(
            received=datetime.combine(record.received_on, datetime.min.time(), UTC),
            due=datetime.combine(record.effective_due_on, datetime.min.time(), UTC),
            completed=completed,
        ),
        tombstone=tombstone,
        legal_ground=record.legal_ground.value,
        subject_found=bool(plan.roots),
        already_erased_by=next(
            (
                SubjectSearch.model_validate(item.evidence).already_erased_by
                for item in plan.items
                if item.rule == NOT_FOUND_RULE
            ),
            None,
        ),
        interventions=list(interventions),
    )
