"""How each output column of a qualified query depends on base-table columns, scope by scope.

Every column a scope outputs carries its *direct* sources (the base columns its value is made
from, and how: identity, transformation, aggregation) and its *indirect* ones (columns that
only choose or order its values: CASE conditions, window partitions, aggregate FILTERs).
Every scope also carries the indirect sources of its clauses (WHERE, JOIN, GROUP BY, ORDER
BY, HAVING, QUALIFY...) and of the derived tables and CTEs it reads, so a CTE nobody reads
and a column nobody selects add nothing. Where a column or a subquery is used only to choose
rows, everything it depends on takes that use's subtype: a window column filtered in an
outer WHERE is a FILTER, so is everything a WHERE subquery reads. What cannot be traced is a
gap, never a guess. `column_refs` finds what each clause references and in which role; this
module resolves those references to base-table columns and combines them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.scope import Scope, ScopeType

from erasure.lineage.sql.column_refs import Projection, Ref, RefScanner, Scan, compose
from erasure.lineage.sql.column_selectors import selector
from erasure.lineage.sql.field_paths import path_parts, reads_fields_by_dot
from erasure.lineage.sql.from_items import (
    alias_columns,
    function_table_columns,
    original_name,
    reads_only_arguments,
    visible_columns,
)
from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.names import ALL_COLUMNS, UNKNOWN_TABLE, table_name
from erasure.lineage.sql.table_shards import TABLE_SUFFIX
from erasure.model import EdgeSubtype, GapKind

LATERAL_ALIAS = "erasure_lateral_alias"  # meta flag: a bare name an earlier projection defines
# meta flag: a bare name in WHERE/HAVING/QUALIFY that names one of the SELECT's outputs
CLAUSE_ALIAS = "erasure_clause_alias"
LATERAL_FIELD = "erasure_lateral_field"  # meta: `st.a` where `st` an earlier projection defines
WILDCARD_TABLE = "erasure_wildcard_table"  # meta flag: a BigQuery wildcard table (`events_*`)


class SourceColumn(NamedTuple):
    """A base-table column an output reads: `table.name` (`<unknown>.name`, `table.*`)."""

    table: str
    name: str

    def __str__(self) -> str:
        return f"{self.table}.{self.name}"


Direct = dict[SourceColumn, EdgeSubtype]  # base column -> how its value reaches the output
Indirect = dict[tuple[SourceColumn, EdgeSubtype], None]  # ordered set of (column, subtype)


@dataclass
class Deps:
    """What one column (or one subquery) depends on."""

    direct: Direct = field(default_factory=dict)
    indirect: Indirect = field(default_factory=dict)

    def flow(self, other: Deps, via: EdgeSubtype) -> None:
        """`other`'s values flow in through `via`; what sways them sways these too."""
        for column, subtype in other.direct.items():
            composed = compose(via, subtype)
            self.direct[column] = compose(self.direct.get(column, composed), composed)
        self.indirect.update(other.indirect)

    def sway(self, other: Deps, subtype: EdgeSubtype) -> None:
        """`other` only chooses or orders: everything it depends on becomes `subtype`."""
        for column in [*other.direct, *(c for c, _ in other.indirect)]:
            self.indirect[(column, subtype)] = None


class OutputColumn(NamedTuple):
    """An output column: the source columns its value comes from, and those that sway it."""

    name: str
    sources: Direct
    indirect: Indirect


# Scopes that may see their parent's sources (correlated subqueries, lateral functions).
_CORRELATED = (ScopeType.SUBQUERY, ScopeType.UDTF, ScopeType.SET_OPERATION)


class ColumnFlow:
    """Follows one qualified statement's output columns down to base-table columns."""

    def __init__(
        self,
        root: Scope,
        tables: Mapping[str, str],
        known: Mapping[str, list[str]],
        number: int,
        *,
        dialect: Dialect,
    ) -> None:
        self._root = root
        self._tables = tables
        self._known = known
        self._number = number
        self._dialect = dialect
        self._dot_fields = reads_fields_by_dot(dialect)
        scopes = list(root.traverse())
        self._scopes = {id(scope.expression): scope for scope in scopes}
        self._refs = RefScanner(self._scopes)
        self._traversed = {id(scope) for scope in scopes}
        self._owners = {  # a FROM item's scope, where a table function's arguments resolve
            id(source): scope
            for scope in scopes
            for source in scope.sources.values()
            if isinstance(source, exp.Table)
        }
        self._scans: dict[int, Scan] = {}
        self._outputs: dict[int, list[OutputColumn]] = {}
        self._partial: dict[int, list[OutputColumn]] = {}  # outputs so far, for lateral aliases
        self._row_deps: dict[int, Indirect] = {}
        self._passthrough: dict[int, list[exp.Table | Scope]] = {}  # unexpanded `*` sources
        self._busy: set[int] = set()
        self._unnamed: dict[int, set[int]] = {}  # positions of outputs named as SQL cannot tell
        self._busy_rows: set[int] = set()
        self.gaps: list[SqlGap] = []

    def gap(self, gap: SqlGap) -> None:
        if gap not in self.gaps:
            self.gaps.append(gap)

    def indirect_sources(self) -> list[tuple[SourceColumn, EdgeSubtype]]:
        """What sways the root's rows or any of its columns: applied to every output column."""
        found = dict(self.row_deps(self._root))
        for out in self.outputs(self._root):
            found.update(out.indirect)
        return list(found)

    def unnamed_outputs(self, scope: Scope) -> set[int]:
        """Positions of the scope's outputs whose names lineage cannot tell (`max(COLUMNS(*))`
        gives one per column, named by DuckDB's rendering): written by position, or table-level."""
        self.outputs(scope)
        return set(self._unnamed.get(id(scope), set()))

    # - outputs

    def outputs(self, scope: Scope) -> list[OutputColumn]:
        """The scope's output columns, each with what it depends on."""
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
        if _renames_by_position(scope, outputs):
            outputs = [
                OutputColumn(name.lower(), out.sources, out.indirect)
                for name, out in zip(scope.outer_columns, outputs, strict=True)
            ]
        self._outputs[key] = outputs
        return outputs

    def _select_outputs(self, scope: Scope) -> list[OutputColumn]:
        outputs = self._partial.setdefault(id(scope), [])
        outputs.clear()
        self._unnamed.pop(id(scope), None)
        for projection in self._scan(scope).projections:
            if projection.star is not None and not projection.within:
                outputs.extend(self._expand_star(scope, projection.star))
                continue
            if isinstance(projection.star, exp.Columns):  # f(COLUMNS(...)): one per column
                within = self._within_outputs(scope, projection, projection.star)
                if not projection.star.args.get("unpack"):
                    unnamed = self._unnamed.setdefault(id(scope), set())
                    unnamed.update(range(len(outputs), len(outputs) + len(within)))
                outputs.extend(within)
                continue
            deps = Deps()
            for ref in projection.refs:
                found = self._ref_deps(scope, ref)
                if ref.indirect is None:
                    deps.flow(found, ref.subtype)
                else:
                    deps.sway(found, ref.indirect)
            outputs.append(OutputColumn(projection.name, deps.direct, deps.indirect))
        return list(outputs)

    def _set_operation_outputs(self, scope: Scope) -> list[OutputColumn]:
        """UNION and friends: by position (or BY NAME), named by the first branch that has the
        column; EXCEPT's right side only removes rows (see `row_deps`)."""
        branches = [self.outputs(branch) for branch in self._value_branches(scope)]
        if not branches:
            return []
        if scope.expression.args.get("by_name"):
            return _by_name(branches)
        widths = sorted({len(branch) for branch in branches})
        stars = [i for b in branches for i, out in enumerate(b) if out.name == ALL_COLUMNS]
        aligned = min(stars) if stars else widths[-1]  # past an unexpanded `*`, no positions
        outputs = []
        for position in range(aligned):
            name, deps = "", Deps()
            for branch in branches:
                if position < len(branch):
                    name = name or branch[position].name
                    deps.flow(_deps_of(branch[position]), EdgeSubtype.IDENTITY)
            outputs.append(OutputColumn(name, deps.direct, deps.indirect))
        if stars:
            deps = Deps()
            for branch in branches:
                for out in branch[aligned:]:
                    deps.flow(_deps_of(out), EdgeSubtype.IDENTITY)
            outputs.append(OutputColumn(ALL_COLUMNS, deps.direct, deps.indirect))
        elif len(widths) > 1:
            self.gap(
                SqlGap(
                    f"set operation in statement {self._number} has branches of "
                    f"{' and '.join(map(str, widths))} columns: a column only a later branch "
                    "has takes that branch's name",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        return outputs

    def _value_branches(self, scope: Scope) -> list[Scope]:
        branches = list(scope.set_operation_scopes)
        return branches[:1] if isinstance(scope.expression, exp.Except) else branches

    def _expand_star(self, scope: Scope, star: exp.Expr) -> list[OutputColumn]:
        """`*` / `t.*` that qualify left alone: expand what is known, table-level for the rest."""
        if isinstance(star, exp.Dot):  # `e.payload.*`, the fields of a STRUCT column
            return [self._struct_star(scope, star)]
        if isinstance(star, exp.Columns):
            return self._selected_columns(scope, star)
        table = star.table if isinstance(star, exp.Column) else ""
        selected = self._selected(scope)
        aliases = [table] if table else list(selected)
        outputs: list[OutputColumn] = []
        for alias in aliases:
            source = selected.get(alias) if alias in selected else self._find_source(scope, alias)
            if source is None:
                outputs.append(self._struct_star(scope, star))
                continue
            if isinstance(source, Scope):
                inner = self.outputs(source)
                renamed = [c.lower() for c in source.outer_columns]
                if renamed and not _renames_by_position(source, inner):  # over an unknown `*`
                    outputs.extend(
                        OutputColumn(name, deps.direct, deps.indirect)
                        for name in renamed
                        for deps in [self._renamed_star(source, name)]
                    )
                    continue
                if any(out.name == ALL_COLUMNS for out in inner) or not inner:
                    self._passthrough.setdefault(id(scope), []).append(source)
                outputs.extend(inner)
                continue
            if self._is_table_function(source):
                outputs.extend(self._function_table_outputs(source))
                continue
            written = self._written(source)
            columns = self._known.get(written)
            if columns is not None:
                outputs.extend(
                    OutputColumn(seen, {SourceColumn(written, own): EdgeSubtype.IDENTITY}, {})
                    for seen, own in visible_columns(source, columns)
                )
                continue
            self._passthrough.setdefault(id(scope), []).append(source)
            self.gap(
                SqlGap(
                    f"SELECT * over {written} without schema in statement {self._number}: "
                    "table-level lineage only",
                    GapKind.TABLE_ONLY_LINEAGE,
                )
            )
            outputs.append(
                OutputColumn(
                    ALL_COLUMNS, {SourceColumn(written, ALL_COLUMNS): EdgeSubtype.IDENTITY}, {}
                )
            )
        return outputs

    def _selected_columns(self, scope: Scope, columns: exp.Columns) -> list[OutputColumn]:
        """DuckDB's COLUMNS(...): the columns of `*` it keeps (`column_selectors`)."""
        keep = selector(columns)
        if keep is None:
            self.gap(
                SqlGap(
                    f"{columns.sql(dialect=self._dialect)} in statement {self._number} is not "
                    "evaluated: lineage to every column it may select",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        argument = columns.this
        qualified = isinstance(argument, exp.Column) and argument.is_star  # COLUMNS(b.* ...)
        star: exp.Expr = exp.Star()
        if qualified:
            star = exp.Column(this=exp.Star(), table=argument.args.get("table"))
        outputs = self._expand_star(scope, star)
        return [out for out in outputs if out.name == ALL_COLUMNS or keep is None or keep(out.name)]

    def _within_outputs(
        self, scope: Scope, projection: Projection, columns: exp.Columns
    ) -> list[OutputColumn]:
        """`max(COLUMNS(...))`: one output per column COLUMNS keeps, each from that column and
        the expression's other columns; `coalesce(*COLUMNS(...))` one, from all of them."""
        shared = Deps()
        mine: list[Ref] = []
        for ref in projection.refs:
            if ref.node is columns:
                mine.append(ref)
            elif ref.indirect is None:
                shared.flow(self._ref_deps(scope, ref), ref.subtype)
            else:
                shared.sway(self._ref_deps(scope, ref), ref.indirect)
        via = mine[0].subtype if mine else EdgeSubtype.TRANSFORMATION
        selected = self._selected_columns(scope, columns)
        unpacked = bool(columns.args.get("unpack"))
        if unpacked or any(out.name == ALL_COLUMNS for out in selected):
            deps = Deps(dict(shared.direct), dict(shared.indirect))
            for out in selected:
                deps.flow(_deps_of(out), via)
            name = projection.name if unpacked else ALL_COLUMNS
            return [OutputColumn(name, deps.direct, deps.indirect)]
        outputs = []
        for out in selected:
            deps = Deps(dict(shared.direct), dict(shared.indirect))
            deps.flow(_deps_of(out), via)
            outputs.append(OutputColumn(out.name, deps.direct, deps.indirect))
        return outputs

    def _selector_deps(self, scope: Scope, columns: exp.Columns) -> Deps:
        """COLUMNS(...) in WHERE, GROUP BY, ON...: every column it keeps."""
        deps = Deps()
        for out in self._selected_columns(scope, columns):
            deps.flow(_deps_of(out), EdgeSubtype.IDENTITY)
        return deps

    # - what sways a scope's rows

    def row_deps(self, scope: Scope) -> Indirect:
        """Columns that filter, join, group or sort the scope's rows, or those it reads."""
        key = id(scope)
        if key in self._row_deps:
            return self._row_deps[key]
        if key in self._busy_rows:
            return {}  # a recursive CTE reading itself adds nothing new
        self._busy_rows.add(key)
        try:
            found = Deps()
            for ref in self._scan(scope).clauses:
                assert ref.indirect is not None
                found.sway(self._ref_deps(scope, ref), ref.indirect)
            for source in self._selected(scope).values():
                if isinstance(source, Scope):
                    found.indirect.update(self.row_deps(source))
            branches = list(scope.set_operation_scopes)
            values = self._value_branches(scope) if branches else []
            for branch in branches:
                if branch in values:
                    found.indirect.update(self.row_deps(branch))
                else:  # EXCEPT's right side: every column it reads removes rows
                    found.sway(self._scope_deps(branch), EdgeSubtype.FILTER)
        finally:
            self._busy_rows.discard(key)
        self._row_deps[key] = found.indirect
        return found.indirect

    # - scanning a scope's own expression

    def _scan(self, scope: Scope) -> Scan:
        key = id(scope)
        if key not in self._scans:
            self._scans[key] = self._refs.scan(scope, lambda join: self._using_refs(scope, join))
        return self._scans[key]

    def _using_refs(self, scope: Scope, join: exp.Expr) -> list[Ref]:
        """JOIN ... USING (k) that qualify could not rewrite to ON: k of every side holding it."""
        refs = []
        for identifier in join.args.get("using") or []:
            name = identifier.name.lower()
            for alias, source in self._selected(scope).items():
                columns = self._columns_of(source)
                if columns is None or name in columns:
                    refs.append(
                        Ref(exp.column(name, table=alias), EdgeSubtype.IDENTITY, EdgeSubtype.JOIN)
                    )
        return refs

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

    def _ref_deps(self, scope: Scope, ref: Ref) -> Deps:
        if isinstance(ref.node, Scope):
            return self._scope_deps(ref.node)
        if isinstance(ref.node, exp.Columns):
            return self._selector_deps(scope, ref.node)
        if isinstance(ref.node, exp.TableColumn):  # `e` for the row of `FROM events e`
            star = exp.Column(this=exp.Star(), table=exp.to_identifier(ref.node.name))
            deps = Deps()
            for out in self._expand_star(scope, star):
                deps.flow(_deps_of(out), EdgeSubtype.IDENTITY)
            return deps
        return self._column_deps(scope, ref.node)

    def _scope_deps(self, scope: Scope) -> Deps:
        """A nested query: everything it selects, and what sways its rows."""
        deps = Deps()
        for out in self.outputs(scope):
            deps.flow(_deps_of(out), EdgeSubtype.IDENTITY)
        deps.indirect.update(self.row_deps(scope))
        return deps

    def _column_deps(self, scope: Scope, column: exp.Column) -> Deps:
        name = column.name.lower()
        if column.meta.get(LATERAL_ALIAS):
            lateral = self._lateral_alias(scope, column, name)
            if lateral is not None:
                return lateral
        if column.meta.get(CLAUSE_ALIAS):
            output = self._clause_alias(scope, column, name)
            if output is not None:
                return output
        if name == TABLE_SUFFIX and self._reads_wildcard(scope):
            return Deps()  # which shard a row came from: a table name, not a column value
        alias = column.table
        if alias:
            source = self._find_source(scope, alias)
            lateral_field = column.meta.get(LATERAL_FIELD)
            if source is None and lateral_field:
                earlier = self._lateral_alias(scope, exp.column(lateral_field), lateral_field)
                if earlier is not None:
                    return _field_of(earlier)
            if source is None:
                nested = self._field_path(scope, path_parts(column))
                if nested is not None:
                    return nested
                source = self._outer_source(scope, alias)
            if source is None:
                return self._unknown(name, f"{alias} is not a table or alias in scope")
            return self._source_column(source, name)
        return self._unqualified(scope, column, name)

    # - nested fields (`field_paths`)

    def _field_path(self, scope: Scope, parts: list[str]) -> Deps | None:
        """`alias.col.f`, `db.table.col.f`, `col.f.g`: the column a dotted name reads, if any.

        Leading parts that name a table in scope win (as in BigQuery); otherwise the first
        part is a column, where the schema or the query names it, or the dialect reads dots
        as fields and one table in scope may have it. None: the name reads no known column.
        """
        for count in range(1, len(parts)):
            source = self._source_named(scope, parts[:count])
            if source is not None:
                found = self._source_column(source, parts[count])
                return _field_of(found) if count + 1 < len(parts) else found
        top = self._top_level_column(scope, parts[0])
        return _field_of(top) if top is not None else None

    def _source_named(self, scope: Scope, qualifier: list[str]) -> exp.Table | Scope | None:
        """The table or subquery in scope that `qualifier` (`e`, `ds.events`) names."""
        if len(qualifier) == 1:
            return self._find_source(scope, qualifier[0])
        dotted = ".".join(qualifier)
        current: Scope | None = scope
        while current is not None:
            for source in current.sources.values():
                if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
                    written = self._written(source)
                    if written == dotted or written.endswith(f".{dotted}"):
                        return source
            if current.scope_type not in _CORRELATED:
                return None
            current = current.parent
        return None

    def _top_level_column(self, scope: Scope, name: str) -> Deps | None:
        current: Scope | None = scope
        while current is not None:
            having, maybe = self._candidates(current, name)
            candidates = having or (maybe if self._dot_fields else [])
            if len(candidates) == 1:
                return self._source_column(candidates[0], name)
            if len(candidates) > 1:
                tables = ", ".join(sorted(self._describe(c) for c in candidates))
                return self._unknown(name, f"ambiguous between {tables}")
            if current.scope_type not in _CORRELATED:
                break
            current = current.parent
        selected = list(self._selected(scope).values())
        if self._dot_fields and len(selected) == 1 and isinstance(selected[0], exp.Table):
            return self._source_column(selected[0], name)  # the schema misses it: a gap
        return None

    def _struct_star(self, scope: Scope, star: exp.Expr) -> OutputColumn:
        """BigQuery's `SELECT e.payload.*`: every field of a column, whose names are unknown."""
        deps: Deps | None = None
        if isinstance(star, exp.Dot):  # qualify found the column: Dot(e.payload, *)
            deps = Deps()
            refs: list[Ref] = []
            self._refs.walk(star.this, EdgeSubtype.TRANSFORMATION, None, refs)
            for ref in refs:
                deps.flow(self._ref_deps(scope, ref), EdgeSubtype.TRANSFORMATION)
        elif isinstance(star, exp.Column) and path_parts(star):
            deps = self._field_path(scope, path_parts(star))
        if deps is None:
            return OutputColumn(ALL_COLUMNS, self._unknown(ALL_COLUMNS).direct, {})
        for source in deps.direct:
            self.gap(
                SqlGap(
                    f"SELECT {star.sql().lower()} in statement {self._number} selects the "
                    f"fields of {source}, whose names are unknown: lineage to every column",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        fields = dict.fromkeys(deps.direct, EdgeSubtype.TRANSFORMATION)
        return OutputColumn(ALL_COLUMNS, fields, deps.indirect)

    # - date shards (`table_shards`)

    def _reads_wildcard(self, scope: Scope) -> bool:
        current: Scope | None = scope
        while current is not None:
            if any(
                isinstance(source, exp.Table) and source.meta.get(WILDCARD_TABLE)
                for source in current.sources.values()
            ):
                return True
            if current.scope_type not in _CORRELATED:
                return False
            current = current.parent
        return False

    def _lateral_alias(self, scope: Scope, column: exp.Column, name: str) -> Deps | None:
        """`SELECT a AS b, b + 1`: the earlier output, unless a table is known to have `b`."""
        earlier = [out for out in self._partial.get(id(scope), []) if out.name == name]
        if not earlier:
            return None
        source = self._find_source(scope, column.table) if column.table else None
        columns = self._columns_of(source) if source is not None else None
        if columns is not None and name in columns:
            return None
        deps = Deps()
        for out in earlier:
            deps.flow(_deps_of(out), EdgeSubtype.IDENTITY)
        return deps

    def _clause_alias(self, scope: Scope, column: exp.Column, name: str) -> Deps | None:
        """`SELECT lower(email) AS e ... WHERE e ...` (Snowflake, DuckDB, Databricks): the output,
        unless a table is known to have `e`; both, when the tables' columns are unknown."""
        output = self._projection_deps(scope, name)
        if output is None:
            return None
        if not column.table:
            having, maybe = self._candidates(scope, name)
            if having:
                return None
            if maybe:
                output.flow(self._unqualified(scope, column, name), EdgeSubtype.IDENTITY)
            return output
        source = self._find_source(scope, column.table)
        columns = self._columns_of(source) if source is not None else None
        if columns is not None:
            return None if name in columns else output
        if source is not None:
            output.flow(self._source_column(source, name), EdgeSubtype.IDENTITY)
        return output

    def _find_source(self, scope: Scope, alias: str) -> exp.Table | Scope | None:
        current: Scope | None = scope
        while current is not None:
            if alias in current.sources:
                return self._canonical(current.sources[alias])
            if current.scope_type not in _CORRELATED:
                return None  # CTEs and derived tables cannot see the enclosing query
            current = current.parent
        return None

    def _outer_source(self, scope: Scope, alias: str) -> exp.Table | Scope | None:
        """`alias` of an enclosing query, read from a derived table nested in one of its
        subqueries (`EXISTS (SELECT ... FROM (SELECT ... WHERE e.uid = u.id) z)`).

        A derived table does not see the FROM items beside it (unless LATERAL), only what the
        query enclosing its subquery sees; a CTE sees nothing outside: None (a gap), not the
        table of that name elsewhere.
        """
        child = scope
        while child.parent is not None and child.scope_type is not ScopeType.CTE:
            current = child.parent
            sees = child.scope_type in _CORRELATED or _is_lateral(child)
            if sees and alias in current.sources:
                return self._canonical(current.sources[alias])
            child = current
        return None

    def _unqualified(self, scope: Scope, column: exp.Column, name: str) -> Deps:
        """A bare column qualify could not place: output alias, one candidate, or unknown."""
        alias = self._projection_deps(scope, name)
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
            if not isinstance(source.this, exp.Identifier):
                named = function_table_columns(source)
                return set(named) if named is not None else None
            columns = self._known.get(self._written(source))
            if columns is None:
                return None
            return {seen for seen, _ in visible_columns(source, columns)}
        if not isinstance(source.expression, (exp.Select, exp.SetOperation)):
            return alias_columns(source.expression)
        if id(source) in self._busy:
            return None
        names = {out.name for out in self.outputs(source)}
        return None if ALL_COLUMNS in names or id(source) in self._passthrough else names

    def _projection_deps(self, scope: Scope, name: str) -> Deps | None:
        if id(scope) in self._busy:
            return None
        matches = [out for out in self.outputs(scope) if out.name == name]
        if not matches:
            return None
        deps = Deps()
        for match in matches:
            deps.flow(_deps_of(match), EdgeSubtype.IDENTITY)
        return deps

    def _source_column(self, source: exp.Table | Scope, name: str) -> Deps:
        if isinstance(source, Scope):
            return self._scope_column(source, name)
        if self._is_table_function(source):
            return self._function_table_deps(source)
        written = self._written(source)
        columns = self._known.get(written)
        original = original_name(source, name, columns)
        if original is None:
            self.gap(
                SqlGap(
                    f"{name} in statement {self._number} renames a column of {written} by "
                    f"position, and {written}'s columns are unknown: lineage to every column",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
            return Deps({SourceColumn(written, ALL_COLUMNS): EdgeSubtype.IDENTITY})
        name = original
        if columns is not None and name not in columns:
            self.gap(
                SqlGap(
                    f"{written}.{name} in statement {self._number} is not in the schema of "
                    f"{written}",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        return Deps({SourceColumn(written, name): EdgeSubtype.IDENTITY})

    def _scope_column(self, scope: Scope, name: str) -> Deps:
        if id(scope) in self._busy:
            return Deps()  # a recursive CTE reading itself adds no new source
        if not isinstance(scope.expression, (exp.Select, exp.SetOperation)):
            return self._opaque_sources(scope)
        found = self._projection_deps(scope, name)
        if found is not None:
            return found
        renamed = [column.lower() for column in scope.outer_columns]
        if name in renamed:  # `c (x, y) AS (SELECT * ...)` over columns nobody knows
            return self._renamed_star(scope, name)
        passthrough = self._passthrough.get(id(scope), [])
        if len(passthrough) == 1:
            return self._source_column(passthrough[0], name)
        outputs = self.outputs(scope)
        if isinstance(scope.expression, exp.SetOperation) and any(
            out.name == ALL_COLUMNS for out in outputs
        ):  # a UNION of `*`s: the column of that name in every branch that gives values
            deps = Deps()
            for branch in self._value_branches(scope):
                deps.flow(self._scope_column(branch, name), EdgeSubtype.IDENTITY)
            return deps
        return self._unknown(name, f"no column {name} in subquery or CTE")

    def _renamed_star(self, scope: Scope, name: str) -> Deps:
        """A column list naming columns of a `*` whose columns are unknown: which one `name`
        is cannot be told, so it may be any of them (table-level), and that is a gap."""
        self.gap(
            SqlGap(
                f"{name} in statement {self._number} names a column of a subquery or CTE by "
                "position over a `*` whose columns are unknown: lineage to every column",
                GapKind.TABLE_ONLY_LINEAGE,
            )
        )
        deps = Deps()
        for out in self.outputs(scope):
            deps.flow(_deps_of(out), EdgeSubtype.IDENTITY)
        return deps

    def _opaque_sources(self, scope: Scope) -> Deps:
        """A table function or VALUES list: every column it reads, transformed."""
        refs: list[Ref] = []
        self._refs.walk(scope.expression, EdgeSubtype.TRANSFORMATION, None, refs)
        deps = Deps()
        parent = scope.parent or scope
        self._busy.add(id(scope))  # `unnest(tags) AS tags` must not resolve to itself
        try:
            for ref in refs:
                deps.flow(self._ref_deps(parent, ref), EdgeSubtype.TRANSFORMATION)
        finally:
            self._busy.discard(id(scope))
        return deps

    def _function_table_deps(self, table: exp.Table) -> Deps:
        """`FROM JSON_TABLE(p.doc, ...)`, `CROSS JOIN dbo.fn(c.id)`: what its arguments read."""
        owner = self._owners.get(id(table))
        refs: list[Ref] = []
        self._refs.walk(table.this, EdgeSubtype.TRANSFORMATION, None, refs)
        deps = Deps()
        if owner is None:
            return deps
        self._busy.add(id(table))  # its arguments read the tables beside it, never itself
        try:
            for ref in refs:
                deps.flow(self._ref_deps(owner, ref), EdgeSubtype.TRANSFORMATION)
        finally:
            self._busy.discard(id(table))
        return deps

    def _function_table_outputs(self, table: exp.Table) -> list[OutputColumn]:
        """`SELECT *` over a table function: its named columns, or one table-level column."""
        deps = self._function_table_deps(table)
        names = function_table_columns(table) or [ALL_COLUMNS]
        return [OutputColumn(name, dict(deps.direct), dict(deps.indirect)) for name in names]

    def _is_table_function(self, table: exp.Table) -> bool:
        """`FROM read_parquet(...)`: rows from outside any table lineage sees, a gap; JSON_TABLE
        and the like read only their arguments."""
        if isinstance(table.this, exp.Identifier):
            return False
        function = table.this
        if reads_only_arguments(function):
            return True
        name = function.sql_name() if isinstance(function, exp.Func) else type(function).__name__
        self.gap(
            SqlGap(
                f"table function {name.lower()} in statement {self._number}: what it reads "
                "is not traced",
                GapKind.OPAQUE_PRODUCER,
            )
        )
        return True

    def _written(self, table: exp.Table) -> str:
        return self._tables.get(table.name.lower(), table_name(table))

    def _describe(self, source: exp.Table | Scope) -> str:
        if isinstance(source, exp.Table):
            return self._written(source)
        parent = source.expression.parent
        return parent.alias_or_name if isinstance(parent, (exp.CTE, exp.Subquery)) else "subquery"

    def _unknown(self, name: str, why: str = "") -> Deps:
        detail = f" ({why})" if why else ""
        self.gap(
            SqlGap(
                f"{UNKNOWN_TABLE}.{name} in statement {self._number}: table not resolved"
                f"{detail}; declare the tables' columns in the schema",
                GapKind.UNRESOLVED_COLUMN,
            )
        )
        return Deps({SourceColumn(UNKNOWN_TABLE, name): EdgeSubtype.IDENTITY})


def _is_lateral(scope: Scope) -> bool:
    """A derived table written LATERAL (or CROSS APPLY): it sees the FROM items before it."""
    node = scope.expression.parent
    if isinstance(node, exp.Subquery):
        node = node.parent
    return isinstance(node, exp.Lateral)


def _renames_by_position(scope: Scope, outputs: list[OutputColumn]) -> bool:
    """Whether a column list (`c (x, y) AS ...`) names each output: one name per output, and
    no `*` whose width is unknown among them."""
    return bool(scope.outer_columns) and (
        len(scope.outer_columns) == len(outputs) and all(out.name != ALL_COLUMNS for out in outputs)
    )


def _field_of(deps: Deps) -> Deps:
    """A field inside the columns `deps` reads: part of their value, a TRANSFORMATION."""
    direct = {c: compose(EdgeSubtype.TRANSFORMATION, s) for c, s in deps.direct.items()}
    return Deps(direct, dict(deps.indirect))


def _deps_of(out: OutputColumn) -> Deps:
    return Deps(dict(out.sources), dict(out.indirect))


def _by_name(branches: list[list[OutputColumn]]) -> list[OutputColumn]:
    """UNION BY NAME: columns matched by name, a name a later branch adds appended."""
    merged: dict[str, Deps] = {}
    for branch in branches:
        for out in branch:
            merged.setdefault(out.name, Deps()).flow(_deps_of(out), EdgeSubtype.IDENTITY)
    return [OutputColumn(name, deps.direct, deps.indirect) for name, deps in merged.items()]


def _clause_of(node: exp.Expr, select: exp.Expr) -> exp.Expr | None:
    """The clause of `select` (ORDER BY, GROUP BY, ...) that holds `node`."""
    while node.parent is not None and node.parent is not select:
        node = node.parent
    return node if node.parent is select else None
