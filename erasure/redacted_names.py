"""Dataset and job names that name the subject, withheld from the plan (rule 1a).

OpenLineage names a file by its path, and a path may be named after the person it holds
(`s3://dsar-exports/2026/<email>/profile.json`); a job may be named after the request it ran
for. The plan, the XCom, the DPO's prompts and the signed records name datasets, so such a
name would carry the identifier into everything kept for years. The plan names it instead
by a keyed hash, `redacted:<16 hex>` (HMAC-SHA256 under the request's pepper, so a re-plan
names it the same), carries a `names_subject` gap, and escalates the dataset: the system
cannot act on what it no longer names, and a person finds it and rules on it.

A name names the subject as free text does (`erasure.free_text`): one of the request's
identities as a whole token, caseless; a phone number in any format.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import phonenumbers

from erasure.catalog import Catalog
from erasure.free_text import named_types
from erasure.model import (
    NAMED_DATASET_RULE,
    Action,
    DatasetRef,
    GapKind,
    Identity,
    Plan,
)
from erasure.pseudonym import canonical_text, fold_case

REDACTED = "redacted:"
_ACTION_ORDER = [
    Action.ERASE_ROWS,
    Action.CRYPTO_SHRED,
    Action.REBUILD,
    Action.AGGREGATE_OK,
    Action.ESCALATE,
    Action.INSERT_TOMBSTONE,
]
# A word of a reason or gap detail is read as a name when it has a name's punctuation: the
# counts and dates of a sentence ("holds 1 row(s)") are not names, whatever the identifier.
_NAME_MARKS = re.compile(r"[/.:_@+]")
_WORDS = re.compile(r"(\s+)")
_NOT_DIGITS = re.compile(r"[^0-9]+")
_FREE_TEXT = frozenset({"reason", "detail"})  # the keys whose words may hold a job's name
_OPENING = "([{'\"`"
_CLOSING = ")]}'\"`,;:."


def redacted_name(key: bytes, name: str) -> str:
    """`redacted:` and the first 16 hex digits of HMAC-SHA256(key, name)."""
    digest = hmac.new(key, b"erasure-name\x00" + name.encode("utf-8"), hashlib.sha256)
    return REDACTED + digest.hexdigest()[:16]


class SubjectNames:
    """Which identifier types of the subject a name holds (cached: plans repeat names)."""

    def __init__(self, catalog: Catalog, identities: Iterable[Identity]) -> None:
        self._catalog = catalog
        self._needles = [
            (identity, fold_case(identity.value), _phone_digits(catalog, identity))
            for identity in sorted(identities, key=lambda i: (i.type, i.value))
        ]
        self._cache: dict[tuple[str, int], list[str]] = {}

    def may_hold(self, text: str) -> bool:
        """False when `text` cannot name the subject (a quick test over a whole plan)."""
        return bool(self._candidates(text) or self._candidates(unquote(text)))

    def types(self, text: str, *, min_length: int = 0) -> list[str]:
        """The identifier types of the subject `text` names (percent-encoded too), sorted;
        only by identities of `min_length` characters or more."""
        found = self._cache.get((text, min_length))
        if found is None:
            found = sorted(
                {
                    t
                    for reading in {text, unquote(text)}
                    if (candidates := self._candidates(reading, min_length))
                    for t in named_types(self._catalog, reading, candidates)
                }
            )
            self._cache[(text, min_length)] = found
        return found

    def _candidates(self, text: str, min_length: int = 0) -> list[Identity]:
        folded: str | None = None
        digits: str | None = None
        out = []
        for identity, needle, phone in self._needles:
            if len(identity.value) < min_length:
                continue
            if phone is not None:
                digits = _digits(text) if digits is None else digits
                hit = phone in digits
            else:
                folded = fold_case(canonical_text(text)) if folded is None else folded
                hit = bool(needle) and needle in folded
            if hit:
                out.append(identity)
        return out


def _without_port(namespace: str) -> str:
    """A namespace without its URL scheme and port (`postgres://host:5432/db` is
    `host/db`): a port is not named after a person."""
    parts = urlsplit(namespace)
    if not (parts.scheme and parts.netloc):
        return namespace
    return _PORT.sub("", parts.netloc) + parts.path


_PORT = re.compile(r":[0-9]*$")
# In a namespace (hosts, buckets, paths) only an identity this long counts: a short id is a
# host's digit or a year there far more often than a person.
_NAMESPACE_MIN = 4


def _phone_digits(catalog: Catalog, identity: Identity) -> str | None:
    """The national number of a phone identity (every way of writing it holds these digits
    in a row); "" when it cannot be read; None for other identifier types."""
    spec = catalog.identifiers.get(identity.type)
    if spec is None or spec.normalise != "e164":
        return None
    try:
        return phonenumbers.national_significant_number(phonenumbers.parse(identity.value))
    except phonenumbers.NumberParseException:
        return ""


def _digits(text: str) -> str:
    """The decimal digits of `text` in a row, as ASCII."""
    if text.isascii():
        return _NOT_DIGITS.sub("", text)
    return "".join(str(unicodedata.decimal(ch)) for ch in text if ch.isdecimal())


def redact_subject_names(
    plan: Plan, catalog: Catalog, identities: Iterable[Identity], key: bytes
) -> Plan:
    """`plan` with every dataset, namespace and job name that names the subject replaced by
    its `redacted_name`, a `names_subject` gap for each, and each such dataset escalated
    (rule 1a); `plan` itself when no name in it names the subject."""
    names = SubjectNames(catalog, identities)
    if not names.may_hold("\n".join(_plan_strings(plan))):
        return plan
    renamed: dict[str, str] = {}  # original text -> its redacted form
    datasets: dict[DatasetRef, tuple[DatasetRef, list[str]]] = {}
    # The catalog's names are the operator's, and the actions find their datasets by them: a
    # catalogued dataset (a located root above all) and a catalogued namespace keep theirs.
    # Only the catalog's own entries: a default or a dbt manifest describes names it never
    # saw (an export named after the person), and those are redacted like any other.
    catalogued = {ds.namespace for ds in catalog.datasets}
    for ref in _refs(plan):
        if catalog.entry(ref) is not None:
            continue
        name_types = names.types(ref.name)
        space_types = (
            []
            if ref.namespace in catalogued
            else names.types(_without_port(ref.namespace), min_length=_NAMESPACE_MIN)
        )
        if not name_types and not space_types:
            continue
        namespace = redacted_name(key, ref.namespace) if space_types else ref.namespace
        name = redacted_name(key, ref.qualified) if name_types else ref.name
        datasets[ref] = (DatasetRef(namespace, name), sorted({*name_types, *space_types}))
        renamed[ref.qualified] = f"{namespace}/{name}"
        if name_types:
            renamed[ref.name] = name
        if space_types:
            renamed[ref.namespace] = namespace
    # A qualified name before its parts; whole names only, not inside another word.
    known = re.compile(
        "|".join(
            rf"(?<![^\W_]){re.escape(original)}(?![^\W_])"
            for original in sorted(renamed, key=len, reverse=True)
        )
    )
    words: dict[str, tuple[str, list[str]]] = {}  # other names found in reasons and details
    # The catalog's own names inside a word ("identity:src.people.id") are not the person's.
    operators = re.compile(
        "|".join(
            re.escape(n)
            for n in sorted(
                {n for ds in catalog.datasets for n in (ds.name, ds.namespace)}, key=len
            )[::-1]
        )
        or "(?!)"
    )

    def scrub(text: str, free_text: bool) -> str:
        if not names.types(text):
            return text
        if renamed:
            text = known.sub(lambda match: renamed[match.group(0)], text)
        if not free_text:
            return text
        return "".join(
            _scrub_word(part, names, key, words, operators) for part in _WORDS.split(text)
        )

    document = plan.model_dump(mode="json")
    for part in ("items", "gaps", "cycles", "roots"):
        document[part] = _mapped(document[part], scrub, free_text=False)
    by_new = {new: (old, types) for old, (new, types) in datasets.items()}
    items = [_escalated(item, by_new, catalog) for item in document["items"]]
    document["items"] = sorted(items, key=lambda i: _ACTION_ORDER.index(Action(i["action"])))
    document["gaps"] += [_dataset_gap(new, types) for new, (_, types) in sorted(by_new.items())]
    document["gaps"] += [
        {
            "kind": GapKind.NAMES_SUBJECT.value,
            "detail": f"a job or dataset name in the lineage contains the subject's "
            f"{', '.join(types)}; it is shown as {tag}",
            "dataset": None,
        }
        for tag, types in sorted(words.values())
    ]
    return Plan.model_validate(document)


def _scrub_word(
    part: str, names: SubjectNames, key: bytes, found: dict[str, Any], operators: re.Pattern[str]
) -> str:
    """A word of free text, its name replaced when the name (without the catalog's own
    names in it) names the subject."""
    start, end = 0, len(part)
    while start < end and part[start] in _OPENING:
        start += 1
    while end > start and part[end - 1] in _CLOSING:
        end -= 1
    core = part[start:end]
    if not core or not _NAME_MARKS.search(core) or _is_number(core):
        return part
    residue = operators.sub(" ", core)
    types = (
        names.types(_without_port(residue), min_length=_NAMESPACE_MIN)
        if "://" in residue
        else names.types(residue)
    )
    if not types:
        return part
    tag = redacted_name(key, core)
    found[core] = (tag, types)
    return part[:start] + tag + part[end:]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _escalated(
    item: dict[str, Any], by_new: dict[DatasetRef, tuple[DatasetRef, list[str]]], catalog: Catalog
) -> dict[str, Any]:
    """A plan item (as JSON) escalated under rule 1a if its dataset's name names the subject."""
    ref = DatasetRef(item["dataset"]["namespace"], item["dataset"]["name"])
    if ref not in by_new:
        return item
    original, types = by_new[ref]
    spec = catalog.dataset(original)
    return {
        **item,
        "action": Action.ESCALATE.value,
        "rule": NAMED_DATASET_RULE,
        "reason": f"its name contains the subject's {', '.join(types)}, so the name is withheld "
        f"(shown as {ref.name}) and this system does not act on it: its owner finds it (by "
        "its namespace and what it derives from) and erases the person there, or the DPO "
        "confirms the subject is not held there or retains it under an exemption",
        "evidence": {
            "identifier_types": types,
            "namespace": ref.namespace,
            **({"owner": spec.owner} if spec is not None and spec.owner else {}),
            "withheld_action": item["action"],
            "withheld_rule": item["rule"],
        },
    }


def _dataset_gap(ref: DatasetRef, types: list[str]) -> dict[str, Any]:
    return {
        "kind": GapKind.NAMES_SUBJECT.value,
        "detail": f"the name of a dataset contains the subject's {', '.join(types)}: it is "
        f"withheld as {ref.name} (namespace {ref.namespace}); the DPO rules on it",
        "dataset": ref.as_dict(),
    }


def _refs(plan: Plan) -> Iterator[DatasetRef]:
    """Every dataset the plan names by identity."""
    for item in plan.items:
        yield item.dataset
        yield from item.upstreams
    for gap in plan.gaps:
        if gap.dataset is not None:
            yield gap.dataset
    for cycle in plan.cycles:
        yield from cycle.datasets
    for root in plan.roots:
        yield root.dataset


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _plan_strings(plan: Plan) -> Iterator[str]:
    """Every text of the plan's items, gaps, cycles and roots (no copy of the plan made)."""
    for ref in _refs(plan):
        yield ref.namespace
        yield ref.name
    for item in plan.items:
        yield item.reason
        yield from _strings(item.evidence)
    for gap in plan.gaps:
        yield gap.detail


def _mapped(value: Any, scrub: Callable[[str, bool], str], *, free_text: bool) -> Any:
    """`value` (JSON) with `scrub` applied to every string, dictionary keys included; names
    within the words of a reason or a gap's detail too (`free_text`)."""
    if isinstance(value, str):
        return scrub(value, free_text)
    if isinstance(value, dict):
        return {
            scrub(str(k), False): _mapped(v, scrub, free_text=free_text or k in _FREE_TEXT)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_mapped(v, scrub, free_text=free_text) for v in value]
    return value
