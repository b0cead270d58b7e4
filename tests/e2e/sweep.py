"""The sweep after an end-to-end run: every row of a database, every file under a folder and
every Vault path and secret, read for a canary (`holds`: whether a text holds it)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hvac
import sqlalchemy as sa

from local.up.stack import Stack

Holds = Callable[[str], bool]


def airflow_db(stack: Stack) -> str:
    """Airflow's metadata DB (SQLAlchemy URL): Postgres when the local server answers."""
    assert stack.metadata is not None
    return stack.metadata.url


def airflow_db_file(stack: Stack) -> Path | None:
    """The metadata DB's file when it is SQLite."""
    url = airflow_db(stack)
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def store_file(stack: Stack) -> Path:
    url = stack.env["ERASURE_STORE_URL"]
    assert url.startswith("sqlite:///"), url
    return Path(url.removeprefix("sqlite:///"))


def as_text(value: Any) -> str:
    """A column value as searchable text; compressed blobs are inflated first."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        with contextlib.suppress(zlib.error):
            raw = zlib.decompress(raw)
        return raw.decode("utf-8", errors="replace")
    if isinstance(value, dict | list):  # JSON columns on Postgres come back parsed
        return json.dumps(value)
    return "" if value is None else str(value)


def dump_rows(database: Path | str) -> Iterator[tuple[str, str]]:
    """(table, row as text) for every row of every table of a SQLite file or database URL."""
    url = f"sqlite:///{database}" if isinstance(database, Path) else database
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            metadata = sa.MetaData()
            metadata.reflect(conn)
            for table in metadata.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    yield table.name, " | ".join(as_text(v) for v in row)
    finally:
        engine.dispose()


def hits_in_rows(path: Path | str, holds: Holds) -> tuple[dict[str, int], list[str]]:
    """Rows per table, and the tables/rows that hold the canary."""
    counts: dict[str, int] = {}
    hits = []
    for table, row in dump_rows(path):
        counts[table] = counts.get(table, 0) + 1
        if holds(row):
            hits.append(f"{table}: {row[:300]}")
    return counts, hits


def files_holding(
    folder: Path, holds: Holds, *, skip: tuple[Path, ...] = ()
) -> tuple[int, list[str]]:
    """(files read, files holding the canary) under `folder`, read as raw bytes."""
    read, hits = 0, []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p not in skip):
        read += 1
        if holds(path.read_bytes().decode("utf-8", errors="replace")):
            hits.append(str(path))
    return read, hits


def secure_delete() -> bool:
    """Whether this SQLite overwrites deleted content (Debian builds with SECURE_DELETE)."""
    with sqlite3.connect(":memory:") as conn:
        return bool(conn.execute("PRAGMA secure_delete").fetchone()[0])


def vault_entries(client: hvac.Client) -> tuple[set[str], list[str], list[str]]:
    """(mounts, every key path and transit key name, every kv secret's data as text)."""
    mounts = client.sys.list_mounted_secrets_engines()["data"]
    paths: list[str] = []
    values: list[str] = []

    def listed(path: str) -> list[str]:
        response = client.list(path)
        return list((response or {}).get("data", {}).get("keys", []))

    for mount, spec in mounts.items():
        if spec["type"] == "kv":
            v2 = str((spec.get("options") or {}).get("version")) == "2"
            folders = [""]
            while folders:
                folder = folders.pop()
                for key in listed(f"{mount}{'metadata/' if v2 else ''}{folder}"):
                    if key.endswith("/"):
                        folders.append(folder + key)
                        continue
                    paths.append(f"{mount}{folder}{key}")
                    secret = client.read(f"{mount}{'data/' if v2 else ''}{folder}{key}")
                    values.append(str((secret or {}).get("data")))
        elif spec["type"] == "transit":
            paths += [f"{mount}keys/{key}" for key in listed(f"{mount}keys")]
    return set(mounts), paths, values
