"""Nested fields: `col.a.b` is a column of its table, never a table.

A dotted name is read the way BigQuery reads it: its leading parts name a table in scope (an
alias, a table's name, or its qualified name), the next part is a column of that table, and the
rest are fields inside the column. When no leading part names a table, the first part is the
column: in the dialects that reach into STRUCT, ROW or SUPER values with dots (BigQuery, Spark,
Databricks, Hive, DuckDB, Trino, Presto, Athena, Redshift), and in any dialect when the schema or
the query names it as a column of a table in scope. Postgres' `(col).a`, Snowflake's `col:a.b`
and `col['a']`, and `arr[OFFSET(0)].f` read `col` as a column already.

The edge names the top-level column, `payload` for `payload.user_id`: it is what a catalog's
`pii_columns`/`holds_subject` and a warehouse DELETE name, and a subject's value anywhere inside
it makes the column hold the subject. The path below it is not kept, since the contract's
`table.col` could not carry it without breaking that match; taking a field is a TRANSFORMATION
(part of the column's value reaches the output), as taking an array's elements with UNNEST is.

In a FROM clause BigQuery and Redshift read `JOIN t.items AS i`, after `t`, as the array `items`
of each row of `t` (an implicit UNNEST), not as a table `items` of a dataset `t`.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.bigquery import BigQuery
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.hive import Hive
from sqlglot.dialects.presto import Presto
from sqlglot.dialects.redshift import Redshift

# Dialects where `a.b`, `a` not a table in scope, is field `b` of a column `a`. Spark,
# Databricks and Athena derive from Hive and Presto (Trino) in sqlglot.
_DOT_FIELD_DIALECTS = (BigQuery, Hive, DuckDB, Presto, Redshift)
# Dialects where a FROM item `alias.column` is an array of the row `alias` names.
_ARRAY_PATH_DIALECTS = (BigQuery, Redshift)


def reads_fields_by_dot(dialect: Dialect) -> bool:
    """Whether `a.b` may be field `b` of a column `a` when no table in scope is named `a`."""
    return isinstance(dialect, _DOT_FIELD_DIALECTS)


def path_parts(column: exp.Column) -> list[str]:
    """A column's dotted name, lower-cased: `e.payload.user_id` -> [e, payload, user_id].

    For `e.payload.*` the parts before the star: [e, payload].
    """
    return [part.name.lower() for part in column.parts if isinstance(part, exp.Identifier)]


def unnest_array_paths(query: exp.Expr, dialect: Dialect) -> None:
    """Rewrite FROM items `alias.path [AS x]` that walk into a row in scope as `UNNEST(...)`."""
    if not isinstance(dialect, _ARRAY_PATH_DIALECTS):
        return
    for table in list(query.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier) or not table.args.get("db"):
            continue
        parts = [part for part in table.parts if isinstance(part, exp.Identifier)]
        if parts[0].name.lower() not in _range_variables(table):
            continue
        alias = table.args.get("alias")
        name = alias.this if isinstance(alias, exp.TableAlias) and alias.this else parts[-1]
        path = exp.column(
            parts[-1].copy(),
            table=parts[-2].copy(),
            db=parts[-3].copy() if len(parts) > 2 else None,
        )
        table.replace(exp.Unnest(expressions=[path], alias=exp.TableAlias(columns=[name.copy()])))


def _range_variables(table: exp.Table) -> set[str]:
    """Aliases (or names) of the other FROM items of the SELECTs that enclose `table`."""
    names: set[str] = set()
    select = table.find_ancestor(exp.Select)
    while select is not None:
        from_ = select.args.get("from_")
        items = [from_.this] if isinstance(from_, exp.From) else []
        items += [join.this for join in select.args.get("joins") or []]
        names.update(
            item.alias_or_name.lower()
            for item in items
            if item is not table
            and isinstance(item, (exp.Table, exp.Subquery, exp.Unnest))
            and item.alias_or_name
        )
        select = select.find_ancestor(exp.Select)
    return names
