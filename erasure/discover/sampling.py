"""Bounded samples of a table's rows: which columns are sampled, one query per table with
its LIMIT bound and each value cut in SQL, and a large Postgres table sampled by blocks.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.discover.judge import _Context
from erasure.discover.reading import _end_transaction, _Table
from erasure.discover.values import MAX_VALUE_CHARS, _Sample
from erasure.errors import describe_failure

# Postgres: a table holding more than this many times the rows wanted is sampled by blocks
# (TABLESAMPLE SYSTEM, repeatable), asking for _OVERSAMPLE times the rows, then LIMIT.
_TABLESAMPLE_OVER = 10
_OVERSAMPLE = 5
_SAMPLE_SEED = 20_251_204


def _examinable(kind: Any, dialect: str) -> bool:
    """A column type an identifier is stored in: text, whole numbers, uuids, or unknown; on
    SQLite also NUMERIC, the affinity a `UUID` or any other unknown type name gets."""
    if dialect == "sqlite" and isinstance(kind, sa.Numeric):
        return True
    return isinstance(kind, sa.String | sa.Integer | sa.Uuid | sa.types.NullType)


_PG_RELATIONS = """SELECT n.nspname, c.relname, c.relkind, c.relispartition,
       CASE WHEN c.relkind = 'p' THEN (
           SELECT coalesce(sum(greatest(k.reltuples, 0)), 0)
           FROM pg_partition_tree(c.oid) AS t JOIN pg_class AS k ON k.oid = t.relid
           WHERE t.isleaf)
       ELSE c.reltuples END
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'm', 'f') AND n.nspname IN :schemas"""


def _pg_relations(
    conn: Connection, schemas: Sequence[str], table: str | None = None
) -> dict[tuple[str, str], tuple[str, bool, float]]:
    """Postgres: (schema, table) -> relkind, whether a partition, estimated rows (reltuples;
    a partitioned table's, its leaves'; negative when never analysed): one catalog query."""
    if not schemas:
        return {}
    sql = _PG_RELATIONS + (" AND c.relname = :table" if table is not None else "")
    query = sa.text(sql).bindparams(sa.bindparam("schemas", expanding=True))
    params: dict[str, Any] = {"schemas": list(schemas)}
    if table is not None:
        params["table"] = table
    rows = conn.execute(query, params)
    return {(s, t): (k, bool(p), float(e if e is not None else -1)) for s, t, k, p, e in rows}


def _sample_percent(relkind: str, estimate: float, rows: int) -> float | None:
    """The TABLESAMPLE SYSTEM percentage for a large Postgres table (None: plain LIMIT)."""
    if relkind not in ("r", "p", "m") or estimate <= _TABLESAMPLE_OVER * rows:
        return None
    return min(100.0, 100.0 * _OVERSAMPLE * rows / estimate)


def _sample_table(
    conn: Connection,
    table: _Table,
    columns: list[tuple[str, Any]],
    rows: int,
    context: _Context,
) -> _Sample | None:
    if not columns:
        return _Sample(0, {}, {})
    try:
        return _sample(conn, table, columns, rows)
    except (sa.exc.SQLAlchemyError, TypeError, ValueError) as exc:
        # The driver's message may quote a value: its class and code only.
        context.notes.append(
            f"{table.name}: not sampled ({describe_failure(exc)}); its columns are judged by "
            "name alone"
        )
        return None
    finally:
        _end_transaction(conn)


def _sample(conn: Connection, table: _Table, columns: list[tuple[str, Any]], rows: int) -> _Sample:
    """At most `rows` rows of the columns, each text value cut to MAX_VALUE_CHARS + 1 in SQL:
    one query, its LIMIT (and a Postgres TABLESAMPLE percentage) bound parameters."""
    clause = sa.table(
        table.table, *(sa.column(name, kind) for name, kind in columns), schema=table.schema
    )
    source: sa.FromClause = clause
    if table.sample_percent is not None and conn.dialect.name == "postgresql":
        source = sa.tablesample(
            clause, sa.func.system(table.sample_percent), seed=sa.literal(_SAMPLE_SEED)
        )
    selected: list[sa.ColumnElement[Any]] = []
    sqlite = conn.dialect.name == "sqlite"
    for name, kind in columns:
        # SQLite stores any value in any column: every one is read as text, cut.
        if isinstance(kind, sa.Integer | sa.Uuid) and not sqlite:
            selected.append(source.c[name])
        else:
            text = sa.cast(source.c[name], sa.Text())
            selected.append(sa.func.substr(text, 1, MAX_VALUE_CHARS + 1, type_=sa.Text()))
    query = sa.select(*selected).limit(rows)
    names = [name for name, _ in columns]
    values: dict[str, Counter[object]] = {c: Counter() for c in names}
    others = dict.fromkeys(names, 0)
    read = 0
    for row in conn.execute(query):
        read += 1
        for column, value in zip(names, row, strict=True):
            if value is None:
                continue
            if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
                others[column] += 1  # longer than any identifier
            elif isinstance(value, str | int | uuid.UUID):
                values[column][value] += 1
            else:
                others[column] += 1
    return _Sample(read, values, others)
