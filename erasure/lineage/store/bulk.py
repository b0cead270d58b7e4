"""Bulk statements on the lineage tables: binary COPY and JSON-bound upserts on Postgres,
key joins through json_each on SQLite, IN lists in chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.errors import LineageError
from erasure.lineage.openlineage import event_json
from erasure.model import DatasetRef
from erasure.store.dialect import conflict_insert

IN_CHUNK = 500  # values per IN (...) list


def copy_cursor(conn: Connection) -> Any:
    driver = conn.connection.driver_connection
    cursor = driver.cursor() if driver is not None else None
    return cursor if cursor is not None and hasattr(cursor, "copy") else None


def copy_rows(
    conn: Connection,
    table: str,
    names: Sequence[str],
    types: Sequence[str],
    rows: Sequence[Sequence[Any]],
) -> None:
    """psycopg 3's binary COPY FROM STDIN: values go as they are, nothing to escape; an order
    of magnitude above row-by-row INSERTs, and five times text COPY for event-sized rows."""
    cursor = copy_cursor(conn)
    with cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(list(types))
        for row in rows:
            copy.write_row(row)


def joined_to_keys(
    query: sa.Select[Any], table: sa.Table, columns: Sequence[str], keys: Iterable[Sequence[Any]]
) -> sa.Select[Any]:
    """SQLite: `query` over `table` joined to the keys bound as one JSON array (json_each),
    one primary-key probe each; IN lists per column made it probe every combination."""
    key = sa.func.json_each(sa.bindparam("keys", json_rows(columns, keys))).table_valued("value")
    match = [table.c[c] == sa.func.json_extract(key.c.value, f"$.{c}") for c in columns]
    return query.select_from(key).join(table, sa.and_(*match))


def pg_upsert(
    conn: Connection,
    table: str,
    fields: Sequence[str],
    types: Sequence[str],
    key: Sequence[str],
    rows: list[dict[str, Any]],
) -> None:
    """INSERT ... SELECT FROM json_to_recordset ON CONFLICT DO UPDATE: one statement per
    batch, its rows one JSON parameter (encoded in C, where arrays were built value by value
    in Python and took longer than the statement)."""
    columns = ", ".join(fields)
    shape = ", ".join(f"{f} {t}" for f, t in zip(fields, types, strict=True))
    updates = ", ".join(f"{f} = EXCLUDED.{f}" for f in fields if f not in key)
    conn.exec_driver_sql(
        f"INSERT INTO {table} ({columns}) SELECT {columns} "
        f"FROM json_to_recordset(%(rows)s::json) AS r({shape}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}",
        {"rows": json_rows(fields, ([r.get(f) for f in fields] for r in rows))},
    )


def upsert_rows(
    conn: Connection,
    table: sa.Table,
    fields: Sequence[str],
    types: Sequence[str],
    key: Sequence[str],
    rows: list[dict[str, Any]],
) -> None:
    """Insert or update `rows` (each a value per field) by `key`, in one statement: bound as
    JSON on Postgres (`pg_upsert`), ON CONFLICT DO UPDATE elsewhere."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        pg_upsert(conn, table.name, fields, types, key, rows)
        return
    insert = conflict_insert(table, conn.dialect.name)
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=list(key),
            set_={c: insert.excluded[c] for c in rows[0] if c not in key},
        ),
        rows,
    )


def json_rows(fields: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows as a JSON array of objects: one bound parameter for json_to_recordset."""
    return event_json.sql_parameter([dict(zip(fields, r, strict=True)) for r in rows])


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def stored_datasets(conn: Connection, refs: Sequence[DatasetRef]) -> Iterable[Sequence[Any]]:
    """(id, namespace, name) of those of `refs` that are stored, in one statement: the
    identities bound as one JSON array (a compiled IN list per chunk cost more than the
    lookup on a first load)."""
    keys = _identities(refs)
    if conn.dialect.name == "postgresql":
        return conn.exec_driver_sql(
            "SELECT d.id, d.namespace, d.name FROM lineage_datasets AS d "
            "JOIN json_array_elements(%(keys)s::json) AS k(v) "
            "ON d.namespace = k.v->>0 AND d.name = k.v->>1",
            {"keys": keys},
        ).all()
    return conn.exec_driver_sql(
        "SELECT d.id, d.namespace, d.name FROM json_each(?) AS k "
        "JOIN lineage_datasets AS d ON d.namespace = json_extract(k.value, '$[0]') "
        "AND d.name = json_extract(k.value, '$[1]')",
        (keys,),
    ).all()


def _identities(refs: Sequence[DatasetRef]) -> str:
    """The datasets' (namespace, name) as one JSON array parameter. A NUL is refused: SQLite's
    json_extract ends a string at it (`a\x00b` would be looked up, and stored, as `a`), and
    Postgres text cannot hold one."""
    if any("\x00" in r.namespace or "\x00" in r.name for r in refs):
        raise LineageError("a dataset's namespace or name holds a NUL character: refused")
    return event_json.sql_parameter([[r.namespace, r.name] for r in refs])


def insert_datasets(conn: Connection, refs: Sequence[DatasetRef]) -> Iterable[Sequence[Any]]:
    """Insert datasets known not to be stored (the projection lock is held), in the order
    given; their (id, namespace, name)."""
    rows = _identities(refs)
    if conn.dialect.name == "postgresql":
        return conn.exec_driver_sql(
            "INSERT INTO lineage_datasets (namespace, name) "
            "SELECT k.v->>0, k.v->>1 FROM json_array_elements(%(rows)s::json) "
            "WITH ORDINALITY AS k(v, n) ORDER BY k.n RETURNING id, namespace, name",
            {"rows": rows},
        ).all()
    return conn.exec_driver_sql(
        "INSERT INTO lineage_datasets (namespace, name) "
        "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?) "
        "ORDER BY key RETURNING id, namespace, name",
        (rows,),
    ).all()
