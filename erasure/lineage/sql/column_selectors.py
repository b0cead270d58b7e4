"""DuckDB's `COLUMNS(...)`: a `*` that keeps the columns a pattern, a list or a lambda picks.

`COLUMNS('.*_id')` keeps the columns whose name the regular expression matches anywhere (as
DuckDB's `regexp_matches`), `COLUMNS(['a', 'b'])` those named, `COLUMNS(*)` all and
`COLUMNS(* EXCLUDE (a))` all but those named, `COLUMNS(b.* EXCLUDE (a))` the same of `b`'s.
A lambda (`COLUMNS(c -> c LIKE '%id')`), a pattern Python's `re` cannot read, or one it could
take exponential time on (a repeated group holding a repetition or an alternation, a
backreference, many repetitions) is not evaluated: every column is kept, and the caller says so
in a gap. Names match without regard to case: for a list or EXCLUDE as DuckDB's identifiers
do; for a pattern, DuckDB matches case-sensitively, but the schema's names may be folded, so
every column a case-sensitive match could keep is kept (and perhaps more).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

Selector = Callable[[str], bool]


def is_selector(node: exp.Expr) -> bool:
    """Whether a projection is `COLUMNS(...)` itself, the way `*` is a projection."""
    return isinstance(node, exp.Columns)


def selector(node: exp.Columns) -> Selector | None:
    """Which column names `COLUMNS(...)` keeps; None when it cannot be evaluated here."""
    argument = node.this
    if isinstance(argument, exp.Column) and isinstance(argument.this, exp.Star):  # b.* EXCLUDE
        argument = argument.this
    if isinstance(argument, exp.Star) and {k for k, v in argument.args.items() if v} <= {"except_"}:
        dropped = {c.name.lower() for c in argument.args.get("except_") or []}
        return lambda name: name.lower() not in dropped
    if isinstance(argument, exp.Literal) and argument.is_string:
        if may_backtrack(argument.name):
            return None
        try:
            pattern = re.compile(argument.name, re.IGNORECASE)
        except re.error:
            return None
        # A name longer than any a warehouse allows is kept, not searched.
        return lambda name: len(name) > _LONGEST_NAME or pattern.search(name) is not None
    if isinstance(argument, (exp.Array, exp.Tuple)) and all(
        isinstance(item, exp.Literal) and item.is_string for item in argument.expressions
    ):
        names = {item.name.lower() for item in argument.expressions}
        return lambda name: name.lower() in names
    return None


_LONGEST_NAME = 256
_MOST_REPETITIONS = 4
_COUNTED = re.compile(r"\{\d*,?\d*\}")


def may_backtrack(pattern: str) -> bool:
    """Whether `pattern` may take Python's backtracking `re` exponential (or high polynomial)
    time on a long name: a repeated group holding a repetition or an alternation (`(\\w+_?)+`,
    `(a|aa)*`), a backreference, or more than a few repetitions in all."""
    open_groups: list[bool] = []  # per open group: whether it holds a repetition or `|`
    closed: bool | None = None  # the group just closed held one; None: the last item no group
    repetitions = 0
    position = 0
    while position < len(pattern):
        char = pattern[position]
        step = 1
        if char == "\\":
            following = pattern[position + 1 : position + 2]
            if following.isdigit() and following != "0":
                return True  # \1: a backreference
            step, closed = 2, None
        elif char == "[":
            step, closed = _class_length(pattern, position), None
        elif char == "(":
            if pattern.startswith("(?P=", position):
                return True  # a named backreference
            open_groups.append(False)
            closed = None
            if pattern.startswith("(?", position):
                step = 2  # (?:, (?P<name>, lookarounds: no repetition
        elif char == ")":
            held = open_groups.pop() if open_groups else False
            if held and open_groups:
                open_groups[-1] = True
            closed = held
        elif char == "|":
            if open_groups:
                open_groups[-1] = True
            closed = None
        elif char in "*+" or (char == "{" and _COUNTED.match(pattern, position)):
            if closed:
                return True  # a repeated group holding a repetition
            repetitions += 1
            if open_groups:
                open_groups[-1] = True
            if char == "{":
                match = _COUNTED.match(pattern, position)
                step = match.end() - position if match else 1
            closed = None
        else:
            closed = None if char != "?" else closed
        position += step
    return repetitions > _MOST_REPETITIONS


def _class_length(pattern: str, start: int) -> int:
    """How many characters the `[...]` at `start` spans (to the end when unclosed)."""
    position = start + 1
    if pattern.startswith("^", position):
        position += 1
    if pattern.startswith("]", position):
        position += 1
    while position < len(pattern) and pattern[position] != "]":
        position += 2 if pattern[position] == "\\" else 1
    return position + 1 - start
