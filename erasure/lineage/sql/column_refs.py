"""What a query's expression references, and in which role, before anything is resolved.

A scope's projections and clauses are walked once: each column, nested query, DuckDB
`COLUMNS(...)` or whole-row reference met is a `Ref`, with the DIRECT subtype its value takes on
the way to the projection (identity, transformation, aggregation) or, when it only chooses or
orders rows, the INDIRECT one (a CASE condition, a window partition, an aggregate's FILTER or
ORDER BY, a WHERE or a JOIN). `column_flow` resolves the references to base-table columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from erasure.lineage.sql.column_selectors import is_selector
from erasure.lineage.sql.names import ALL_COLUMNS
from erasure.model import EdgeSubtype

_DIRECT_RANK = {EdgeSubtype.IDENTITY: 0, EdgeSubtype.TRANSFORMATION: 1, EdgeSubtype.AGGREGATION: 2}


def compose(outer: EdgeSubtype, inner: EdgeSubtype) -> EdgeSubtype:
    """An aggregate of a transformation is an aggregation; an alias of one changes nothing."""
    return outer if _DIRECT_RANK[outer] >= _DIRECT_RANK[inner] else inner


# Window value functions copy one row's value into another row: not an aggregation.
_VALUE_FUNCTIONS = (exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue)

# Query clauses whose columns decide which rows, or in what order, reach the output.
_CLAUSES = (
    ("where", EdgeSubtype.FILTER),
    ("prewhere", EdgeSubtype.FILTER),
    ("having", EdgeSubtype.FILTER),
    ("qualify", EdgeSubtype.FILTER),
    ("group", EdgeSubtype.GROUP_BY),
    ("distinct", EdgeSubtype.GROUP_BY),
    ("order", EdgeSubtype.SORT),
    ("sort", EdgeSubtype.SORT),
    ("windows", EdgeSubtype.WINDOW),
    ("connect", EdgeSubtype.FILTER),
)


@dataclass(frozen=True, slots=True)
class Ref:
    """A column (or a nested query) met in a scope, and the role it plays there."""

    # exp.Columns: DuckDB's COLUMNS(...) in an expression; exp.TableColumn: a table's whole row
    # as a value (Postgres' `row_to_json(e)`, `json_agg(e)`)
    node: exp.Column | exp.Columns | exp.TableColumn | Scope
    subtype: EdgeSubtype  # DIRECT subtype on the way to the projection
    indirect: EdgeSubtype | None  # set when the reference only influences the output


@dataclass
class Projection:
    name: str
    star: exp.Expr | None  # `*`, `t.*`, DuckDB's COLUMNS(...)
    refs: list[Ref]  # value refs, and refs that only sway this column (indirect set)
    within: bool = False  # `star` is COLUMNS(...) inside an expression: one output per column


@dataclass
class Scan:
    projections: list[Projection]
    clauses: list[Ref]  # WHERE, JOIN, GROUP BY...: refs that sway every row


class RefScanner:
    """Walks a qualified query's scopes; a nested query met is a reference to its scope."""

    def __init__(self, scopes: Mapping[int, Scope]) -> None:
        self._scopes = scopes  # id of a scope's expression -> the scope

    def scan(self, scope: Scope, using: Callable[[exp.Expr], list[Ref]]) -> Scan:
        """The scope's projections and clauses, each reference with its role; `using` gives a
        JOIN ... USING's references (which needs the sides' columns)."""
        expression = scope.expression
        scan = Scan([], [])
        if not isinstance(expression, (exp.Select, exp.SetOperation)):
            return scan
        if isinstance(expression, exp.Select):
            for position, projection in enumerate(expression.expressions):
                selected = projection.this if isinstance(projection, exp.Alias) else projection
                if projection.is_star or is_selector(selected):
                    star = projection if projection.is_star else selected
                    scan.projections.append(Projection(ALL_COLUMNS, star, []))
                    continue
                refs: list[Ref] = []
                self.walk(projection, EdgeSubtype.IDENTITY, None, refs)
                name = projection.output_name.lower() or f"_col_{position}"
                within = projection.find(exp.Columns)
                if within is not None:
                    scan.projections.append(Projection(name, within, refs, within=True))
                    continue
                scan.projections.append(Projection(name, None, refs))
            for join in expression.args.get("joins") or []:
                self._walk_arg(join, "on", EdgeSubtype.JOIN, scan.clauses)
                scan.clauses.extend(using(join))
            scan.clauses.extend(self._ordinal_refs(expression))
        for key, subtype in _CLAUSES:
            self._walk_arg(expression, key, subtype, scan.clauses)
        return scan

    def _ordinal_refs(self, select: exp.Select) -> list[Ref]:
        """GROUP BY 1 / ORDER BY 2 that qualify left as numbers: the projection they name;
        GROUP BY ALL / ORDER BY ALL (Snowflake, DuckDB, Databricks): every projection, for
        GROUP BY every one without an aggregate."""
        refs: list[Ref] = []
        for key, subtype in (("group", EdgeSubtype.GROUP_BY), ("order", EdgeSubtype.SORT)):
            clause = select.args.get(key)
            if isinstance(clause, exp.Group) and clause.args.get("all"):
                for projection in select.expressions:
                    if projection.find(exp.AggFunc, exp.Window) is None:
                        self.walk(projection, EdgeSubtype.IDENTITY, subtype, refs)
            for item in clause.expressions if isinstance(clause, exp.Expr) else []:
                node = item.this if isinstance(item, exp.Ordered) else item
                if isinstance(node, exp.Var) and node.name.upper() == "ALL":
                    for projection in select.expressions:
                        self.walk(projection, EdgeSubtype.IDENTITY, subtype, refs)
                if isinstance(node, exp.Literal) and node.is_int:
                    position = int(node.name) - 1
                    if 0 <= position < len(select.expressions):
                        self.walk(select.expressions[position], EdgeSubtype.IDENTITY, subtype, refs)
        return refs

    def _walk_arg(self, node: exp.Expr, key: str, indirect: EdgeSubtype, out: list[Ref]) -> None:
        value = node.args.get(key)
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, exp.Expr):
                self.walk(child, EdgeSubtype.TRANSFORMATION, indirect, out)

    def walk(
        self,
        node: exp.Expr,
        subtype: EdgeSubtype,
        indirect: EdgeSubtype | None,
        out: list[Ref],
    ) -> None:
        """Collect the columns under `node`, each with its role; the outermost INDIRECT wins."""
        if isinstance(node, exp.Column):
            if not isinstance(node.this, exp.Star):  # count(t.*) reads no column value
                out.append(Ref(node, subtype, indirect))
            return
        if isinstance(node, (exp.Columns, exp.TableColumn)):  # not COLUMNS' EXCLUDE list
            out.append(Ref(node, subtype, indirect))
            return
        if isinstance(node, (exp.Select, exp.SetOperation)):
            nested = self._scopes.get(id(node))
            if nested is not None:
                out.append(Ref(nested, subtype, indirect))
                return
        value = compose(subtype, EdgeSubtype.TRANSFORMATION)
        if isinstance(node, exp.Window):
            self._walk_child(node.this, subtype, indirect, out)
            for key in ("partition_by", "order"):
                self._walk_args(node, key, value, indirect or EdgeSubtype.WINDOW, out)
            return
        if isinstance(node, (exp.Case, exp.If)):
            # CASE x WHEN ... / WHEN cond THEN: the conditions choose, the branches flow.
            condition = indirect or EdgeSubtype.CONDITIONAL
            self._walk_child(node.this, value, condition, out)
            for branch in node.args.get("ifs") or []:
                self._walk_child(branch.this, value, condition, out)
                self._walk_child(branch.args.get("true"), value, indirect, out)
            for key in ("true", "false", "default"):
                self._walk_child(node.args.get(key), value, indirect, out)
            return
        if isinstance(node, exp.DecodeCase) and node.expressions:  # DECODE(x, search, result...)
            condition = indirect or EdgeSubtype.CONDITIONAL
            operand, *pairs = node.expressions
            self.walk(operand, value, condition, out)
            for position, item in enumerate(pairs):
                searched = position % 2 == 0 and position + 1 < len(pairs)
                self.walk(item, value, condition if searched else indirect, out)
            return
        if isinstance(node, exp.Filter):  # agg(x) FILTER (WHERE cond)
            self._walk_child(node.this, subtype, indirect, out)
            self._walk_child(node.expression, value, indirect or EdgeSubtype.FILTER, out)
            return
        if isinstance(node, exp.WithinGroup):
            self._walk_child(node.this, subtype, indirect, out)
            order = node.expression
            if isinstance(order, exp.Order) and _ordered_set(node.this):
                # percentile_cont(0.5) / mode() WITHIN GROUP (ORDER BY x): x is the value
                self.walk(order, compose(subtype, EdgeSubtype.AGGREGATION), indirect, out)
            elif isinstance(order, exp.Order):
                self._walk_sort_keys(order, node.this, subtype, indirect, out)
            return
        if isinstance(node, exp.Order) and _orders_an_aggregate(node):
            # string_agg(x, ',' ORDER BY y): y only orders the values
            self._walk_child(node.this, subtype, indirect, out)
            self._walk_sort_keys(node, node.this, subtype, indirect, out)
            return
        if isinstance(node, (exp.Alias, exp.Paren, exp.Subquery)):
            value = subtype
        elif isinstance(node, exp.AggFunc) and not isinstance(node, _VALUE_FUNCTIONS):
            value = compose(subtype, EdgeSubtype.AGGREGATION)
        for child in node.iter_expressions():
            self.walk(child, value, indirect, out)

    def _walk_sort_keys(
        self,
        order: exp.Order,
        values: exp.Expr | None,
        subtype: EdgeSubtype,
        indirect: EdgeSubtype | None,
        out: list[Ref],
    ) -> None:
        """An aggregate's ORDER BY keys: SORT, except the columns it aggregates (their value
        flows already)."""
        aggregated = {_column_key(c) for c in values.find_all(exp.Column)} if values else set()
        keys: list[Ref] = []
        for key in order.expressions:
            self.walk(key, subtype, indirect or EdgeSubtype.SORT, keys)
        out.extend(
            ref
            for ref in keys
            if not (isinstance(ref.node, exp.Column) and _column_key(ref.node) in aggregated)
        )

    def _walk_child(
        self, node: Any, subtype: EdgeSubtype, indirect: EdgeSubtype | None, out: list[Ref]
    ) -> None:
        if isinstance(node, exp.Expr):
            self.walk(node, subtype, indirect, out)

    def _walk_args(
        self,
        node: exp.Expr,
        key: str,
        subtype: EdgeSubtype,
        indirect: EdgeSubtype,
        out: list[Ref],
    ) -> None:
        value = node.args.get(key)
        for child in value if isinstance(value, list) else [value]:
            self._walk_child(child, subtype, indirect, out)


def _column_key(column: exp.Column) -> tuple[str, str]:
    return column.table.lower(), column.name.lower()


# Ordered-set and hypothetical-set aggregates: WITHIN GROUP (ORDER BY x) gives their values.
_ORDERED_SET = frozenset(
    {
        "percentile_cont",
        "percentile_disc",
        "mode",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
    }
)


def _ordered_set(aggregate: exp.Expr) -> bool:
    """Whether `aggregate WITHIN GROUP (ORDER BY x)` takes its value from x (percentile_cont,
    mode, rank...), rather than ordering values it reads itself (listagg, array_agg...)."""
    if isinstance(aggregate, (exp.PercentileCont, exp.PercentileDisc, exp.Mode)):
        return True
    if isinstance(aggregate, exp.Anonymous):
        name = aggregate.name
    else:
        name = aggregate.sql_name() if isinstance(aggregate, exp.Func) else ""
    return name.lower() in _ORDERED_SET or aggregate.find(exp.Column) is None


def _orders_an_aggregate(order: exp.Order) -> bool:
    """`agg(x ORDER BY y)` / BigQuery's `agg(x ORDER BY y LIMIT 1)`, not a query's ORDER BY."""
    parent = order.parent
    if isinstance(parent, exp.Limit):
        parent = parent.parent
    return isinstance(parent, exp.AggFunc)
