"""What an unaliased output column is called: its expression as written.

`SELECT max(col1), count(*), a + b FROM t` writes columns named `max(col1)`, `count(*)` and
`a + b`, the way the open column-lineage parsers name them: the expression's own text, runs of
whitespace made one space, none just inside parentheses, lower-cased. A bare column keeps its
name, and so does a Postgres `col::type` cast of one.

The text comes from the statement's tokens: every SELECT list in them is split at its
top-level commas, and a parsed SELECT takes the list whose items hold the positions sqlglot
recorded for its projections. Where no list fits, the expression is printed by sqlglot
instead, so every output column has a name and none is invented.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect

# Tokens that end a SELECT list at parenthesis depth 0.
_LIST_ENDS = frozenset(
    {
        TokenType.FROM,
        TokenType.INTO,
        TokenType.WHERE,
        TokenType.GROUP_BY,
        TokenType.HAVING,
        TokenType.ORDER_BY,
        TokenType.LIMIT,
        TokenType.UNION,
        TokenType.INTERSECT,
        TokenType.EXCEPT,
        TokenType.WINDOW,
        TokenType.QUALIFY,
        TokenType.SEMICOLON,
        TokenType.FETCH,
        TokenType.OFFSET,
    }
)

_Span = tuple[int, int]  # first and last token index of one SELECT list item


def name_projections(
    query: exp.Expr, tokens: Sequence[Token], source: str, dialect: Dialect
) -> None:
    """Alias every unaliased expression projected by a SELECT in `query` with its text."""
    lists = _select_lists(tokens)
    for select in list(query.find_all(exp.Select)):
        projections = list(select.expressions)
        if all(_named_by_itself(p) for p in projections):
            continue
        matched = _matching_list(projections, lists, tokens)
        items: list[_Span | None] = list(matched) if matched else [None] * len(projections)
        named = []
        for projection, item in zip(projections, items, strict=True):
            if _named_by_itself(projection):
                named.append(projection)
                continue
            text = _text(tokens[item[0] : item[1] + 1], source) if item else None
            if _cast_operator_on_a_column(projection, text):
                named.append(projection)
                continue
            name = text or projection.sql(dialect=dialect).lower()
            # the projection itself moves under the alias, so nested SELECTs stay in the tree
            named.append(exp.Alias(this=projection, alias=exp.to_identifier(name, quoted=True)))
        select.set("expressions", named)


def _named_by_itself(projection: exp.Expr) -> bool:
    """Aliases, columns, struct fields and `*` already carry the name the output gets."""
    return isinstance(projection, (exp.Alias, exp.Column, exp.Dot, exp.Star))


def _cast_operator_on_a_column(projection: exp.Expr, text: str | None) -> bool:
    """Postgres `col::type` keeps the column's name (`cast(col as type)` is named as written)."""
    return (
        isinstance(projection, exp.Cast)
        and text is not None
        and "::" in text
        and bool(projection.output_name)
    )


def _select_lists(tokens: Sequence[Token]) -> list[list[_Span]]:
    """Every SELECT list in the statement, as the token spans of its items."""
    lists = []
    for index, token in enumerate(tokens):
        if token.token_type == TokenType.SELECT:
            lists.append(_items(tokens, _skip_modifiers(tokens, index + 1)))
    return lists


def _skip_modifiers(tokens: Sequence[Token], at: int) -> int:
    """Past DISTINCT [ON (...)], ALL, TOP n [PERCENT] [WITH TIES], AS STRUCT/VALUE."""
    while at < len(tokens):
        kind, word = tokens[at].token_type, tokens[at].text.upper()
        if kind in (TokenType.DISTINCT, TokenType.ALL):
            at += 1
            if at < len(tokens) and tokens[at].token_type == TokenType.ON:
                at = _past_parentheses(tokens, at + 1)
        elif kind == TokenType.TOP:
            at = _past_parentheses(tokens, at + 1)
            while at < len(tokens) and tokens[at].text.upper() in ("PERCENT", "WITH", "TIES"):
                at += 1
        elif kind == TokenType.ALIAS and _word_at(tokens, at + 1) in ("STRUCT", "VALUE"):
            at += 2
        elif word == "SQL_CALC_FOUND_ROWS":
            at += 1
        else:
            return at
    return at


def _word_at(tokens: Sequence[Token], at: int) -> str:
    return tokens[at].text.upper() if at < len(tokens) else ""


def _past_parentheses(tokens: Sequence[Token], at: int) -> int:
    """Past one token, or past a whole parenthesised group starting at `at`."""
    if at >= len(tokens) or tokens[at].token_type != TokenType.L_PAREN:
        return at + 1
    depth = 0
    while at < len(tokens):
        if tokens[at].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[at].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return at + 1
        at += 1
    return at


def _items(tokens: Sequence[Token], start: int) -> list[_Span]:
    items = []
    depth = 0
    at = start
    while at < len(tokens):
        kind = tokens[at].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            if depth == 0:
                break  # the parenthesis closing a subquery
            depth -= 1
        elif depth == 0 and kind in _LIST_ENDS:
            break
        elif depth == 0 and kind == TokenType.COMMA:
            items.append((start, at - 1))
            start = at + 1
        at += 1
    items.append((start, at - 1))
    return items


def _matching_list(
    projections: list[exp.Expr], lists: list[list[_Span]], tokens: Sequence[Token]
) -> list[_Span] | None:
    """The SELECT list whose items hold each projection's recorded positions."""
    anchors = [_positions(projection) for projection in projections]
    if not any(anchors):
        return None
    for items in lists:
        if len(items) != len(projections) or any(first > last for first, last in items):
            continue
        if all(
            tokens[first].start <= position <= tokens[last].end
            for (first, last), positions in zip(items, anchors, strict=True)
            for position in positions
        ):
            return items
    return None


def _positions(node: exp.Expr) -> list[int]:
    return [n.meta["start"] for n in node.walk() if isinstance(n.meta.get("start"), int)]


def _text(tokens: Sequence[Token], source: str) -> str | None:
    """Token texts as written, one space where the source had any gap, none inside `( )`."""
    text = ""
    previous: Token | None = None
    for token in tokens:
        if (
            previous is not None
            and token.start > previous.end + 1
            and previous.token_type != TokenType.L_PAREN
            and token.token_type != TokenType.R_PAREN
        ):
            text += " "
        text += source[token.start : token.end + 1]
        previous = token
    return text.lower() or None
