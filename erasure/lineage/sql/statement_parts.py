"""A statement that writes several tables, as one statement per table it writes.

Hive's `FROM src INSERT OVERWRITE TABLE a SELECT ... INSERT INTO TABLE b SELECT ...` and
Snowflake's and Oracle's `INSERT ALL | FIRST [WHEN c THEN] INTO a ... [ELSE INTO b ...] SELECT ...`
read one source into several tables: each target becomes an `INSERT ... SELECT` of its own, its
WHEN a filter (under FIRST and ELSE, the branches before it filter too). Postgres' data-modifying
CTEs (`WITH gone AS (DELETE ... RETURNING *) INSERT INTO archive SELECT * FROM gone`) write a
table inside the statement and hand the rows they touched on: the write becomes a statement of
its own (a DELETE writes no values), and the CTE a SELECT of the rows its RETURNING gives, read
from the table it wrote. Every part is then read as any other statement.
"""

from __future__ import annotations

from sqlglot import exp

_MODIFYING = (exp.Delete, exp.Update, exp.Insert, exp.Merge)
_ROWS = "_erasure_rows"  # the alias a multi-table INSERT's source query gets


def statement_parts(statement: exp.Expr) -> list[exp.Expr]:
    """The statements `statement` amounts to, in the order they write; itself when one."""
    if isinstance(statement, exp.MultitableInserts):
        return _inserts(statement)
    with_ = statement.args.get("with_")  # Postgres allows them in the top-level WITH only
    ctes = with_.expressions if isinstance(with_, exp.With) else []
    if not any(isinstance(cte.this, _MODIFYING) for cte in ctes):
        return [statement]
    statement = statement.copy()
    writes = _modifying_ctes(statement)
    return [*writes, statement]


def _inserts(statement: exp.MultitableInserts) -> list[exp.Expr]:
    source = statement.args.get("source")
    first = str(statement.args.get("kind") or "").upper() == "FIRST"
    conditions = [
        item.expression
        for item in statement.expressions
        if isinstance(item, exp.ConditionalInsert) and isinstance(item.expression, exp.Expr)
    ]
    parts: list[exp.Expr] = []
    earlier: list[exp.Expr] = []
    for item in statement.expressions:
        conditional = isinstance(item, exp.ConditionalInsert)
        insert = item.this if conditional else item
        if not isinstance(insert, exp.Insert) or not isinstance(source, exp.Expr):
            continue
        insert = insert.copy()
        query = insert.expression
        if isinstance(query, exp.Select) and query.args.get("from_") is None:
            _read_from(query, source)  # Hive: FROM src INSERT ... SELECT ...
        else:  # INSERT ALL/FIRST ... SELECT: the values come from the source's rows
            condition = item.expression if conditional else None
            if conditional and item.args.get("else_"):
                where = _none_of(conditions) if conditions else None
            else:
                chosen = [condition] if condition is not None else []
                if first and earlier:
                    chosen.append(_none_of(earlier))
                where = _all_of(chosen)
            insert.set("expression", _from_rows(query, source, where))
            if condition is not None:
                earlier.append(condition)
        parts.append(insert)
    return parts


def _read_from(query: exp.Select, source: exp.Expr) -> None:
    """Give a Hive multi-insert branch the statement's FROM (a table, its joins, a subquery)."""
    source = source.copy()
    joins = list(source.args.get("joins") or [])
    source.set("joins", None)
    query.set("from_", exp.From(this=source))
    if joins:
        query.set("joins", [*joins, *(query.args.get("joins") or [])])


def _from_rows(values: exp.Expr | None, source: exp.Expr, where: exp.Expr | None) -> exp.Select:
    """`INTO t VALUES (a, b)` over the source query: SELECT a, b FROM (source) WHERE ...;
    `INTO t` alone inserts every column of the source."""
    tuples = values.expressions if isinstance(values, exp.Values) else []
    row = tuples[0].expressions if len(tuples) == 1 and isinstance(tuples[0], exp.Tuple) else []
    projections = [value.copy() for value in row] or [exp.Star()]
    rows = source.this if isinstance(source, exp.Subquery) else source
    select = exp.Select(
        expressions=projections,
        from_=exp.From(
            this=exp.Subquery(this=rows.copy(), alias=exp.TableAlias(this=exp.to_identifier(_ROWS)))
        ),
    )
    if where is not None:
        select.set("where", exp.Where(this=where))
    return select


def _all_of(conditions: list[exp.Expr]) -> exp.Expr | None:
    return exp.and_(*[exp.paren(c.copy()) for c in conditions]) if conditions else None


def _none_of(conditions: list[exp.Expr]) -> exp.Expr:
    return exp.not_(exp.paren(exp.or_(*[exp.paren(c.copy()) for c in conditions])))


def _modifying_ctes(statement: exp.Expr) -> list[exp.Expr]:
    """Rewrite each data-modifying CTE of `statement` as the rows it returns; its writes, each
    with the CTEs before it (a write may read them)."""
    writes: list[exp.Expr] = []
    with_ = statement.args.get("with_")
    if not isinstance(with_, exp.With):
        return writes
    earlier: list[exp.Expr] = []
    for cte in list(with_.expressions):
        modifying = cte.this
        if isinstance(modifying, _MODIFYING):
            if not isinstance(modifying, exp.Delete):
                write = modifying.copy()
                write.set("returning", None)
                if earlier:
                    write.set("with_", exp.With(expressions=[c.copy() for c in earlier]))
                writes.append(write)
            rows = _returned_rows(modifying)
            if rows is None:
                cte.pop()  # no RETURNING: nothing can read it
                continue
            cte.set("this", rows)
        earlier.append(cte)
    if not with_.expressions:
        with_.pop()
    return writes


def _returned_rows(modifying: exp.Expr) -> exp.Select | None:
    """`... RETURNING x` as `SELECT x FROM <the table written> [its FROM/USING] WHERE ...`."""
    returning = modifying.args.get("returning")
    if not isinstance(returning, exp.Returning):
        return None
    table = modifying.this
    if isinstance(table, exp.Schema):
        table = table.this
    if not isinstance(table, exp.Table):
        return None
    select = exp.Select(
        expressions=[e.copy() for e in returning.expressions],
        from_=exp.From(this=table.copy()),
    )
    others: list[exp.Expr] = []
    using = modifying.args.get("using")
    others.extend(using if isinstance(using, list) else [])
    source = modifying.args.get("from_")
    if isinstance(source, exp.From):
        others.append(source.this)
        others.extend(source.this.args.get("joins") or [])
    joins = []
    for other in others:
        if isinstance(other, exp.Join):
            joins.append(other.copy())
        elif isinstance(other, exp.Expr):
            bare = other.copy()
            bare.set("joins", None)
            joins.append(exp.Join(this=bare))
    if joins:
        select.set("joins", joins)
    where = modifying.args.get("where")
    if isinstance(where, exp.Where):
        select.set("where", where.copy())
    return select
