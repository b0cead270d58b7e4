"""One real database transaction per action, on SQLite as on Postgres, and how its failures
are described without repeating what the database said (which may quote a subject's value).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection


@contextmanager
def transaction(conn: Connection) -> Iterator[None]:
    """Commit everything inside on success, roll all of it back (DDL included) on error."""
    with conn.begin():
        if conn.dialect.name == "sqlite":
            # Python's sqlite3 only opens a transaction before DML, so a DROP or CREATE run
            # first would autocommit and survive a rollback; an explicit BEGIN covers DDL too.
            raw = conn.connection.dbapi_connection
            if raw is not None and not getattr(raw, "in_transaction", False):
                conn.exec_driver_sql("BEGIN")
        yield


def statement_text(statement: sa.ClauseElement, dialect: sa.Dialect) -> str:
    """A statement as evidence shows it: the SQL with its placeholders (one per bound value,
    IN lists expanded), never the values, on one line."""
    sql = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return " ".join(str(sql).split())


def describe_failure(exc: sa.exc.DBAPIError) -> str:
    """The driver's error class and SQLSTATE: enough to diagnose, never a row's value."""
    orig = exc.orig
    # psycopg names the SQLSTATE, sqlite3 (3.11+) the extended result code, e.g.
    # SQLITE_CONSTRAINT_FOREIGNKEY; the message text itself may quote a key and is dropped.
    code = (
        getattr(orig, "sqlstate", None)
        or getattr(orig, "pgcode", None)
        or getattr(orig, "sqlite_errorname", None)
    )
    name = type(orig).__name__ if orig is not None else type(exc).__name__
    return f"{name} {code}" if code else name
