"""The nightly CRM sync: load a CRM export into the warehouse, keeping erased subjects out.

Every row passes through `SuppressionFilter` before it is written; the load is one
transaction of parameterised upserts by primary key, so a failed run writes nothing and a
rerun converges to the same table. Logs and errors carry counts, column names and line
numbers, never a value.

Export formats, chosen by suffix: `.csv` (header row, UTF-8) and `.jsonl`/`.ndjson`/`.json`
(one JSON object per line). The columns written are the first record's (the CSV header, or
the first object's keys); a later object may omit a key (written as NULL) but not add one.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Connection, Engine

from erasure.errors import ConfigError, SuppressionError, WarehouseError, describe_failure
from erasure.pseudonym import Pepper
from erasure.store.dialect import conflict_insert
from erasure.suppression import IdentifierColumn, SuppressionFilter, SuppressionList
from erasure.warehouse import split_name

log = logging.getLogger(__name__)

CSV_SUFFIXES = (".csv",)
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson", ".json")
BATCH_ROWS = 1000
ATTEMPTS = 3  # loads to try when tombstones keep arriving while one runs


class _TombstonesAdded(Exception):
    """Raised inside the load transaction to roll it back."""


class IngestCounts(BaseModel):
    """What one ingest run read, loaded and kept out (safe for logs and XCom)."""

    table: str
    read: int
    loaded: int
    suppressed: int
    invalid_identifier: int
    suppressed_by_type: dict[str, int]
    pepper_versions: list[int]
    tombstones: int


def ingest_crm_export(
    path: str | Path,
    *,
    engine: Engine | str,
    table: str,
    identifier_columns: Mapping[str, IdentifierColumn],
    peppers: Sequence[Pepper],
    suppression: SuppressionList,
    batch_rows: int = BATCH_ROWS,
) -> IngestCounts:
    """Upsert the export at `path` into `table` (`schema.table`), minus suppressed subjects.

    `engine` is the warehouse: on SQLite pass `Warehouse(catalog).engine(...)`, which attaches
    the schema databases; a URL string suits Postgres.
    """
    path = Path(path)
    own_engine = isinstance(engine, str)
    bound = sa.create_engine(engine, hide_parameters=True) if isinstance(engine, str) else engine
    try:
        for _attempt in range(ATTEMPTS):
            flt = SuppressionFilter.from_list(suppression, identifier_columns, peppers)
            if _load_once(path, bound, table, flt, suppression, batch_rows):
                break
            log.info("tombstones were added while %s was loading: loading it again", table)
        else:
            raise SuppressionError(
                f"tombstones kept being added during {ATTEMPTS} loads of {table}; rerun later"
            )
    finally:
        if own_engine:
            bound.dispose()
    c = flt.counts
    counts = IngestCounts(
        table=table,
        read=c.read,
        loaded=c.loaded,
        suppressed=c.suppressed,
        invalid_identifier=c.invalid_identifier,
        suppressed_by_type=dict(c.suppressed_by_type),
        pepper_versions=flt.pepper_versions,
        tombstones=flt.tombstones,
    )
    log.info(
        "CRM ingest into %s: read %d, loaded %d, suppressed %d %s, invalid identifier %d "
        "(loaded); checked against %d tombstone(s) under pepper version(s) %s",
        table,
        counts.read,
        counts.loaded,
        counts.suppressed,
        counts.suppressed_by_type,
        counts.invalid_identifier,
        counts.tombstones,
        counts.pepper_versions,
    )
    return counts


def _load_once(
    path: Path,
    engine: Engine,
    table: str,
    flt: SuppressionFilter,
    suppression: SuppressionList,
    batch_rows: int,
) -> bool:
    """One transaction; False (rolled back) if tombstones were added while it ran."""
    export = _Export(path)
    records = iter(export)
    try:
        with engine.begin() as conn:
            target = _reflect(conn, table)
            _load(conn, target, table, flt.filter(records), export, batch_rows)
            if suppression.count() != flt.tombstones:
                raise _TombstonesAdded  # a subject erased meanwhile may be in what we wrote
    except _TombstonesAdded:
        return False
    except sa.exc.SQLAlchemyError as exc:
        raise WarehouseError(
            f"loading {path.name} into {table} failed ({describe_failure(exc)}); the transaction "
            "was rolled back and nothing was written: fix the cause and rerun"
        ) from None
    finally:
        records.close()
    return True


class _Export:
    """The records of an export file; `line` is where the last record read ends."""

    def __init__(self, path: Path) -> None:
        suffix = path.suffix.lower()
        if suffix not in CSV_SUFFIXES + JSON_LINES_SUFFIXES:
            raise ConfigError(
                f"CRM export {path.name}: unknown format {suffix or '(no suffix)'!r}; use "
                f"{', '.join(CSV_SUFFIXES + JSON_LINES_SUFFIXES)}"
            )
        if not path.is_file():
            raise ConfigError(
                f"CRM export {path} does not exist: check the DAG's export_path or "
                "ERASURE_CRM_EXPORT"
            )
        self.path = path
        self.csv = suffix in CSV_SUFFIXES
        self.line = 0

    def __iter__(self) -> Generator[dict[str, Any]]:
        return self._csv() if self.csv else self._json_lines()

    def where(self) -> str:
        return f"{self.path.name} line {self.line}"

    def _csv(self) -> Generator[dict[str, Any]]:
        with self.path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            if any(not name for name in header) or len(set(header)) != len(header):
                raise ConfigError(
                    f"CRM export {self.path.name}: the header has blank or repeated names"
                )
            for row in reader:
                self.line = reader.line_num
                if None in row:
                    raise ConfigError(f"CRM export {self.where()}: more fields than the header")
                yield row

    def _json_lines(self) -> Generator[dict[str, Any]]:
        with self.path.open(encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                self.line = number
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    # exc.msg says what is wrong and where; it does not quote the line.
                    raise ConfigError(f"CRM export {self.where()}: not JSON ({exc.msg})") from None
                if not isinstance(record, dict):
                    raise ConfigError(f"CRM export {self.where()}: not a JSON object")
                yield record


def _reflect(conn: Connection, name: str) -> sa.Table:
    schema, table = split_name(name)
    try:
        target = sa.Table(table, sa.MetaData(), schema=schema, autoload_with=conn)
    except sa.exc.NoSuchTableError:
        raise WarehouseError(
            f"table {name} does not exist in the warehouse: create it before the CRM ingest"
        ) from None
    if not target.primary_key.columns:
        raise WarehouseError(f"table {name} has no primary key: the CRM ingest upserts by it")
    return target


def _load(
    conn: Connection,
    target: sa.Table,
    name: str,
    rows: Iterator[dict[str, Any]],
    export: _Export,
    batch_rows: int,
) -> None:
    """Upsert `rows` in batches; errors name the export line (rows arrive one at a time)."""
    key = [c.name for c in target.primary_key.columns]
    columns: list[str] | None = None
    converters: dict[str, Callable[[Any], Any]] = {}
    statement: Any = None
    batch: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        if columns is None:
            columns = list(row)
            unknown = sorted(set(columns) - set(target.columns.keys()))
            if unknown:
                raise WarehouseError(f"the export has columns {unknown} that {name} does not")
            missing_key = [k for k in key if k not in columns]
            if missing_key:
                raise WarehouseError(f"the export lacks the primary key column(s) {missing_key}")
            converters = {c: _converter(target.c[c]) for c in columns}
            statement = _upsert(conn, target, columns, key)
        elif row.keys() - converters.keys():
            extra = sorted(row.keys() - converters.keys())
            raise WarehouseError(f"{export.where()}: columns {extra} that the first record lacks")
        params = {}
        for column, convert in converters.items():
            value = row.get(column)
            try:
                params[column] = convert(value)
            except (ValueError, TypeError, InvalidOperation):
                raise WarehouseError(
                    f"{export.where()} column {column!r}: not a valid "
                    f"{target.c[column].type.python_type.__name__}"
                ) from None
        pk = tuple(params[k] for k in key)
        if any(v is None for v in pk):
            raise WarehouseError(f"{export.where()}: the primary key {key} is empty")
        batch[pk] = params  # a key repeated in the export: the last record wins
        if len(batch) >= batch_rows:
            conn.execute(statement, list(batch.values()))
            batch.clear()
    if batch:
        conn.execute(statement, list(batch.values()))


def _upsert(conn: Connection, target: sa.Table, columns: list[str], key: list[str]) -> Any:
    stmt = conflict_insert(target, conn.dialect.name)
    update = {c: stmt.excluded[c] for c in columns if c not in key}
    if not update:
        return stmt.on_conflict_do_nothing(index_elements=key)
    return stmt.on_conflict_do_update(index_elements=key, set_=update)


def _converter(column: sa.Column[Any]) -> Callable[[Any], Any]:
    """Text from a CSV to the column's Python type; JSON values of the right type pass."""
    try:
        kind: type = column.type.python_type
    except NotImplementedError:
        return _passthrough
    if kind is str:
        return _passthrough
    parsers: dict[type, Callable[[str], Any]] = {
        int: int,
        float: float,
        Decimal: Decimal,
        bool: _parse_bool,
        date: date.fromisoformat,
        datetime: datetime.fromisoformat,
    }
    parse: Callable[[str], Any] = parsers.get(kind, _passthrough)

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            return None if value.strip() == "" else parse(value.strip())
        return value

    return convert


def _passthrough(value: Any) -> Any:
    return value


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "t", "yes", "y", "1"):
        return True
    if lowered in ("false", "f", "no", "n", "0"):
        return False
    raise ValueError("not a boolean")
