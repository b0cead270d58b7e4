"""SQL text without its values: every string and number literal a placeholder, no comments.

A producer's `sql` job facet quotes the statement it ran, and a statement written for one
person (`WHERE email = 'ann@example.com'`) carries that person's identifier. Lineage reads
tables and columns, never values, so the stored text keeps the statement's shape and loses
its literals and comments; text sqlglot cannot read is not kept at all.
"""

from __future__ import annotations

from functools import lru_cache

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

# Queries longer than this are not parsed to be stripped (sqlglot's time grows with them):
# their text is dropped instead.
MAX_STRIPPED_QUERY = 100_000

_LITERAL_TOKENS = frozenset(
    {
        TokenType.STRING,
        TokenType.NUMBER,
        TokenType.NATIONAL_STRING,
        TokenType.NATIONAL_RAW_STRING,
        TokenType.HEX_STRING,
        TokenType.BIT_STRING,
        TokenType.BYTE_STRING,
        TokenType.RAW_STRING,
        TokenType.HEREDOC_STRING,
        TokenType.UNICODE_STRING,
    }
)
_LITERALS = (
    exp.Literal,
    exp.National,
    exp.HexString,
    exp.BitString,
    exp.ByteString,
    exp.RawString,
    exp.UnicodeString,
)


def sql_dialect(name: object) -> Dialect:
    """The sqlglot dialect an OpenLineage `dialect` names; generic SQL when it names none."""
    if isinstance(name, str) and name.strip():
        try:
            return Dialect.get_or_raise(name.strip().lower())
        except ValueError:
            pass
    return Dialect.get_or_raise(None)


@lru_cache(maxsize=4096)  # a job runs the same statement on every run
def without_literals(query: str, dialect: str | None = None) -> str | None:
    """`query` with every literal a placeholder and no comments (itself when it has neither);
    None when it cannot be read (so nothing of it may be kept)."""
    if len(query) > MAX_STRIPPED_QUERY:
        return None
    reader = sql_dialect(dialect)
    try:
        tokens = reader.tokenize(query)
    except (SqlglotError, RecursionError, ValueError):
        return None
    if reader == _GENERIC and any(_strings_in(d, query) != _strings(tokens) for d in _READINGS):
        # No dialect named (the facet's `dialect` is optional): `"ann@example.com"` is a
        # name in standard SQL and a string in MySQL, `$$ann$$` a string in Postgres only.
        # Read another way it holds other values: keep nothing.
        return None
    if not _has_values(tokens):
        return query  # nothing to strip: the text as the producer wrote it
    try:
        statements = [s for s in reader.parse(query) if s is not None]
    except (SqlglotError, RecursionError, ValueError):
        return None
    stripped = []
    for statement in statements:
        if any(isinstance(node, exp.Command) for node in statement.walk()):
            return None  # sqlglot kept the rest of the statement as raw text
        try:
            text = statement.transform(_placeholder).sql(dialect=reader, comments=False)
        except (SqlglotError, RecursionError, ValueError):
            return None
        stripped.append(text)
    result = ";\n".join(stripped)
    try:
        left = reader.tokenize(result)
    except (SqlglotError, RecursionError, ValueError):
        return None
    if _has_values(left):
        return None  # a value the generator spelt back as a literal: keep nothing
    return result


_GENERIC = Dialect.get_or_raise(None)
# Dialects that quote values where standard SQL does not: "..." (MySQL, Spark), $$...$$
# (Postgres), r'...' and triple quotes (BigQuery).
_READINGS = tuple(Dialect.get_or_raise(name) for name in ("mysql", "postgres", "bigquery"))


def _strings(tokens: list[Token]) -> int:
    return sum(token.token_type in _LITERAL_TOKENS for token in tokens)


def _strings_in(dialect: Dialect, query: str) -> int:
    """The literals of `query` as `dialect` reads it (-1 when it cannot: then the readings
    differ, and nothing is kept)."""
    try:
        return _strings(dialect.tokenize(query))
    except (SqlglotError, RecursionError, ValueError):
        return -1


def _has_values(tokens: list[Token]) -> bool:
    """Whether the tokens hold a comment or a literal (the number of `$1` names a parameter)."""
    after_parameter = False
    for token in tokens:
        if token.comments:
            return True
        if token.token_type in _LITERAL_TOKENS and not (
            after_parameter and token.token_type is TokenType.NUMBER
        ):
            return True
        after_parameter = token.token_type is TokenType.PARAMETER
    return False


def _placeholder(node: exp.Expression) -> exp.Expression:
    # `$1` and `@p` are parameters already; the number inside one names it, not a value.
    if isinstance(node, _LITERALS) and not isinstance(node.parent, exp.Parameter):
        return exp.Placeholder()
    return node
