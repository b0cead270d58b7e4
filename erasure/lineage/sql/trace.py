"""Tracing one query's output columns down to base-table columns, through sqlglot scopes.

The query's tables are qualified against the schema (so `*` expands and bare columns find
their table) and split into scopes (CTEs, subqueries, set operations); `column_flow`
follows each output column to the base-table columns its value comes from, and how
(identity, transformation, aggregation), and collects apart the columns that only filter,
join, group, sort or choose. What cannot be traced is a gap, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from erasure.lineage.sql.column_flow import (
    CLAUSE_ALIAS,
    LATERAL_ALIAS,
    LATERAL_FIELD,
    WILDCARD_TABLE,
    ColumnFlow,
    OutputColumn,
    SourceColumn,
)
from erasure.lineage.sql.field_paths import unnest_array_paths
from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.known_tables import KnownTables
from erasure.lineage.sql.names import table_name
from erasure.lineage.sql.table_resolution import TableNaming
from erasure.lineage.sql.table_shards import is_wildcard
from erasure.model import EdgeSubtype, GapKind


@dataclass
class ColumnTrace:
    """A traced query: its output columns in order, the columns that sway every row, gaps."""

    outputs: list[OutputColumn]
    unnamed: set[int]  # positions of outputs whose names lineage cannot tell
    indirect: list[tuple[SourceColumn, EdgeSubtype]]  # filter, join, group, sort, window...
    gaps: list[SqlGap]


def trace_columns(
    query: exp.Query,
    number: int,
    dialect: Dialect,
    known: KnownTables,
    variables: frozenset[str] = frozenset(),
    *,
    naming: TableNaming,
) -> ColumnTrace:
    """Trace the query of statement `number` (renaming its tables in place) with `known` columns.

    `variables` are a routine's parameters and variables: a bare name among them is not a
    column, unless a table the query reads is known to have a column of that name. Tables
    are named by `naming`.
    """
    unnest_array_paths(query, dialect)
    isolated = _isolate_tables(query, naming, known, number)
    tables = isolated.tables
    if isolated.conflicts:
        known = known.without(isolated.conflicts)
    _mark_lateral_aliases(query)
    if variables:
        _drop_variables(query, variables, tables, known)
    schema: dict[str, object] = {
        synthetic: dict.fromkeys(known[written], "text")
        for synthetic, written in tables.items()
        if written in known
    }
    held = _hold_column_lists(query, schema)
    qualified = _qualify(query, dialect, schema)
    if held:
        _restore_column_lists(qualified)
    root = build_scope(qualified)
    if root is None:
        raise OptimizeError("no query scope")
    tracer = ColumnFlow(root, tables, known, number, dialect=dialect)
    for gap in isolated.gaps:
        tracer.gap(gap)
    outputs = tracer.outputs(root)
    indirect = tracer.indirect_sources()
    for function in qualified.find_all(exp.Anonymous, exp.AnonymousAggFunc):
        tracer.gap(
            SqlGap(
                f"opaque function {function.name.lower()} in statement {number}",
                GapKind.OPAQUE_PRODUCER,
            )
        )
    return ColumnTrace(outputs, tracer.unnamed_outputs(root), indirect, tracer.gaps)


_SYNTHETIC_PREFIX = "_erasure_t"


@dataclass
class _Isolated:
    tables: dict[str, str]  # synthetic name -> the table's name in edges
    gaps: list[SqlGap] = field(default_factory=list)
    conflicts: set[str] = field(default_factory=set)  # names whose known columns are another's


def _isolate_tables(
    query: exp.Expr, naming: TableNaming, known: KnownTables, number: int
) -> _Isolated:
    """Give every base table a one-part synthetic name, remembering the name edges carry.

    sqlglot's schema needs every table at the same depth, while scripts mix `crm.customers`
    and `staging`; one-part synthetic names sidestep that, and the tables' names come back
    from this map. A table without an alias keeps its own name as alias, so `customers.email`
    still resolves. A CTE's name is never a table, so never completed.
    """
    ctes = [
        cte.args["alias"].this
        for cte in query.find_all(exp.CTE)
        if isinstance(cte.args.get("alias"), exp.TableAlias)
        and isinstance(cte.args["alias"].this, exp.Identifier)
    ]
    synthetic: dict[str, str] = {}
    isolated = _Isolated({})
    for table in list(query.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue  # table functions
        written = table_name(table)
        if (
            not table.args.get("db")
            and not written.startswith("#")
            and any(naming.same_identifier(table.this, cte) for cte in ctes)
        ):
            continue
        resolved = naming.resolve(table, known)
        isolated.gaps.extend(resolved.gaps(written, number))
        conflict = known.conflict(resolved, table.sql(dialect=naming.dialect), number)
        if conflict is not None:
            isolated.gaps.append(conflict)
            isolated.conflicts.add(resolved.text)
        name = synthetic.setdefault(resolved.text, f"{_SYNTHETIC_PREFIX}{len(synthetic)}")
        if not table.alias:
            table.set("alias", exp.TableAlias(this=table.this.copy()))
        if is_wildcard(written):
            table.meta[WILDCARD_TABLE] = True
        table.set("this", exp.to_identifier(name))
        table.set("db", None)
        table.set("catalog", None)
    isolated.tables = {name: text for text, name in synthetic.items()}
    return isolated


def _mark_lateral_aliases(query: exp.Expr) -> None:
    """Flag bare names an earlier projection of the same SELECT defines: `a AS b, b + 1`, a
    field of one (`named_struct(...) AS st, st.a`), and bare names in its WHERE, HAVING or
    QUALIFY that name one of its outputs.

    With the tables' columns sqlglot reads them as the alias; without, it gives up (or takes
    them for a column of the only table), and the flag lets the tracer read them so too.
    """
    for select in query.find_all(exp.Select):
        aliases: set[str] = set()
        for projection in select.expressions:
            for column in projection.find_all(exp.Column):
                qualifier = column.table.lower()
                named = qualifier or column.name.lower()  # the earlier output it may mean
                if named not in aliases or column.find_ancestor(exp.Select) is not select:
                    continue
                if not qualifier:
                    column.meta[LATERAL_ALIAS] = True
                elif qualifier not in _from_aliases(select):
                    column.meta[LATERAL_FIELD] = qualifier  # `named_struct(...) AS st, st.a`
            if isinstance(projection, exp.Alias):
                aliases.add(projection.alias.lower())
        for key in ("where", "having", "qualify"):
            clause = select.args.get(key)
            for column in clause.find_all(exp.Column) if isinstance(clause, exp.Expr) else []:
                own = column.find_ancestor(exp.Select) is select
                if own and not column.table and column.name.lower() in aliases:
                    column.meta[CLAUSE_ALIAS] = True


_HELD_COLUMNS = "erasure_held_columns"  # meta: a column list kept from sqlglot's qualify


def _hold_column_lists(query: exp.Expr, schema: Mapping[str, object]) -> bool:
    """Keep `c (x, y) AS (SELECT * FROM s)` and `(SELECT * FROM s) AS q (x, y)` column lists
    from qualify while `s`'s columns are unknown: sqlglot would expand the `*` into `s.x, s.y`,
    taking the list's names for `s`'s columns. The tracer reads the list (restored after).
    Whether any was held."""
    held = False
    ctes = {
        cte.alias_or_name.lower(): cte.this
        for cte in query.find_all(exp.CTE)
        if isinstance(cte.this, (exp.Select, exp.SetOperation))
    }
    for alias in list(query.find_all(exp.TableAlias)):
        body = alias.parent.this if isinstance(alias.parent, (exp.CTE, exp.Subquery)) else None
        if not alias.columns or not isinstance(body, (exp.Select, exp.SetOperation)):
            continue
        if _star_over_unknown(body, schema, ctes, set()):
            alias.meta[_HELD_COLUMNS] = [column.copy() for column in alias.columns]
            alias.set("columns", None)
            held = True
    return held


def _branches(union: exp.SetOperation) -> list[exp.Select]:
    """The SELECTs a set operation combines, however nested."""
    found: list[exp.Select] = []
    for side in (union.this, union.expression):
        side = side.unnest() if isinstance(side, exp.Subquery) else side
        if isinstance(side, exp.Select):
            found.append(side)
        elif isinstance(side, exp.SetOperation):
            found.extend(_branches(side))
    return found


def _star_over_unknown(
    body: exp.Expr, schema: Mapping[str, object], ctes: Mapping[str, exp.Expr], seen: set[int]
) -> bool:
    """Whether the query's `*` reaches, at any depth (through derived tables and CTEs), a base
    table with no known columns: its width, and so what a column list names, is unknown."""
    if id(body) in seen:
        return False  # a recursive CTE
    seen.add(id(body))
    branches = [body] if isinstance(body, exp.Select) else []
    if isinstance(body, exp.SetOperation):
        branches = _branches(body)
    for branch in branches:
        if not any(p.is_star for p in branch.expressions):
            continue
        from_ = branch.args.get("from_")
        items = [from_.this] if isinstance(from_, exp.From) else []
        items += [join.this for join in branch.args.get("joins") or []]
        for item in items:
            if isinstance(item, exp.Subquery):
                inner: exp.Expr | None = item.unnest()
            elif isinstance(item, exp.Table) and item.name.startswith(_SYNTHETIC_PREFIX):
                if item.name not in schema:
                    return True
                continue
            elif isinstance(item, exp.Table):
                inner = ctes.get(item.name.lower())
            else:
                continue
            if inner is not None and _star_over_unknown(inner, schema, ctes, seen):
                return True
    return False


def _restore_column_lists(query: exp.Expr) -> None:
    for alias in query.find_all(exp.TableAlias):
        held = alias.meta.pop(_HELD_COLUMNS, None)
        if held:
            alias.set("columns", held)


def _from_aliases(select: exp.Select) -> set[str]:
    """The names a SELECT's own FROM items go by (aliases, or tables' names)."""
    from_ = select.args.get("from_")
    items = [from_.this] if isinstance(from_, exp.From) else []
    items += [join.this for join in select.args.get("joins") or []]
    items += list(select.args.get("laterals") or [])
    return {item.alias_or_name.lower() for item in items if item.alias_or_name}


def _drop_variables(
    query: exp.Expr,
    variables: frozenset[str],
    tables: Mapping[str, str],
    known: KnownTables,
) -> None:
    """Turn bare references to routine variables into plain values, which read no column."""
    columns = {c for written in tables.values() for c in known.get(written, [])}
    for column in list(query.find_all(exp.Column)):
        name = column.name.lower()
        if not column.table and name in variables and name not in columns:
            column.replace(exp.Var(this=column.name))


def _qualify(query: exp.Expr, dialect: Dialect, schema: dict[str, object]) -> exp.Expr:
    """Qualify columns with the schema; with less help when sqlglot cannot resolve an alias.

    Without a table's columns sqlglot refuses some queries (an alias that might shadow a
    column, correlated subqueries); the tracer then resolves columns itself.
    """
    attempts = ((True, True), (False, True), (False, False))
    for expand_alias_refs, qualify_columns in attempts:
        try:
            return qualify(
                query.copy(),
                dialect=dialect,
                schema=schema,
                expand_alias_refs=expand_alias_refs,
                qualify_columns=qualify_columns,
                validate_qualify_columns=False,
                quote_identifiers=False,
                identify=False,
            )
        except OptimizeError:
            if not qualify_columns:
                raise
    raise AssertionError("unreachable")
