"""Alembic environment: run by `open_store` with a connection, or by the `alembic` command.

`open_store` passes its connection in `config.attributes["connection"]`. The `alembic`
command (root alembic.ini) takes the URL from `-x url=...` or ERASURE_STORE_URL.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import sqlalchemy as sa
from alembic import context
from sqlalchemy.engine import Connection

from erasure.store.schema import UtcDateTime, metadata

# Any number for pg_advisory_xact_lock: two processes opening the store at once migrate in turn.
_MIGRATION_LOCK = 0x65726173  # "eras"


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(
        "ERASURE_STORE_URL"
    )
    if not url:
        raise SystemExit("give the store URL: alembic -x url=<URL>, or set ERASURE_STORE_URL")
    return url


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
        compare_type=True,
        render_item=_render_item,
    )


def _render_item(kind: str, obj: Any, _autogen: Any) -> str | Literal[False]:
    """Autogenerate writes UtcDateTime as the plain column type: revisions stay frozen."""
    if kind == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations_online() -> None:
    connection: Connection | None = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool, hide_parameters=True)
    with engine.connect() as conn:
        _run(conn)
        conn.commit()


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        elif connection.dialect.name == "sqlite":
            # pysqlite begins a transaction only before DML: without this, each revision's
            # DDL before its first INSERT would commit on its own and survive a failure.
            raw = connection.connection.dbapi_connection
            if raw is not None and not getattr(raw, "in_transaction", False):
                connection.exec_driver_sql("BEGIN")
        context.run_migrations()


def run_migrations_offline() -> None:
    """Print the SQL instead of running it (`alembic upgrade head --sql`), for DBAs."""
    context.configure(
        url=_url(),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
