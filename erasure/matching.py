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
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import phonenumbers
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.catalog import Catalog, IdentifierSpec
from erasure.errors import SubjectError, WarehouseError
from erasure.pseudonym import canonical_or_none, normaliser

SQL_FUNCTION = "erasure_canonical"
SUPPORTED_DIALECTS = ("sqlite", "postgresql")
# The phone prefilter compares this many trailing digits of the national number, in order.
_PHONE_DIGITS = 7
_SCAN_BATCH = 10_000
_LIKE_ESCAPE = "\\"


@dataclass(frozen=True)
class Matcher:
    """How values of one identifier type are matched: its normaliser, as Python and as SQL."""

    id_type: str
    normalise: str  # one of pseudonym.NORMALISERS
    default_region: str | None = None

    @classmethod
    def of(cls, catalog: Catalog, id_type: str) -> Matcher:
        spec: IdentifierSpec = catalog.identifiers[id_type]
        return cls(id_type, spec.normalise, spec.default_region)

    def canonical(self, stored: object) -> str | None:
        """The stored value's canonical form; None when it names nobody (NULL, malformed)."""
        return _canonical(self.normalise, self.default_region)(stored)


@cache
def _canonical(kind: str, region: str | None) -> Callable[[object], str | None]:
    return canonical_or_none(normaliser(kind, region))


def sql_canonical(kind: str, region: str | None, value: object) -> str | None:
    """The body of the SQLite function `erasure_canonical`."""
    return _canonical(kind, region)(value)


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
    if not targets:
        return sa.false()
    dialect = conn.dialect.name
    if dialect == "sqlite":
        canonical = sa.func.erasure_canonical(
            sa.bindparam(None, matcher.normalise),
            sa.bindparam(None, matcher.default_region, type_=sa.String),
            column,
        )
        return canonical.in_(sorted(targets))
    if dialect == "postgresql":
        _require_exact_equality(conn, table, column)
        exact = [
            stored
            for stored in conn.execute(
                sa.select(column).where(candidate_predicate(column, matcher, targets)).distinct()
            ).scalars()
            if matcher.canonical(stored) in targets
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
    (whitespace, format characters, accents in either form, `ß`/`ss`); case-folded ones
    compare the value with its ASCII letters lower-cased. Phones: the trailing digits of the
    national number, in order, anywhere in the value with keypad letters and non-ASCII
    digits read as digits.

    The value is compared under the "C" collation: there `lower()` changes ASCII letters
    only, the same in every database, where a Turkish collation (column or database default)
    lowers `I` to a dotless i (U+0131) that the pattern's `i` would miss.
    """
    text = column if isinstance(column.type, sa.String) else sa.cast(column, sa.Text)
    exact = text.collate("C")
    if matcher.normalise == "e164":
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
        patterns = {phone_pattern(t) for t in targets}
        return sa.or_(*(digits.like(sa.bindparam(None, p)) for p in sorted(patterns)))
    case_folded = matcher.normalise != "strip"
    compared = sa.func.lower(exact) if case_folded else exact
    patterns = {text_pattern(t, case_folded=case_folded) for t in targets}
    return sa.or_(
        *(compared.like(sa.bindparam(None, p), escape=_LIKE_ESCAPE) for p in sorted(patterns))
    )


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
    """ASCII characters that casefolding (with NFC) makes out of non-ASCII ones, lower-cased:
    where the stored form may differ, so the pattern must not insist on them."""
    return frozenset(
        out.lower()
        for cp in range(0x80, 0x10000)  # every source of one lies in the BMP
        for out in unicodedata.normalize(
            "NFC", unicodedata.normalize("NFD", chr(cp)).casefold()
        )
        if out.isascii()
    )


@cache
def _composed_ascii() -> frozenset[str]:
    """ASCII characters NFC makes out of non-ASCII ones (e.g. KELVIN SIGN -> K), as made."""
    return frozenset(
        out
        for cp in range(0x80, 0x10000)
        for out in unicodedata.normalize("NFC", chr(cp))
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
    """(canonical form, rows) for every distinct value of `column` that names somebody."""
    key = exact_key(conn, column)
    query = sa.select(key, sa.func.count()).where(column.is_not(None)).group_by(key)
    result = conn.execution_options(yield_per=_SCAN_BATCH).execute(query)
    for stored, rows in result:
        canonical = matcher.canonical(stored)
        if canonical is not None:
            yield canonical, int(rows)


def count_by_scan(
    conn: Connection, column: sa.Column[Any], matcher: Matcher, targets: Collection[str]
) -> int:
    """Rows whose `column` is one of `targets`, decided in Python over a full scan."""
    wanted = set(targets)
    return sum(rows for canonical, rows in scan(conn, column, matcher) if canonical in wanted)


class NearMiss:
    """Kinds of rows that match the identifier only loosely (counted, never shown)."""

    SAME_LOCAL_PART = "same_local_part_other_domain"
    ONE_EDIT = "one_character_different"


def near_misses(
    conn: Connection, column: sa.Column[Any], matcher: Matcher, target: str
) -> dict[str, int]:
    """How many rows of `column` nearly match `target`: an email with the same local part at
    another domain, or a value one edit (insert, delete, replace) away."""
    counts: dict[str, int] = {}
    local = target.rpartition("@")[0] if matcher.normalise == "email" else None
    for canonical, rows in scan(conn, column, matcher):
        if canonical == target:
            continue
        if local and canonical.rpartition("@")[0] == local:
            kind = NearMiss.SAME_LOCAL_PART
        elif one_edit_apart(canonical, target):
            kind = NearMiss.ONE_EDIT
        else:
            continue
        counts[kind] = counts.get(kind, 0) + rows
    return counts


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
