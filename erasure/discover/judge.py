"""A column judged for each of the catalog's identifier types, by its name and its sampled
values (an opaque id's looked up in a declared key): a status and the evidence as counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from erasure.catalog import Catalog, DatasetSpec, StoredForm
from erasure.discover.findings import Finding, NamedBy, Status
from erasure.discover.names import (
    _FACT_WORDS,
    _GENERIC_WORDS,
    _NOUNS,
    _WORDS,
    _Holder,
    _holds_words,
    _name_key,
    _names_key_of,
    _other_party,
    _table_words,
    _words,
)
from erasure.discover.reading import _Reader
from erasure.discover.values import (
    MAX_VALUE_CHARS,
    _as_text,
    _mail_domain,
    _Sample,
    _whole,
    _written_as_phone,
)
from erasure.identifier_types import FAMILY, Family, fit
from erasure.model import DatasetRef
from erasure.pseudonym import canonical_or_none, canonical_text, normaliser
from erasure.warehouse import Warehouse

MAX_IDS_LOOKED_UP = 1000  # distinct sampled ids of one column looked up in a declared key
MAX_KEY_LOOKUPS = 200  # lookups (one column's ids in one declared key) in one run


_NAME_STRENGTH = {None: 0, NamedBy.WORDS: 1, NamedBy.TYPE_NAME: 2, NamedBy.DECLARED_COLUMN: 3}


@dataclass
class _Context:
    """The catalog's types, the columns it declares for each (indexed by their names' words),
    the read-only connections and the notes of one run."""

    catalog: Catalog
    warehouse: Warehouse
    min_share: float
    notes: list[str] = field(default_factory=list)
    families: dict[str, Family] = field(default_factory=dict)
    types: list[str] = field(default_factory=list)
    holders: dict[str, list[_Holder]] = field(default_factory=dict)
    # id type -> a declared column's words -> its holders; generic words (`id`) are keyed with
    # their table's words too, as they count only in a table named alike.
    by_words: dict[str, dict[tuple[tuple[str, ...], tuple[str, ...]], list[_Holder]]] = field(
        default_factory=dict
    )
    lookups_left: int = 0
    _reader: _Reader | None = None
    _key_holders: dict[str, list[_Holder]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lookups_left = MAX_KEY_LOOKUPS
        self.types = sorted(self.catalog.identifiers)
        for id_type, spec in self.catalog.identifiers.items():
            self.families[id_type] = FAMILY[spec.normalise]
            self.holders[id_type] = []
            self.by_words[id_type] = {}
        for ds in sorted(self.catalog.datasets, key=lambda d: (d.name, d.namespace)):
            for id_type, columns in ds.holds_subject.items():
                if id_type not in self.holders:
                    continue
                for column in columns:
                    holder = _Holder(ds, column)
                    self.holders[id_type].append(holder)
                    self.by_words[id_type].setdefault(_name_key(column, ds.name), []).append(holder)

    @property
    def reader(self) -> _Reader:
        if self._reader is None:
            self._reader = _Reader(self.warehouse, self.notes)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def judge(
        self,
        ref: DatasetRef,
        entry: DatasetSpec | None,
        column: str,
        sample: _Sample | None,
        *,
        described: str | None,
        own: bool,
    ) -> list[Finding]:
        """What `column` of `ref` looks like, type by type (`sample` None: by name alone)."""
        held = entry.holds_subject if entry is not None else {}
        declared = sorted(t for t, cols in held.items() if column in cols)
        handled_as = None if entry is None else _handled_as(entry)
        found = []
        for id_type in self.types:
            finding = self._judge_type(ref, column, id_type, sample, declared)
            if finding is not None:
                found.append(
                    finding.model_copy(
                        update={
                            "catalogued": own,
                            "described_by": described,
                            "handled_as": handled_as,
                        }
                    )
                )
        return self._strongest_per_family(found)

    def _judge_type(
        self,
        ref: DatasetRef,
        column: str,
        id_type: str,
        sample: _Sample | None,
        declared: list[str],
    ) -> Finding | None:
        family = self.families[id_type]
        named = None if declared else self.named_like(ref, column, id_type)
        counts: dict[str, Any] = {}
        agree = contradict = False
        if sample is not None:
            values = sample.values.get(column, Counter())
            sampled = sum(values.values()) + sample.others.get(column, 0)
            # A whole number is no evidence of a phone or an id: a counter, an amount and any
            # other key hold small numbers too.
            neutral = 0 if family == "email" else sum(n for v, n in values.items() if _whole(v))
            read = sum(n for v, n in values.items() if self.reads_as(id_type, v))
            counts = {
                "rows_sampled": sample.rows,
                "values_sampled": sampled,
                "values_read": read,
                "values_neutral": neutral,
            }
            judged = sampled - neutral
            contradict = judged > 0 and read < self.min_share * judged
            share_ok = sampled > 0 and read >= self.min_share * sampled
            if family != "opaque":
                agree = share_ok
            elif share_ok and not declared:
                counts.update(self._look_up(ref, column, id_type, values))
                looked_up = counts.get("ids_looked_up", 0)
                agree = looked_up > 0 and counts["ids_found"] >= self.min_share * looked_up
        if id_type in declared:
            status = Status.DECLARED
        elif declared:
            # Declared for a type of this family (`email`, and this is `work_email`): their
            # values read alike, so the values say nothing against the declaration.
            if not agree or any(self.families[t] == family for t in declared):
                return None
            status = Status.DECLARED_OTHER
        elif named is not None:
            status = Status.NAME_ONLY if contradict and not agree else Status.PROPOSED
        elif agree:
            # An opaque id's values alone are no proposal: any id-shaped code may be in a key.
            status = Status.VALUES_ONLY if family == "opaque" else Status.PROPOSED
        elif family != "opaque" and counts.get("values_read"):
            status = Status.BELOW_SHARE
        else:
            return None
        facts: dict[str, Any] = {
            "dataset": ref,
            "column": column,
            "identifier_type": id_type,
            "status": status,
            "declared_as": declared,
            "values_agree": agree,
            **counts,
        }
        if status in (Status.PROPOSED, Status.NAME_ONLY, Status.VALUES_ONLY, Status.DECLARED):
            party = _other_party(_words(column), _table_words(ref.name), _words(id_type), family)
            if party:
                facts["other_party"] = party
                if status is not Status.DECLARED:  # declared: said, the catalog's to change
                    facts["status"] = Status.OTHER_PARTY
        if named is not None:
            facts.update(named_by=named[0], named_like=named[1])
        facts["evidence"] = _evidence(family, facts, self.min_share)
        return Finding.model_validate(facts)

    def named_like(self, ref: DatasetRef, column: str, id_type: str) -> tuple[NamedBy, str] | None:
        """What `column`'s name is like, when it says the column holds `id_type`."""
        words = _words(column)
        if not words:
            return None
        for holder in self.by_words[id_type].get(_name_key(column, ref.name), ()):
            if holder.dataset.ref != ref or holder.column != column:
                return NamedBy.DECLARED_COLUMN, f"{holder.label}, declared {id_type}"
        if set(words) & _FACT_WORDS:
            return None
        own = _words(id_type)
        family = self.families[id_type]
        if own and not set(own) <= _GENERIC_WORDS and _holds_words(words, own):
            return NamedBy.TYPE_NAME, f"the identifier type {id_type}"
        if family == "opaque" and _names_key_of(words, own):
            return NamedBy.TYPE_NAME, f"the identifier type {id_type}"
        if family != "opaque" and set(words) & _WORDS[family]:
            return NamedBy.WORDS, _NOUNS[family]
        return None

    def reads_as(self, id_type: str, value: object) -> bool:
        """Whether a stored value reads as `id_type` (see the package's docstring)."""
        family = self.families[id_type]
        # A phone is text written as a number is dialled; an address is text with an `@`;
        # an opaque id is text or a uuid that is not a whole number.
        if family == "phone":
            text = value if isinstance(value, str) else None
            if text is None or not _written_as_phone(canonical_text(text)):
                return False
        elif family == "email":
            if not isinstance(value, str) or "@" not in canonical_text(value):
                return False
            text = value
        else:
            if _whole(value):
                return False
            text = _as_text(value)
            if text is None:
                return False
        if len(text) > MAX_VALUE_CHARS:
            return False
        if not fit(self.catalog.identifiers, id_type, text).fits:
            return False
        return family != "email" or _mail_domain(text)

    def _look_up(
        self, ref: DatasetRef, column: str, id_type: str, values: Counter[object]
    ) -> dict[str, Any]:
        """Sampled values that could be ids, looked up in the declared key columns for the
        type until one holds at least min_share of them; the counts of the best lookup."""
        could_be = (v for v in values if self.reads_as(id_type, v))
        texts = list(dict.fromkeys(t for v in could_be if (t := _as_text(v)) is not None))
        texts = texts[:MAX_IDS_LOOKED_UP]
        if not texts:
            return {}
        spec = self.catalog.identifiers[id_type]
        read = canonical_or_none(normaliser(spec.normalise, spec.default_region))
        # A value is found as stored, or in the type's canonical form (how holders store it).
        keys = [{t} | ({c} if (c := read(t)) is not None else set()) for t in texts]
        best: dict[str, Any] = {"ids_looked_up": len(texts), "ids_found": 0, "keys_looked_in": 0}
        for holder in self.key_holders(id_type):
            if holder.dataset.ref == ref and holder.column == column:
                continue
            if self.lookups_left <= 0:
                self._note(
                    f"ids were looked up in {MAX_KEY_LOOKUPS} declared key columns, the most "
                    "one run makes: the columns after judged by name and value shape alone"
                )
                break
            self.lookups_left -= 1
            stored = self.reader.stored_in(holder, set().union(*keys))
            if stored is None:
                continue
            best["keys_looked_in"] += 1
            found = sum(1 for k in keys if k & stored)
            if found > best["ids_found"]:
                best = {**best, "ids_found": found, "found_in": holder.label}
            if found >= self.min_share * len(texts):
                break
        return best

    def key_holders(self, id_type: str) -> list[_Holder]:
        """The declared columns for `id_type` that are a primary key or unique on their own,
        that can be compared as stored (no `stored_forms`), and hold text or uuids."""
        if id_type not in self._key_holders:
            self._key_holders[id_type] = [
                h
                for h in self.holders[id_type]
                if h.dataset.connection is not None
                and h.dataset.stored_forms.get(h.column, StoredForm()) == StoredForm()
                and self.reader.is_key(h)
            ]
        return self._key_holders[id_type]

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _strongest_per_family(self, found: list[Finding]) -> list[Finding]:
        """Of the types of one family a column looks like (`email` and `work_email`), those
        with the strongest evidence: values that agree, then the closer name."""

        def strength(f: Finding) -> tuple[bool, int]:
            return f.values_agree, _NAME_STRENGTH[f.named_by]

        kept: list[Finding] = []
        for family in ("email", "phone", "opaque"):
            of_family = [f for f in found if self.families[f.identifier_type] == family]
            settled = [f for f in of_family if f.status in (Status.DECLARED, Status.BELOW_SHARE)]
            open_ = [f for f in of_family if f not in settled]
            if open_:
                best = max(strength(f) for f in open_)
                open_ = [f for f in open_ if strength(f) == best]
            kept += settled + open_
        return kept


def _handled_as(ds: DatasetSpec) -> str:
    """What the catalog makes of a dataset, in brief: its kind, storage and rebuild."""
    parts = [ds.kind.value.replace("_", " ")]
    if ds.storage == "immutable":
        parts.append("immutable")
    if ds.rebuild is not None:
        parts.append(f"rebuilt by {ds.rebuild.kind}")
    elif ds.aggregate is not None:
        parts.append("aggregate")
    return ", ".join(parts)


def _evidence(family: Family, facts: Mapping[str, Any], min_share: float) -> str:
    """What the name is like and what the values say, as a person reads it: counts only."""
    parts = []
    if facts.get("named_like") is not None:
        parts.append(f"name (like {facts['named_like']})")
    id_type = facts["identifier_type"]
    rows, sampled = facts.get("rows_sampled"), facts.get("values_sampled", 0)
    read, neutral = facts.get("values_read", 0), facts.get("values_neutral", 0)
    if rows is None:
        parts.append("values not sampled")
    elif rows == 0:
        parts.append("no values to check (no rows sampled)")
    elif sampled == 0:
        parts.append(f"no values to check (NULL in all {rows} rows sampled)")
    elif neutral == sampled:
        parts.append(f"values: all {sampled} sampled values are whole numbers (no evidence)")
    elif family != "opaque":
        parts.append(f"values: {read} of {sampled} sampled values read as {id_type}")
    elif read < min_share * sampled or "ids_looked_up" not in facts:
        parts.append(f"values: {read} of {sampled} sampled values could be {id_type} values")
    elif facts.get("found_in") is not None:
        parts.append(
            f"values: {facts['ids_found']} of {facts['ids_looked_up']} distinct sampled values "
            f"found in {facts['found_in']} (a key)"
        )
    elif facts.get("keys_looked_in"):
        parts.append(
            f"values: none of {facts['ids_looked_up']} distinct sampled values found in a "
            f"declared {id_type} key"
        )
    else:
        parts.append(
            f"values: {read} of {sampled} sampled values could be {id_type} values (no declared "
            f"{id_type} column that is a key to look them up in)"
        )
    if 0 < neutral < sampled:
        parts.append(f"{neutral} whole numbers (no evidence)")
    if facts.get("status") is Status.VALUES_ONLY:
        parts.append("the name does not say whose")
    if facts.get("other_party"):
        parts.append(f"another party's, by its name ({facts['other_party']})")
    declared = facts.get("declared_as") or []
    if declared and id_type not in declared:
        parts.append(f"declared as {', '.join(declared)}")
    return "; ".join(parts)
