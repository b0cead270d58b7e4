"""INSERT ... ON CONFLICT for the two dialects the project runs on (SQLite and Postgres).

SQLAlchemy keeps ON CONFLICT in each dialect's own `insert()`; this picks the right one so
the store and the warehouse loaders can upsert without branching on the dialect themselves.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from erasure.errors import ConfigError

Upsertable = postgresql.Insert | sqlite.Insert


def conflict_insert(table: sa.Table, dialect: str) -> Upsertable:
    """An INSERT for `table` that supports `on_conflict_do_nothing/_do_update` on `dialect`."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise ConfigError(f"dialect {dialect!r} is not supported here; use SQLite or PostgreSQL")
