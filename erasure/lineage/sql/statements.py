"""A SQL script as statements, and each statement as the table it writes and from which query.

Each statement is parsed on its own, so one that cannot be parsed is a gap and spoils nothing
else. A statement becomes a `Job`: INSERT, CREATE ... AS, SELECT INTO, UPDATE and MERGE all
reduce to one query whose output columns are written to the target. Statements that move no
column values are skipped; any other unrecognised one is a gap, since it may copy the subject
somewhere lineage cannot see.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError

from erasure.lineage.sql.blocks import Span, statement_spans, tokenize
from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.known_tables import KnownTables
from erasure.lineage.sql.names import OUTPUT_TABLE, table_name
from erasure.lineage.sql.table_resolution import TableName, TableNaming
from erasure.model import GapKind


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement of a script: where it starts, and its parse or why it has none."""

    number: int  # 1-based, counting non-empty statements
    line: int
    expression: exp.Expr | None
    error: SqlGap | None = None
    tokens: tuple[Token, ...] = ()  # the statement's tokens, positioned in `source`
    source: str = ""
    variables: frozenset[str] = frozenset()  # a routine's parameters and variables: not columns


def split_statements(script: str, dialect: Dialect) -> Iterator[Statement]:
    """The script's statements, each parsed on its own so one bad statement spoils nothing.

    Statements inside procedure bodies and script blocks take their place in the order
    (`blocks`), each naming the variables in scope there.
    """
    try:
        tokens = tokenize(script, dialect)
    except TokenError:
        # An unterminated string or comment: fall back to a plain split on semicolons.
        yield from _statements_by_semicolon(script, dialect)
        return
    for number, span in enumerate(statement_spans(tokens, script, dialect), start=1):
        if span.gap is not None:
            yield Statement(
                number, span.line, None, span.gap.placed(f"statement {number} (line {span.line})")
            )
            continue
        yield _parse_span(number, span, dialect)


def _parse_span(number: int, span: Span, dialect: Dialect) -> Statement:
    """Tokenize and parse one statement's text, keeping its lines and columns in the script."""
    line_start = span.source.rfind("\n", 0, span.start) + 1
    text = " " * (span.start - line_start) + span.source[span.start : span.end]
    try:
        tokens = dialect.tokenize(text)
    except TokenError as error:
        return Statement(number, span.line, None, _parse_gap(number, span.line, error))
    if not tokens:
        return Statement(number, span.line, None)
    statement = _parse_tokens(number, tokens, text, dialect, span.line - 1)
    return replace(statement, variables=span.variables)


def _parse_tokens(
    number: int, tokens: list[Token], sql: str, dialect: Dialect, lines_before: int = 0
) -> Statement:
    line = tokens[0].line + lines_before
    try:
        tokens = _replace_into_as_insert(tokens, sql, dialect)
        parsed = [e for e in dialect.parser().parse(tokens, sql) if e is not None]
    except ParseError as error:
        return Statement(number, line, None, _parse_gap(number, line, error, lines_before))
    except RecursionError:
        return Statement(number, line, None, too_deep(number, line))
    except Exception as error:  # the parser fails on some malformed SQL (IndexError...)
        return Statement(number, line, None, failed(number, line, error))
    return Statement(number, line, parsed[0] if parsed else None, tokens=tuple(tokens), source=sql)


def _replace_into_as_insert(tokens: list[Token], sql: str, dialect: Dialect) -> list[Token]:
    """MySQL's and SQLite's `REPLACE INTO t ...` writes as `INSERT INTO t ...` does; sqlglot
    reads REPLACE as a command and keeps the rest as text, so it is read as INSERT (MySQL's
    LOW_PRIORITY / DELAYED dropped, its optional INTO added)."""
    if tokens[0].text.upper() != "REPLACE" or len(tokens) < 2:
        return tokens
    try:
        words = tokenize(sql, dialect)  # without commands, the rest is tokens again
    except TokenError:
        return tokens
    rest = words[1:]
    while rest and rest[0].text.upper() in _REPLACE_MODIFIERS:
        rest = rest[1:]
    if not rest:
        return tokens
    first = words[0]
    insert = Token(TokenType.INSERT, "INSERT", first.line, first.col, first.start, first.end)
    if rest[0].text.upper() == "INTO":
        return [insert, *rest]
    if rest[0].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
        return tokens  # not `REPLACE [INTO] table ...`
    into = Token(TokenType.INTO, "INTO", first.line, first.col, first.start, first.end)
    return [insert, into, *rest]  # MySQL: INTO is optional


_REPLACE_MODIFIERS = frozenset({"LOW_PRIORITY", "DELAYED"})


def _statements_by_semicolon(script: str, dialect: Dialect) -> Iterator[Statement]:
    number = 0
    lines_before = 0  # newlines before the current piece
    for piece in script.split(";"):
        start = lines_before + 1 + piece[: len(piece) - len(piece.lstrip())].count("\n")
        lines_before += piece.count("\n")
        if not piece.strip():
            continue
        number += 1
        try:
            tokens = dialect.tokenize(piece)
        except TokenError as error:
            yield Statement(number, start, None, _parse_gap(number, start, error))
            continue
        if tokens:
            yield _parse_tokens(number, tokens, piece, dialect, lines_before - piece.count("\n"))


def too_deep(number: int, line: int) -> SqlGap:
    """The gap of a statement that nests deeper than the parser or the analysis can follow."""
    return SqlGap(
        f"statement {number} (line {line}) nests too deeply for the SQL parser to follow "
        "(dozens of parentheses, subqueries or operators inside each other) and was not "
        "analysed; split it into CTEs or views",
        GapKind.UNPARSEABLE_SQL,
    )


def failed(number: int, line: int, error: Exception) -> SqlGap:
    """The gap of a statement the parser or the analysis failed on (malformed or unusual SQL).

    Only the error's type is named: its message may quote the SQL, and so a subject's data.
    """
    return SqlGap(
        f"statement {number} (line {line}) could not be analysed: the SQL parser or lineage "
        f"failed on it ({type(error).__name__}); check its syntax, or declare its lineage",
        GapKind.UNPARSEABLE_SQL,
    )


# How deep a parsed statement's expression tree may nest before it is not analysed: a chain
# of a few thousand `a + a + ...` parses, but tracing it is quadratic and then recursive
# (seconds to minutes, then a RecursionError). Written queries nest a few dozen levels.
MAX_EXPRESSION_DEPTH = 200


def nests_too_deep(expression: exp.Expr, limit: int = MAX_EXPRESSION_DEPTH) -> bool:
    """Whether the expression tree is deeper than `limit` (walked without recursion)."""
    stack = [(expression, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in node.iter_expressions())
    return False


def _parse_gap(number: int, line: int, error: SqlglotError, lines_before: int = 0) -> SqlGap:
    # sqlglot's messages quote the SQL around the error; the gap names the place instead.
    detail = "unterminated string, quoted name or comment"
    if isinstance(error, ParseError) and error.errors:
        first = error.errors[0]
        at = int(first.get("line") or 0) + lines_before
        detail = f"{first.get('description')} at line {at}, col {first.get('col')}"
    return SqlGap(
        f"statement {number} (line {line}) could not be parsed: {detail}", GapKind.UNPARSEABLE_SQL
    )


# Statements that move no column values; anything else unrecognised (COPY, EXPORT, CALL...)
# is a gap, since it may copy the subject somewhere lineage cannot see.
_NO_DATA_FLOW = (
    exp.Drop,
    exp.Delete,
    exp.Alter,
    exp.TruncateTable,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.Set,
    exp.Use,
    exp.Analyze,
    exp.Grant,
    exp.Revoke,
    exp.Comment,
    exp.Describe,
    exp.Pragma,
    exp.Show,
    exp.Semicolon,
    exp.Refresh,
    exp.Declare,
    exp.Uncache,
    exp.Kill,
    exp.Summarize,
    exp.Values,
)
# The same, for statements sqlglot keeps as an opaque Command.
_NO_DATA_FLOW_COMMANDS = frozenset(
    {
        "ANALYZE",
        "VACUUM",
        "GRANT",
        "REVOKE",
        "COMMENT",
        "SET",
        "RESET",
        "SHOW",
        "USE",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "REFRESH",
        "CHECKPOINT",
        "DISCARD",
        "LOCK",
    }
)


@dataclass
class Job:
    """A statement reduced to: the table it writes, from which query, into which columns."""

    target: str
    query: exp.Query | None  # None: DDL that only declares the target's columns
    columns: list[str] | None  # explicit target columns, matched by position
    creates: bool  # the target's columns become schema for later statements
    gaps: list[SqlGap] = field(default_factory=list)
    name: TableName | None = None  # the target resolved; None for `<output>` and variables


def job_of(
    statement: exp.Expr,
    number: int,
    known: KnownTables,
    output: str,
    variables: frozenset[str] = frozenset(),
    *,
    naming: TableNaming,
) -> Job | None:
    """What `statement` writes; None when it moves no column values.

    Tables are named by `naming` (as written, or completed with the default database and
    schema); a target's columns come from `known` when it means the same table.
    """
    targets = _Targets(naming, known, number)
    if isinstance(statement, exp.Create) and not statement.args.get("clone"):
        written = targets.of(statement.this)
        query = _unwrap(statement.expression)
        if written is None:  # CREATE INDEX, FUNCTION, SCHEMA...
            return None
        name, columns = written
        if query is not None:
            job = Job(name.text, _with_ctes(query, statement), columns, creates=True, name=name)
            return targets.noted(job)
        if statement.kind == "TABLE" and columns:
            return targets.noted(Job(name.text, None, columns, creates=True, name=name))
        return None
    if isinstance(statement, exp.Insert):
        written = targets.of(statement.this)
        query = _unwrap(statement.expression) or _values_query(statement.expression)
        if written is None or query is None:  # INSERT ... VALUES: literals only
            return None
        name, columns = written
        target = name.text
        by_name = bool(statement.args.get("by_name"))  # INSERT ... BY NAME: matched by name
        if columns is None and not by_name:
            columns = _partitioned(targets.columns(name), statement.this)
        job = Job(
            target,
            _with_ctes(query, statement),
            columns,
            creates=False,
            name=name,
        )
        targets.noted(job)
        if job.columns is None and not by_name:
            job.gaps.append(
                SqlGap(
                    f"INSERT INTO {target} without a column list in statement {number}: "
                    f"{target} is not in the schema, target columns are taken from "
                    "the SELECT's output names",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        return job
    if isinstance(statement, exp.Update):
        update = _update_job(statement, targets)
        return targets.noted(update) if update is not None else None
    if isinstance(statement, exp.Merge):
        merge = _merge_job(statement, number, targets)
        return targets.noted(merge) if merge is not None else None
    if isinstance(statement, exp.Query):
        query = _unwrap(statement)
        if query is None:
            return None
        assigned = _assigned_variables(query, variables)
        if assigned:
            return Job(
                "",
                None,
                None,
                creates=False,
                gaps=[
                    SqlGap(
                        f"statement {number} sets variable {assigned} from a query: values "
                        "passed on through variables are not traced",
                        GapKind.UNRESOLVED_COLUMN,
                    )
                ],
            )
        into = query.args.get("into")
        if isinstance(into, exp.Into) and isinstance(into.this, exp.Table):
            query = query.copy()
            query.set("into", None)
            name = targets.name(into.this)
            return targets.noted(Job(name.text, query, None, creates=True, name=name))
        return Job(output, query, None, creates=output != OUTPUT_TABLE)
    if isinstance(statement, exp.Create):  # CREATE ... CLONE copies data we cannot trace
        kind = "CREATE ... CLONE"
    elif isinstance(statement, exp.Command):
        kind = statement.name.upper()
        if kind in _NO_DATA_FLOW_COMMANDS:
            return None
    elif isinstance(statement, _NO_DATA_FLOW):
        return None
    else:
        kind = type(statement).__name__.upper()
    return Job(
        "",
        None,
        None,
        creates=False,
        gaps=[
            SqlGap(
                f"unsupported statement {kind} in statement {number} was not analysed",
                GapKind.UNPARSEABLE_SQL,
            )
        ],
    )


def _values_query(values: exp.Expr | None) -> exp.Query | None:
    """`VALUES ((SELECT email FROM s ...), 1)` / MySQL's `SET email = (SELECT ...)`: the rows as
    `SELECT <row> UNION ALL ...` of the rows that read a query; None when none does."""
    if not isinstance(values, exp.Values) or values.find(exp.Query) is None:
        return None
    selects: list[exp.Query] = []
    for row in values.expressions:
        if row.find(exp.Query) is None:
            continue  # literals only: no column flows from the row
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        selects.append(exp.Select(expressions=[item.copy() for item in items]))
    query = selects[0]
    for select in selects[1:]:
        query = exp.union(query, select, distinct=False)
    return query


def _partitioned(columns: list[str] | None, target: exp.Expr) -> list[str] | None:
    """The columns `INSERT ... t PARTITION (dt = 'x', region) SELECT` writes, in order: Hive's
    and Spark's, the table's other columns and then the dynamic partition columns; a static
    partition column takes its value from the PARTITION clause."""
    partition = target.args.get("partition") if isinstance(target, exp.Table) else None
    if columns is None or not isinstance(partition, exp.Partition):
        return columns
    static = {
        item.this.name.lower()
        for item in partition.expressions
        if isinstance(item, exp.EQ) and isinstance(item.this, exp.Column)
    }
    dynamic = [item.name.lower() for item in partition.expressions if isinstance(item, exp.Column)]
    named = static | set(dynamic)
    return [c for c in columns if c not in named] + dynamic  # the schema may miss one


def _assigned_variables(query: exp.Query, variables: frozenset[str]) -> str | None:
    """`SELECT x INTO v` (v a declared variable) or T-SQL's `SELECT @v = x`: the variable."""
    into = query.args.get("into")
    if isinstance(into, exp.Into) and isinstance(into.this, exp.Table):
        name = table_name(into.this)
        if name in variables:
            return name
    if (
        isinstance(query, exp.Select)
        and query.expressions
        and all(
            isinstance(p, exp.EQ) and isinstance(p.this, (exp.Parameter, exp.SessionParameter))
            for p in query.expressions
        )
    ):
        return str(query.expressions[0].this.sql()).lower()
    return None


@dataclass
class _Targets:
    """Names the tables a statement writes, and notes what naming them leaves unknown."""

    naming: TableNaming
    known: KnownTables
    number: int
    gaps: list[SqlGap] = field(default_factory=list)

    def name(self, table: exp.Table) -> TableName:
        name = self.naming.resolve(table, self.known)
        written = table_name(table)
        self.gaps.extend(name.gaps(written, self.number))
        conflict = self.known.conflict(name, table.sql(dialect=self.naming.dialect), self.number)
        if conflict is not None:
            self.gaps.append(conflict)
        return name

    def of(self, node: exp.Expr | None) -> tuple[TableName, list[str] | None] | None:
        """Target table and its explicit column list, from `t` or `t (a, b)`."""
        if isinstance(node, exp.Schema) and isinstance(node.this, exp.Table):
            columns = [
                column.name.lower()
                for column in node.expressions
                if isinstance(column, (exp.ColumnDef, exp.Identifier, exp.Column))
            ]
            return self.name(node.this), columns or None
        if isinstance(node, exp.Table):
            return self.name(node), None
        return None

    def columns(self, name: TableName) -> list[str] | None:
        """The columns `known` has for the table `name` means."""
        return self.known[name.text] if self.known.means(name) else None

    def same(self, left: exp.Table, right: exp.Table) -> bool:
        return self.naming.reference(left).text == self.naming.reference(right).text

    def noted(self, job: Job) -> Job:
        job.gaps[:0] = [gap for gap in dict.fromkeys(self.gaps) if gap not in job.gaps]
        self.gaps.clear()
        return job


def _unwrap(node: exp.Expr | None) -> exp.Query | None:
    while isinstance(node, exp.Subquery):
        node = node.this
    return node if isinstance(node, (exp.Select, exp.SetOperation)) else None


def _with_ctes(query: exp.Query, statement: exp.Expr) -> exp.Query:
    """Move `WITH` written before INSERT/CREATE/MERGE onto the query that uses it."""
    ctes = statement.args.get("with_")
    if not isinstance(ctes, exp.With):
        return query
    query = query.copy()
    own = query.args.get("with_")
    if isinstance(own, exp.With):
        own.set("expressions", [*ctes.copy().expressions, *own.expressions])
    else:
        query.set("with_", ctes.copy())
    return query


def _update_job(update: exp.Update, targets: _Targets) -> Job | None:
    """UPDATE t SET a = expr FROM s WHERE c  ->  SELECT expr AS a FROM t, s WHERE c.

    The target is the table UPDATE names, or in T-SQL's `UPDATE alias SET ... FROM table
    alias JOIN ...` the table FROM gives that name; MySQL's `UPDATE t JOIN s ON ...` joins
    stay joins, and `SET (a, b) = (SELECT x, y ...)` assigns column by column.
    """
    named = update.this
    if not isinstance(named, exp.Table):
        return None
    columns, values = _assignments(update.expressions)
    source = update.args.get("from_")
    sources = _from_tables(source) if isinstance(source, exp.From) else []
    target = next((t for t in sources if _names_target(t, named, targets)), None)
    if target is not None and isinstance(source, exp.From):  # T-SQL: FROM holds the target
        first = source.this.copy()
        joins = list(first.args.get("joins") or [])
        first.set("joins", None)
    else:
        target = named
        first = named.copy()
        joins = list(first.args.get("joins") or [])  # MySQL's multi-table UPDATE
        first.set("joins", None)
        if isinstance(source, exp.From):
            table = source.this.copy()
            joins += [exp.Join(this=table), *(table.args.get("joins") or [])]
            table.set("joins", None)
    select = exp.Select(expressions=values, from_=exp.From(this=first), joins=joins)
    where = update.args.get("where")
    if where is not None:
        select.set("where", where.copy())
    name = targets.name(target)
    return Job(name.text, _with_ctes(select, update), columns, creates=False, name=name)


def _assignments(assignments: list[exp.Expr]) -> tuple[list[str], list[exp.Expr]]:
    """`a = x` and `(a, b) = (x, y)` / `(a, b) = (SELECT x, y ...)`: columns and values."""
    columns: list[str] = []
    values: list[exp.Expr] = []
    for assignment in assignments:
        if not isinstance(assignment, exp.EQ):
            continue
        left, right = assignment.this, assignment.expression
        if isinstance(left, exp.Column):
            pairs = [(left, right)]
        elif isinstance(left, exp.Tuple):
            pairs = list(
                zip(left.expressions, _row_values(right, len(left.expressions)), strict=True)
            )
        else:
            continue
        for column, value in pairs:
            if isinstance(column, exp.Column):
                columns.append(column.name.lower())
                values.append(exp.alias_(value.copy(), column.name))
    return columns, values


def _row_values(row: exp.Expr, width: int) -> list[exp.Expr]:
    """The values a row assignment gives, one per column; a subquery gives one column each."""
    if isinstance(row, (exp.Tuple, exp.Paren)) and not isinstance(row.unnest(), exp.Query):
        items = row.expressions if isinstance(row, exp.Tuple) else [row.this]
        if len(items) == width:
            return list(items)
    query = row.unnest() if isinstance(row, exp.Paren) else row
    query = query.this if isinstance(query, exp.Subquery) else query
    if isinstance(query, exp.Select) and len(query.expressions) == width:
        return [
            exp.Subquery(this=query.copy().select(projection.copy(), append=False))
            for projection in query.expressions
        ]
    return [row] * width  # cannot be split: every column may take any of its values


def _from_tables(source: exp.From) -> list[exp.Table]:
    first = source.this
    joined = [join.this for join in first.args.get("joins") or []]
    return [t for t in [first, *joined] if isinstance(t, exp.Table)]


def _names_target(table: exp.Table, named: exp.Table, targets: _Targets) -> bool:
    """Whether FROM's `table` is the one `UPDATE named` means: by alias, or by its name."""
    if table.alias:
        return not named.args.get("db") and table.alias.lower() == named.name.lower()
    return targets.same(table, named)


def _merge_job(merge: exp.Merge, number: int, targets: _Targets) -> Job | None:
    """MERGE as one SELECT: every assignment a projection, ON a join, WHEN ... AND a filter."""
    target = merge.this
    if not isinstance(target, exp.Table):
        return None
    resolved = targets.name(target)
    name = resolved.text
    job = Job(name, None, None, creates=False, name=resolved)
    columns: list[str] = []
    values: list[exp.Expr] = []
    conditions: list[exp.Expr] = []
    source = merge.args["using"]
    target_columns = targets.columns(resolved)
    every_column = False  # UPDATE SET * / INSERT * over a target whose columns are unknown
    whole_row = False  # BigQuery's INSERT ROW: the source's columns, by position
    whens = merge.args.get("whens")
    for when in whens.expressions if isinstance(whens, exp.Whens) else []:
        if when.args.get("condition") is not None:
            conditions.append(exp.paren(when.args["condition"].copy()))
        action = when.args.get("then")
        where = action.args.get("where") if isinstance(action, exp.Expr) else None
        if isinstance(where, exp.Where):  # Oracle's UPDATE SET ... WHERE cond
            conditions.append(exp.paren(where.this.copy()))
        pairs: list[tuple[str, exp.Expr]] = []
        if _sets_every_column(action):
            # Databricks/Spark: every target column from the source column of its name
            if target_columns is None:
                every_column = True
            else:
                alias = source.alias_or_name
                pairs = [(c, exp.column(c, table=alias)) for c in target_columns]
        elif _inserts_row(action):
            whole_row = True
        elif isinstance(action, exp.Update):
            pairs = [
                (a.this.name, a.expression)
                for a in action.expressions
                if isinstance(a, exp.EQ) and isinstance(a.this, exp.Column)
            ]
        elif isinstance(action, exp.Insert) and isinstance(action.expression, exp.Tuple):
            names = (
                [c.name for c in action.this.expressions]
                if isinstance(action.this, exp.Tuple)
                else targets.columns(resolved)
            )
            if names is None:
                job.gaps.append(
                    SqlGap(
                        f"MERGE INSERT without a column list in statement {number}: "
                        f"{name} is not in the schema",
                        GapKind.UNRESOLVED_COLUMN,
                    )
                )
                continue
            pairs = list(zip(names, action.expression.expressions, strict=False))
        elif action is not None and action.find(exp.Star) is not None:
            job.gaps.append(
                SqlGap(
                    f"MERGE ... * in statement {number}: unsupported, not analysed",
                    GapKind.UNPARSEABLE_SQL,
                )
            )
        for column, value in pairs:
            columns.append(column.lower())
            values.append(exp.alias_(value.copy(), column))
    if every_column or whole_row:  # the source's columns, into the target's of their name
        values.append(exp.Column(this=exp.Star(), table=exp.to_identifier(source.alias_or_name)))
        if whole_row and target_columns is not None:  # or of their position
            columns.extend(target_columns)
        else:
            every_column = True
        if whole_row and target_columns is None:
            job.gaps.append(
                SqlGap(
                    f"MERGE INSERT ROW in statement {number}: {name} is not in the schema, "
                    "target columns are taken from the source's names",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
    on = merge.args.get("on")
    select = exp.Select(
        expressions=values,
        from_=exp.From(this=target.copy()),
        joins=[exp.Join(this=source.copy(), on=on.copy() if on else None)],
    )
    if conditions:
        select.set("where", exp.Where(this=exp.or_(*conditions)))
    job.query = _with_ctes(select, merge)
    job.columns = None if every_column else columns
    return job


def _inserts_row(action: object) -> bool:
    """BigQuery's `WHEN NOT MATCHED THEN INSERT ROW`."""
    return (
        isinstance(action, exp.Insert)
        and isinstance(action.this, exp.Var)
        and action.this.name.upper() == "ROW"
    )


def _sets_every_column(action: object) -> bool:
    """`WHEN MATCHED THEN UPDATE SET *` / `UPDATE *` / `WHEN NOT MATCHED THEN INSERT *`."""
    if isinstance(action, exp.Update):
        assigned = action.args.get("expressions")
        items = assigned if isinstance(assigned, list) else [assigned]
        return any(isinstance(item, exp.Star) for item in items)
    return isinstance(action, exp.Insert) and isinstance(action.this, exp.Star)
