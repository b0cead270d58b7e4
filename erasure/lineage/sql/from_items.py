"""The columns a FROM item provides when it is not a plain table, and under which names.

A table function names its columns in its alias (`unnest(x) AS t(a)`), or its own way: Hive and
Spark's `LATERAL VIEW explode(arr) v` gives `col` (`key`, `value` for a map; `pos` first for
posexplode), `json_tuple(...)` gives `c0`, `c1`...; `JSON_TABLE(doc, ... COLUMNS (...))` names
them in its COLUMNS clause. A table's alias may rename its columns by position (`FROM people AS
p (pid, pname)`, SQL's derived column list). JSON_TABLE, OPENJSON, UNNEST and the generators
read nothing but their arguments; any other table function may read more than lineage sees.
"""

from __future__ import annotations

from sqlglot import exp

# Table functions whose rows are made from their arguments alone.
_READS_ONLY_ARGUMENTS = (
    exp.JSONTable,
    exp.OpenJSON,
    exp.Unnest,
    exp.Explode,
    exp.ExplodeOuter,
    exp.Inline,
)


def reads_only_arguments(function: exp.Expr) -> bool:
    """Whether a table function's rows come from its arguments alone (no gap to report)."""
    return isinstance(function, _READS_ONLY_ARGUMENTS)


def alias_columns(node: exp.Expr) -> set[str] | None:
    """Columns a table function provides: `unnest(x) AS t(a)` -> {a}, `AS u` -> {u}, a LATERAL
    VIEW's generator's own names; None when they are unknown."""
    alias = node.args.get("alias")
    if not isinstance(alias, exp.TableAlias):
        return None
    if alias.columns:
        return {column.name.lower() for column in alias.columns}
    if isinstance(node, exp.Lateral) and node.args.get("view"):
        return generator_columns(node.this)  # the alias names the view, not its column
    return {alias.name.lower()} if alias.name else None


def generator_columns(function: exp.Expr) -> set[str] | None:
    """The names Hive and Spark give a generator's columns when the query names none.

    Whether explode's argument is an array (`col`) or a map (`key`, `value`) is not known
    here, so all three are the generator's.
    """
    if isinstance(function, exp.Posexplode):  # before Explode: a subclass of it
        return {"pos", "col", "key", "value"}
    if isinstance(function, (exp.Explode, exp.ExplodeOuter)):
        return {"col", "key", "value"}
    if isinstance(function, exp.Anonymous) and function.name.lower() == "json_tuple":
        return {f"c{position}" for position in range(len(function.expressions) - 1)}
    return None


def function_table_columns(table: exp.Table) -> list[str] | None:
    """Columns of a FROM item that is a function, in order: its alias's, or JSON_TABLE's."""
    named = renamed_columns(table)
    if named:
        return named
    if isinstance(table.this, exp.JSONTable):
        return [
            definition.name.lower()
            for definition in table.this.find_all(exp.JSONColumnDef)
            if definition.name
        ]
    return None


def renamed_columns(table: exp.Table) -> list[str]:
    """`FROM people AS p (pid, pname)`: the names the alias gives the table's first columns."""
    alias = table.args.get("alias")
    if not isinstance(alias, exp.TableAlias):
        return []
    return [column.name.lower() for column in alias.columns]


def original_name(table: exp.Table, name: str, columns: list[str] | None) -> str | None:
    """The table's own name for `name` as the query sees it; None when `name` is a renamed
    column whose original the table's unknown columns cannot tell."""
    renamed = renamed_columns(table)
    if name not in renamed:
        return name
    position = renamed.index(name)
    if columns is None or position >= len(columns):
        return None
    return columns[position]


def visible_columns(table: exp.Table, columns: list[str]) -> list[tuple[str, str]]:
    """(name the query sees, table's own name) for every column of a renamed table."""
    renamed = renamed_columns(table)
    return [
        (renamed[position] if position < len(renamed) else column, column)
        for position, column in enumerate(columns)
    ]
