"""What the file search looks for, and how one text, path or value is judged to name the subject.

A place keyed by a column (a column's cells, stats keyed by a column's name, a decoded bound,
a partition value, a `col=value` path segment or Iceberg summary key `partitions.col=value`)
is judged by the caller's `match` alone: a neighbour's "joann@x.com" contains "ann@x.com"
without being hers, and a value stored as "Ann@X.com" is hers though it spells none of the
values given. Only text no column keys (old metadata, free text, a predicate another engine
logged) is searched for their string values, and then only as a whole token: not preceded or
followed by a character that could continue it (a letter, a digit, `.`, `_`, `-`, `+`, `@`
or `%`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import date
from urllib.parse import quote, quote_plus, unquote

from erasure.lakehouse.table import Match, SubjectValues

BoundDecoder = Callable[[int, bytes], "tuple[str, object] | None"]
SummaryBoundDecoder = Callable[[int, int, bytes], "tuple[str, object] | None"]

# A string value shorter than this is searched only where it is keyed (a column, a stats key, a
# bound, a partition): "%", "_" or "ann" occur in every file name, UUID and JSON of a table.
TEXT_MIN_CHARS = 5
# A string bound shorter than this is not taken for a truncated subject value: too many values
# share their first few characters ("info@", "+4930").
TRUNCATED_BOUND_MIN_CHARS = 8
# Iceberg's prefix of an Iceberg summary key naming a partition: `partitions.email=a%40b.c`.
SUMMARY_PARTITION_PREFIX = "partitions."
# How a path shows a redacted partition value.
REDACTED = "…"
_CONTINUES_TOKEN = frozenset("._-+@%")
_NULL_PARTITIONS = frozenset({"__HIVE_DEFAULT_PARTITION__", "null"})
_INTEGER = re.compile(r"^[+-]?\d{1,30}$")
_DECIMAL = re.compile(r"^[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WORD_BREAK = re.compile(r"[\s\"',;]+")
_QUOTED_OR_SPACED = re.compile(r"[\s\"']")


@dataclass(frozen=True)
class Probe:
    """What a file is searched for: `match` on the values of `columns` wherever a column keys
    them, and `texts` (the subject's string values and their percent-encoded forms, as a
    partition path spells them) as whole tokens of unkeyed text."""

    match: Match
    columns: frozenset[str]
    texts: tuple[str, ...]
    # Iceberg: field id -> current column name (Parquet field ids, manifest bounds); the
    # decoder of a bound (field id, bytes) -> (column, value); the decoder of a manifest
    # list's partition summary bound (spec id, position, bytes) -> (column, value).
    field_names: Mapping[int, str] = field(default_factory=dict)
    decode_bound: BoundDecoder | None = None
    decode_summary_bound: SummaryBoundDecoder | None = None
    # The name a path segment gives a partition -> its column (Iceberg: identity partition
    # fields named otherwise than their source). A subject column's own name needs no entry.
    partition_columns: Mapping[str, str] = field(default_factory=dict)
    # Partitions whose value is its column's value cut short (Iceberg's truncate[W]): theirs
    # when it begins one of their values, as a truncated bound does.
    truncating: frozenset[str] = frozenset()
    # Iceberg: values other people hold in the current snapshot that begin as one of theirs
    # does, and the data files that snapshot uses. A live manifest entry of one of those
    # files judges its bounds with `shared` set to `others` (`cut_short`); nothing else does.
    others: frozenset[str] = frozenset()
    live_files: frozenset[str] = frozenset()
    shared: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls,
        match: Match,
        columns: Collection[str],
        values: SubjectValues,
        *,
        field_names: Mapping[int, str] | None = None,
        decode_bound: BoundDecoder | None = None,
        decode_summary_bound: SummaryBoundDecoder | None = None,
        partition_columns: Mapping[str, str] | None = None,
        truncating: Collection[str] = (),
    ) -> Probe:
        texts: dict[str, None] = {}
        for given in values.values():
            for value in given:
                if isinstance(value, str) and len(value) >= TEXT_MIN_CHARS:
                    for form in (value, quote(value, safe=""), quote_plus(value)):
                        texts[form] = None
        return cls(
            match=match,
            columns=frozenset(columns),
            texts=tuple(texts),
            field_names=dict(field_names or {}),
            decode_bound=decode_bound,
            decode_summary_bound=decode_summary_bound,
            partition_columns=dict(partition_columns or {}),
            truncating=frozenset(truncating),
        )

    def accepts(self, column: str, value: object) -> bool:
        """Whether `match` takes `value` of `column` for theirs (False for a subject column
        it cannot compare, or any other column)."""
        if column not in self.columns:
            return False
        try:
            return bool(self.match(column, value))
        except Exception:  # a value of a type the caller's match cannot compare
            return False

    def segment_needles(self) -> tuple[str, ...]:
        """What a text must contain to have a `col=value` segment of a subject column."""
        names = {
            *self.columns,
            *(n for n, c in self.partition_columns.items() if c in self.columns),
        }
        return tuple(sorted({f"{form}=" for n in names for form in (n, quote(n, safe=""))}))

    def column_of(self, name: str) -> str | None:
        """The subject column a partition (path segment, summary key) named `name` is, if any."""
        column = self.partition_columns.get(name, name)
        return column if column in self.columns else None


def continues_token(char: str) -> bool:
    """Whether `char` could continue a value (so a value next to it is part of another)."""
    return char.isalnum() or char in _CONTINUES_TOKEN


def has_token(text: str, value: str) -> bool:
    """Whether `value` occurs in `text` as a whole token."""
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        if (start == 0 or not continues_token(text[start - 1])) and (
            end == len(text) or not continues_token(text[end])
        ):
            return True
        start = text.find(value, start + 1)
    return False


def text_holds(text: str, probe: Probe) -> bool:
    """Whether one unkeyed string (a path, a JSON string or key, a manifest's file path) names
    the subject: a `col=value` segment `match` accepts, or one of their string values as a
    whole token outside such segments."""
    if "=" not in text:
        return any(has_token(text, t) or has_token(unquote(text), t) for t in probe.texts)
    if any(partition_holds(name, value, probe) for name, value in segments(text)):
        return True
    unkeyed = _unkeyed(text, probe)
    return any(has_token(unkeyed, t) or has_token(unquote(unkeyed), t) for t in probe.texts)


def path_holds(path: str, probe: Probe) -> bool:
    """Whether a path names the subject (a partition directory of theirs, a file named after
    them): unkeyed text whose `col=value` segments are keyed."""
    return text_holds(path, probe)


def document_holds(text: str, probe: Probe) -> bool:
    """Whether a whole text file (not JSON) names the subject: one of their values as a whole
    token, or a word of it a `col=value` path whose value `match` accepts."""
    if any(has_token(text, t) for t in probe.texts):
        return True
    return "=" in text and any(
        partition_holds(name, value, probe)
        for word in _WORD_BREAK.split(text)
        for name, value in segments(word)
    )


def segments(text: str) -> Iterator[tuple[str, str]]:
    """Each `name=value` segment of a path or Iceberg summary key (`partitions.a=1/b=2`), the
    name without the summary prefix, both percent-decoded."""
    for segment in text.split("/"):
        name, equals, value = segment.partition("=")
        if not equals or not name:
            continue
        name = name.removeprefix(SUMMARY_PARTITION_PREFIX)
        yield unquote(name), unquote(value)


def typed_forms(value: str) -> list[object]:
    """A partition value as a path spells it, and as the number or date it may be typed as."""
    forms: list[object] = [value]
    if _INTEGER.match(value):
        forms.append(int(value))
    elif _DECIMAL.match(value):
        forms.append(float(value))
    elif _DATE.match(value):
        with suppress(ValueError):
            forms.append(date.fromisoformat(value))
    elif value in ("true", "false"):
        forms.append(value == "true")
    return forms


def partition_holds(name: str, value: str, probe: Probe) -> bool:
    """Whether a partition `name`=`value` (as a path or summary spells it) is theirs."""
    column = probe.column_of(name)
    if column is None or value in _NULL_PARTITIONS:
        return False
    if any(probe.accepts(column, form) for form in typed_forms(value)):
        return True
    return name in probe.truncating and cut_short(value, probe)


def cut_short(value: str, probe: Probe) -> bool:
    """Whether `value` is one of their values cut short (a truncated bound or partition), and
    not exactly (in its case) the beginning of a value in `probe.shared`: a neighbour's
    "ann.ohara.zqcanary99@example.com" in a live file gives it the bound "ann.ohara.zqcana",
    which begins hers too, and would keep verify failing for as long as it is there."""
    if not any(truncated_bound_of(value, t) for t in probe.texts):
        return False
    return not any(value == v or truncated_bound_of(value, v, folded=False) for v in probe.shared)


def sharing_a_beginning(values: Iterable[object], texts: Collection[str]) -> set[str]:
    """The string `values` whose first TRUNCATED_BOUND_MIN_CHARS characters, folded, are those
    of one of `texts` (what `Probe.others` keeps of other people's values)."""
    heads = {_folded(t)[:TRUNCATED_BOUND_MIN_CHARS] for t in texts}
    heads.discard("")
    return {
        v
        for v in values
        if isinstance(v, str)
        and len(v) >= TRUNCATED_BOUND_MIN_CHARS
        and _folded(v)[:TRUNCATED_BOUND_MIN_CHARS] in heads
    }


def _unkeyed(text: str, probe: Probe) -> str:
    """`text` with the values of its keyed `col=value` segments left out (the slash kept, so
    a token cannot join across them). A value quoted or spaced is no path's (a predicate's
    `email='a@b.c'`): it stays, to be searched as text."""
    kept = []
    for segment in text.split("/"):
        name, equals, value = segment.partition("=")
        keyed = probe.column_of(unquote(name.removeprefix(SUMMARY_PARTITION_PREFIX)))
        if equals and keyed and not _QUOTED_OR_SPACED.search(value):
            kept.append(name + "=")
        else:
            kept.append(segment)
    return "/".join(kept)


def truncated_bound_of(bound: str, value: str, *, folded: bool = True) -> bool:
    """Whether `bound` is `value` truncated as a lower bound (a prefix) or as an upper bound (a
    prefix whose last character was rounded up), and at least TRUNCATED_BOUND_MIN_CHARS long.

    Compared case- and compatibility-folded (NFKC, then case folding): a truncated bound
    cannot be matched as a whole value, and the value searched for is the identity's
    canonical form, where the table may store it in another case ("Ann.OHara.zqcana" is a
    bound of ann.ohara.zqcanary77@example.com stored as Ann.OHara.zqcanary77@Example.com);
    exactly as stored with `folded` False."""
    if len(bound) < TRUNCATED_BOUND_MIN_CHARS:
        return False
    fold = _folded if folded else str
    folded_value = fold(value)
    head = fold(bound)
    if len(head) < len(folded_value) and folded_value.startswith(head):
        return True
    head, last = fold(bound[:-1]), ord(bound[-1])
    if last == 0 or len(head) >= len(folded_value) or not folded_value.startswith(head):
        return False
    return folded_value.startswith(fold(chr(last - 1)), len(head))


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def redact(path: str, probe: Probe | None = None) -> str:
    """`path` for messages and evidence: every `col=value` segment as `col=…` whatever the
    value (a partition of anyone's), and any of the subject's values it spells blanked."""
    parts = []
    for segment in path.split("/"):
        name, equals, _ = segment.partition("=")
        parts.append(f"{name}={REDACTED}" if equals and name else segment)
    cleaned = "/".join(parts)
    if probe is not None:
        for text in sorted(probe.texts, key=len, reverse=True):
            cleaned = cleaned.replace(text, REDACTED)
    return cleaned
