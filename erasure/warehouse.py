"""Warehouse connections for the catalog: engines, table references, schemas.

Dataset names are written `schema.table` in every dialect. On SQLite each schema is an
attached database file next to the main one, so the same SQL runs on SQLite and Postgres.

A catalog connection is a kind (erasure.catalog.CONNECTIONS) whose factory, here, gives the
SQLAlchemy URL. Two are built in: `url` (`{url: ...}`) and `airflow` (`{airflow_conn_id:
...}`). The domain does not import Airflow: whoever runs inside Airflow (the DAG adapters)
hands the Warehouse a `ConnectionResolver` that turns the conn id into a SQLAlchemy URL
through the Postgres provider's hook; without one, an `airflow` connection cannot be opened.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from erasure.catalog import (
    CONNECTIONS,
    AirflowConnection,
    Catalog,
    ConnectionContext,
    DatasetSpec,
    UrlConnection,
)
from erasure.errors import (
    CatalogError,
    WarehouseError,
    describe_failure,
    driver_message,
)
from erasure.matching import SQL_FUNCTION, sql_canonical

if TYPE_CHECKING:
    from erasure.lakehouse import LakehouseTable
    from erasure.store import Store

# (catalog connection name, airflow_conn_id) -> the SQLAlchemy URL it stands for. Raises
# CatalogError naming the conn id when Airflow does not know it.
ConnectionResolver = Callable[[str, str], sa.URL | str]


def url_of(config: UrlConnection, context: ConnectionContext) -> str:
    """The URL as written, with a relative SQLite path made absolute."""
    prefix = "sqlite:///"
    if config.url.startswith(prefix) and not config.url.startswith(prefix + "/"):
        path = config.url[len(prefix) :]
        if path and path != ":memory:":
            return prefix + str((context.base_dir / path).resolve())
    return config.url


def airflow_url(config: AirflowConnection, context: ConnectionContext) -> sa.URL | str:
    """The URL Airflow keeps for the conn id; CatalogError outside Airflow."""
    if context.resolve_conn_id is None:
        raise CatalogError(
            f"connection {context.name!r} uses airflow_conn_id {config.airflow_conn_id!r}: "
            "resolve it through Airflow, or give a 'url' to use it outside Airflow"
        )
    return context.resolve_conn_id(context.name, config.airflow_conn_id)


class Warehouse:
    """Lazily built engines for the catalog's connections, one per connection name.

    `store`: the erasure store whose holds keep two workers from erasing, expiring or
    searching one lakehouse table at once (`holding`); without it, only this process's."""

    def __init__(
        self,
        catalog: Catalog,
        resolve: ConnectionResolver | None = None,
        *,
        store: Store | None = None,
        hold_wait: float = 30.0,  # as Settings.lakehouse_hold_wait_seconds
    ) -> None:
        self.catalog = catalog
        self._resolve = resolve
        self._store = store
        self._hold_wait = hold_wait
        self._engines: dict[str, Engine] = {}
        self._tables: dict[tuple[str, str], sa.Table | None] = {}
        self._schemas: dict[str, dict[str, list[str]]] = {}

    def url(self, connection: str) -> sa.URL | str:
        """The SQLAlchemy URL of a catalog connection (it may hold a password: never log it)."""
        if connection not in self.catalog.connections:
            raise CatalogError(
                f"connection {connection!r} is not declared under 'connections'; "
                f"declared: {sorted(self.catalog.connections)}"
            )
        context = ConnectionContext(connection, self.catalog.base_dir, self._resolve)
        return CONNECTIONS.build(self.catalog.connections[connection], context)

    def engine(self, connection: str) -> Engine:
        if connection not in self._engines:
            url = self.url(connection)
            try:
                # Bound values are subject identifiers: never in an error message or log.
                engine = sa.create_engine(url, hide_parameters=True)
            except (sa.exc.ArgumentError, ImportError) as exc:
                raise CatalogError(
                    f"connection {connection!r}: cannot use its URL ({type(exc).__name__}); "
                    "check the driver and the URL form"
                ) from None
            if engine.dialect.name == "sqlite":
                schemas = self._schemas_on(connection)
                odd = sum(not _SQLITE_SCHEMA.fullmatch(schema) for schema in schemas)
                if odd:
                    # Each schema is a database file beside the warehouse's: a schema part
                    # such as `../x` or `a/b` would name a file elsewhere, or none.
                    raise CatalogError(
                        f"connection {connection!r} is SQLite, and {odd} schema name(s) of its "
                        "datasets are not plain names (letters, digits, '_', '$', '-'): "
                        "name each dataset schema.table"
                    )
                _sqlite_semantics(engine, schemas)
            self._engines[connection] = engine
        return self._engines[connection]

    def dialect(self, connection: str) -> str:
        """sqlglot's name for the connection's SQL dialect."""
        name = self.engine(connection).dialect.name
        return {"postgresql": "postgres"}.get(name, name)

    @contextmanager
    def connect(self, ds: DatasetSpec) -> Iterator[Connection]:
        """A connection to the dataset's warehouse; failures become WarehouseError."""
        if ds.connection is None:
            raise CatalogError(f"dataset {ds.name!r} has no connection to query it through")
        engine = self.engine(ds.connection)
        try:
            conn = engine.connect()
        except sa.exc.DBAPIError as exc:  # no statement ran: the message names the server
            raise WarehouseError(
                f"dataset {ds.name!r}: warehouse connection {ds.connection!r} failed "
                f"({driver_message(exc)}); check the server is up and the URL is right"
            ) from None
        try:
            with conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            # The driver's message may quote a row's value (a subject identifier): its class
            # and SQLSTATE only.
            raise WarehouseError(
                f"dataset {ds.name!r}: a query failed ({describe_failure(exc)}); check the "
                "catalog's columns for it against the table"
            ) from None

    def table(self, ds: DatasetSpec) -> sa.Table | None:
        """The reflected table, or None when it does not exist (yet)."""
        key = (ds.namespace, ds.name)
        if key not in self._tables:
            schema, name = split_name(ds.name)
            assert ds.connection is not None
            engine = self.engine(ds.connection)
            try:
                self._tables[key] = sa.Table(
                    name, sa.MetaData(), schema=schema, autoload_with=engine
                )
            except sa.exc.NoSuchTableError:
                self._tables[key] = None
            except sa.exc.OperationalError as exc:
                raise WarehouseError(
                    f"dataset {ds.name!r}: cannot read its schema ({driver_message(exc)})"
                ) from None
            except sa.exc.DBAPIError as exc:  # e.g. the connection closed under the reflection
                raise WarehouseError(
                    f"dataset {ds.name!r}: cannot read its schema ({describe_failure(exc)})"
                ) from None
        return self._tables[key]

    def is_view(self, ds: DatasetSpec) -> bool:
        """Whether the warehouse holds `ds` as a view (a plain view: a materialized one holds
        rows). A table, or nothing, is not one."""
        schema, name = split_name(ds.name)
        assert ds.connection is not None
        try:
            views = sa.inspect(self.engine(ds.connection)).get_view_names(schema=schema)
        except sa.exc.DBAPIError as exc:
            raise WarehouseError(
                f"dataset {ds.name!r}: cannot read its schema ({describe_failure(exc)})"
            ) from None
        return name in views  # exactly: a view `Cust` beside a table `cust` is no answer

    def columns(self, ds: DatasetSpec) -> list[str] | None:
        """Column names from the catalog, else from the warehouse's schema; None if unknown.

        The warehouse is asked once per connection (`schema`), never table by table: most
        datasets of a large estate are known only from run events and are not in it.
        """
        if ds.columns is not None:
            return list(ds.columns)
        if ds.connection is None:
            return None
        columns = self.schema(ds.connection).get(ds.name)
        return None if columns is None else list(columns)

    def schema(self, connection: str) -> dict[str, list[str]]:
        """`schema.table` -> column names of every table and view on a connection, in one
        catalog query (information_schema; SQLite: one per attached database), cached."""
        if connection not in self._schemas:
            engine = self.engine(connection)
            try:
                with engine.connect() as conn:
                    self._schemas[connection] = _read_schema(conn)
            except sa.exc.OperationalError as exc:
                raise WarehouseError(
                    f"connection {connection!r}: cannot read its schema ({driver_message(exc)}); "
                    "check the server is up and the URL is right"
                ) from None
        return self._schemas[connection]

    def lakehouse_table(self, ds: DatasetSpec) -> LakehouseTable:
        """The lakehouse table `ds` names, opened through its lakehouse (not cached: each
        opening reads the table's current metadata). LakehouseError when it cannot be."""
        from erasure.lakehouse import open_table

        config = self.catalog.lakehouse(ds)
        assert ds.lakehouse is not None
        return open_table(config, ds.lakehouse.catalog, ds.lakehouse.table, self.catalog.base_dir)

    @contextmanager
    def holding(self, table: LakehouseTable) -> Iterator[None]:
        """Hold a lakehouse table for the block, waiting for another worker's hold; the table
        is read again once held.

        One erasure, history expiry or search of a table at a time: two copy-on-write deletes
        from one snapshot cannot both commit; a search reading while another's delete has
        staged its rewritten files (holding everyone else) finds them on disk; an expiry
        removing a manifest list another's is still walking leaves that one's files behind,
        named by nothing. The hold is named by the table's own id, so two catalog entries or
        spellings of one table share it. LakehouseBusy (nothing done) once the wait is over."""
        from erasure.store.holds import hold

        name = f"lakehouse\0{table.format}\0{table.physical_id()}"
        with hold(self._store, name, wait=self._hold_wait) as held:
            if not held:
                from erasure.lakehouse import LakehouseBusy

                raise LakehouseBusy(
                    f"{table.label}: another worker has been erasing, expiring or searching "
                    f"this table for over {self._hold_wait:.0f} s; this try changed nothing "
                    "and is tried again once that one is done"
                )
            table.refresh()  # as the holder before left it
            yield

    def forget_tables(self) -> None:
        """Drop cached reflections and schemas (after a rebuild replaced a table)."""
        self._tables.clear()
        self._schemas.clear()

    def dispose(self) -> None:
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()

    def _schemas_on(self, connection: str) -> set[str]:
        return {
            split_name(ds.name)[0] or "main"
            for ds in self.catalog.datasets
            if ds.connection == connection
        } - {"main"}


def statement_text(statement: sa.ClauseElement, dialect: sa.Dialect) -> str:
    """A statement as evidence shows it: the SQL with its placeholders (one per bound value,
    IN lists expanded), never the values, on one line."""
    sql = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return " ".join(str(sql).split())


def count_rows(
    conn: Connection,
    table: sa.TableClause,
    predicate: sa.ColumnElement[bool] | None = None,
) -> int:
    """Rows of `table` (that match `predicate`): how locate, erase, verify and rebuild count."""
    query = sa.select(sa.func.count()).select_from(table)
    if predicate is not None:
        query = query.where(predicate)
    return int(conn.execute(query).scalar_one())


def split_name(name: str) -> tuple[str | None, str]:
    """`crm.customers` -> ("crm", "customers"); a bare name has no schema."""
    schema, _, table = name.rpartition(".")
    return (schema or None), table


def sqlite_schema_path(main_db: Path, schema: str) -> Path:
    """Where the attached database for `schema` lives beside the main SQLite file."""
    return main_db.with_name(f"{main_db.stem}.{schema}{main_db.suffix or '.db'}")


_SQLITE_SCHEMA = re.compile(r"[A-Za-z0-9_$-]{1,128}")
SQLITE_BUSY_TIMEOUT_MS = 30_000  # how long a transaction waits for another's write lock


def _sqlite_semantics(engine: Engine, schemas: set[str]) -> None:
    """Make SQLite behave like the production warehouse: schemas, foreign keys, transactions
    that cover DDL (pysqlite would otherwise autocommit a DROP or CREATE) and wait for each
    other, and the subject matcher's SQL function."""
    database = engine.url.database
    main_db = Path(database) if database and database != ":memory:" else None

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        # The matcher's normaliser as SQL: locate and erase select exactly what Python decides.
        dbapi_conn.create_function(SQL_FUNCTION, 3, sql_canonical, deterministic=True)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        # Deleted rows overwritten with zeros, not left in free pages (erasure.actions.reclaim);
        # before ATTACH, which gives each attached database the main one's setting.
        cursor.execute("PRAGMA secure_delete = ON")
        for schema in sorted(schemas):
            if main_db is None:
                break
            # Schema names come from the validated catalog, not from a subject: safe to inline.
            path = str(sqlite_schema_path(main_db, schema)).replace("'", "''")
            cursor.execute(f"ATTACH DATABASE '{path}' AS \"{schema}\"")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # IMMEDIATE: the write lock is taken (waited for) at the start. A deferred transaction
        # that reads, then deletes, fails at once with SQLITE_BUSY when another request's
        # erasure writes meanwhile: SQLite cannot wait there without a deadlock.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


_PG_SCHEMA = """SELECT table_schema, table_name, column_name FROM information_schema.columns
    WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
    ORDER BY table_schema, table_name, ordinal_position"""


def _read_schema(conn: Connection) -> dict[str, list[str]]:
    """Every table's columns, keyed as datasets are named (`schema.table`, lower-cased)."""
    found: dict[str, list[str]] = {}
    dialect = conn.dialect.name
    if dialect == "postgresql":
        for schema, table, column in conn.exec_driver_sql(_PG_SCHEMA):
            found.setdefault(f"{schema}.{table}".lower(), []).append(column)
            if schema == "public":  # a bare name resolves there on the default search path
                found.setdefault(str(table).lower(), found[f"{schema}.{table}".lower()])
        return found
    if dialect == "sqlite":
        databases = [row[1] for row in conn.exec_driver_sql("PRAGMA database_list")]
        for database in databases:
            if database == "temp":
                continue
            quoted = '"' + str(database).replace('"', '""') + '"'
            literal = "'" + str(database).replace("'", "''") + "'"
            rows = conn.exec_driver_sql(
                f"SELECT m.name, p.name FROM {quoted}.sqlite_master AS m "
                f"JOIN pragma_table_info(m.name, {literal}) AS p "
                "WHERE m.type IN ('table', 'view') ORDER BY m.name, p.cid"
            )
            for table, column in rows:
                key = str(table) if database == "main" else f"{database}.{table}"
                found.setdefault(key.lower(), []).append(column)
        return found
    inspector = sa.inspect(conn)
    for schema in inspector.get_schema_names():
        for (_, table), columns in inspector.get_multi_columns(schema=schema).items():
            found[f"{schema}.{table}".lower()] = [c["name"] for c in columns]
    return found
