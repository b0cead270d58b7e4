"""Reading the warehouse read-only: a run's own connections (SQLite files opened `mode=ro`
and their schema files attached, Postgres sessions `READ ONLY`), tables reflected, keys
found, and sampled ids looked up in a declared key by bound parameters.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from erasure.catalog import DatasetSpec
from erasure.discover.names import _Holder
from erasure.errors import (
    CatalogError,
    ErasureError,
    WarehouseError,
    describe_failure,
    driver_message,
)
from erasure.matching import require_exact_dialect
from erasure.warehouse import Warehouse, split_name, sqlite_schema_path

_LOOKUP_CHUNK = 500


@dataclass(frozen=True)
class _Table:
    schema: str | None
    table: str
    name: str  # as a dataset is named: `schema.table`, lower-cased; SQLite's main: `table`
    bare: str | None  # the name a catalog may also give it (the default schema's tables)
    columns: list[tuple[str, Any]]  # (name, SQLAlchemy type)
    kind: str = "table"  # or `materialized_view`
    sample_percent: float | None = None  # Postgres: TABLESAMPLE SYSTEM at this percentage


@dataclass
class _Open:
    """One read-only connection of a run, and what it has attached (SQLite)."""

    engine: Engine
    conn: Connection
    sqlite_main: Path | None = None
    attached: list[str] = field(default_factory=list)
    attach_limit: int = 0


# What a SQLite schema file may be named: the catalog's rule for a SQLite dataset's schema.
_SQLITE_SCHEMA = re.compile(r"[A-Za-z0-9_$-]{1,128}")


class _Reader:
    """Read-only connections of one run, one per catalog connection, of their own (NullPool,
    never the warehouse's pool): a SQLite file opened `mode=ro` with `query_only`, its schema
    files attached read-only (never created), detached and closed by `close`; a Postgres
    session in autocommit, `READ ONLY`. Failures are described by class and code."""

    def __init__(self, warehouse: Warehouse, notes: list[str]) -> None:
        self.warehouse = warehouse
        self.notes = notes
        self._open: dict[str, _Open] = {}
        self._failed: dict[str, ErasureError] = {}
        self._tables: dict[tuple[str, str], _Table | None] = {}
        self._keys: dict[tuple[str, str | None], frozenset[tuple[str, str]] | None] = {}

    def open(self, connection: str) -> Connection:
        """The run's connection to `connection`; CatalogError or WarehouseError saying why not."""
        if connection in self._failed:
            raise self._failed[connection]
        if connection not in self._open:
            try:
                self._open[connection] = _open_read_only(self.warehouse, connection)
            except ErasureError as exc:
                self._failed[connection] = exc
                raise
        return self._open[connection].conn

    def sqlite_files(self, connection: str) -> dict[str, Path] | None:
        """SQLite: the schema files beside the main one, the catalog's first (each sorted);
        None for another dialect."""
        opened = self._open[connection]
        if opened.sqlite_main is None:
            return None
        main_db = opened.sqlite_main
        named = sorted(
            {
                split_name(ds.name)[0] or "main"
                for ds in self.warehouse.catalog.datasets
                if ds.connection == connection
            }
            - {"main"}
        )
        beside = sorted(
            path.name[len(main_db.stem) + 1 : len(path.name) - len(path.suffix)]
            for path in main_db.parent.glob(f"{main_db.stem}.*{main_db.suffix or '.db'}")
        )
        files = {}
        for schema in [*named, *(s for s in beside if s not in named)]:
            path = sqlite_schema_path(main_db, schema)
            if _SQLITE_SCHEMA.fullmatch(schema) and path.is_file():
                files[schema] = path
        return files

    def attach(self, connection: str, schema: str | None) -> str | None:
        """SQLite: attach `schema`'s file read-only if it is not yet; why not, else None."""
        opened = self._open[connection]
        if opened.sqlite_main is None or schema in (None, "main") or schema in opened.attached:
            return None
        path = sqlite_schema_path(opened.sqlite_main, schema)
        if not _SQLITE_SCHEMA.fullmatch(schema) or not path.is_file():
            return "no such schema file"
        if len(opened.attached) >= opened.attach_limit:
            return f"SQLite attaches at most {opened.attach_limit} schema files at once"
        raw = opened.conn.connection.dbapi_connection
        assert raw is not None
        try:
            raw.execute(f'ATTACH DATABASE ? AS "{schema}"', (_read_only_uri(path),))
        except sqlite3.Error as exc:
            return f"cannot be read ({describe_failure(exc)})"
        opened.attached.append(schema)
        return None

    def table(self, ds: DatasetSpec) -> _Table | None:
        """A catalogued dataset's table as reflected; None when missing or not readable
        (the latter in the notes)."""
        assert ds.connection is not None
        key = (ds.connection, ds.name)
        if key not in self._tables:
            self._tables[key] = self._reflect(ds.connection, ds.name)
        return self._tables[key]

    def _reflect(self, connection: str, name: str) -> _Table | None:
        conn = self.open(connection)
        schema, table = split_name(name)
        if self.attach(connection, schema) is not None:
            return None
        try:
            columns = sa.inspect(conn).get_columns(table, schema=schema)
        except sa.exc.NoSuchTableError:
            return None
        except sa.exc.SQLAlchemyError as exc:
            self._note(f"{name}: cannot read its columns ({describe_failure(exc)})")
            return None
        finally:
            _end_transaction(conn)
        return _Table(schema, table, name, None, [(c["name"], c["type"]) for c in columns])

    def is_key(self, holder: _Holder) -> bool:
        """Whether a declared column is its table's primary key or unique on its own (one
        reflection per schema), and of a type a sampled id can be compared with."""
        ds = holder.dataset
        assert ds.connection is not None
        try:
            self.open(ds.connection)
        except ErasureError as exc:
            self._note(f"no ids looked up in the declared columns on {ds.connection!r}: {exc}")
            return False
        schema, table = split_name(ds.name)
        keys = self._keys_of(ds.connection, schema)
        if keys is None or (table.lower(), holder.column.lower()) not in keys:
            return False
        reflected = self.table(ds)
        kind = dict(reflected.columns).get(holder.column) if reflected is not None else None
        return kind is not None and _comparable(kind, self._open[ds.connection])

    def _keys_of(self, connection: str, schema: str | None) -> frozenset[tuple[str, str]] | None:
        """(table, column) of the single-column primary keys, unique constraints and unique
        indexes of a schema, lower-cased; None when they cannot be read (noted)."""
        if (connection, schema) not in self._keys:
            conn = self.open(connection)
            found: set[tuple[str, str]] = set()
            if self.attach(connection, schema) is not None:
                self._keys[(connection, schema)] = None
                return None
            try:
                inspector = sa.inspect(conn)
                for (_, table), pk in inspector.get_multi_pk_constraint(schema=schema).items():
                    if len(pk.get("constrained_columns") or []) == 1:
                        found.add((table.lower(), pk["constrained_columns"][0].lower()))
                for (_, table), uniques in inspector.get_multi_unique_constraints(
                    schema=schema
                ).items():
                    for unique in uniques:
                        if len(unique["column_names"]) == 1:
                            found.add((table.lower(), unique["column_names"][0].lower()))
                for (_, table), indexes in inspector.get_multi_indexes(schema=schema).items():
                    for index in indexes:
                        names = index.get("column_names") or []
                        if index.get("unique") and len(names) == 1 and names[0] is not None:
                            found.add((table.lower(), names[0].lower()))
                self._keys[(connection, schema)] = frozenset(found)
            except sa.exc.SQLAlchemyError as exc:
                where = f"schema {schema}" if schema else "the default schema"
                self._note(
                    f"connection {connection!r}, {where}: cannot read its keys "
                    f"({describe_failure(exc)}); no ids looked up there"
                )
                self._keys[(connection, schema)] = None
            finally:
                _end_transaction(conn)
        return self._keys[(connection, schema)]

    def stored_in(self, holder: _Holder, keys: set[str]) -> frozenset[str] | None:
        """Which of `keys` a declared key column holds, exactly as stored (bound parameters,
        only keys of the column's type); None when the lookup failed (noted)."""
        ds = holder.dataset
        assert ds.connection is not None
        reflected = self.table(ds)
        if reflected is None:
            return None
        opened = self._open[ds.connection]
        kind = dict(reflected.columns)[holder.column]
        table = sa.table(reflected.table, sa.column(holder.column, kind), schema=reflected.schema)
        column: sa.ColumnElement[Any] = table.c[holder.column]
        bound: dict[object, set[str]] = {}
        if isinstance(kind, sa.Uuid):
            for key in keys:
                try:
                    bound.setdefault(uuid.UUID(key), set()).add(key)
                except ValueError:
                    continue  # not a uuid: a uuid key cannot hold it
            as_stored = {str(u): found for u, found in bound.items()}
        else:
            if opened.sqlite_main is not None:
                # SQLite compares by the stored value, whatever the declared type (a `UUID`
                # column reflects as NUMERIC): no conversion on the way in or out.
                column = sa.type_coerce(column, sa.String())
            bound = {key: {key} for key in keys}
            as_stored = {key: {key} for key in keys}
        found: set[str] = set()
        values = list(bound)
        try:
            for at in range(0, len(values), _LOOKUP_CHUNK):
                chunk = values[at : at + _LOOKUP_CHUNK]
                query = sa.select(column).where(column.in_(chunk)).distinct()
                for value in opened.conn.execute(query).scalars():
                    found |= as_stored.get(str(value), set())
        except (sa.exc.SQLAlchemyError, TypeError, ValueError) as exc:
            self._note(f"could not look ids up in {holder.label} ({describe_failure(exc)})")
            return None
        finally:
            _end_transaction(opened.conn)
        return frozenset(found)

    def close(self) -> None:
        """Detach what was attached and close every connection, even after a failure."""
        for opened in self._open.values():
            try:
                raw = opened.conn.connection.dbapi_connection
                for schema in reversed(opened.attached):
                    if raw is not None:
                        raw.execute(f'DETACH DATABASE "{schema}"')
            except (sa.exc.SQLAlchemyError, sqlite3.Error):
                pass  # closing the connection below drops its attachments all the same
            finally:
                opened.attached.clear()
                opened.conn.close()
                opened.engine.dispose()
        self._open.clear()

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)


def _open_read_only(warehouse: Warehouse, connection: str) -> _Open:
    """A read-only connection of its own to a catalog connection (see _Reader)."""
    url = warehouse.url(connection)  # CatalogError naming the declared ones
    require_exact_dialect(url, f"connection {connection!r}")
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise CatalogError(
            f"connection {connection!r}: cannot use its URL (ArgumentError); check the URL form"
        ) from None
    sqlite_main = None
    try:
        if parsed.get_backend_name() == "sqlite":
            sqlite_main = _sqlite_file(parsed, connection)
            uri = _read_only_uri(sqlite_main)
            engine = sa.create_engine(
                "sqlite://",
                creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False),
                poolclass=NullPool,
                hide_parameters=True,
            )
            sa.event.listen(engine, "connect", _sqlite_read_only)
        else:
            engine = sa.create_engine(
                url, poolclass=NullPool, hide_parameters=True, isolation_level="AUTOCOMMIT"
            )
            sa.event.listen(engine, "connect", _postgres_read_only)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise CatalogError(
            f"connection {connection!r}: cannot use its URL ({type(exc).__name__}); check the "
            "driver and the URL form"
        ) from None
    try:
        conn = engine.connect()
    except sa.exc.DBAPIError as exc:  # no statement ran: the message names the server
        engine.dispose()
        raise WarehouseError(
            f"connection {connection!r}: cannot connect ({driver_message(exc)}); check the "
            "server is up and the connection's URL in the catalog"
        ) from None
    limit = 0
    if sqlite_main is not None:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        limit = raw.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED)
    return _Open(engine, conn, sqlite_main, attach_limit=limit)


def _sqlite_read_only(dbapi_conn: Any, _record: Any) -> None:
    # Text that is not UTF-8 is read with replacement characters: one bad row must not stop
    # the table's sample, and sqlite3's decode error would quote the value.
    dbapi_conn.text_factory = lambda data: data.decode("utf-8", "replace")
    dbapi_conn.isolation_level = None  # no implicit BEGIN: nothing is written, nothing locked
    dbapi_conn.execute("PRAGMA query_only = ON")


def _postgres_read_only(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    finally:
        cursor.close()
    dbapi_conn.commit()  # the setting outlives the transaction the driver opened for it


def _end_transaction(conn: Connection) -> None:
    """End what a read began (AUTOCOMMIT and SQLite's isolation_level None begin nothing on
    the server; SQLAlchemy's own transaction state is reset)."""
    with contextlib.suppress(sa.exc.SQLAlchemyError):
        conn.rollback()


def _sqlite_file(url: sa.URL, connection: str) -> Path:
    """The SQLite file a URL names (a plain path, or a `file:` URI with `uri=true`); a file
    that does not exist is refused (it would be created empty)."""
    database = url.database or ""
    if url.query.get("uri") in ("true", "1", "True"):
        # `file:w.db?...` (made absolute by the catalog as `<dir>/file:w.db`) or `file:///abs`.
        head, sep, tail = database.rpartition("file:")
        if sep:
            tail = urllib.parse.unquote(tail.partition("?")[0])
            tail = tail[2:] if tail.startswith("///") else tail
            database = tail if Path(tail).is_absolute() else str(Path(head or ".") / tail)
    if database in ("", ":memory:") or database.startswith("file::memory:"):
        raise WarehouseError(
            f"connection {connection!r}: an in-memory SQLite database cannot be read from "
            "another connection; give the path of a SQLite file"
        )
    path = Path(database)
    if not path.is_file():
        raise WarehouseError(
            f"connection {connection!r}: the SQLite file {database} does not exist; check "
            "the connection's url in the catalog (a relative path is relative to the "
            "catalog file)"
        )
    return path


def _read_only_uri(path: Path) -> str:
    return f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"


def _comparable(kind: Any, opened: _Open) -> bool:
    """A key column a sampled id can be compared with: text or uuid (Postgres), anything but
    a whole number on SQLite (compared as stored); whole numbers are never id evidence."""
    if isinstance(kind, sa.Integer):
        return False
    if opened.sqlite_main is not None:
        return True
    return isinstance(kind, sa.String | sa.Uuid | sa.types.NullType)
