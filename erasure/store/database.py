"""Open the erasure store: one SQLAlchemy engine, migrated to the newest schema on open.

SQLite is the embedded default (a file, created with its directory); Postgres is production.
Migrations are Alembic revisions in `migrations/versions/`, run programmatically here, so no
`alembic` command is needed to start (the root alembic.ini only serves writing new revisions).
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import StaticPool

from erasure.errors import ErasureError, StoreError, driver_message

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
_ALEMBIC_LOCK = threading.Lock()
PG_CONNECT_TIMEOUT_SECONDS = 10


class Store:
    """The erasure store's engine; use as a context manager or call `close()`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def url(self) -> str:
        """The store URL with any password hidden: safe for logs and messages."""
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def revision(self) -> str | None:
        """The schema revision the database is at (None if never migrated; revisions joined
        by commas if it is at several, which no head is)."""
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(_VERSION_TABLE):
                return None
            rows = conn.execute(sa.text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalars()
            return ",".join(sorted(str(r) for r in rows)) or None

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def open_store(url: str | URL, *, migrate: bool = True) -> Store:
    """Connect to the store at `url` and migrate it to head; StoreError if that fails."""
    engine = _create_engine(url)
    shown = engine.url.render_as_string(hide_password=True)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise StoreError(
            f"cannot reach the erasure store at {shown} ({driver_message(exc)}); check that the "
            "database server is running and the URL (ERASURE_STORE_URL) is right"
        ) from None
    store = Store(engine)
    try:
        if migrate and store.revision() != head_revision():
            upgrade(store)
    except sa.exc.SQLAlchemyError as exc:
        engine.dispose()
        raise StoreError(
            f"cannot read the schema revision of the erasure store at {shown} "
            f"({driver_message(exc)})"
        ) from None
    except BaseException:
        engine.dispose()
        raise
    return store


def upgrade(store: Store, revision: str = "head") -> None:
    """Run the store's migrations up to `revision`, in one transaction where the DB allows."""
    from alembic import command
    from alembic.util.exc import CommandError

    try:
        # Alembic's `context` is module state: one migration per process at a time. Across
        # processes, env.py takes a Postgres advisory lock, and a SQLite file is locked here.
        with _ALEMBIC_LOCK, _sqlite_file_lock(store), store.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(
            f"cannot migrate the erasure store at {store.url} to {revision} ({driver_message(exc)})"
        ) from None
    except CommandError as exc:  # e.g. the database is at a revision this code does not know
        raise StoreError(
            f"cannot migrate the erasure store at {store.url} to {revision} ({exc}); a newer "
            "version of erasure may have migrated it: run that version"
        ) from None


@contextmanager
def _sqlite_file_lock(store: Store) -> Iterator[None]:
    """An exclusive lock, across processes, beside a SQLite store's file (`<file>.migrating`):
    processes that open a new store at once (`make up`'s scheduler, API server and triggerer)
    migrate it in turn, the later ones finding it migrated. Nothing for another database."""
    database = store.engine.url.database if store.dialect == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    import fcntl

    with open(f"{database}.migrating", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        yield


@cache
def head_revision() -> str:
    """The newest revision the code knows; a store at another revision is out of date.

    Read from the migration files' `revision` and `down_revision` assignments, as Alembic
    reads them (a test holds the two to the same answer), so that opening a store at head
    does not import Alembic.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        found = _revision_names(path)
        if "revision" not in found:
            continue
        revisions.add(str(found["revision"]))
        down = found.get("down_revision")
        parents.update([down] if isinstance(down, str) else down or ())
    heads = revisions - parents
    if len(heads) > 1:
        raise StoreError(
            f"the migrations in {MIGRATIONS} have several heads: join them with `alembic merge`"
        )
    if not heads:
        raise StoreError(f"no migrations found in {MIGRATIONS}")
    return heads.pop()


def _revision_names(path: Path) -> dict[str, Any]:
    """A migration file's module-level `revision` and `down_revision` values."""
    try:
        module = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found: dict[str, Any] = {}
        for node in module.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                found[target.id] = ast.literal_eval(value)
        return found
    except (OSError, SyntaxError, ValueError) as exc:
        raise StoreError(
            f"cannot read the revision of migration {path.name} ({type(exc).__name__}): "
            "revision and down_revision must be literal strings (a tuple for a merge)"
        ) from None


_VERSION_TABLE = "alembic_version"


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations (no alembic.ini needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@contextmanager
def store_errors(
    store: Store, action: str, error: type[ErasureError] = StoreError
) -> Iterator[None]:
    """Turn database failures inside the block into `error`, naming the store and `action`.

    The message carries the driver's first line and error class, never the SQL or its
    parameters: those may hold values the caller did not mean to show.
    """
    try:
        yield
    except sa.exc.SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None) or exc
        raise error(
            f"could not {action} in the erasure store at {store.url} ({type(orig).__name__}: "
            f"{driver_message(orig)}); check the store is reachable and migrated (open_store "
            "migrates it)"
        ) from None


def _create_engine(url: str | URL) -> Engine:
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        # The URL may hold a password: name the expected form, not the input.
        raise StoreError(
            "the erasure store URL cannot be parsed; expected a SQLAlchemy URL such as "
            "sqlite:///var/erasure.db or postgresql://user@host/db"
        ) from None
    # Bound values include hashes and refs, and in the warehouse identifiers: errors and logs
    # show placeholders, never the values.
    kwargs: dict[str, Any] = {"hide_parameters": True}
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            # One shared connection, or every checkout would see a new empty database.
            kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
        elif not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    elif backend == "postgresql" and "connect_timeout" not in parsed.query:
        kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_SECONDS}
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise StoreError(
            f"cannot use the erasure store URL {parsed.render_as_string(hide_password=True)} "
            f"({type(exc).__name__}: {exc}); check the dialect and driver names"
        ) from None
    if backend == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")  # Airflow tasks and the CLI share the file
    cursor.close()
