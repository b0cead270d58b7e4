"""Tracing one query's output columns down to base-table columns, through sqlglot scopes.

The query's tables are qualified against the schema (so `*` expands and bare columns find
their table) and split into scopes (CTEs, subqueries, set operations); each output column is
followed to the base-table columns its value comes from, and how (identity, transformation,
aggregation). Columns that only filter, join, group or sort rows are collected apart. What
cannot be traced is a gap, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, ScopeType, build_scope

from erasure.lineage.sql_names import ALL_COLUMNS, UNKNOWN_TABLE, table_name
from erasure.model import EdgeSubtype


@dataclass
class ColumnTrace:
    """A traced query: its output columns in order, the columns that sway every row, gaps."""

    outputs: list[OutputColumn]
    indirect: list[tuple[SourceColumn, EdgeSubtype]]  # filter, join, group, sort, window...
    gaps: list[str]


def trace_columns(
    query: exp.Query,
    number: int,
    dialect: Dialect,
    known: Mapping[str, list[str]],
    variables: frozenset[str] = frozenset(),
) -> ColumnTrace:
    """Trace the query of statement `number` (renaming its tables in place) with `known` columns.

    `variables` are a routine's parameters and variables: a bare name among them is not a
    column, unless a table the query reads is known to have a column of that name.
    """
    tables = _isolate_tables(query)
    if variables:
        _drop_variables(query, variables, tables, known)
    schema: dict[str, object] = {
        synthetic: dict.fromkeys(known[written], "text")
        for synthetic, written in tables.items()
        if written in known
    }
    qualified = _qualify(query, dialect, schema)
    root = build_scope(qualified)
    if root is None:
        raise OptimizeError("no query scope")
    tracer = _Tracer(root, tables, known, number)
    outputs = tracer.outputs(root)
    indirect = tracer.indirect_sources()
    for function in qualified.find_all(exp.Anonymous, exp.AnonymousAggFunc):
        tracer.gap(f"opaque function {function.name.lower()} in statement {number}")
    return ColumnTrace(outputs, indirect, tracer.gaps)


_SYNTHETIC_PREFIX = "_erasure_t"


def _isolate_tables(query: exp.Expr) -> dict[str, str]:
    """Give every base table a one-part synthetic name; return synthetic -> written name.

    sqlglot's schema needs every table at the same depth, while scripts mix `crm.customers`
    and `staging`; one-part synthetic names sidestep that, and the written names come back
    from this map. A table without an alias keeps its own name as alias, so `customers.email`
    still resolves.
    """
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    synthetic: dict[str, str] = {}
    for table in list(query.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue  # table functions
        written = table_name(table)
        if not table.args.get("db") and written in ctes:
            continue
        name = synthetic.setdefault(written, f"{_SYNTHETIC_PREFIX}{len(synthetic)}")
        if not table.alias:
            table.set("alias", exp.TableAlias(this=table.this.copy()))
        table.set("this", exp.to_identifier(name))
        table.set("db", None)
        table.set("catalog", None)
    return {name: written for written, name in synthetic.items()}


def _drop_variables(
    query: exp.Expr,
    variables: frozenset[str],
    tables: Mapping[str, str],
    known: Mapping[str, list[str]],
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


class SourceColumn(NamedTuple):
    """A base-table column an output reads: `table.name` (`<unknown>.name`, `table.*`)."""

    table: str
    name: str

    def __str__(self) -> str:
        return f"{self.table}.{self.name}"


_Sources = dict[SourceColumn, EdgeSubtype]  # base column -> how its value reaches the output

_DIRECT_RANK = {EdgeSubtype.IDENTITY: 0, EdgeSubtype.TRANSFORMATION: 1, EdgeSubtype.AGGREGATION: 2}


def _compose(outer: EdgeSubtype, inner: EdgeSubtype) -> EdgeSubtype:
    """An aggregate of a transformation is an aggregation; an alias of one changes nothing."""
    return outer if _DIRECT_RANK[outer] >= _DIRECT_RANK[inner] else inner


def _merge(into: _Sources, sources: _Sources, via: EdgeSubtype) -> None:
    for column, subtype in sources.items():
        composed = _compose(via, subtype)
        into[column] = _compose(into.get(column, composed), composed)


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

# Scopes that may see their parent's sources (correlated subqueries, lateral functions).
_CORRELATED = (ScopeType.SUBQUERY, ScopeType.UDTF, ScopeType.SET_OPERATION)


@dataclass(frozen=True, slots=True)
class _Ref:
    """A column (or a nested query) met in a scope, and the role it plays there."""

    node: exp.Column | Scope
    subtype: EdgeSubtype  # DIRECT subtype on the way to the projection
    indirect: EdgeSubtype | None  # set when the reference only influences the output


@dataclass
class _Projection:
    name: str
    star: exp.Expr | None
    refs: list[_Ref]


@dataclass
class _Scan:
    projections: list[_Projection]
    indirect: list[_Ref]


class OutputColumn(NamedTuple):
    """An output column and the source columns its value comes from."""

    name: str
    sources: _Sources


class _Tracer:
    """Traces one qualified statement's output columns down to base-table columns."""

    def __init__(
        self, root: Scope, tables: Mapping[str, str], known: Mapping[str, list[str]], number: int
    ) -> None:
        self._root = root
        self._tables = tables
        self._known = known
        self._number = number
        scopes = list(root.traverse())
        self._scopes = {id(scope.expression): scope for scope in scopes}
        self._traversed = {id(scope) for scope in scopes}
        self._scans: dict[int, _Scan] = {}
        self._outputs: dict[int, list[OutputColumn]] = {}
        self._passthrough: dict[int, list[exp.Table | Scope]] = {}  # unexpanded `*` sources
        self._busy: set[int] = set()
        self.gaps: list[str] = []

    def gap(self, text: str) -> None:
        if text not in self.gaps:
            self.gaps.append(text)

    # - outputs

    def outputs(self, scope: Scope) -> list[OutputColumn]:
        """The scope's output columns, each with the base columns its value comes from."""
        key = id(scope)
        if key in self._outputs:
            return self._outputs[key]
        self._busy.add(key)
        try:
            expression = scope.expression
            if isinstance(expression, exp.SetOperation):
                outputs = self._set_operation_outputs(scope)
            elif isinstance(expression, exp.Select):
                outputs = self._select_outputs(scope)
            else:
                outputs = []  # table functions, VALUES: looked up by name in _opaque_sources
        finally:
            self._busy.discard(key)
        if scope.outer_columns and len(scope.outer_columns) == len(outputs):
            outputs = [
                OutputColumn(name.lower(), out.sources)
                for name, out in zip(scope.outer_columns, outputs, strict=True)
            ]
        self._outputs[key] = outputs
        return outputs

    def _select_outputs(self, scope: Scope) -> list[OutputColumn]:
        outputs = []
        for projection in self._scan(scope).projections:
            if projection.star is not None:
                outputs.extend(self._expand_star(scope, projection.star))
                continue
            sources: _Sources = {}
            for ref in projection.refs:
                _merge(sources, self._ref_sources(scope, ref), ref.subtype)
            outputs.append(OutputColumn(projection.name, sources))
        return outputs

    def _set_operation_outputs(self, scope: Scope) -> list[OutputColumn]:
        """UNION and friends: names from the first branch, values from every branch by position."""
        branches = [self.outputs(branch) for branch in scope.set_operation_scopes]
        if not branches:
            return []
        outputs = []
        for position, first in enumerate(branches[0]):
            sources: _Sources = {}
            for branch in branches:
                if position < len(branch):
                    _merge(sources, branch[position].sources, EdgeSubtype.IDENTITY)
            outputs.append(OutputColumn(first.name, sources))
        return outputs

    def _expand_star(self, scope: Scope, star: exp.Expr) -> list[OutputColumn]:
        """`*` / `t.*` that qualify left alone: expand what is known, table-level for the rest."""
        table = star.table if isinstance(star, exp.Column) else ""
        selected = self._selected(scope)
        aliases = [table] if table else list(selected)
        outputs: list[OutputColumn] = []
        for alias in aliases:
            source = selected.get(alias) if alias in selected else self._find_source(scope, alias)
            if source is None:
                outputs.append(OutputColumn(ALL_COLUMNS, self._unknown(ALL_COLUMNS)))
                continue
            if isinstance(source, Scope):
                inner = self.outputs(source)
                if any(out.name == ALL_COLUMNS for out in inner) or not inner:
                    self._passthrough.setdefault(id(scope), []).append(source)
                outputs.extend(inner)
                continue
            if self._is_table_function(source):
                continue
            written = self._written(source)
            columns = self._known.get(written)
            if columns is not None:
                outputs.extend(
                    OutputColumn(c, {SourceColumn(written, c): EdgeSubtype.IDENTITY})
                    for c in columns
                )
                continue
            self._passthrough.setdefault(id(scope), []).append(source)
            self.gap(
                f"SELECT * over {written} without schema in statement {self._number}: "
                "table-level lineage only"
            )
            outputs.append(
                OutputColumn(
                    ALL_COLUMNS, {SourceColumn(written, ALL_COLUMNS): EdgeSubtype.IDENTITY}
                )
            )
        return outputs

    # - indirect

    def indirect_sources(self) -> list[tuple[SourceColumn, EdgeSubtype]]:
        """Base columns that filter, join, group, sort or condition rows anywhere."""
        found: dict[tuple[SourceColumn, EdgeSubtype], None] = {}
        for scope in self._root.traverse():
            for ref in self._scan(scope).indirect:
                assert ref.indirect is not None
                for column in self._ref_sources(scope, ref):
                    found[(column, ref.indirect)] = None
        return list(found)

    # - scanning a scope's own expression

    def _scan(self, scope: Scope) -> _Scan:
        key = id(scope)
        if key not in self._scans:
            self._scans[key] = self._scan_scope(scope)
        return self._scans[key]

    def _scan_scope(self, scope: Scope) -> _Scan:
        expression = scope.expression
        scan = _Scan([], [])
        if not isinstance(expression, (exp.Select, exp.SetOperation)):
            return scan
        if isinstance(expression, exp.Select):
            for position, projection in enumerate(expression.expressions):
                if projection.is_star:
                    scan.projections.append(_Projection(ALL_COLUMNS, projection, []))
                    continue
                refs: list[_Ref] = []
                self._walk(projection, EdgeSubtype.IDENTITY, None, refs)
                scan.projections.append(
                    _Projection(
                        projection.output_name.lower() or f"_col_{position}",
                        None,
                        [ref for ref in refs if ref.indirect is None],
                    )
                )
                scan.indirect.extend(ref for ref in refs if ref.indirect is not None)
            for join in expression.args.get("joins") or []:
                self._walk_arg(join, "on", EdgeSubtype.JOIN, scan.indirect)
                scan.indirect.extend(self._using_refs(scope, join))
            scan.indirect.extend(self._ordinal_refs(expression))
        for key, subtype in _CLAUSES:
            self._walk_arg(expression, key, subtype, scan.indirect)
        return scan

    def _using_refs(self, scope: Scope, join: exp.Expr) -> list[_Ref]:
        """JOIN ... USING (k) that qualify could not rewrite to ON: k of every side holding it."""
        refs = []
        for identifier in join.args.get("using") or []:
            name = identifier.name.lower()
            for alias, source in self._selected(scope).items():
                columns = self._columns_of(source)
                if columns is None or name in columns:
                    refs.append(
                        _Ref(exp.column(name, table=alias), EdgeSubtype.IDENTITY, EdgeSubtype.JOIN)
                    )
        return refs

    def _ordinal_refs(self, select: exp.Select) -> list[_Ref]:
        """GROUP BY 1 / ORDER BY 2 that qualify left as numbers: the projection they name."""
        refs: list[_Ref] = []
        for key, subtype in (("group", EdgeSubtype.GROUP_BY), ("order", EdgeSubtype.SORT)):
            clause = select.args.get(key)
            for item in clause.expressions if isinstance(clause, exp.Expr) else []:
                node = item.this if isinstance(item, exp.Ordered) else item
                if isinstance(node, exp.Literal) and node.is_int:
                    position = int(node.name) - 1
                    if 0 <= position < len(select.expressions):
                        self._walk(
                            select.expressions[position], EdgeSubtype.IDENTITY, subtype, refs
                        )
        return refs

    def _walk_arg(self, node: exp.Expr, key: str, indirect: EdgeSubtype, out: list[_Ref]) -> None:
        value = node.args.get(key)
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, exp.Expr):
                self._walk(child, EdgeSubtype.TRANSFORMATION, indirect, out)

    def _walk(
        self,
        node: exp.Expr,
        subtype: EdgeSubtype,
        indirect: EdgeSubtype | None,
        out: list[_Ref],
    ) -> None:
        """Collect the columns under `node`, each with its role; the outermost INDIRECT wins."""
        if isinstance(node, exp.Column):
            if not isinstance(node.this, exp.Star):  # count(t.*) reads no column value
                out.append(_Ref(node, subtype, indirect))
            return
        if isinstance(node, (exp.Select, exp.SetOperation)):
            nested = self._scopes.get(id(node))
            if nested is not None:
                out.append(_Ref(nested, subtype, indirect))
                return
        value = _compose(subtype, EdgeSubtype.TRANSFORMATION)
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
        if isinstance(node, exp.Filter):  # agg(x) FILTER (WHERE cond)
            self._walk_child(node.this, subtype, indirect, out)
            self._walk_child(node.expression, value, indirect or EdgeSubtype.FILTER, out)
            return
        if isinstance(node, (exp.Alias, exp.Paren, exp.Subquery)):
            value = subtype
        elif isinstance(node, exp.AggFunc) and not isinstance(node, _VALUE_FUNCTIONS):
            value = _compose(subtype, EdgeSubtype.AGGREGATION)
        for child in node.iter_expressions():
            self._walk(child, value, indirect, out)

    def _walk_child(
        self, node: Any, subtype: EdgeSubtype, indirect: EdgeSubtype | None, out: list[_Ref]
    ) -> None:
        if isinstance(node, exp.Expr):
            self._walk(node, subtype, indirect, out)

    def _walk_args(
        self,
        node: exp.Expr,
        key: str,
        subtype: EdgeSubtype,
        indirect: EdgeSubtype,
        out: list[_Ref],
    ) -> None:
        value = node.args.get(key)
        for child in value if isinstance(value, list) else [value]:
            self._walk_child(child, subtype, indirect, out)

    # - resolution

    def _canonical(self, source: exp.Table | Scope) -> exp.Table | Scope:
        """A recursive CTE's reference to itself is a stand-in scope; use the traversed one."""
        if isinstance(source, Scope) and id(source) not in self._traversed:
            return self._scopes.get(id(source.expression), source)
        return source

    def _selected(self, scope: Scope) -> dict[str, exp.Table | Scope]:
        return {
            alias: self._canonical(source) for alias, (_, source) in scope.selected_sources.items()
        }

    def _ref_sources(self, scope: Scope, ref: _Ref) -> _Sources:
        if isinstance(ref.node, Scope):  # a nested query: everything it selects
            sources: _Sources = {}
            for out in self.outputs(ref.node):
                _merge(sources, out.sources, EdgeSubtype.IDENTITY)
            return sources
        return self._column_sources(scope, ref.node)

    def _column_sources(self, scope: Scope, column: exp.Column) -> _Sources:
        name = column.name.lower()
        alias = column.table
        if alias:
            source = self._find_source(scope, alias)
            if source is None:
                return self._unknown(name, f"{alias} is not a table or alias in scope")
            return self._source_column(source, name)
        return self._unqualified(scope, column, name)

    def _find_source(self, scope: Scope, alias: str) -> exp.Table | Scope | None:
        current: Scope | None = scope
        while current is not None:
            if alias in current.sources:
                return self._canonical(current.sources[alias])
            if current.scope_type not in _CORRELATED:
                return None  # CTEs and derived tables cannot see the enclosing query
            current = current.parent
        return None

    def _unqualified(self, scope: Scope, column: exp.Column, name: str) -> _Sources:
        """A bare column qualify could not place: output alias, one candidate, or unknown."""
        alias = self._projection_sources(scope, name)
        if alias is not None:
            clause = _clause_of(column, scope.expression)
            having, _ = self._candidates(scope, name)
            # ORDER BY names output columns first; GROUP BY/HAVING may name one too, and
            # without the tables' columns the alias is the reading that does not invent one.
            if isinstance(clause, exp.Order) or (
                isinstance(clause, (exp.Group, exp.Having)) and not having
            ):
                return alias
        current: Scope | None = scope
        while current is not None:
            having, maybe = self._candidates(current, name)
            candidates = having or maybe
            if len(candidates) == 1:
                return self._source_column(candidates[0], name)
            if len(candidates) > 1:
                tables = ", ".join(sorted(self._describe(c) for c in candidates))
                return self._unknown(name, f"ambiguous between {tables}")
            if current is scope and alias is not None:
                return alias
            if current.scope_type not in _CORRELATED:
                break
            current = current.parent
        selected = list(self._selected(scope).values())
        if len(selected) == 1 and isinstance(selected[0], exp.Table):
            return self._source_column(selected[0], name)  # the schema misses it: gap below
        return self._unknown(name)

    def _candidates(
        self, scope: Scope, name: str
    ) -> tuple[list[exp.Table | Scope], list[exp.Table | Scope]]:
        """Sources known to have the column, and sources whose columns are unknown."""
        having: list[exp.Table | Scope] = []
        maybe: list[exp.Table | Scope] = []
        for source in self._selected(scope).values():
            if id(source) in self._busy:
                continue  # the source being traced cannot feed itself
            columns = self._columns_of(source)
            if columns is None:
                maybe.append(source)
            elif name in columns:
                having.append(source)
        return having, maybe

    def _columns_of(self, source: exp.Table | Scope) -> set[str] | None:
        if isinstance(source, exp.Table):
            columns = self._known.get(self._written(source))
            return set(columns) if columns is not None else None
        if not isinstance(source.expression, (exp.Select, exp.SetOperation)):
            return _alias_columns(source.expression)
        if id(source) in self._busy:
            return None
        names = {out.name for out in self.outputs(source)}
        return None if ALL_COLUMNS in names or id(source) in self._passthrough else names

    def _projection_sources(self, scope: Scope, name: str) -> _Sources | None:
        if id(scope) in self._busy:
            return None
        matches = [out.sources for out in self.outputs(scope) if out.name == name]
        if not matches:
            return None
        sources: _Sources = {}
        for match in matches:
            _merge(sources, match, EdgeSubtype.IDENTITY)
        return sources

    def _source_column(self, source: exp.Table | Scope, name: str) -> _Sources:
        if isinstance(source, Scope):
            return self._scope_column(source, name)
        if self._is_table_function(source):
            return {}
        written = self._written(source)
        columns = self._known.get(written)
        if columns is not None and name not in columns:
            self.gap(
                f"{written}.{name} in statement {self._number} is not in the schema of {written}"
            )
        return {SourceColumn(written, name): EdgeSubtype.IDENTITY}

    def _scope_column(self, scope: Scope, name: str) -> _Sources:
        if id(scope) in self._busy:
            return {}  # a recursive CTE reading itself adds no new source
        if not isinstance(scope.expression, (exp.Select, exp.SetOperation)):
            return self._opaque_sources(scope)
        found = self._projection_sources(scope, name)
        if found is not None:
            return found
        passthrough = self._passthrough.get(id(scope), [])
        if len(passthrough) == 1:
            return self._source_column(passthrough[0], name)
        return self._unknown(name, f"no column {name} in subquery or CTE")

    def _opaque_sources(self, scope: Scope) -> _Sources:
        """A table function or VALUES list: every column it reads, transformed."""
        refs: list[_Ref] = []
        self._walk(scope.expression, EdgeSubtype.TRANSFORMATION, None, refs)
        sources: _Sources = {}
        parent = scope.parent or scope
        self._busy.add(id(scope))  # `unnest(tags) AS tags` must not resolve to itself
        try:
            for ref in refs:
                _merge(sources, self._ref_sources(parent, ref), EdgeSubtype.TRANSFORMATION)
        finally:
            self._busy.discard(id(scope))
        return sources

    def _is_table_function(self, table: exp.Table) -> bool:
        """`FROM read_parquet(...)`: rows from outside any table, a gap with no column source."""
        if isinstance(table.this, exp.Identifier):
            return False
        function = table.this
        name = function.sql_name() if isinstance(function, exp.Func) else type(function).__name__
        self.gap(
            f"table function {name.lower()} in statement {self._number}: what it reads "
            "is not traced"
        )
        return True

    def _written(self, table: exp.Table) -> str:
        return self._tables.get(table.name.lower(), table_name(table))

    def _describe(self, source: exp.Table | Scope) -> str:
        if isinstance(source, exp.Table):
            return self._written(source)
        parent = source.expression.parent
        return parent.alias_or_name if isinstance(parent, (exp.CTE, exp.Subquery)) else "subquery"

    def _unknown(self, name: str, why: str = "") -> _Sources:
        detail = f" ({why})" if why else ""
        self.gap(
            f"{UNKNOWN_TABLE}.{name} in statement {self._number}: table not resolved"
            f"{detail}; declare the tables' columns in the schema"
        )
        return {SourceColumn(UNKNOWN_TABLE, name): EdgeSubtype.IDENTITY}


def _clause_of(node: exp.Expr, select: exp.Expr) -> exp.Expr | None:
    """The clause of `select` (ORDER BY, GROUP BY, ...) that holds `node`."""
    while node.parent is not None and node.parent is not select:
        node = node.parent
    return node if node.parent is select else None


def _alias_columns(node: exp.Expr) -> set[str] | None:
    """Columns a table function names: `unnest(x) AS t(a)` -> {a}, `AS u` -> {u}."""
    alias = node.args.get("alias")
    if not isinstance(alias, exp.TableAlias):
        return None
    if alias.columns:
        return {column.name.lower() for column in alias.columns}
    return {alias.name.lower()} if alias.name else None
