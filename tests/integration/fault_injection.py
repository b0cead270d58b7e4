"""Faults injected for real into a running erasure step, and the places where they strike.

Nothing here mocks a store: OpenBao is SIGKILLed (its raft storage survives the restart), the
erasure store's file is taken away or its Postgres database stops accepting connections and
its backends are terminated, the warehouse connection is closed or its backend terminated in
the middle of a transaction, and the worker process is SIGKILLed by its parent.

A `Probe` numbers the places in one attempt of a task where a fault may strike (a Vault
request, the first write of a store or warehouse transaction, the end of the task) and strikes
once, at the one it is armed with. Arming the next number for each retry walks the fault
through the task: the first place in the first try, the second place in the retry (which
resumes from what the first did), and so on until a try gets through.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from requests.adapters import HTTPAdapter

from erasure.keys.vault import EmbeddedOpenBao
from erasure.services import Services

_WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "REPLACE")


class Site(StrEnum):
    """A kind of place in a step where a fault may strike."""

    TASK_START = "before the task starts"
    VAULT_FIRST = "the task's first Vault request"
    VAULT_WRITE = "each Vault write (sign, destroy, create)"
    STORE_WRITE = "each erasure-store write transaction"
    WAREHOUSE_FIRST = "the task's first warehouse statement"
    WAREHOUSE_WRITE = "each warehouse write transaction"
    TASK_END = "the end of the task, before it reports success"


@dataclass(frozen=True)
class Point:
    """One place a fault struck: its kind and what was about to happen (no values)."""

    site: Site
    what: str


@dataclass
class Probe:
    """Numbers the fault points of one attempt and calls `strike` at point number `at`.

    `after`: strike once the statement ran or the Vault request returned (the transaction is
    still open), rather than just before it.
    """

    sites: frozenset[Site]
    at: int
    strike: Callable[[Point, sa.Connection | None], None]
    after: bool = False
    part: int | None = None  # count only the points of this part of the task (see `current`)
    current: int | None = None  # the part the task is in (the task sets it: one per item)
    seen: int = 0
    struck: Point | None = None
    _store: sa.engine.Engine | None = None
    _writing: dict[int, bool] = field(default_factory=dict)  # connection -> wrote in its txn
    _due: dict[int, Point] = field(default_factory=dict)
    _first_vault: bool = True
    _first_warehouse: bool = True

    @contextmanager
    def installed(self, svc: Services) -> Iterator[Probe]:
        """Watch `svc`'s store, warehouse and Vault client while the block runs."""
        self._store = svc.store.engine
        listeners: list[tuple[str, Callable[..., Any]]] = [
            ("begin", self._begin),
            ("before_cursor_execute", self._before),
            ("after_cursor_execute", self._after),
        ]
        for name, fn in listeners:
            sa.event.listen(sa.engine.Engine, name, fn)
        session = svc.vault.adapter.session
        session.mount("http://", _VaultTap(self))
        try:
            yield self
        finally:
            for name, fn in listeners:
                sa.event.remove(sa.engine.Engine, name, fn)
            session.mount("http://", HTTPAdapter())

    def task_end(self) -> None:
        self._point(Site.TASK_END, "task end", None)

    # -- what the hooks see ------------------------------------------------------------------

    def _begin(self, conn: sa.Connection) -> None:
        self._writing[id(conn)] = False

    def _before(self, conn: sa.Connection, _cursor: Any, statement: str, *_rest: Any) -> None:
        words = statement.split()
        verb = words[0].upper() if words else ""
        store = conn.engine is self._store
        site: Site | None = None
        if not store and self._first_warehouse:
            self._first_warehouse = False
            site = Site.WAREHOUSE_FIRST
        if verb in _WRITES and not self._writing.get(id(conn), False):
            self._writing[id(conn)] = True
            if site is None or Site.WAREHOUSE_FIRST not in self.sites:
                site = Site.STORE_WRITE if store else Site.WAREHOUSE_WRITE
        if site is None:
            return
        point = Point(site, " ".join(words[:3])[:60])
        if self.after:
            self._due[id(conn)] = point
        else:
            self._point(point.site, point.what, conn)

    def _after(self, conn: sa.Connection, *_rest: Any) -> None:
        point = self._due.pop(id(conn), None)
        if point is not None:
            self._point(point.site, point.what, conn)

    def vault_site(self, method: str) -> Site | None:
        """Which kind of point a Vault request about to be sent is, if any."""
        first, self._first_vault = self._first_vault, False
        write = method not in ("GET", "LIST", "HEAD")
        if write and (Site.VAULT_WRITE in self.sites or not first):
            return Site.VAULT_WRITE
        return Site.VAULT_FIRST if first else None

    def vault(self, site: Site | None, method: str, path: str, *, done: bool) -> None:
        if site is not None and done == self.after:
            self._point(site, f"{method} {path.split('?')[0]}"[:60], None)

    def _point(self, site: Site, what: str, conn: sa.Connection | None) -> None:
        if site not in self.sites or self.struck is not None:
            return
        if self.part is not None and self.current != self.part:
            return
        self.seen += 1
        if self.seen == self.at:
            self.struck = Point(site, what)
            self.strike(self.struck, conn)


class _VaultTap(HTTPAdapter):
    """The Vault client's transport, reporting each request to the probe around sending it."""

    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self._probe = probe

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        site = self._probe.vault_site(request.method)
        self._probe.vault(site, request.method, request.path_url, done=False)
        response = super().send(request, *args, **kwargs)
        self._probe.vault(site, request.method, request.path_url, done=True)
        return response


# ---------------------------------------------------------------------------------------------
# The faults themselves


def kill_openbao(bao: EmbeddedOpenBao) -> None:
    """OpenBao crashes: SIGKILL to its own pid, then reap it."""
    pid = bao.pid
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    bao.stop()


def cut_warehouse(conn: sa.Connection, admin: PostgresAdmin | None) -> None:
    """The warehouse connection dies under the running transaction (the server rolls it back)."""
    raw = conn.connection.dbapi_connection
    assert raw is not None
    if conn.dialect.name == "sqlite":
        raw.close()  # SQLite discards the uncommitted transaction with the connection
    else:
        assert admin is not None
        admin.terminate(raw.info.backend_pid)


@dataclass
class SqliteStoreOutage:
    """The erasure store's SQLite file is gone from where it lives (an unmounted volume).

    A directory takes its place, so nothing can silently create an empty store there.
    """

    path: Path

    def cut(self, conn: sa.Connection | None = None, engine: sa.Engine | None = None) -> None:
        self.path.rename(self._away)
        self.path.mkdir()
        if conn is not None:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.close()
        if engine is not None:
            engine.pool.dispose()  # the connections it kept open die with the volume

    def restore(self) -> None:
        self.path.rmdir()
        self._away.rename(self.path)

    @property
    def _away(self) -> Path:
        return self.path.with_name(self.path.name + ".unreachable")


@dataclass
class PostgresAdmin:
    """A superuser connection of the tests' own, to break and mend databases they created."""

    url: str
    created: list[str] = field(default_factory=list)  # databases to drop at the end
    _conn: psycopg.Connection[Any] | None = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True)
        return self._conn

    def create(self, name: str, template: str | None = None) -> None:
        copy = f' TEMPLATE "{template}"' if template else ""
        self.conn.execute(f'CREATE DATABASE "{name}"{copy}')
        self.created.append(name)

    def drop(self, name: str) -> None:
        self.conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def terminate(self, pid: int) -> None:
        self.conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

    def refuse_connections(self, name: str) -> None:
        self.conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        self.conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )

    def allow_connections(self, name: str) -> None:
        self.conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')

    def close(self) -> None:
        for name in reversed(self.created):  # copies before the template they were made from
            self.drop(name)
        if self._conn is not None:
            self._conn.close()


@dataclass
class PostgresStoreOutage:
    """The erasure store's database refuses connections and its backends are terminated."""

    admin: PostgresAdmin
    database: str

    def cut(self, conn: sa.Connection | None = None, engine: sa.Engine | None = None) -> None:
        self.admin.refuse_connections(self.database)

    def restore(self) -> None:
        self.admin.allow_connections(self.database)


# ---------------------------------------------------------------------------------------------
# The worker killed: the step runs in a forked child that the parent SIGKILLs at the point


@dataclass(frozen=True)
class ChildOutcome:
    killed_at: Point | None  # None: the child ran to its end without reaching the point
    error: str | None  # the exception class the child failed with, had it failed by itself


def run_killed(
    settings: Any,
    sites: frozenset[Site],
    at: int,
    step: Callable[[Services, Probe], Any],
    *,
    part: int | None = None,
    timeout: float = 60.0,
) -> ChildOutcome:
    """Run `step` in a forked worker and SIGKILL it from here once it reaches point `at`.

    The worker stops at the point (inside the open transaction, or right after the Vault
    request returned) and tells the parent, which kills it there: nothing after the point
    runs, no rollback or `finally` of the worker's.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read_end)
        code = 0
        try:

            def strike(point: Point, _conn: sa.Connection | None) -> None:
                os.write(write_end, f"K{point.site.name}|{point.what}\n".encode())
                time.sleep(timeout)  # the parent kills us here

            probe = Probe(sites, at, strike, after=True, part=part)
            with Services.open(settings) as svc, probe.installed(svc):
                step(svc, probe)
                probe.task_end()
        except BaseException as exc:
            os.write(write_end, f"E{type(exc).__name__}\n".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        ready, _, _ = select.select([pipe], [], [], timeout)
        line = pipe.readline().decode().strip() if ready else "Etimed out"
        if line.startswith("K") or not ready:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if line.startswith("K"):
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        name, _, what = line[1:].partition("|")
        return ChildOutcome(Point(Site[name], what), None)
    return ChildOutcome(None, line[1:] if line.startswith("E") else None)
