"""One real database transaction per action, on SQLite as on Postgres. How a statement is
shown as evidence: `erasure.warehouse.statement_text`; how failures are described:
`erasure.errors.describe_failure`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
