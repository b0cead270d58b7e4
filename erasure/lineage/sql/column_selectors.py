"""DuckDB's `COLUMNS(...)`: a `*` that keeps the columns a pattern, a list or a lambda picks.

`COLUMNS('.*_id')` keeps the columns whose name the regular expression matches anywhere (as
DuckDB's `regexp_matches`), `COLUMNS(['a', 'b'])` those named, `COLUMNS(*)` all and
`COLUMNS(* EXCLUDE (a))` all but those named. A lambda (`COLUMNS(c -> c LIKE '%id')`) or a
pattern Python's `re` cannot read is not evaluated: every column is kept, and the caller says
so in a gap. Names match without regard to case, as DuckDB's identifiers do.
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
    if isinstance(argument, exp.Star) and {k for k, v in argument.args.items() if v} <= {"except_"}:
        dropped = {c.name.lower() for c in argument.args.get("except_") or []}
        return lambda name: name.lower() not in dropped
    if isinstance(argument, exp.Literal) and argument.is_string:
        try:
            pattern = re.compile(argument.name, re.IGNORECASE)
        except re.error:
            return None
        return lambda name: pattern.search(name) is not None
    if isinstance(argument, (exp.Array, exp.Tuple)) and all(
        isinstance(item, exp.Literal) and item.is_string for item in argument.expressions
    ):
        names = {item.name.lower() for item in argument.expressions}
        return lambda name: name.lower() in names
    return None
