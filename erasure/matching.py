"""When a stored value is the subject: one decision, held to it in SQL on every dialect.

The decision is Python's: a stored value is the subject's when its canonical form
(`erasure.pseudonym`) equals one of the subject's identities. SQL is held to it two ways:

- SQLite runs the normaliser itself: `Warehouse` registers it on every connection as the
  SQL function `erasure_canonical(normaliser, region, value)`, so the predicate *is* the
  decision;
- PostgreSQL cannot (its `lower` is not `casefold`, its `trim` misses most whitespace), so
  a broader predicate selects candidates that cannot miss a match (`candidate_predicate`),
  Python decides on each distinct candidate value, and the rows are then selected by those
  exact stored values (`column IN (...)`), under a collation that compares them exactly.

Any other dialect is refused: its equality may ignore case, accents or trailing spaces.

Verification does not reuse either predicate: `count_by_scan` reads every distinct value of
the column and decides in Python, so a defect in the SQL side is caught there.

A column may store the identifier its own way (catalog `stored_forms`: its own normaliser, a
prefix, a case, an integer): `Matcher.for_column` compares by that column's key on both sides.
Near misses (`NearMiss`) are decided by a looser reading that exact matching never uses: a
look-alike (UTS #39 skeleton), another extension or subaddress may be somebody else.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import phonenumbers
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.catalog import Catalog, DatasetSpec, IdentifierSpec, StoredForm
from erasure.errors import SubjectError, WarehouseError
from erasure.pseudonym import (
    IGNORABLE_CHARACTERS,
    canonical_or_none,
    canonical_text,
    fold_case,
    normaliser,
)

SQL_FUNCTION = "erasure_canonical"
SUPPORTED_DIALECTS = ("sqlite", "postgresql")
# The phone prefilter compares this many trailing digits of the national number, in order.
_PHONE_DIGITS = 7
_SCAN_BATCH = 10_000
_LIKE_ESCAPE = "\\"


@dataclass(frozen=True)
class Matcher:
    """How values of one identifier type are matched: its normaliser, as Python and as SQL,
    and, for one column, how that column stores the identifier (`stored_forms`).

    A stored value and an identity are compared by key: the stored value read the column's
    way (`key`), the identity written the column's way (`target_key`). Without a stored form
    both are the canonical form.
    """

    id_type: str
    normalise: str  # one of pseudonym.NORMALISERS
    default_region: str | None = None
    form: StoredForm | None = None

    @classmethod
    def of(cls, catalog: Catalog, id_type: str) -> Matcher:
        spec: IdentifierSpec = catalog.identifiers[id_type]
        return cls(id_type, spec.normalise, spec.default_region)

    @classmethod
    def for_column(
        cls, catalog: Catalog, dataset: DatasetSpec, column: str, id_type: str
    ) -> Matcher:
        """The matcher of `id_type` for one column of `dataset`: its declared stored form."""
        spec: IdentifierSpec = catalog.identifiers[id_type]
        form = dataset.stored_forms.get(column)
        if form is not None and form == _AS_THE_TYPE:
            form = None
        return cls(id_type, spec.normalise, spec.default_region, form)

    @staticmethod
    def any_form_of(
        catalog: Catalog, column: str, id_type: str
    ) -> Callable[[Collection[str]], Callable[[object], bool]]:
        """Whether a value of a column named `column` in a derived artefact is one of the
        identities, in the type's form or any form a catalog column of that name stores it in
        (a copy keeps its source's form)."""
        matchers = {Matcher.of(catalog, id_type)} | {
            Matcher.for_column(catalog, ds, column, id_type)
            for ds in catalog.datasets
            if column in ds.holds_subject.get(id_type, ())
        }

        def of(identities: Collection[str]) -> Callable[[object], bool]:
            tests = [m.matches(identities) for m in matchers]
            return lambda stored: any(test(stored) for test in tests)

        return of

    @property
    def reads_with(self) -> str:
        """The normaliser stored values of this column are read with."""
        return self.form.normaliser or self.normalise if self.form else self.normalise

    @property
    def sql_kind(self) -> str:
        """The first argument of `erasure_canonical` that computes `key` in SQLite."""
        if self.form is None:
            return self.normalise
        return _FORM_TAG + json.dumps(
            [self.normalise, self.form.model_dump(mode="json")], sort_keys=True
        )

    def canonical(self, stored: object) -> str | None:
        """The identity a stored value names, in the type's canonical form; None when it names
        nobody (NULL, malformed) or when the column's form cannot be read back (case changed,
        kept as a number, another normaliser): then only `key` compares it."""
        if self.form is None:
            return _canonical(self.normalise, self.default_region)(stored)
        form = self.form
        if form.integer or form.case != "as_is" or self.reads_with != self.normalise:
            return None
        key = self.key(stored)
        return (
            None
            if key is None
            else _canonical(self.normalise, self.default_region)((form.drop_prefix or "") + key)
        )

    def key(self, stored: object) -> str | None:
        """The stored value as this column's comparison key; None when it names nobody."""
        return _key(self.sql_kind, self.default_region)(stored)

    def target_key(self, identity: str) -> str | None:
        """An identity (canonical form) as this column would store it, as a key; None when
        the column cannot hold it (a prefix it lacks, letters in an integer column)."""
        form = self.form
        if form is None:
            return identity
        if form.drop_prefix:
            if not identity.startswith(form.drop_prefix):
                return None
            identity = identity[len(form.drop_prefix) :]
        if form.normaliser is not None and form.normaliser != self.normalise:
            written = _canonical(form.normaliser, self.default_region)(identity)
            if written is None:
                return None
            identity = written
        return _cased_number(identity, form)

    def target_keys(self, identities: Collection[str]) -> set[str]:
        """The keys of `identities` in this column (those it can hold)."""
        keys = (self.target_key(i) for i in identities)
        return {k for k in keys if k is not None}

    def matches(self, identities: Collection[str]) -> Callable[[object], bool]:
        """Whether a stored value of this column is one of `identities`."""
        keys = self.target_keys(identities)
        return lambda stored: self.key(stored) in keys


_AS_THE_TYPE = StoredForm()
_FORM_TAG = "form:"


@cache
def _canonical(kind: str, region: str | None) -> Callable[[object], str | None]:
    return canonical_or_none(normaliser(kind, region))


@cache
def _key(kind: str, region: str | None) -> Callable[[object], str | None]:
    """Stored value -> key, for a normaliser or a `sql_kind` naming a stored form."""
    if not kind.startswith(_FORM_TAG):
        return _canonical(kind, region)
    type_normaliser, raw = json.loads(kind[len(_FORM_TAG) :])
    form = StoredForm.model_validate(raw)
    read_with = form.normaliser or type_normaliser
    read = _canonical(read_with, region)

    def key(stored: object) -> str | None:
        if form.integer and isinstance(stored, int) and not isinstance(stored, bool):
            stored = str(stored)
        text = read(stored)
        if text is None:
            return None
        if form.case != "as_is":
            text = _case(text, form.case)
        if form.prefix:
            prefix = canonical_text(form.prefix)
            if form.case != "as_is" or read_with in ("lower", "email"):
                prefix = _case(prefix, form.case if form.case != "as_is" else "lower")
            if not text.startswith(prefix):
                return None
            text = text[len(prefix) :]
        return _cased_number(text, form)

    return key


def _case(text: str, case: str) -> str:
    return fold_case(text).upper() if case == "upper" else fold_case(text)


def _cased_number(text: str, form: StoredForm) -> str | None:
    if form.integer:
        digits = text.strip()
        return str(int(digits)) if digits.isascii() and digits.isdigit() else None
    return text if form.case == "as_is" else _case(text, form.case)


def sql_canonical(kind: str, region: str | None, value: object) -> str | None:
    """The body of the SQLite function `erasure_canonical`."""
    return _key(kind, region)(value)


# ---------------------------------------------------------------------------------------------
# The rows of the subject


def exact_predicate(
    conn: Connection,
    table: sa.Table,
    column: sa.Column[Any],
    matcher: Matcher,
    targets: Collection[str],
) -> sa.ColumnElement[bool]:
    """A parameterised predicate selecting exactly the rows whose `column` is the subject."""
    keys = matcher.target_keys(targets)
    if not keys:
        return sa.false()
    dialect = conn.dialect.name
    if dialect == "sqlite":
        canonical = sa.func.erasure_canonical(
            sa.bindparam(None, matcher.sql_kind),
            sa.bindparam(None, matcher.default_region, type_=sa.String),
            column,
        )
        return canonical.in_(sorted(keys))
    if dialect == "postgresql":
        _require_exact_equality(conn, table, column)
        exact = [
            stored
            for stored in conn.execute(
                sa.select(column).where(candidate_predicate(column, matcher, targets)).distinct()
            ).scalars()
            if matcher.key(stored) in keys
        ]
        return column.in_(exact) if exact else sa.false()
    raise _unsupported(f"table {table.fullname!r}", dialect)


def require_exact_dialect(url: sa.URL | str, where: str) -> None:
    """Refuse, before connecting, a warehouse whose dialect cannot be matched exactly."""
    try:
        backend = sa.make_url(url).get_backend_name()
    except sa.exc.ArgumentError:
        return  # not a URL: opening the engine says so, naming the connection
    if backend not in SUPPORTED_DIALECTS:
        raise _unsupported(where, backend)


def _unsupported(where: str, dialect: str) -> WarehouseError:
    return WarehouseError(
        f"{where}: the {dialect} dialect cannot be matched exactly (its text comparison may "
        "ignore case, accents or trailing spaces); the subject can be located on "
        f"{' and '.join(SUPPORTED_DIALECTS)} only"
    )


def candidate_predicate(
    column: sa.Column[Any], matcher: Matcher, targets: Collection[str]
) -> sa.ColumnElement[bool]:
    """A predicate true for every row whose value is one of `targets`, and a few more.

    Text normalisers: the value LIKE a pattern keeping only the target's ASCII characters
    that no other character folds or composes to, in order, with `%` for the rest and around
    (whitespace, format characters, accents in either form, `ß`/`ss`, `İ`/`i`); case-folded
    ones compare the value with its ASCII letters lower-cased, addresses with IDNA's other
    full stops (`。`) read as `.`. Phones: the trailing digits of the national number, in
    order, anywhere in the value with keypad letters and non-ASCII digits read as digits.

    The value is compared under the "C" collation: there `lower()` changes ASCII letters
    only, the same in every database, where a Turkish collation (column or database default)
    lowers `I` to a dotless i (U+0131) that the pattern's `i` would miss.
    """
    text = column if isinstance(column.type, sa.String) else sa.cast(column, sa.Text)
    exact = text.collate("C")
    keys = matcher.target_keys(targets)
    if not keys:
        return sa.false()
    if matcher.reads_with == "e164":
        # translate() costs microseconds a row: a value of digits and punctuation alone (most
        # of them) is compared as it is; the rest with keypad letters and every script's
        # digits read as ASCII digits.
        plain = sa.not_(exact.regexp_match(sa.bindparam(None, _PLAIN_PHONE)))
        read = sa.func.translate(
            sa.func.lower(exact),
            sa.bindparam(None, _DIGIT_SOURCES),
            sa.bindparam(None, _DIGIT_TARGETS),
        )
        digits = sa.case((plain, exact), else_=read)
        patterns = {phone_pattern(t) for t in keys}
        return sa.or_(*(digits.like(sa.bindparam(None, p)) for p in sorted(patterns)))
    # A value of printable ASCII alone (most of them) is compared as it is; the rest without
    # their default-ignorable characters and in NFKC, as Python reads them.
    plain = sa.not_(exact.regexp_match(sa.bindparam(None, _PLAIN_TEXT)))
    read = sa.func.normalize(
        sa.func.regexp_replace(exact, sa.bindparam(None, _IGNORABLE_CLASS), "", "g"),
        sa.literal_column("NFKC"),
    )
    if matcher.reads_with == "email":
        # IDNA's other full stops separate a domain's labels as `.` does, and Python reads
        # them so; NFKC leaves the ideographic one (and makes the halfwidth one it).
        read = sa.func.translate(
            read,
            sa.bindparam(None, IDNA_FULL_STOPS),
            sa.bindparam(None, "." * len(IDNA_FULL_STOPS)),
        )
    value = sa.case((plain, exact), else_=read.collate("C"))
    form = matcher.form
    case_folded = matcher.reads_with != "strip" or (form is not None and form.case != "as_is")
    compared = sa.func.lower(value) if case_folded else value
    if matcher.reads_with == "email":
        patterns = {email_pattern(t) for t in keys}
    else:
        patterns = {text_pattern(t, case_folded=case_folded) for t in keys}
    return sa.or_(
        *(compared.like(sa.bindparam(None, p), escape=_LIKE_ESCAPE) for p in sorted(patterns))
    )


_PLAIN_TEXT = r"[^ -~]"
# The label separators of IDNA (RFC 3490 3.1) other than `.`: ideographic, fullwidth and
# halfwidth ideographic full stop.
IDNA_FULL_STOPS = "\u3002\uff0e\uff61"


def _ignorable_class() -> str:
    """A regex class of the default-ignorable characters, as ranges (translate() over the
    4,000 of them costs a millisecond a row)."""
    points = sorted(map(ord, IGNORABLE_CHARACTERS))
    ranges: list[list[int]] = []
    for cp in points:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges) + "]"


_IGNORABLE_CLASS = _ignorable_class()


def email_pattern(target: str) -> str:
    """The LIKE pattern every stored form of the address `target` matches: its ASCII
    characters in order, anything between them (a display name, quotes, comments, punycode
    labels, whose ASCII letters stay in order)."""
    unsafe = _folded_ascii()
    out = ["%"]
    for ch in target:
        if ch.isascii() and ch not in unsafe and ch != '"':
            out.append(_LIKE_ESCAPE + ch if ch in "%_\\" else ch.lower())
            out.append("%")
    return "".join(out)


def text_pattern(target: str, *, case_folded: bool) -> str:
    """The LIKE pattern every stored form of `target` matches: on the value with its ASCII
    letters lower-cased (`case_folded`), or on the value as stored."""
    unsafe = _folded_ascii() if case_folded else _composed_ascii()
    out = ["%"]
    for ch in target:
        if ch.isascii() and ch not in unsafe:
            ch = ch.lower() if case_folded else ch
            out.append(_LIKE_ESCAPE + ch if ch in "%_\\" else ch)
        elif out[-1] != "%":
            out.append("%")
    if out[-1] != "%":
        out.append("%")
    return "".join(out)


def phone_pattern(e164: str) -> str:
    """`%d%d...%`: the national number's trailing digits, in order, anywhere."""
    try:
        national = phonenumbers.national_significant_number(phonenumbers.parse(e164))
    except phonenumbers.NumberParseException:
        raise SubjectError("a phone identity is not in E.164 form") from None
    return "%" + "%".join(national[-_PHONE_DIGITS:]) + "%"


@cache
def _folded_ascii() -> frozenset[str]:
    """ASCII characters that casefolding makes out of a non-ASCII character where SQL's
    `lower(normalize(..., NFKC))` (lower-casing ASCII letters only) does not: where the stored
    form may differ, so the pattern must not insist on them (`ß` is `ss`)."""
    return frozenset(
        out
        for cp in range(0x80, 0x10000)  # every source of one lies in the BMP
        if chr(cp) not in IGNORABLE_CHARACTERS
        and (folded := fold_case(canonical_text(chr(cp))))
        != _ascii_lower(unicodedata.normalize("NFKC", chr(cp)))
        for out in folded
        if out.isascii()
    )


def _ascii_lower(text: str) -> str:
    return "".join(ch.lower() if ch.isascii() else ch for ch in text)


@cache
def _composed_ascii() -> frozenset[str]:
    """ASCII characters Python's reading makes out of a non-ASCII character where SQL's
    `normalize(..., NFKC)` does not (none while both apply NFKC: kept as the check)."""
    return frozenset(
        out
        for cp in range(0x80, 0x10000)
        if chr(cp) not in IGNORABLE_CHARACTERS
        and (read := canonical_text(chr(cp))) != unicodedata.normalize("NFKC", chr(cp)).strip()
        for out in read
        if out.isascii()
    )


# Keypad letters, as phonenumbers reads a vanity number ("0800-FLOWERS").
_KEYPAD_SOURCES = "abcdefghijklmnopqrstuvwxyz"
_KEYPAD_TARGETS = "22233344455566677778889999"
# A character outside these (under "C": any non-ASCII one too) may need translating.
_PLAIN_PHONE = r"[^0-9 +().,/-]"


def _digit_translation() -> tuple[str, str]:
    """`translate()` arguments reading keypad letters and every Unicode digit as ASCII, on a
    value whose ASCII letters are lower-cased."""
    # phonenumbers looks each character up upper-cased, so dotless i and long s are keypad
    # letters too (I, S).
    keypad = dict(zip(_KEYPAD_SOURCES, _KEYPAD_TARGETS, strict=True))
    # translate() stops at the first hit: the characters of most values come first, as
    # themselves, so only the rare others scan the whole list.
    common = "0123456789 +-().,/:;#*"
    sources = [*common, *keypad]
    targets = [*common, *keypad.values()]
    for cp in range(0x80, sys.maxunicode + 1):
        ch = chr(cp)
        if unicodedata.category(ch) == "Nd":
            sources.append(ch)
            targets.append(str(unicodedata.digit(ch)))
        elif ch.upper().isascii() and ch.upper().lower() in keypad:
            sources.append(ch)
            targets.append(keypad[ch.upper().lower()])
    return "".join(sources), "".join(targets)


_DIGIT_SOURCES, _DIGIT_TARGETS = _digit_translation()


def _require_exact_equality(conn: Connection, table: sa.Table, column: sa.Column[Any]) -> None:
    """Refuse a PostgreSQL column whose `=` is not exact: citext (also under a domain), or a
    nondeterministic collation (a domain's collation is the column's)."""
    row = conn.execute(
        sa.text(
            "WITH RECURSIVE chain (oid, typname, typbasetype) AS ("
            " SELECT t.oid, t.typname, t.typbasetype FROM pg_attribute a"
            " JOIN pg_type t ON t.oid = a.atttypid"
            " WHERE a.attrelid = CAST(:rel AS regclass) AND a.attname = :col"
            " UNION ALL SELECT b.oid, b.typname, b.typbasetype FROM pg_type b"
            " JOIN chain ON b.oid = chain.typbasetype) "
            "SELECT array_agg(chain.typname::text), ("
            " SELECT c.collisdeterministic FROM pg_attribute a"
            " LEFT JOIN pg_collation c ON c.oid = a.attcollation"
            " WHERE a.attrelid = CAST(:rel AS regclass) AND a.attname = :col) "
            "FROM chain"
        ),
        {"rel": _qualified(table), "col": column.name},
    ).one()
    type_names, deterministic = row
    if type_names is None:
        return  # not a plain table column (a cast expression): compared as text, exactly
    if "citext" in type_names or deterministic is False:
        raise WarehouseError(
            f"table {table.fullname!r} column {column.name!r}: its equality ignores case or "
            "accents (citext or a nondeterministic collation), so the subject's rows cannot be "
            "selected exactly; give the column a deterministic collation or type text"
        )


def _qualified(table: sa.Table) -> str:
    name = f'"{table.name}"'
    return f'"{table.schema}".{name}' if table.schema else name


# ---------------------------------------------------------------------------------------------
# The independent look: every distinct value, decided in Python


def exact_key(conn: Connection, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """`column` as a GROUP BY / DISTINCT key that tells apart every value Python may.

    A column's own collation may merge values (SQLite `COLLATE NOCASE`, a case-insensitive
    Postgres collation), so a scan grouping by it would decide on one value of a group and
    count the others along with it: `C-1` and `c-1` are two customers to `strip`.
    """
    if not isinstance(column.type, sa.String | sa.types.NullType):
        return column  # numbers, bytes, dates: no collation applies
    if conn.dialect.name == "sqlite":
        return sa.type_coerce(column, sa.String()).collate("BINARY")
    if conn.dialect.name == "postgresql":
        return sa.cast(column, sa.Text).collate("C")
    return column


def scan(conn: Connection, column: sa.Column[Any], matcher: Matcher) -> Iterator[tuple[str, int]]:
    """(key, rows) for every distinct value of `column` that names somebody."""
    for stored, rows in _distinct(conn, column):
        key = matcher.key(stored)
        if key is not None:
            yield key, rows


def _distinct(conn: Connection, column: sa.Column[Any]) -> Iterator[tuple[object, int]]:
    key = exact_key(conn, column)
    query = sa.select(key, sa.func.count()).where(column.is_not(None)).group_by(key)
    result = conn.execution_options(yield_per=_SCAN_BATCH).execute(query)
    for stored, rows in result:
        yield stored, int(rows)


def count_by_scan(
    conn: Connection, column: sa.Column[Any], matcher: Matcher, targets: Collection[str]
) -> int:
    """Rows whose `column` is one of `targets`, decided in Python over a full scan."""
    wanted = matcher.target_keys(targets)
    return sum(rows for key, rows in scan(conn, column, matcher) if key in wanted)


class NearMiss:
    """Kinds of rows that match the identifier only loosely (counted, never shown), most
    specific first: a row is counted under the first kind it is."""

    OTHER_EXTENSION = "same_number_other_extension"
    SUBADDRESS = "same_address_other_subaddress"
    SAME_LOCAL_PART = "same_local_part_other_domain"
    CASE = "differs_in_case_only"
    TURKISH_I = "differs_in_dotted_or_dotless_i"
    LOOKS_ALIKE = "looks_alike"  # confusables, accents, separators, padding zeros
    ONE_EDIT = "one_character_different"
    UNREADABLE = "unreadable_but_similar"  # the normaliser rejects it; its text looks alike
    CONTAINS = "holds_it_among_other_text"  # e.g. two addresses or numbers in one field


# A target this long (skeleton characters) inside an unreadable value is reported: shorter
# ones would be found inside every longer value.
_CONTAINS_FROM = 6


def near_misses(
    conn: Connection, column: sa.Column[Any], matcher: Matcher, target: str
) -> dict[str, int]:
    """How many rows of `column` nearly match the identity `target` (kinds: `NearMiss`)."""
    counts: dict[str, int] = {}
    key = matcher.target_key(target)
    decide = near_miss_kind(matcher, target if key is None else key)
    for stored, rows in _distinct(conn, column):
        kind = decide(stored)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + rows
    return counts


def near_miss_kind(matcher: Matcher, target_key: str) -> Callable[[object], str | None]:
    """The near-miss kind of a stored value against a target key; None for an exact match
    or a value that is not near. Exact matching never uses these: a look-alike may be
    somebody else."""
    phone = matcher.reads_with == "e164"
    email = matcher.reads_with == "email"
    loose_target = skeleton(target_key, phone=phone)
    number = target_key.partition(";ext=")[0]
    local, _, domain = target_key.rpartition("@") if email else ("", "", "")

    def kind(stored: object) -> str | None:
        key = matcher.key(stored)
        if key == target_key:
            return None
        if key is None:
            if stored is None or isinstance(stored, bytes | bytearray | memoryview):
                return None
            loose = skeleton(deobfuscated(str(stored)), phone=phone)
            if loose and (
                loose == loose_target
                or (
                    phone
                    and (_same_digits(loose, loose_target) or one_edit_apart(loose, loose_target))
                )
            ):
                return NearMiss.UNREADABLE
            if len(loose_target) >= _CONTAINS_FROM and loose_target in loose:
                return NearMiss.CONTAINS
            return None
        if phone and key.partition(";ext=")[0] == number:
            return NearMiss.OTHER_EXTENSION
        if email:
            stored_local, _, stored_domain = key.rpartition("@")
            if stored_domain == domain and _base(stored_local) == _base(local):
                return NearMiss.SUBADDRESS
            if local and stored_local == local:
                return NearMiss.SAME_LOCAL_PART
        if _case_blind(key) == _case_blind(target_key):
            return NearMiss.CASE
        if _turkish(key) == _turkish(target_key):
            return NearMiss.TURKISH_I
        if skeleton(key, phone=phone) == loose_target:
            return NearMiss.LOOKS_ALIKE
        if one_edit_apart(key, target_key):
            return NearMiss.ONE_EDIT
        return None

    return kind


def _base(local: str) -> str:
    """A local part without its subaddress (`ann+news` is `ann`)."""
    return local.partition("+")[0]


def _case_blind(text: str) -> str:
    """Case-folded as Unicode alone folds (`İ` is `i` + COMBINING DOT ABOVE): where a column
    keeps case, `İD-7731` is another spelling of `ID-7731`'s i (`_turkish`), not its case."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def _turkish(text: str) -> str:
    """Case-folded with Turkish dotted capital and dotless small i read as `i`, the way a
    Turkish locale lowers them (`fold_case` reads `İ` as `i` already)."""
    return fold_case(text).replace("\u0131", "i")


def _same_digits(a: str, b: str) -> bool:
    """Whether two digit strings end in the same national number (9+ digits agree)."""
    n = min(len(a), len(b))
    return n >= 9 and a[-n:] == b[-n:]


_OBFUSCATIONS = (
    (re.compile(r"\s*[(\[{<]\s*at\s*[)\]}>]\s*|\s+at\s+", re.IGNORECASE), "@"),
    (re.compile(r"\s*[(\[{<]\s*dot\s*[)\]}>]\s*|\s+dot\s+", re.IGNORECASE), "."),
)


def deobfuscated(text: str) -> str:
    """`text` with the ways people spell out an address undone: `[at]`, `(dot)`, ` at `."""
    for pattern, plain in _OBFUSCATIONS:
        text = pattern.sub(plain, text)
    return text


def skeleton(text: str, *, phone: bool = False, padding: bool = True) -> str:
    """A skeleton two look-alike values share (after UTS #39's): case folded, accents,
    format characters, separators and padding zeros (unless `padding` is False) dropped,
    confusable letters and digits read as the Latin letter they imitate; for phones the
    digits alone (every script's)."""
    text = canonical_text(text)
    if phone:
        return "".join(
            str(unicodedata.digit(ch)) for ch in text.partition(";ext=")[0] if ch.isdigit()
        )
    decomposed = unicodedata.normalize("NFKD", _turkish(text))
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    if padding:
        bare = _LEADING_ZEROS.sub("", bare)
    mapped = bare.translate(_CONFUSABLES)
    for many, one in _CONFUSABLE_SEQUENCES:
        mapped = mapped.replace(many, one)
    return "".join(ch for ch in mapped if ch.isalnum() or ch == "@")


# A practical subset of UTS #39's confusables (confusables.txt), folded: Cyrillic, Greek and
# Armenian letters that look like Latin ones, and the digits and letters that look alike.
_CONFUSABLES = str.maketrans(
    {
        **dict.fromkeys("\u0430\u0251\u03b1", "a"),
        **dict.fromkeys("\u044c\u0432\u03b2", "b"),
        **dict.fromkeys("\u0441\u03f2", "c"),
        **dict.fromkeys("\u0501", "d"),
        **dict.fromkeys("\u0435\u0454\u03b5", "e"),
        **dict.fromkeys("\u0493", "f"),
        **dict.fromkeys("\u0261", "g"),
        **dict.fromkeys("\u04bb\u043d\u0570", "h"),
        **dict.fromkeys("\u0456\u0457\u03b9\u0269\u04cf1|\u2113i", "l"),
        **dict.fromkeys("\u0458\u03f3", "j"),
        **dict.fromkeys("\u043a\u03ba", "k"),
        **dict.fromkeys("\u043c\u03bc", "m"),
        **dict.fromkeys("\u043f\u03b7", "n"),
        **dict.fromkeys("\u043e\u03bf\u03c3\u05850", "o"),
        **dict.fromkeys("\u0440\u03c1", "p"),
        **dict.fromkeys("\u051b", "q"),
        **dict.fromkeys("\u0433", "r"),
        **dict.fromkeys("\u0455", "s"),
        **dict.fromkeys("\u0442\u03c4", "t"),
        **dict.fromkeys("\u03c5\u057d", "u"),
        **dict.fromkeys("\u0475\u03bd", "v"),
        **dict.fromkeys("\u051d\u03c9\u0461", "w"),
        **dict.fromkeys("\u0445\u03c7", "x"),
        **dict.fromkeys("\u0443\u03b3\u04af", "y"),
        **dict.fromkeys("\u1d22", "z"),
    }
)
# Zeros that pad a number (`C0001` and `C1`), as a system that kept it as an integer drops them.
_LEADING_ZEROS = re.compile(r"(?<![0-9])0+(?=[0-9])")
_CONFUSABLE_SEQUENCES = (("rn", "m"), ("vv", "w"), ("cl", "d"))


def one_edit_apart(a: str, b: str) -> bool:
    """Whether `a` and `b` differ by exactly one inserted, deleted or replaced character."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i + 1 :] == b[i + 1 :] if len(a) == len(b) else a[i:] == b[i + 1 :]
