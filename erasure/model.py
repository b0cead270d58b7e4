"""The vocabulary every module shares: datasets, fields, lineage edges, gaps, plans.

Identity follows OpenLineage: a dataset is (namespace, name), a field is dataset + column.
Lineage edges are plain frozen dataclasses (a graph holds millions of them); everything that
crosses a boundary (plan, evidence, CLI/HTTP documents) is a pydantic model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

# Airflow's own rule for a DAG id: nothing a URL path or a pattern could be steered by.
DAG_ID = re.compile(r"[A-Za-z0-9_.-]{1,250}")


@dataclass(frozen=True, slots=True, order=True)
class DatasetRef:
    """An OpenLineage dataset identity: namespace + name (name lower-cased, as written)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def qualified(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __reduce__(self) -> tuple[type[DatasetRef], tuple[str, str]]:
        # Pickled with every event ingest's workers hand over: a frozen dataclass unpickles
        # field by field through setattr, this through __init__.
        return DatasetRef, (self.namespace, self.name)

    def as_dict(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name}


@dataclass(frozen=True, slots=True, order=True)
class FieldRef:
    """A column of a dataset; column None means the dataset as a whole (table-level lineage)."""

    dataset: DatasetRef
    column: str | None

    def __str__(self) -> str:
        return f"{self.dataset.name}.{self.column if self.column is not None else '*'}"


class EdgeType(StrEnum):
    DIRECT = "DIRECT"  # the target's value is derived from the source's value: a disclosure
    INDIRECT = "INDIRECT"  # the source influences which rows or how (filter, join, group by)


class EdgeSubtype(StrEnum):
    IDENTITY = "IDENTITY"
    TRANSFORMATION = "TRANSFORMATION"
    AGGREGATION = "AGGREGATION"
    JOIN = "JOIN"
    GROUP_BY = "GROUP_BY"
    FILTER = "FILTER"
    SORT = "SORT"
    WINDOW = "WINDOW"
    CONDITIONAL = "CONDITIONAL"
    UNKNOWN = "UNKNOWN"  # table-level lineage: the producer did not say how


class EdgeOrigin(StrEnum):
    DECLARED = "declared"  # from SQL or the catalog
    OBSERVED = "observed"  # from an OpenLineage run event


@dataclass(frozen=True, slots=True)
class LineageEdge:
    """One column (or table) level dependency, with where we learnt it from."""

    source: FieldRef
    target: FieldRef
    type: EdgeType
    subtype: EdgeSubtype
    origin: EdgeOrigin
    producer: str  # the SQL file or OpenLineage job that declared/observed it
    run_id: str | None = None
    run_state: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    observed_at: datetime | None = None


class GapKind(StrEnum):
    UNCATALOGUED = "uncatalogued"  # lineage reaches a dataset the catalog does not know
    OPAQUE_PRODUCER = "opaque_producer"  # UDF, external call, Python job: no column lineage
    TABLE_ONLY_LINEAGE = "table_only_lineage"  # inputs/outputs known, columns not
    NO_EVENTS = "no_events"  # a catalogued producer never reported a run
    UNRESOLVED_COLUMN = "unresolved_column"  # SQL column whose table could not be resolved
    UNPARSEABLE_SQL = "unparseable_sql"
    TRUNCATED = "truncated"  # the closure hit its bound
    ERROR_CYCLE = "error_cycle"  # a cycle with no materialisation boundary
    CATALOG_DRIFT = "catalog_drift"  # the warehouse lacks a table/column the catalog names
    LINEAGE_SHRANK = "lineage_shrank"  # an output's observed inputs shrank or vanished
    NAMES_SUBJECT = "names_subject"  # a dataset or job name holds the subject's identifier
    # A table the plan keeps has a column named like an identifier the catalog does not
    # declare there: a request by that identifier would not find the rows (a warning).
    UNDECLARED_IDENTIFIER = "undeclared_identifier"


class Gap(BaseModel):
    """Something the lineage does not know; every gap in a closure escalates."""

    model_config = ConfigDict(frozen=True)

    kind: GapKind
    detail: str
    dataset: DatasetRef | None = None  # when the gap belongs to one dataset


class CycleKind(StrEnum):
    FEEDBACK = "feedback"  # the loop crosses a materialised node: legal, e.g. incremental
    ERROR = "error"  # no materialisation boundary: a definition loop


class Cycle(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: CycleKind
    datasets: list[DatasetRef]  # the strongly connected component, sorted

    def names(self) -> str:
        return " -> ".join(ref.name for ref in self.datasets)


class Action(StrEnum):
    ERASE_ROWS = "erase_rows"
    REBUILD = "rebuild"
    CRYPTO_SHRED = "crypto_shred"
    AGGREGATE_OK = "aggregate_ok"
    ESCALATE = "escalate"
    INSERT_TOMBSTONE = "insert_tombstone"


class SubjectRef(BaseModel):
    """What a request names: an identifier type and its raw value (kept secret)."""

    model_config = ConfigDict(frozen=True)

    type: str
    value: SecretStr

    def __repr__(self) -> str:
        return f"SubjectRef(type={self.type!r}, value=<redacted>)"

    __str__ = __repr__


@dataclass(frozen=True)
class Identity:
    """One normalised identifier value of the subject (never logged or serialised)."""

    type: str
    value: str

    def __repr__(self) -> str:
        return f"Identity(type={self.type!r}, value=<redacted>)"


class SubjectSummary(BaseModel):
    """The subject as documents show it: type and keyed hash, never the value."""

    type: str
    hash: str | None = None
    pepper_version: int | None = None


class RootHit(BaseModel):
    """A dataset where the subject was found, how, and how many rows."""

    dataset: DatasetRef
    identifier_type: str
    columns: list[str]
    rows: int
    via: str  # "request", "identity:<type>" or "reference:<dataset>.<column>"
    shared_referrers: int = 0  # rows of other subjects pointing at the same row


class SearchedColumns(BaseModel):
    """A dataset's columns a subject was looked for in."""

    dataset: DatasetRef
    columns: list[str]


class NearMissCount(BaseModel):
    """Rows of one column that match the identifier only loosely: counted, never shown."""

    dataset: DatasetRef
    column: str
    kind: str  # erasure.matching.NearMiss: same_local_part_other_domain | one_character_different
    rows: int


class ErasedBefore(BaseModel):
    """The earlier request that erased a subject now found nowhere (its tombstone says which,
    and when): why the identifier matches nothing, rather than a typo."""

    request_ref: str
    on: date


class SubjectSearch(BaseModel):
    """Where an identifier found nowhere was looked for (a typo? a homoglyph?), and what
    nearly matched it: the DPO confirms the subject is not held, or corrects the request."""

    identifier_type: str
    searched: list[SearchedColumns]
    near_misses: list[NearMissCount]
    already_erased_by: ErasedBefore | None = Field(default=None, exclude_if=lambda v: v is None)


# Decision-table rows that change what the DPO may answer (erasure.rulings.options_for).
# A request reference, as the requests table allows (b7e1_requests): no '@', '+' or spaces,
# so an email address or a phone number can never be used as one. The one copy: the request
# model, the records, the desk and the DAGs' forms all use it.
REQUEST_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$"
REQUEST_REF = re.compile(REQUEST_REF_PATTERN)
# The references of restore replays' own records (erasure.replay): no request may take one.
REPLAY_REF_PREFIX = "REPLAY-"

# A dataset whose name (or namespace) holds one of the subject's identifiers: the plan names
# it by a keyed hash, and the DPO rules on it (erasure.redacted_names).
NAMED_DATASET_RULE = "1a"


SHARED_ROW_RULE = "2a"
# Rows reached only through an identifier value held back from the expansion: one the subject
# shares with other people, or a second value of a one-per-person type (erasure.locate).
SHARED_IDENTITY_RULE = "2b"
OUTSIDE_REACH_RULE = "2c"  # holds people's rows in a system only its owner can reach
UNKEYED_SHRED_RULE = "3a"  # written under per-subject keys, but the subject has none
# A lakehouse table's branch or tag keeps a snapshot holding the subject: kept until dropped.
LAKEHOUSE_REF_RULE = "2d"
NOT_FOUND_RULE = "not_found"


class PlanItem(BaseModel):
    """One artefact's decision: the action, the rule that fired and the numbers behind it."""

    dataset: DatasetRef
    kind: str
    action: Action
    rule: str  # the decision-table row that fired, e.g. "2a"
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)  # as the rule measured it
    upstreams: list[DatasetRef] = Field(default_factory=list)  # in-closure upstreams

    @model_validator(mode="before")
    @classmethod
    def _named_upstreams(cls, data: Any) -> Any:
        # Plans stored before upstreams were identities name them only: same namespace.
        if isinstance(data, dict) and isinstance(data.get("dataset"), dict):
            namespace = data["dataset"].get("namespace", "")
            data = {
                **data,
                "upstreams": [
                    {"namespace": namespace, "name": u} if isinstance(u, str) else u
                    for u in data.get("upstreams") or []
                ],
            }
        return data


class DagRun(BaseModel):
    """One Airflow DAG run as the orchestrator reports it (the adapter reads it from Airflow):
    the one run model of the domain; rebuild outcomes and the desk's run facts extend it."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    state: str  # Airflow's DagRunState value: queued, running, success, failed
    queued_at: datetime | None = None
    started_at: datetime | None = None

    @property
    def succeeded(self) -> bool:
        return self.state == "success"


class Evidence(BaseModel):
    """What one action did, as the action log and the completion record keep it.

    `reopened`: verify found the subject again after this action was first done; the first
    act's evidence is kept under it when the action is done again.
    """

    reopened: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)


class Plan(BaseModel):
    """The decision for one subject over one lineage snapshot; no raw identifier in it."""

    subject: SubjectSummary
    roots: list[RootHit]
    items: list[PlanItem]  # in action order: erasures, then rebuilds in lineage order, ...
    coverage: float
    gaps: list[Gap]
    cycles: list[Cycle]
    truncated: bool = False
    lineage_snapshot: str  # content hash of the edges the plan was computed on
    created_at: datetime
    # The instant the closure was walked at (None: the current lineage): with the snapshot,
    # `erasure lineage closure --at` gives the same closure again.
    lineage_as_of: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _named_datasets(cls, data: Any) -> Any:
        # Plans stored before gaps and cycles named datasets by identity name them only:
        # the identity is the plan item's of that name.
        if not isinstance(data, dict):
            return data
        refs: dict[str, Any] = {}
        for item in data.get("items") or []:
            if isinstance(item, dict) and isinstance(item.get("dataset"), dict):
                refs.setdefault(item["dataset"].get("name"), item["dataset"])

        def ref(name: Any) -> Any:
            if not isinstance(name, str):
                return name
            return refs.get(name, {"namespace": "", "name": name})

        gaps = [
            {**g, "dataset": ref(g.get("dataset"))} if isinstance(g, dict) else g
            for g in data.get("gaps") or []
        ]
        cycles = [
            {**c, "datasets": [ref(d) for d in c.get("datasets") or []]}
            if isinstance(c, dict)
            else c
            for c in data.get("cycles") or []
        ]
        return {**data, "gaps": gaps, "cycles": cycles}
