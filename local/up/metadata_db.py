"""Airflow's metadata database for the local stack: Postgres when the local server answers.

SQLite takes one writer at a time: a few requests at once already meet "database is locked"
(500s to the desk's trigger and to HITL answers) and the scheduler, triggerer and DAG
processor can die of it. So the stack gives Airflow a database of its own on the local
Postgres (127.0.0.1:5432, trust auth, user postgres; `ERASURE_UP_POSTGRES` names another
server's maintenance database, `off` forces SQLite) and falls back to SQLite in Airflow's
home, saying so, when no Postgres answers.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

# Where the stack looks for Postgres: the maintenance database, from which it creates its own.
LOCAL_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
POSTGRES_ENV = "ERASURE_UP_POSTGRES"
CONNECT_TIMEOUT_SECONDS = 3
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class MetadataDb:
    """The metadata database one stack runs on."""

    url: str  # AIRFLOW__DATABASE__SQL_ALCHEMY_CONN
    database: str | None  # the Postgres database the stack owns; None on SQLite
    admin_url: str | None  # the maintenance database it was created from
    warning: str | None  # set on the SQLite fallback: what it cannot take

    @property
    def kind(self) -> str:
        return "sqlite" if self.database is None else "postgres"

    def describe(self) -> str:
        if self.database is None:
            return f"SQLite ({self.url.removeprefix('sqlite:///')})"
        return f"Postgres database {self.database} ({sa.make_url(self.url).render_as_string()})"


def sqlite_warning(home: Path, why: str) -> str:
    return (
        f"{why}: Airflow's metadata DB is SQLite in {home}. SQLite takes one writer at a time: "
        "a few requests at once meet 'database is locked' (500s to submissions and HITL "
        "answers) and can stop the scheduler, triggerer and DAG processor. Use it for one "
        "request at a time; for more, start Postgres on 127.0.0.1:5432 (trust auth, user "
        f"postgres) or set {POSTGRES_ENV} to a server's maintenance database URL, then run "
        "`make up --fresh`."
    )


def choose_metadata_db(home: Path, database: str, *, admin_url: str | None = None) -> MetadataDb:
    """Database `database` on the local Postgres (created when missing) if the server answers;
    SQLite in `home` with a warning otherwise."""
    if not _NAME.match(database):
        raise ValueError(f"metadata database name {database!r}: lower-case letters, digits, _")
    admin = admin_url or os.environ.get(POSTGRES_ENV) or LOCAL_POSTGRES
    sqlite = f"sqlite:///{home / 'airflow.db'}"
    if admin.strip().lower() in ("off", "none", "sqlite"):
        return MetadataDb(sqlite, None, None, sqlite_warning(home, f"{POSTGRES_ENV}={admin}"))
    try:
        _create_if_missing(admin, database)
    except sa.exc.OperationalError as exc:
        why = f"no Postgres answered at {_where(admin)} ({type(exc.orig).__name__})"
        return MetadataDb(sqlite, None, None, sqlite_warning(home, why))
    url = sa.make_url(admin).set(drivername="postgresql+psycopg2", database=database)
    return MetadataDb(url.render_as_string(hide_password=False), database, admin, None)


def drop_metadata_db(db: MetadataDb) -> None:
    """Drop the stack's Postgres database (Airflow stopped first); SQLite's file stays."""
    if db.database is None or db.admin_url is None:
        return
    engine = _admin_engine(db.admin_url)
    try:
        with engine.connect() as conn:
            name = _quoted(engine, db.database)
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    finally:
        engine.dispose()


def _create_if_missing(admin_url: str, database: str) -> None:
    engine = _admin_engine(admin_url)
    try:
        with engine.connect() as conn:
            exists = conn.execute(
                sa.text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": database}
            ).first()
            if exists is None:
                conn.execute(sa.text(f"CREATE DATABASE {_quoted(engine, database)}"))
    finally:
        engine.dispose()


def _admin_engine(admin_url: str) -> sa.Engine:
    url = sa.make_url(admin_url)
    if url.drivername in ("postgresql", "postgresql+psycopg2"):
        url = url.set(drivername="postgresql+psycopg")
    return sa.create_engine(
        url,
        isolation_level="AUTOCOMMIT",  # CREATE/DROP DATABASE cannot run in a transaction
        connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS},
        poolclass=sa.pool.NullPool,
    )


def _quoted(engine: sa.Engine, name: str) -> str:
    # Identifiers cannot be bound parameters: the name is checked against _NAME, then quoted.
    if not _NAME.match(name):
        raise ValueError(f"metadata database name {name!r}: lower-case letters, digits, _")
    return str(engine.dialect.identifier_preparer.quote_identifier(name))


def _where(admin_url: str) -> str:
    url = sa.make_url(admin_url)
    return f"{url.host or 'localhost'}:{url.port or 5432}"


def forget_metadata_db(database: str, *, admin_url: str | None = None) -> None:
    """Drop `database` on the local Postgres if it answers (`make up --fresh`)."""
    admin = admin_url or os.environ.get(POSTGRES_ENV) or LOCAL_POSTGRES
    if admin.strip().lower() in ("off", "none", "sqlite"):
        return
    with contextlib.suppress(sa.exc.OperationalError):  # no Postgres: nothing of ours there
        drop_metadata_db(MetadataDb("", database, admin, None))
