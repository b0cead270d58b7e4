"""Which completed requests stand behind a restore replay's tombstones, in one dataset.

A tombstone says a subject was erased, not where, nor by whom for certain: the suppression
list keeps the first request that added a hash, which may be an earlier request that found
the subject nowhere, and an in-flight request's tombstone is on the list before its rows go.
So a replay attributes each (pepper version, hash) it matched to the requests whose signed
`completed` record lists it in its tombstone evidence, and looks at what each did to the
replayed dataset:

- erased it (an `erase_rows` or `rebuild` artefact for it, or a DPO ruling that deleted a
  row of it): the replay may erase the rows again, citing every such request;
- kept its rows under a DPO ruling on it (`retain_exemption`, `non_personal`): the rows stay;
- neither (the subject was not held there then): the rows stay, and the record says so.

When several completed requests decided on the dataset for one hash, the latest on the
chain decides (a later erasure after a retention ended, or a later retention). A hash no
completed request lists (in flight, failed, or none) erases nothing: its own run does that.
Only references, record seqs and keyed hashes are read or returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from erasure.audit.records import CompletionRecord, RecordKind, RecordLedger
from erasure.model import Action, DatasetRef

TombstoneKey = tuple[int, str]  # (pepper version, keyed hash), as the suppression list holds it

ERASING_ACTIONS = frozenset({Action.ERASE_ROWS.value, Action.REBUILD.value})
# DPO ruling options (erasure.rulings) under which the dataset's rows were kept, and the one
# under which the request deleted a row of it (a shared row, rule 2a).
KEEPING_OPTIONS = frozenset({"retain_exemption", "non_personal"})
ERASING_OPTIONS = frozenset({"delete_row"})


class Verdict(StrEnum):
    ERASE = "erase"  # the deciding completed request erased the dataset: erase the rows again
    RETAINED = "retained"  # it kept the dataset's rows under a DPO ruling: they stay
    NOT_ERASED_HERE = "not_erased_here"  # completed requests list it; none erased this dataset
    NOT_COMPLETED = "not_completed"  # no completed request lists it (in flight, failed, none)


# What a row's verdicts make of it: the first that any of its tombstones has, in this order.
ROW_ORDER = (Verdict.RETAINED, Verdict.ERASE, Verdict.NOT_ERASED_HERE, Verdict.NOT_COMPLETED)


class CitedCompletion(BaseModel):
    """A request's completed record on the chain."""

    model_config = ConfigDict(frozen=True)

    seq: int
    record_hash: str
    status: str
    completed_at: datetime


@dataclass(frozen=True)
class Completed:
    """A completed request as a replay cites it."""

    request_ref: str
    completion: CitedCompletion


@dataclass(frozen=True)
class KeyVerdict:
    """What the completed requests listing one tombstone decided for the dataset."""

    verdict: Verdict
    # ERASE: every completed request that erased the dataset for it; RETAINED: the one that
    # kept its rows; NOT_ERASED_HERE: the completed requests that list it.
    requests: tuple[Completed, ...] = ()


_UNATTRIBUTED = KeyVerdict(Verdict.NOT_COMPLETED)


@dataclass(frozen=True)
class Attribution:
    """The verdict for every tombstone some completed request lists, in one dataset."""

    dataset: DatasetRef
    by_key: Mapping[TombstoneKey, KeyVerdict]

    def of(self, key: TombstoneKey) -> KeyVerdict:
        return self.by_key.get(key, _UNATTRIBUTED)

    def row(self, keys: Iterable[TombstoneKey]) -> Verdict:
        """A row's verdict from its tombstones': kept if any kept it, else erased if any
        erased it, else the reason it stays."""
        found = {self.of(key).verdict for key in keys}
        return next(v for v in ROW_ORDER if v in found or v is Verdict.NOT_COMPLETED)


def attribute(ledger: RecordLedger, dataset: DatasetRef) -> Attribution:
    """The verdicts for `dataset`, from every signed `completed` record on the chain."""
    listed: dict[TombstoneKey, list[tuple[int, str | None, Completed]]] = {}
    for record in ledger.list(kind=RecordKind.COMPLETED):
        if record.status is None:
            continue
        done = Completed(record.request_ref, completion_of(record))
        decision = _decision(record.body, dataset)
        for key in tombstone_keys(record.body):
            listed.setdefault(key, []).append((record.seq, decision, done))
    by_key: dict[TombstoneKey, KeyVerdict] = {}
    for key, entries in listed.items():
        decided = [e for e in entries if e[1] is not None]
        if not decided:
            by_key[key] = KeyVerdict(Verdict.NOT_ERASED_HERE, tuple(e[2] for e in entries))
            continue
        _seq, last, done = max(decided, key=lambda e: e[0])
        if last == "kept":
            by_key[key] = KeyVerdict(Verdict.RETAINED, (done,))
        else:
            erased = tuple(e[2] for e in sorted(decided, key=lambda e: e[0]) if e[1] == "erased")
            by_key[key] = KeyVerdict(Verdict.ERASE, erased)
    return Attribution(dataset, by_key)


def completion_of(record: CompletionRecord) -> CitedCompletion:
    """The citation of a `completed` record."""
    assert record.status is not None
    return CitedCompletion(
        seq=record.seq,
        record_hash=record.record_hash,
        status=record.status.value,
        completed_at=record.created_at,
    )


def tombstone_keys(body: Mapping[str, Any]) -> set[TombstoneKey]:
    """The (pepper version, hash) of every tombstone a completed body's evidence lists."""
    evidence = body.get("tombstone")
    entries = evidence.get("tombstones") if isinstance(evidence, Mapping) else None
    keys: set[TombstoneKey] = set()
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        version, digest = entry.get("pepper_version"), entry.get("subject_hash")
        if isinstance(version, int) and isinstance(digest, str):
            keys.add((version, digest))
    return keys


def _decision(body: Mapping[str, Any], dataset: DatasetRef) -> str | None:
    """`kept` if a DPO ruling of the request kept the dataset's rows, `erased` if its plan
    erased them (erase_rows, a rebuild without them, a ruling deleting a row), else None."""
    for ruling in _listed(body, "rulings"):
        if ruling.get("option") in KEEPING_OPTIONS and _names(ruling, dataset):
            return "kept"
    for artefact in _listed(body, "artefacts"):
        if artefact.get("action") in ERASING_ACTIONS and _names(artefact, dataset):
            return "erased"
    for ruling in _listed(body, "rulings"):
        if ruling.get("option") in ERASING_OPTIONS and _names(ruling, dataset):
            return "erased"
    return None


def _listed(body: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    items = body.get(field)
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _names(item: Mapping[str, Any], dataset: DatasetRef) -> bool:
    """Whether an artefact or ruling is about `dataset`: its name, and its namespace where
    it gives one (rulings name theirs by identity, older ones by name alone)."""
    named: Any = item.get("dataset", item.get("dataset_name"))
    namespace = item.get("namespace")
    if isinstance(named, Mapping):
        named, namespace = named.get("name"), named.get("namespace")
    return bool(named == dataset.name and namespace in (None, dataset.namespace))
