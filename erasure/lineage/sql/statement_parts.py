"""A statement that writes several tables, as one statement per table it writes.

Hive's `FROM src INSERT OVERWRITE TABLE a SELECT ... INSERT INTO TABLE b SELECT ...` and
Snowflake's and Oracle's `INSERT ALL | FIRST [WHEN c THEN] INTO a ... [ELSE INTO b ...] SELECT ...`
read one source into several tables: each target becomes an `INSERT ... SELECT` of its own (with
the statement's WITH), filtered by the WHEN it is written under, every INTO under one WHEN alike
(under FIRST, also by none of the WHENs before; under ELSE, by none of the WHENs at all).
Postgres' data-modifying CTEs (`WITH gone AS (DELETE ... RETURNING *) INSERT INTO archive
SELECT * FROM gone`) write a table inside the statement and hand the rows they touched on: the
write becomes a statement of its own (a DELETE writes no values), and the CTE a SELECT of the
rows its RETURNING gives, read from the table it wrote (a MERGE's also from its source; an
UPDATE's RETURNING of a column it SET also from the value it set). Every part is then read as
any other statement.
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
    if not isinstance(source, exp.Expr):
        return []
    first = str(statement.args.get("kind") or "").upper() == "FIRST"
    with_ = statement.args.get("with_")  # Hive: WITH w AS (...) FROM w INSERT ... INSERT ...
    conditions = _distinct_reads(
        [
            item.expression
            for item in statement.expressions
            if isinstance(item, exp.ConditionalInsert) and isinstance(item.expression, exp.Expr)
        ]
    )
    parts: list[exp.Expr] = []
    earlier: list[exp.Expr] = []  # the WHENs before the current one, one per columns read
    read_before: set[object] = set()
    where: exp.Expr | None = None  # the current WHEN's or ELSE's filter, for every INTO under it
    for item in statement.expressions:
        conditional = isinstance(item, exp.ConditionalInsert)
        insert = item.this if conditional else item
        if conditional and isinstance(item.expression, exp.Expr):  # WHEN c THEN INTO ...
            chosen = [item.expression]
            if first and earlier:
                chosen.append(_none_of(earlier))
            where = _all_of(chosen)
            if _reads(item.expression) not in read_before:
                read_before.add(_reads(item.expression))
                earlier.append(item.expression)
        elif conditional and item.args.get("else_"):  # ELSE INTO ...
            where = _none_of(conditions) if conditions else None
        # otherwise: another INTO under the same WHEN or ELSE (or no WHEN at all)
        if not isinstance(insert, exp.Insert):
            continue
        insert = insert.copy()
        query = insert.expression
        if isinstance(query, exp.Select) and query.args.get("from_") is None:
            _read_from(query, source)  # Hive: FROM src INSERT ... SELECT ...
        else:  # INSERT ALL/FIRST ... SELECT: the values come from the source's rows
            insert.set("expression", _from_rows(query, source, where))
        if isinstance(with_, exp.With):
            _prepend_ctes(insert, with_)
        parts.append(insert)
    return parts


def _distinct_reads(conditions: list[exp.Expr]) -> list[exp.Expr]:
    """One condition per set of columns read: `NOT (c = 1 OR c = 2 ...)` filters on what
    `NOT (c = 1)` does for lineage, and 300 WHENs need not make every part 300 deep."""
    seen: set[object] = set()
    kept = []
    for condition in conditions:
        if _reads(condition) not in seen:
            seen.add(_reads(condition))
            kept.append(condition)
    return kept


def _reads(condition: exp.Expr) -> object:
    """What a condition reads, for lineage: its columns; a condition with a query is its own."""
    if condition.find(exp.Query) is not None:
        return id(condition)
    return frozenset(column.sql().lower() for column in condition.find_all(exp.Column))


def _prepend_ctes(statement: exp.Expr, with_: exp.With) -> None:
    """Give one part of a multi-table INSERT the statement's WITH, before any of its own."""
    own = statement.args.get("with_")
    ctes = [cte.copy() for cte in with_.expressions]
    if isinstance(own, exp.With):
        own.set("expressions", [*ctes, *own.expressions])
    else:
        statement.set("with_", exp.With(expressions=ctes))


def _read_from(query: exp.Select, source: exp.Expr) -> None:
    """Give a Hive multi-insert branch the statement's FROM (a table, its joins and LATERAL
    VIEWs, a subquery)."""
    source = source.copy()
    joins = list(source.args.get("joins") or [])
    laterals = list(source.args.get("laterals") or [])
    source.set("joins", None)
    source.set("laterals", None)
    query.set("from_", exp.From(this=source))
    if joins:
        query.set("joins", [*joins, *(query.args.get("joins") or [])])
    if laterals:
        query.set("laterals", [*laterals, *(query.args.get("laterals") or [])])


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
        expressions=[_new_values(e.copy(), modifying, table) for e in returning.expressions],
        from_=exp.From(this=table.copy()),
    )
    others: list[exp.Expr] = []
    using = modifying.args.get("using")
    if isinstance(modifying, exp.Merge) and isinstance(using, exp.Expr):  # Postgres 17
        on = modifying.args.get("on")
        others.append(exp.Join(this=using.copy(), on=on.copy() if on else None))
    else:
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


def _new_values(returned: exp.Expr, modifying: exp.Expr, table: exp.Table) -> exp.Expr:
    """An UPDATE's `RETURNING a.email` gives the value SET wrote: the SET's expression (and,
    kept for the rows lineage reads as the table's, the column)."""
    if not isinstance(modifying, exp.Update):
        return returned
    assigned = {
        item.this.name.lower(): item.expression
        for item in modifying.expressions
        if isinstance(item, exp.EQ) and isinstance(item.this, exp.Column)
    }
    names = {table.alias_or_name.lower(), table.name.lower(), ""}
    for column in list(returned.find_all(exp.Column)):
        value = assigned.get(column.name.lower())
        if value is not None and column.table.lower() in names:
            replacement = exp.Coalesce(this=value.copy(), expressions=[column.copy()])
            if column is returned:
                return exp.alias_(replacement, column.name)
            column.replace(replacement)
    return returned
