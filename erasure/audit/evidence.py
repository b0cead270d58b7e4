"""The body of a `completed` record: what was done to every artefact, and why it is enough.

A completed body is checked before it is signed: every escalation carries a DPO ruling, the
verification passed, every crypto-shred states when the last snapshot holding its key expires,
and the effective erasure date is the latest of the dates after which no copy remains.
Bodies of the other record kinds are free-form JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from erasure.errors import ErasureError, invalid_fields
from erasure.model import Action

# Evidence keys the effective date reads (ShredResult and the immutable-copy escalation use them).
SNAPSHOT_EXPIRY = "snapshot_expiry_date"
RETENTION_EXPIRY = "retention_expiry_date"


class EvidenceError(ErasureError):
    """A completion body is incomplete or inconsistent; the record was not written."""


class StorageGuarantee(BaseModel):
    """One storage guarantee that holds for an artefact, in one line an auditor reads; which
    hold is decided by erasure.storage_guarantees (its `Guarantee` is the vocabulary)."""

    model_config = ConfigDict(extra="allow")

    guarantee: str
    means: str
    since: date | None = Field(default=None, exclude_if=lambda v: v is None)  # took effect
    until: date | None = Field(default=None, exclude_if=lambda v: v is None)  # a copy kept
    due: date | None = Field(default=None, exclude_if=lambda v: v is None)  # scheduled by
    detail: dict[str, Any] = Field(default_factory=dict, exclude_if=lambda v: not v)


class ArtefactOutcome(BaseModel):
    """One artefact of the forward closure: the action taken and its evidence."""

    model_config = ConfigDict(extra="allow")

    dataset: str
    namespace: str | None = None
    kind: str | None = None
    action: Action
    rule: str | None = None  # decision-table row, e.g. "2a"
    reason: str | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    upstreams: list[str] = Field(default_factory=list)  # in-closure upstream dataset names
    # The storage guarantees that hold; absent from records signed before they were stated.
    storage: list[StorageGuarantee] = Field(default_factory=list)


class DpoRuling(BaseModel):
    """A DPO decision on an escalated artefact (or a standing ruling it cites)."""

    model_config = ConfigDict(extra="allow")

    # erasure.rulings.Ruling's names are accepted too (dataset_name, author_name, scheduled_by).
    dataset: str = Field(validation_alias=AliasChoices("dataset", "dataset_name"))
    namespace: str | None = None  # where the ruling names its dataset by identity
    author: str = Field(validation_alias=AliasChoices("author", "author_name"))
    decided_at: datetime
    option: str  # rebuild_by_date | delete_artefact | retain_exemption | non_personal
    justification: str = Field(min_length=1)
    exemption: str | None = None  # the Art. 17(3) point (a-e) when the data is retained
    rebuild_by_date: date | None = Field(
        default=None, validation_alias=AliasChoices("rebuild_by_date", "scheduled_by")
    )
    standing_until: date | None = None
    cites: str | None = None  # the request whose standing ruling this one applies

    @model_validator(mode="before")
    @classmethod
    def _dataset_identity(cls, data: Any) -> Any:
        # A ruling names its dataset by identity ({namespace, name}); older ones by name.
        dataset = data.get("dataset") if isinstance(data, dict) else None
        if isinstance(dataset, dict):
            return {**data, "dataset": dataset.get("name"), "namespace": dataset.get("namespace")}
        return data

    def rules_on(self, artefact: ArtefactOutcome) -> bool:
        """Whether this is a ruling on `artefact`: the same name, and the same namespace where
        both say one (two same-named tables in two namespaces are two artefacts)."""
        return self.dataset == artefact.dataset and (
            self.namespace is None
            or artefact.namespace is None
            or self.namespace == artefact.namespace
        )


class LineageEvidence(BaseModel):
    """The pinned lineage snapshot the plan used, its coverage and its gaps."""

    model_config = ConfigDict(extra="allow")

    snapshot_id: str
    coverage: float = Field(ge=0.0, le=1.0)
    gaps: list[dict[str, Any]] = Field(default_factory=list)


class VerificationCheck(BaseModel):
    """One check of the second look (recount, key gone, tombstone, re-plan)."""

    model_config = ConfigDict(extra="allow")

    target: str
    check: str
    result: str
    passed: bool


class VerificationEvidence(BaseModel):
    model_config = ConfigDict(extra="allow")

    passed: bool
    checked_at: datetime
    checks: list[VerificationCheck] = Field(default_factory=list)


class RequestTimestamps(BaseModel):
    model_config = ConfigDict(extra="allow")

    received: datetime
    due: datetime
    completed: datetime


class CompletionEvidence(BaseModel):
    """The body of a `completed` record."""

    model_config = ConfigDict(extra="allow")

    artefacts: list[ArtefactOutcome]
    rulings: list[DpoRuling] = Field(default_factory=list)
    lineage: LineageEvidence
    verification: VerificationEvidence
    timestamps: RequestTimestamps
    tombstone: dict[str, Any] | None = None
    effective_erasure_date: date | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CompletionEvidence:
        for item in self.artefacts:
            if item.action is Action.ESCALATE and not any(r.rules_on(item) for r in self.rulings):
                raise ValueError(
                    f"artefact {item.dataset!r} was escalated and has no DPO ruling: the "
                    "request is not complete; record 'escalated' and wait for the ruling"
                )
            for key in (SNAPSHOT_EXPIRY, RETENTION_EXPIRY):
                if key in item.evidence and _as_date(item.evidence[key]) is None:
                    raise ValueError(f"artefact {item.dataset!r}: {key} is not an ISO date")
            deletion = item.evidence.get("deletion") or {}
            if deletion.get("pending"):
                raise ValueError(
                    f"the deletion of {item.dataset!r} awaits its owner's confirmation (due "
                    f"{deletion.get('due_on')}): the request is not complete"
                )
            if item.action is Action.CRYPTO_SHRED and SNAPSHOT_EXPIRY not in item.evidence:
                raise ValueError(
                    f"the crypto-shred of {item.dataset!r} does not state {SNAPSHOT_EXPIRY}: "
                    "the date the last snapshot holding the key expires is required"
                )
        return self

    @property
    def has_exemptions(self) -> bool:
        """True if some data is kept under an Art. 17(3) exemption."""
        return any(r.exemption for r in self.rulings)

    def computed_effective_date(self) -> date:
        """The effective erasure date these facts imply (see `effective_erasure_date`)."""
        return effective_erasure_date(
            self.timestamps.completed,
            snapshot_expiries=_evidence_dates(self.artefacts, SNAPSHOT_EXPIRY),
            retention_expiries=_evidence_dates(self.artefacts, RETENTION_EXPIRY),
            rebuild_by_dates=[r.rebuild_by_date for r in self.rulings if r.rebuild_by_date],
        )


def effective_erasure_date(
    completed: date | datetime,
    *,
    snapshot_expiries: Iterable[date] = (),
    retention_expiries: Iterable[date] = (),
    rebuild_by_dates: Iterable[date] = (),
) -> date:
    """The day after which no copy of the subject's data remains in use or recoverable.

    The latest of: the completion date, every crypto-shredded key's last snapshot expiry,
    every immutable copy's retention expiry, and every DPO rebuild-by date.
    """
    first = completed.date() if isinstance(completed, datetime) else completed
    return max([first, *snapshot_expiries, *retention_expiries, *rebuild_by_dates])


def parse_completion(body: dict[str, Any]) -> CompletionEvidence:
    """Validate a completed body; EvidenceError names the first missing or wrong field."""
    try:
        return CompletionEvidence.model_validate(body)
    except ValidationError as exc:
        first = invalid_fields(exc)[0]
        raise EvidenceError(f"completion body: {first.where or 'body'}: {first.message}") from None


def _evidence_dates(artefacts: Iterable[ArtefactOutcome], key: str) -> list[date]:
    found = (_as_date(a.evidence.get(key)) for a in artefacts)
    return [d for d in found if d is not None]


def _as_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(value).date()
        except ValueError:
            return None
    return None
