"""DPO rulings on escalated artefacts (DESIGN section 3).

A ruling records who decided what about one dataset, when and why. What the DPO may choose
depends on what escalated (`options_for`):

- a derived artefact: rebuild/retrain by a date, delete the artefact, retain it under an
  Art. 17(3) exemption, or accept it as non-personal;
- a row of a root that other people's rows also reference (rule 2a): retain it under an
  exemption, or delete that one row (never the table);
- a subject found nowhere: confirm the subject is not held;
- per-subject-key storage where the subject has no key (rule 3a): confirm the subject's data
  is not held there, or retain it under an exemption;
- a system only its owner can reach (rule 2c, e.g. the CRM the warehouse copies): its owner
  erases the person there (pending until the owner confirms it), not held, or retain.
- a dataset whose name holds the subject's identifier (rule 1a; the plan shows it by a keyed
  hash, so this system cannot act on it): its owner erases the person there (pending until
  the owner confirms it), not held, or retain;
- a lakehouse table whose branch or tag keeps a snapshot holding the subject (rule 2d; a tag
  is kept forever): its owner erases the person there, dropping or rewriting the branch or
  tag (pending until the owner confirms it; verify then finds them nowhere), or retain;
- rows reached only through an identifier value the subject shares with others (rule 2b):
  confirm the subject is not held in them (they are left as they are), or retain them under
  an exemption. Neither deletes: locate never hands over the values that reached them.

A ruling with `standing_until` is *standing*: later requests cite it for that dataset instead
of asking the DPO again, until the date. The DPO's latest standing ruling on a dataset is the
one in force, so a newer one also shortens or ends an older one. A deletion never stands: it
is the DPO's decision each time.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from erasure.errors import ErasureError
from erasure.model import (
    LAKEHOUSE_REF_RULE,
    NAMED_DATASET_RULE,
    NOT_FOUND_RULE,
    OUTSIDE_REACH_RULE,
    SHARED_IDENTITY_RULE,
    SHARED_ROW_RULE,
    UNKEYED_SHRED_RULE,
    DatasetRef,
    PlanItem,
)
from erasure.pseudonym import canonical_text
from erasure.store import Store, store_errors
from erasure.store.schema import requests, rulings

log = logging.getLogger(__name__)


class RulingError(ErasureError):
    """A ruling is incomplete for its option, or names a request that is not registered."""


class RulingOption(StrEnum):
    REBUILD_BY_DATE = "rebuild_by_date"
    DELETE_ARTEFACT = "delete_artefact"
    RETAIN_EXEMPTION = "retain_exemption"
    NON_PERSONAL = "non_personal"
    DELETE_ROW = "delete_row"  # the one shared row of a root (rule 2a)
    NOT_HELD = "not_held"  # a subject found nowhere
    OWNER_ERASES = "owner_erases"  # held outside reach (rule 2c): its owner erases them there


OPTION_LABELS: dict[RulingOption, str] = {
    RulingOption.REBUILD_BY_DATE: "Rebuild or retrain by a date",
    RulingOption.DELETE_ARTEFACT: "Delete the artefact",
    RulingOption.RETAIN_EXEMPTION: "Retain under an Art. 17(3) exemption",
    RulingOption.NON_PERSONAL: "Accept as non-personal",
    RulingOption.DELETE_ROW: "Delete this row",
    RulingOption.NOT_HELD: "Confirm the subject is not held",
    RulingOption.OWNER_ERASES: "Its owner erases the person there",
}

# What an escalation offers, by what escalated (see the module docstring).
DERIVED_OPTIONS = (
    RulingOption.REBUILD_BY_DATE,
    RulingOption.DELETE_ARTEFACT,
    RulingOption.RETAIN_EXEMPTION,
    RulingOption.NON_PERSONAL,
)
SHARED_ROW_OPTIONS = (RulingOption.RETAIN_EXEMPTION, RulingOption.DELETE_ROW)
NOT_FOUND_OPTIONS = (RulingOption.NOT_HELD,)
# A system of record (or any holder) outside this system's reach (rule 2c).
OUTSIDE_REACH_OPTIONS = (
    RulingOption.OWNER_ERASES,
    RulingOption.NOT_HELD,
    RulingOption.RETAIN_EXEMPTION,
)
# Per-subject-key storage where the subject has no key (rule 3a): never written there, or
# written under a key this system cannot name (then readable, and kept only under an exemption).
UNKEYED_SHRED_OPTIONS = (RulingOption.NOT_HELD, RulingOption.RETAIN_EXEMPTION)
SHARED_IDENTITY_OPTIONS = (RulingOption.NOT_HELD, RulingOption.RETAIN_EXEMPTION)
# A dataset named after the subject (rule 1a): the plan no longer names it, so nothing here
# can delete or rebuild it; its owner erases the person there, or the name only looks alike.
NAMED_DATASET_OPTIONS = (
    RulingOption.OWNER_ERASES,
    RulingOption.NOT_HELD,
    RulingOption.RETAIN_EXEMPTION,
)
# A lakehouse table whose branch or tag keeps the subject (rule 2d): its owner drops or
# re-points the ref and erases the person there (verify then finds them nowhere), or the
# table is kept as it is under an exemption.
LAKEHOUSE_REF_OPTIONS = (RulingOption.OWNER_ERASES, RulingOption.RETAIN_EXEMPTION)
# Never standing: each deletion, and each "not held", is decided for its own request.
NOT_STANDING = frozenset(
    {
        RulingOption.DELETE_ARTEFACT,
        RulingOption.DELETE_ROW,
        RulingOption.NOT_HELD,
        RulingOption.OWNER_ERASES,
    }
)


class Exemption(StrEnum):
    """Art. 17(3): the points under which data may be kept despite an erasure request."""

    A = "a"
    B = "b"
    C = "c"
    D = "d"
    E = "e"


EXEMPTIONS: dict[Exemption, str] = {
    Exemption.A: "Art. 17(3)(a): exercising the right of freedom of expression and information",
    Exemption.B: "Art. 17(3)(b): compliance with a legal obligation, or a task carried out in "
    "the public interest or in the exercise of official authority",
    Exemption.C: "Art. 17(3)(c): reasons of public interest in the area of public health",
    Exemption.D: "Art. 17(3)(d): archiving in the public interest, scientific or historical "
    "research, or statistical purposes",
    Exemption.E: "Art. 17(3)(e): the establishment, exercise or defence of legal claims",
}


class Ruling(BaseModel):
    """One DPO decision on one dataset, for a request or standing for later ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int | None = None  # assigned by `RulingBook.record`
    request_ref: str | None = Field(default=None, max_length=64)
    dataset: DatasetRef
    option: RulingOption
    author_id: str = Field(min_length=1, max_length=255)
    author_name: str = Field(min_length=1, max_length=255)
    justification: str
    exemption: Exemption | None = None
    scheduled_by: date | None = None
    standing_until: date | None = None
    decided_at: AwareDatetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("dataset")
    @classmethod
    def _lower(cls, value: DatasetRef) -> DatasetRef:
        if not value.namespace or not value.name or len(value.qualified) > 767:
            raise ValueError("dataset: name the dataset by its namespace and name")
        return DatasetRef(value.namespace, value.name.lower())  # as the catalog writes names

    @field_validator("decided_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)

    @model_validator(mode="after")
    def _requirements(self, info: ValidationInfo) -> Ruling:
        if info.context and info.context.get("stored"):
            return self  # checked when it was recorded, under the rules of that day
        problems = ruling_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def standing(self) -> bool:
        return self.standing_until is not None

    def in_force_on(self, day: date) -> bool:
        """Whether this standing ruling covers `day`."""
        return (
            self.standing_until is not None and self.decided_at.date() <= day <= self.standing_until
        )


MAX_JUSTIFICATION = 4000  # characters: a reason, kept in signed records for years


class DpoAnswer(BaseModel):
    """The DPO's answer to one prompt, as the adapter read it from the UI: the option, who
    answered and when, and the free text she gave."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    option: RulingOption
    author_id: str = Field(min_length=1, max_length=255)
    author_name: str = Field(min_length=1, max_length=255)
    justification: str = ""
    exemption: Exemption | None = None
    scheduled_by: date | None = None
    standing_until: date | None = None
    decided_at: AwareDatetime
    # The roles the auth manager gives the author; None where the adapter cannot tell
    # (dag.test, the embedded demo). Only a DPO rules (Settings.dpo_roles).
    author_roles: frozenset[str] | None = None


def options_for(item: PlanItem) -> tuple[RulingOption, ...]:
    """What the DPO may answer on an escalated plan item."""
    if item.rule == SHARED_ROW_RULE:
        return SHARED_ROW_OPTIONS
    if item.rule == NOT_FOUND_RULE:
        return NOT_FOUND_OPTIONS
    if item.rule == UNKEYED_SHRED_RULE:
        return UNKEYED_SHRED_OPTIONS
    if item.rule == OUTSIDE_REACH_RULE:
        return OUTSIDE_REACH_OPTIONS
    if item.rule == SHARED_IDENTITY_RULE:
        return SHARED_IDENTITY_OPTIONS
    if item.rule == NAMED_DATASET_RULE:
        return NAMED_DATASET_OPTIONS
    if item.rule == LAKEHOUSE_REF_RULE:
        return LAKEHOUSE_REF_OPTIONS
    return DERIVED_OPTIONS


def option_for_label(label: str) -> RulingOption:
    """The option a prompt's button label stands for; RulingError names the labels."""
    for option, text in OPTION_LABELS.items():
        if text == label:
            return option
    raise RulingError("the answer must choose one of: " + "; ".join(OPTION_LABELS.values()))


def ruling_problems(ruling: Ruling) -> list[str]:
    """Everything the ruling lacks or has wrong for its option (empty: it can be recorded)."""
    problems = []
    option = ruling.option
    if not canonical_text(ruling.justification):  # blank, or zero-width characters alone
        problems.append("justification: must not be empty; say why the DPO decided this")
    elif len(ruling.justification) > MAX_JUSTIFICATION:
        problems.append(
            f"justification: at most {MAX_JUSTIFICATION:,} characters; say why in short, the "
            "evidence is recorded beside it"
        )
    if not ruling.author_id.strip() or not ruling.author_name.strip():
        problems.append("author_id and author_name: name the DPO who decided")
    if option is RulingOption.RETAIN_EXEMPTION and ruling.exemption is None:
        problems.append(
            "exemption: retain_exemption must cite the Art. 17(3) point relied on, one of "
            + "; ".join(f"{e.value} ({EXEMPTIONS[e].split(': ', 1)[1]})" for e in Exemption)
        )
    if option is not RulingOption.RETAIN_EXEMPTION and ruling.exemption is not None:
        problems.append(f"exemption: only retain_exemption cites one, not {option.value}")
    if option is RulingOption.REBUILD_BY_DATE and ruling.scheduled_by is None:
        problems.append(
            "scheduled_by: rebuild_by_date needs the date by which the artefact is rebuilt "
            "or retrained"
        )
    if option is not RulingOption.REBUILD_BY_DATE and ruling.scheduled_by is not None:
        problems.append(f"scheduled_by: only rebuild_by_date is scheduled, not {option.value}")
    decided_on = ruling.decided_at.date()
    if ruling.scheduled_by is not None and ruling.scheduled_by < decided_on:
        problems.append("scheduled_by: must not be before the day of the decision")
    if ruling.standing_until is not None and ruling.standing_until < decided_on:
        problems.append("standing_until: must not be before the day of the decision")
    if ruling.standing_until is not None and option in NOT_STANDING:
        problems.append(
            f"standing_until: {option.value} cannot stand for later requests; the DPO decides "
            "it for each request (leave standing_until empty)"
        )
    return problems


class RulingBook:
    """The rulings in the erasure store; append-only from here."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    def record(self, ruling: Ruling) -> Ruling:
        """Store the ruling and return it with its id; RulingError names what is missing."""
        # model_copy(update=...) skips validation: check again before anything is stored.
        problems = ruling_problems(ruling)
        if problems:
            raise RulingError(f"the ruling cannot be recorded: {'; '.join(problems)}")
        values = ruling.model_dump(exclude={"id", "dataset"})
        values.update(dataset_namespace=ruling.dataset.namespace, dataset_name=ruling.dataset.name)
        with self._db("record the ruling"), self._engine.begin() as conn:
            if ruling.request_ref is not None:
                known = conn.execute(
                    sa.select(requests.c.request_ref).where(
                        requests.c.request_ref == ruling.request_ref
                    )
                ).first()
                if known is None:
                    raise RulingError(
                        f"request {ruling.request_ref!r} is not registered: a ruling cites a "
                        "registered request, or none (a standing ruling)"
                    )
            new_id = conn.execute(rulings.insert().values(**values)).inserted_primary_key
        stored = ruling.model_copy(update={"id": int(new_id[0]) if new_id else None})
        log.info(
            "ruling %s on %s: %s by %s%s",
            stored.id,
            stored.dataset.qualified,
            stored.option.value,
            stored.author_id,
            f", standing until {stored.standing_until}" if stored.standing_until else "",
        )
        return stored

    def standing_for(self, dataset: DatasetRef, today: date) -> Ruling | None:
        """The standing ruling in force for `dataset` on `today`, if any.

        The DPO's latest standing ruling (decided by `today`) governs; if it has lapsed, the
        dataset has none, even when an older one would still run: asking again is the safe side.
        """
        c = rulings.c
        query = (
            sa.select(rulings)
            .where(
                c.dataset_namespace == dataset.namespace,
                c.dataset_name == dataset.name.lower(),
                c.standing_until.is_not(None),
            )
            .order_by(c.decided_at.desc(), c.id.desc())
        )
        with self._db("read standing rulings"), self._engine.connect() as conn:
            for row in conn.execute(query):
                latest = _ruling(row)
                if latest.decided_at.date() > today:
                    continue  # decided after the day asked about
                if latest.option in NOT_STANDING:
                    return None  # recorded before deletions could not stand: ask the DPO
                return latest if latest.in_force_on(today) else None
        return None

    def for_request(self, request_ref: str) -> list[Ruling]:
        """The rulings made for a request, oldest first."""
        c = rulings.c
        query = sa.select(rulings).where(c.request_ref == request_ref).order_by(c.decided_at, c.id)
        with self._db("read the request's rulings"), self._engine.connect() as conn:
            return [_ruling(row) for row in conn.execute(query)]

    def get(self, ruling_id: int) -> Ruling | None:
        """One ruling by id (e.g. the standing ruling a plan cites)."""
        with self._db("read the ruling"), self._engine.connect() as conn:
            row = conn.execute(sa.select(rulings).where(rulings.c.id == ruling_id)).one_or_none()
        return None if row is None else _ruling(row)

    def _db(self, verb: str) -> AbstractContextManager[None]:
        return store_errors(self._store, verb)


def _ruling(row: sa.Row[Any]) -> Ruling:
    values = dict(row._mapping)
    dataset = DatasetRef(values.pop("dataset_namespace"), values.pop("dataset_name"))
    return Ruling.model_validate({**values, "dataset": dataset}, context={"stored": True})
