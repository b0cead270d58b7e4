"""SQL column lineage on the conformance corpus: `erasure lineage sql` against sqlglot's own
`sqlglot.lineage.lineage()`, measured in the same run.

Both read the same cases (`tests/unit/lineage/data/sql_corpus/`). sqlglot's `lineage()`
traces one SELECT column at a time and knows no statement types, so it is given the query and
the target that erasure's statement reduction finds (INSERT, CTAS, UPDATE, MERGE...), its
output columns named by sqlglot, each leaf a DIRECT edge. *exact*: the set of (source, target,
type) equals the expected set; *direct*: the same over DIRECT edges only, which is all that
sqlglot's `lineage()` reports. `BENCH_SQL_LINEAGE_MISSES=1` lists the cases each one misses.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterable

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.lineage import lineage

from erasure.lineage import (
    Depth,
    KnownTables,
    TableNaming,
    job_of,
    split_statements,
    sql_lineage,
    table_name,
)
from tests.unit.lineage.sql_corpus import ClassScore, CorpusCase, Edge, load_corpus, score, total


def erasure_edges(case: CorpusCase) -> set[Edge]:
    result = sql_lineage(
        case.sql,
        dialect=case.dialect,
        schema=case.schema,
        default_db=case.default_db,
        default_schema=case.default_schema,
    )
    return {(e.source, e.target, e.type.value, e.subtype.value) for e in result.edges}


def sqlglot_edges(case: CorpusCase) -> set[Edge]:
    """sqlglot's `lineage()` per output column of each statement's query.

    The default database and schema go to sqlglot's own qualifier (`db`, `catalog`).
    """
    dialect = Dialect.get_or_raise(case.dialect)
    naming = TableNaming.of(dialect, case.default_db, case.default_schema)
    known = KnownTables.from_schema(case.schema or {}, naming)
    defaults = _qualify_defaults(naming)
    edges: set[Edge] = set()
    for statement in split_statements(case.sql, dialect):
        if statement.expression is None:
            continue
        job = job_of(statement.expression, statement.number, known, "<output>", naming=naming)
        if job is None or job.query is None:
            continue
        selects = job.query.selects if isinstance(job.query, exp.Query) else []
        names = [s.alias_or_name for s in selects]
        targets = job.columns or [n.lower() for n in names]
        for name, target in zip(names, targets, strict=False):
            for source in _leaves(name, job.query, dict(known), dialect, defaults):
                edges.add((source, f"{job.target}.{target}", "DIRECT", "IDENTITY"))
        if job.creates and not job.columns and job.name is not None:
            known.define(job.name, [n.lower() for n in names])
    return edges


def _qualify_defaults(naming: TableNaming) -> dict[str, str]:
    """sqlglot's qualifier takes the schema as `db` and the database as `catalog`."""
    defaults = {}
    schema = naming.database if naming.depth is Depth.DATABASE_TABLE else naming.schema
    if schema is not None:
        defaults["db"] = schema.name
    if naming.depth is Depth.DATABASE_SCHEMA_TABLE and naming.database is not None:
        defaults["catalog"] = naming.database.name
    return defaults


def _leaves(
    column: str,
    query: exp.Query,
    known: dict[str, list[str]],
    dialect: Dialect,
    defaults: dict[str, str],
) -> Iterable[str]:
    schema = _nested_schema(known)
    try:
        node = lineage(column, query, schema=schema, dialect=dialect, **defaults)
    except (SqlglotError, KeyError, ValueError):
        return []
    found = []
    for leaf in node.walk():
        if leaf.downstream or not isinstance(leaf.expression, exp.Table):
            continue
        found.append(f"{table_name(leaf.expression)}.{leaf.name.split('.')[-1].lower()}")
    return found


def _nested_schema(known: dict[str, list[str]]) -> dict[str, object] | None:
    """sqlglot wants every table at one depth; mixed depths get no schema at all."""
    if not known or len({k.count(".") for k in known}) != 1:
        return None
    nested: dict[str, object] = {}
    for table, columns in known.items():
        level = nested
        *parents, leaf = table.split(".")
        for part in parents:
            level = level.setdefault(part, {})  # type: ignore[assignment]
        level[leaf] = dict.fromkeys(columns, "text")
    return nested


def _direct_only(case: CorpusCase) -> CorpusCase:
    edges = frozenset(e for e in case.edges if e[2] == "DIRECT")
    return dataclasses.replace(case, edges=edges)


def _percent(entry: ClassScore, count: int) -> str:
    return f"{100 * count / entry.cases:5.1f}%" if entry.cases else "   - "


def main() -> None:
    """Print exact and direct-only match rates per class for both, and the overall rates."""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its parse fallbacks are not news
    cases = load_corpus()
    direct_cases = [_direct_only(case) for case in cases]
    started = time.perf_counter()
    ours = score(cases, erasure_edges)
    elapsed = time.perf_counter() - started
    ours_direct = score(direct_cases, lambda c: {e for e in erasure_edges(c) if e[2] == "DIRECT"})
    theirs = score(cases, sqlglot_edges)
    theirs_direct = score(direct_cases, sqlglot_edges)
    print(f"SQL column lineage corpus: {len(cases)} cases; erasure ran them in {elapsed:.2f} s")
    print(
        f"  {'class':<16} {'cases':>5} | {'erasure exact':>13} {'strict':>7} {'direct':>7} "
        f"| {'sqlglot exact':>13} {'direct':>7}"
    )
    tables = (ours, ours_direct, theirs, theirs_direct)
    rows = [(k, *(t[k] for t in tables)) for k in sorted(ours)]
    rows.append(("total", *(total(t) for t in tables)))
    for klass, o, od, t, td in rows:
        print(
            f"  {klass:<16} {o.cases:>5} | {_percent(o, o.exact):>13} {_percent(o, o.strict):>7} "
            f"{_percent(od, od.exact):>7} | {_percent(t, t.exact):>13} {_percent(td, td.exact):>7}"
        )
    if os.environ.get("BENCH_SQL_LINEAGE_MISSES"):
        print("  erasure misses:", ", ".join(total(ours).misses) or "none")
        print("  sqlglot misses (direct):", ", ".join(total(theirs_direct).misses) or "none")
