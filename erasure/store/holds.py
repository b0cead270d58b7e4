"""Holds: named locks that the database or the system releases when their holder dies.

A hold is taken by name: a Postgres session advisory lock on a store in Postgres; beside a
SQLite store's file, an flock (one file per name, kept); on an in-memory store, or with no
store at all, a lock of this process (the only one that sees it). A crashed holder's hold is
released with its connection or process, so what it held is resumed by the next taker, not
waited on.

`hold(store, name)` tries once; `hold(store, name, wait=s)` tries again until `s` seconds
have passed. Either yields whether the hold was taken.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import sqlalchemy as sa

from erasure.store.database import Store, store_errors

_PROCESS_HOLDS: dict[tuple[str, int], threading.Lock] = {}  # in-memory stores
_PROCESS_HOLDS_LOCK = threading.Lock()
_THREAD = threading.local()
_POLL_SECONDS = (0.2, 1.0)  # between two tries, at random: two waiters do not try in step


@contextmanager
def hold(store: Store | None, name: str, *, wait: float = 0.0) -> Iterator[bool]:
    """Hold `name` for the block: True, or False once `wait` seconds passed with another
    holder. Released when the block ends, or when its holder's connection or process dies.
    With no store, a hold of this process only."""
    key = lock_key(name)
    taken = (id(store), key)
    if taken in _held_here():  # this thread holds it: not free, and not worth waiting for
        if wait > 0:
            raise RuntimeError(
                f"this thread already holds {name!r}: a nested hold would wait for itself"
            )
        yield False
        return
    with _lock(store, key, wait) as held:
        if held:
            _held_here().add(taken)
        try:
            yield held
        finally:
            _held_here().discard(taken)


def _lock(store: Store | None, key: int, wait: float) -> AbstractContextManager[bool]:
    if store is None:
        return _process_lock(("", key), wait)
    database = store.engine.url.database if store.dialect == "sqlite" else None
    if store.dialect == "postgresql":
        return _advisory_lock(store, key, wait)
    if database and database != ":memory:" and not database.startswith("file:"):
        return _file_lock(f"{database}.hold-{key & 0xFFFFFFFFFFFFFFFF:016x}.lock", wait)
    return _process_lock((str(store.engine.url), key), wait)


def _held_here() -> set[tuple[int, int]]:
    """The holds this thread has taken and not yet released."""
    held: set[tuple[int, int]] | None = getattr(_THREAD, "held", None)
    if held is None:
        held = _THREAD.held = set()
    return held


def lock_key(name: str) -> int:
    """A signed 64-bit key for `name` (Postgres advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _tries(wait: float) -> Iterator[None]:
    """Yield once, then again after a pause each time until `wait` seconds have passed."""
    deadline = time.monotonic() + wait
    yield
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, random.uniform(*_POLL_SECONDS)))
        yield


@contextmanager
def _advisory_lock(store: Store, key: int, wait: float) -> Iterator[bool]:
    """A Postgres session advisory lock, on a connection of its own for the block."""
    with store_errors(store, "take a hold"):
        conn = store.engine.connect()
    try:
        held = False
        try:
            for _ in _tries(wait):
                with store_errors(store, "take a hold"):
                    query = sa.text("SELECT pg_try_advisory_lock(:k)")
                    held = bool(conn.execute(query, {"k": key}).scalar())
                    conn.commit()  # a session lock: it outlives this transaction
                if held:
                    break
        except BaseException:
            # The server may have granted it before the failure: end the session, never hand
            # a connection holding it back to the pool (a later hold on it would stack).
            conn.invalidate()
            raise
        try:
            yield held
        finally:
            if held:
                _unlock(conn, key)
    finally:
        conn.close()


@contextmanager
def _file_lock(path: str, wait: float) -> Iterator[bool]:
    """An flock on `path`: per open file, so two threads of one process exclude each other
    as two processes do."""
    import fcntl

    with open(path, "a") as file:
        for _ in _tries(wait):
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            yield True  # released when the file is closed
            return
        yield False


@contextmanager
def _process_lock(name: tuple[str, int], wait: float) -> Iterator[bool]:
    with _PROCESS_HOLDS_LOCK:
        mutex = _PROCESS_HOLDS.setdefault(name, threading.Lock())
    taken = mutex.acquire(timeout=wait) if wait > 0 else mutex.acquire(blocking=False)
    if not taken:
        yield False
        return
    try:
        yield True
    finally:
        mutex.release()


def _unlock(conn: sa.Connection, key: int) -> None:
    """Release the advisory lock; if that fails, end the session (which releases it) rather
    than hand a connection still holding it back to the pool."""
    try:
        conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        conn.commit()
    except sa.exc.SQLAlchemyError:
        conn.invalidate()
