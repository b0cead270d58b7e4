"""The raw event log: `lineage_events` rows (stored once, by content hash, immutable), the
quarantine of refused events, and reading stored events back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Connection

from erasure.errors import LineageError
from erasure.lineage.openlineage import (
    ObservedEvent,
    RunEvent,
    event_id,
    event_json,
    event_text,
    parse_decoded,
)
from erasure.lineage.store.admission import refuse_unstorable
from erasure.lineage.store.bulk import IN_CHUNK, chunks, copy_cursor, copy_rows
from erasure.store.schema import LINEAGE_JOB_LENGTH, LINEAGE_RUN_ID_LENGTH, lineage_events


class QuarantinedEvent(BaseModel):
    """A refused event: where it came from, why, and its text."""

    id: int
    received_at: datetime
    origin: str
    reason: str
    body: str


def event_row(
    event: RunEvent | ObservedEvent,
    received_at: datetime,
    text: str = "",
    *,
    identity: str | None = None,
) -> dict[str, Any]:
    """The `lineage_events` row of an event (its id, if known, as `identity`; an observed
    event's with its text); LineageError when it cannot be stored as is."""
    if isinstance(event, RunEvent):  # an observed event was checked where it was read
        refuse_unstorable(event, received_at)
    job, run_id = run_key(event)
    if len(job) > LINEAGE_JOB_LENGTH:
        raise LineageError(
            f"OpenLineage event: job namespace and name are longer than {LINEAGE_JOB_LENGTH} "
            "characters together; shorten the job name"
        )
    if len(run_id) > LINEAGE_RUN_ID_LENGTH:
        raise LineageError(
            f"OpenLineage event: run.runId is longer than {LINEAGE_RUN_ID_LENGTH} characters; "
            "the spec expects a UUID"
        )
    if isinstance(event, ObservedEvent):
        if identity is None or not text:
            raise ValueError("an observed event is stored with its id and text")
    else:
        identity = identity or event_id(event)
        text = text or event_text(event)
    return {
        "event_id": identity,
        "job": job,
        "run_id": run_id,
        "event_type": event.event_type.value if event.event_type is not None else None,
        "event_time": event.event_time,
        # The event re-serialised, compact, in its own key order (never the text as received:
        # text holding a key twice decodes to its last value, the first would be kept); it
        # reads back to the same event and content hash.
        "raw": text,
        "received_at": received_at,
    }


def quarantine_row(origin: str, reason: str, body: str) -> dict[str, Any]:
    """A refused body's row: its reason and a digest of it, never the body. Nothing read
    from it was minimised (facets, SQL values), and quarantine is kept as long as events:
    the producer's own log holds what it sent."""
    raw = body.encode("utf-8", "backslashreplace")
    return {
        "received_at": datetime.now(UTC),
        "origin": origin[:1024].replace("\x00", "\\x00"),
        "reason": reason.replace("\x00", "\\x00"),
        "body": f"sha256:{hashlib.sha256(raw).hexdigest()} ({len(raw):,} bytes, not kept)",
    }


def stored_ids(conn: Connection, ids: Sequence[str]) -> set[str]:
    """Which of these event ids are stored, in one statement on Postgres.

    Every writer holds the projection lock (`lock_projection`), so the ids not found here cannot be
    inserted by another transaction before this one commits.
    """
    if not ids:
        return set()
    if conn.dialect.name == "postgresql":
        result = conn.exec_driver_sql(
            "SELECT e.event_id FROM lineage_events AS e "
            "JOIN json_array_elements_text(%(ids)s::json) AS k(event_id) USING (event_id)",
            {"ids": event_json.sql_parameter(sorted(set(ids)))},
        )
        return {str(i) for (i,) in result}
    stored: set[str] = set()
    for part in chunks(sorted(set(ids)), IN_CHUNK):
        stored.update(
            str(i)
            for i in conn.execute(
                sa.select(lineage_events.c.event_id).where(lineage_events.c.event_id.in_(part))
            ).scalars()
        )
    return stored


def insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert events known not to be stored (`stored_ids`, under the projection lock)."""
    if rows and conn.dialect.name == "postgresql" and copy_cursor(conn) is not None:
        copy_rows(
            conn,
            "lineage_events",
            _EVENT_FIELDS,
            _EVENT_TYPES,
            [[r[f] for f in _EVENT_FIELDS] for r in rows],
        )
    elif rows:
        conn.execute(lineage_events.insert(), rows)


_EVENT_FIELDS = ("event_id", "job", "run_id", "event_type", "event_time", "raw", "received_at")


_EVENT_TYPES = ("text", "text", "text", "text", "timestamptz", "text", "timestamptz")


def stored_events(
    conn: Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]]:
    out: dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]] = {}
    wanted = set(keys)
    for part in chunks(sorted({k[1] for k in keys}), IN_CHUNK):
        query = sa.select(
            lineage_events.c.event_id, lineage_events.c.job, lineage_events.c.run_id,
            lineage_events.c.raw,
        ).where(lineage_events.c.run_id.in_(part))  # fmt: skip
        for row in conn.execute(query):
            key = (str(row.job), str(row.run_id))
            if key in wanted:
                out.setdefault(key, []).append((str(row.event_id), _parse_stored(row)))
    return out


def _parse_stored(row: Any) -> RunEvent:
    try:
        decoded = event_json.decode(row.raw, depth_checked=True)  # checked when it came in
        return parse_decoded(decoded.value, native=decoded.native)
    except (LineageError, json.JSONDecodeError) as exc:
        raise LineageError(
            f"stored OpenLineage event {row.event_id} cannot be read ({exc}); restore it from "
            "a backup or delete it"
        ) from None


def run_key(event: RunEvent | ObservedEvent) -> tuple[str, str]:
    """(job, run id): which run an event belongs to."""
    if isinstance(event, ObservedEvent):
        return event.producer, event.run_id
    return f"{event.job.namespace}/{event.job.name}", event.run.run_id


def canonical_json(value: Any) -> str:
    """Canonical JSON: the same text `event_id` hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
