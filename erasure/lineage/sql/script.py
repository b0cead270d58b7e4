"""Declared column-level lineage from SQL scripts, through sqlglot with the schema.

Every statement is parsed, its tables are qualified against the schema (so `*` expands and
bare columns find their table), split into sqlglot scopes (CTEs, subqueries, set operations)
and each output column is traced down to base-table columns. What cannot be traced becomes a
gap, never a guess and never an exception. This is the contract of `erasure lineage sql`
(DESIGN §4, §7).

This module holds the result and runs a script statement by statement, so later statements
read the columns earlier ones wrote; `statements` finds what each statement writes,
`trace` traces a query's columns, and `names` holds the names both use. Tables are
named as written unless a default database or schema is given: then `table_resolution`
completes them as the warehouse would, and `known_tables` matches schema keys by the
completed name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

from erasure.errors import LineageError
from erasure.lineage.sql.column_flow import SourceColumn
from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.known_tables import KnownTables
from erasure.lineage.sql.names import ALL_COLUMNS, OUTPUT_TABLE, UNKNOWN_TABLE
from erasure.lineage.sql.projection_names import name_projections
from erasure.lineage.sql.statement_parts import statement_parts
from erasure.lineage.sql.statements import (
    Job,
    Statement,
    failed,
    job_of,
    nests_too_deep,
    split_statements,
    too_deep,
)
from erasure.lineage.sql.table_resolution import TableName, TableNaming
from erasure.lineage.sql.trace import trace_columns
from erasure.model import (
    DatasetRef,
    EdgeOrigin,
    EdgeSubtype,
    EdgeType,
    FieldRef,
    GapKind,
    LineageEdge,
)


@dataclass(frozen=True, slots=True, order=True)
class SqlColumnEdge:
    """One column dependency declared by SQL: `table.col` -> `table.col`."""

    source: str
    target: str
    type: EdgeType
    subtype: EdgeSubtype
    # The column part of `source`/`target` where it holds a dot (`a.x + a.y`, `col.a.b`);
    # None: the column is what follows the last dot.
    source_column: str | None = field(default=None, compare=False)
    target_column: str | None = field(default=None, compare=False)

    @classmethod
    def between(
        cls, source: SourceColumn, table: str, column: str, type_: EdgeType, subtype: EdgeSubtype
    ) -> SqlColumnEdge:
        """The edge from a traced source column to `table.column`."""
        return cls(
            str(source),
            f"{table}.{column}",
            type_,
            subtype,
            source_column=source.name if "." in source.name else None,
            target_column=column if "." in column else None,
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "source": self.source,
            "target": self.target,
            "type": str(self.type),
            "subtype": str(self.subtype),
        }


@dataclass
class SqlLineage:
    """The edges a script declares and what it leaves unknown (the gaps escalate)."""

    edges: list[SqlColumnEdge] = field(default_factory=list)
    gaps: list[SqlGap] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The document `erasure lineage sql --json` prints."""
        return {"edges": [edge.as_dict() for edge in self.edges], "gaps": list(self.gaps)}


def sql_lineage(
    script: str,
    *,
    dialect: str | None = None,
    schema: Mapping[str, Sequence[str]] | None = None,
    default_target: str | None = None,
    default_db: str | None = None,
    default_schema: str | None = None,
) -> SqlLineage:
    """Column-level lineage of every statement of `script`, in statement order.

    With `default_db` / `default_schema`, tables are completed as `dialect`'s warehouse would
    complete them from that database and schema, and `schema` keys match by that name.
    """
    if not isinstance(script, str):
        raise LineageError(
            f"SQL lineage needs the script as text, got {type(script).__name__}; "
            "read the file as text (UTF-8) first"
        )
    sql_dialect = _dialect(dialect)
    naming = TableNaming.of(sql_dialect, default_db, default_schema)
    known = KnownTables.from_schema(schema or {}, naming)
    output = naming.key(default_target) if default_target else None

    edges: set[SqlColumnEdge] = set()
    gaps: dict[SqlGap, None] = {}  # insertion-ordered set: gaps read in statement order
    for statement in _statements(script, sql_dialect):
        try:
            for part in _parts(statement):
                result = _analyse(part, sql_dialect, known, output, naming)
                edges.update(result.edges)
                gaps.update(dict.fromkeys(result.gaps))
                if result.defines is not None:
                    table, columns = result.defines
                    known.define(table, columns)  # later statements read what this one wrote
            after = naming.after(statement.expression)
        except RecursionError:  # the parser got through; tracing it goes deeper still
            gaps[too_deep(statement.number, statement.line)] = None
            continue
        except Exception as error:  # sqlglot's optimizer on odd SQL: a gap, never a crash
            gaps[failed(statement.number, statement.line, error)] = None
            continue
        naming, changed = after
        if changed is not None:
            gaps[changed.placed(f"statement {statement.number} (line {statement.line})")] = None
    return SqlLineage(sorted(edges), list(gaps))


def _statements(script: str, dialect: Dialect) -> Iterator[Statement]:
    """`split_statements`, where a failure to split the rest of the script is a gap."""
    statements = split_statements(script, dialect)
    number, line = 1, 1
    while True:
        try:
            statement = next(statements)
        except StopIteration:
            return
        except Exception as error:  # the splitter failed: the rest is not analysed
            yield Statement(number, line, None, failed(number, line, error))
            return
        number, line = statement.number + 1, statement.line
        yield statement


def _parts(statement: Statement) -> list[Statement]:
    """The statement, or one per table it writes (`statement_parts`), numbered as it is."""
    if statement.expression is None or statement.error is not None:
        return [statement]
    return [replace(statement, expression=part) for part in statement_parts(statement.expression)]


def to_lineage_edges(lineage: SqlLineage, *, namespace: str, producer: str) -> list[LineageEdge]:
    """Declared `LineageEdge`s in `namespace`; `<unknown>`/`<output>` ends are gaps, not edges."""
    edges = []
    for edge in lineage.edges:
        source = _field_ref(edge.source, edge.source_column, namespace)
        target = _field_ref(edge.target, edge.target_column, namespace)
        if source is None or target is None:
            continue
        edges.append(
            LineageEdge(
                source=source,
                target=target,
                type=edge.type,
                subtype=edge.subtype,
                origin=EdgeOrigin.DECLARED,
                producer=producer,
            )
        )
    return edges


def _field_ref(text: str, column: str | None, namespace: str) -> FieldRef | None:
    if column is not None and text.endswith(f".{column}"):
        table = text[: -len(column) - 1]
    else:
        table, _, column = text.rpartition(".")
    if table in (UNKNOWN_TABLE, OUTPUT_TABLE):
        return None
    return FieldRef(DatasetRef(namespace, table), None if column == ALL_COLUMNS else column)


def _dialect(name: str | None) -> Dialect:
    try:
        return Dialect.get_or_raise(name)
    except ValueError as error:
        raise LineageError(
            f"unknown SQL dialect {_shown(name)}; use a sqlglot dialect name such as "
            "postgres, snowflake, bigquery, duckdb or sqlite"
        ) from error


def _shown(name: str | None) -> str:
    # A word is repeated; anything else may be a value typed in the wrong place.
    return repr(name) if name and re.fullmatch(r"\w{1,40}", name, re.ASCII) else "(as given)"


@dataclass
class _Result:
    edges: list[SqlColumnEdge] = field(default_factory=list)
    gaps: list[SqlGap] = field(default_factory=list)
    defines: tuple[TableName, list[str]] | None = None


def _analyse(
    statement: Statement,
    dialect: Dialect,
    known: KnownTables,
    output: TableName | None,
    naming: TableNaming,
) -> _Result:
    if statement.error is not None:
        return _Result(gaps=[statement.error])
    if statement.expression is None:
        return _Result()
    if nests_too_deep(statement.expression):
        return _Result(gaps=[too_deep(statement.number, statement.line)])
    number = statement.number
    target = output.text if output is not None else OUTPUT_TABLE
    try:
        job = job_of(
            statement.expression, number, known, target, statement.variables, naming=naming
        )
        if job is None:
            return _Result()
        if job.name is None and output is not None and job.target == output.text:
            job.name = output
        if job.query is not None:
            name_projections(job.query, statement.tokens, statement.source, dialect)
        if job.query is None:
            declares = job.creates and bool(job.columns) and job.name is not None
            return _Result(
                gaps=job.gaps,
                defines=(job.name, job.columns or []) if declares and job.name else None,
            )
        return _job_lineage(job, number, dialect, known, statement.variables, naming)
    except SqlglotError as error:
        first_line = str(error).splitlines()[0] if str(error) else ""
        return _Result(
            gaps=[
                SqlGap(
                    f"statement {number} (line {statement.line}) uses unsupported SQL "
                    f"and was not analysed: {type(error).__name__}: {first_line}",
                    GapKind.UNPARSEABLE_SQL,
                )
            ]
        )


def _job_lineage(
    job: Job,
    number: int,
    dialect: Dialect,
    known: KnownTables,
    variables: frozenset[str],
    naming: TableNaming,
) -> _Result:
    """The job's query traced, its output columns named by the columns the job writes."""
    assert job.query is not None
    trace = trace_columns(job.query, number, dialect, known, variables, naming=naming)
    outputs = trace.outputs
    result = _Result(gaps=list(job.gaps))
    names = [out.name for out in outputs]
    if job.columns is not None and ALL_COLUMNS not in names:
        if len(job.columns) != len(outputs):
            result.gaps.append(
                SqlGap(
                    f"statement {number} writes {len(job.columns)} columns of "
                    f"{job.target} from {len(outputs)} selected columns",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        names = job.columns[: len(outputs)]
    elif trace.unnamed:  # `max(COLUMNS(*))` without a column list: which columns, unknown
        names = [ALL_COLUMNS if i in trace.unnamed else name for i, name in enumerate(names)]
        result.gaps.append(
            SqlGap(
                f"statement {number} selects COLUMNS(...) inside an expression, one column per "
                f"column it keeps, named as lineage cannot tell: table-level lineage into "
                f"{job.target}; give the INSERT a column list",
                GapKind.UNRESOLVED_COLUMN,
            )
        )
    for name, out in zip(names, outputs, strict=False):
        for source, subtype in out.sources.items():
            result.edges.append(
                SqlColumnEdge.between(source, job.target, name, EdgeType.DIRECT, subtype)
            )
    # OpenLineage convention: what filters, joins, groups or sorts affects every output column.
    for source, subtype in trace.indirect:
        for name in dict.fromkeys(names):
            result.edges.append(
                SqlColumnEdge.between(source, job.target, name, EdgeType.INDIRECT, subtype)
            )
    result.gaps.extend(trace.gaps)
    if job.name is not None and job.creates and names and ALL_COLUMNS not in names:
        result.defines = (job.name, list(dict.fromkeys(names)))
    return result
