"""Projection of runs into edge sets: one producer's links into one dataset over an interval,
superseded when a later run publishes a different set; the run and output rows that record
where each producer stands; the projection lock and version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.errors import LineageError
from erasure.lineage.openlineage import OutputLineage, PlainLinks, event_json, link_key
from erasure.lineage.store.bulk import joined_to_keys, json_rows, upsert_rows
from erasure.lineage.store.intake import IngestReport
from erasure.model import DatasetRef, EdgeOrigin, FieldRef
from erasure.store.schema import (
    COLUMN_LENGTH,
    lineage_edge_sets,
    lineage_index,
    lineage_outputs,
    lineage_runs,
    lineage_state,
)

Link = tuple[FieldRef, FieldRef, Any, Any]  # (source, target, EdgeType, EdgeSubtype)
LinkSet = frozenset[Link] | PlainLinks  # a set's links, as objects or as text rows


@dataclass
class Chunk:
    """One transaction's worth of work, and what it changed."""

    report: IngestReport = field(default_factory=IngestReport)
    version: int | None = None  # set once the chunk changes an edge
    dropped_index: bool = False


def without_late_repetitions(
    publications: list[tuple[datetime, str, OutputLineage]], state: Mapping[str, Any]
) -> list[tuple[datetime, str, OutputLineage]] | None:
    """The publications (in time order) less the late ones that change no interval, or None
    when the producer's series must be replayed from every stored run.

    A late run (completed before the output's latest) whose links are those of the current
    edge set and which completed inside that set's interval (after `current_since`: at the
    same instant, run ids would decide which run opened it) only repeats it: the timeline
    is the same with or without it: a late day of a job whose lineage did not change costs
    what a new day does. The latest run itself again, with the same links (a streaming run's
    heartbeat), changes nothing either. Any other late run needs the replay. (A run whose
    publication moved is replayed before this is asked: `_publish`'s `republished`.)
    """
    latest = (state["last_completed_at"], state["last_run_id"])
    kept = []
    for publication in publications:
        completed_at, run_id, published = publication
        if (completed_at, run_id) > latest:
            kept.append(publication)
        elif (completed_at, run_id) == latest and _repeats_current(published, state):
            continue  # the latest run again, as it was (a streaming run's heartbeat)
        elif completed_at <= state["current_since"] or not _repeats_current(published, state):
            return None
    return kept


def _repeats_current(published: OutputLineage, state: Mapping[str, Any]) -> bool:
    """Whether a run published the output's current edge set (by facets, else by links)."""
    if state.get("facet_digest") is not None and published.facet_digest() == state["facet_digest"]:
        return True
    return bool(link_set_digest(published.link_set()) == state["edge_set"])


SET_FIELDS = (
    "id", "target_dataset_id", "producer", "origin", "run_id", "run_state", "valid_from",
    "valid_to", "observed_at", "source_key", "edges", "links", "version",
)  # fmt: skip


SET_TYPES = (
    "int8", "int4", "text", "text", "text", "text", "timestamptz", "timestamptz",
    "timestamptz", "text", "int4", "text", "int8",
)  # fmt: skip


@dataclass
class EdgeSet:
    """An edge set to insert: one producer's links into one dataset over an interval."""

    target_id: int
    producer: str
    links: LinkSet
    run_id: str | None
    valid_from: datetime | None
    valid_to: datetime | None = None
    source_key: str | None = None  # declared sets only

    def row(self, set_id: int, ids: dict[DatasetRef, int], version: int) -> tuple[Any, ...]:
        observed = self.source_key is None
        return (
            set_id, self.target_id, self.producer,
            (EdgeOrigin.OBSERVED if observed else EdgeOrigin.DECLARED).value,
            self.run_id, "COMPLETE" if observed else None, self.valid_from, self.valid_to,
            self.valid_from if observed else None, self.source_key, len(self.links),
            links_text(self.links, ids), version,
        )  # fmt: skip


def links_text(links: Iterable[Link] | PlainLinks, ids: dict[DatasetRef, int]) -> str:
    """The links of a set as compact JSON, in a fixed order (equal sets, equal text)."""
    if isinstance(links, PlainLinks):
        return _plain_text(links, ids)
    rows = []
    for source, target, kind, subtype in sorted(links, key=link_key):
        for column in (source.column, target.column):
            if column is not None and len(column) > COLUMN_LENGTH:
                raise LineageError(
                    f"a column name in lineage into {target.dataset.name} is longer than "
                    f"{COLUMN_LENGTH} characters; shorten it in the producer"
                )
        rows.append([ids[source.dataset], source.column, target.column, kind.value, subtype.value])
    return event_json.compact(rows, native=True)  # ints and strings: json.dumps' very text


def _plain_text(links: PlainLinks, ids: dict[DatasetRef, int]) -> str:
    """`links_text` of PlainLinks: their rows are in `link_key` order already."""
    if any(len(r[2]) > COLUMN_LENGTH or len(r[3]) > COLUMN_LENGTH for r in links.rows):
        raise LineageError(
            f"a column name in lineage into {links.output.name} is longer than "
            f"{COLUMN_LENGTH} characters; shorten it in the producer"
        )
    source_ids: dict[tuple[str, str], int] = {}
    rows = []
    for namespace, name, source_column, target_column, kind, subtype in links.rows:
        source = source_ids.get((namespace, name))
        if source is None:
            source = source_ids[(namespace, name)] = ids[DatasetRef(namespace, name)]
        rows.append([source, source_column, target_column, kind, subtype])
    return event_json.compact(rows, native=True)


def link_sources(links: LinkSet) -> set[DatasetRef]:
    """The datasets the links of a set come from."""
    if isinstance(links, PlainLinks):
        return links.sources()
    return {link[0].dataset for link in links}


def link_set_digest(links: Iterable[Link] | PlainLinks) -> str:
    """Order-independent digest of an edge set: equal sets of links, equal digests."""
    if isinstance(links, PlainLinks):
        output = links.output
        plain = sorted(
            "\x1f".join(
                (ns, name, column or "\x00", output.namespace, output.name, target or "\x00",
                 kind, subtype)
            )
            for ns, name, column, target, kind, subtype in links.rows
        )  # fmt: skip
        return hashlib.sha256("\x1e".join(plain).encode()).hexdigest()
    texts = sorted(
        "\x1f".join(
            (
                s.dataset.namespace,
                s.dataset.name,
                s.column or "\x00",
                t.dataset.namespace,
                t.dataset.name,
                t.column or "\x00",
                str(kind),
                str(subtype),
            )
        )
        for s, t, kind, subtype in links
    )
    return hashlib.sha256("\x1e".join(texts).encode()).hexdigest()


_SET_COLUMNS = (
    lineage_edge_sets.c.id,
    lineage_edge_sets.c.target_dataset_id,
    lineage_edge_sets.c.producer,
    lineage_edge_sets.c.origin,
    lineage_edge_sets.c.run_id,
    lineage_edge_sets.c.run_state,
    lineage_edge_sets.c.valid_from,
    lineage_edge_sets.c.valid_to,
    lineage_edge_sets.c.observed_at,
    lineage_edge_sets.c.links,
)


def set_rows(conn: Connection, where: Any) -> list[tuple[Any, ...]]:
    query = sa.select(*_SET_COLUMNS).order_by(lineage_edge_sets.c.id)
    if where is not None:
        query = query.where(where)
    return [tuple(r) for r in conn.execute(query)]


def close_current(conn: Connection, closes: list[tuple[datetime, str, int]], version: int) -> int:
    """End the current observed set of each (producer, target); the edges they held."""
    if not closes:
        return 0
    if conn.dialect.name == "postgresql":  # one statement for the batch
        ended = conn.exec_driver_sql(
            "UPDATE lineage_edge_sets AS s SET valid_to = k.at, version = %(version)s "
            "FROM json_to_recordset(%(closes)s::json) AS k(at timestamptz, producer text, "
            "target int) WHERE s.producer = k.producer AND s.target_dataset_id = k.target "
            "AND s.origin = %(observed)s AND s.valid_to IS NULL RETURNING s.edges",
            {
                "version": version,
                "closes": json_rows(("at", "producer", "target"), closes),
                "observed": EdgeOrigin.OBSERVED.value,
            },
        )
        return sum(int(edges) for (edges,) in ended)
    total = 0
    for at, producer, target in closes:
        where = (
            (lineage_edge_sets.c.producer == producer)
            & (lineage_edge_sets.c.target_dataset_id == target)
            & (lineage_edge_sets.c.origin == EdgeOrigin.OBSERVED.value)
            & lineage_edge_sets.c.valid_to.is_(None)
        )
        total += int(
            conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(lineage_edge_sets.c.edges), 0)).where(where)
            ).scalar_one()
        )
        conn.execute(lineage_edge_sets.update().where(where).values(valid_to=at, version=version))
    return total


def delete_observed_sets(conn: Connection, pairs: list[tuple[str, int]]) -> int:
    """Delete every observed set of each (producer, target id); how many rows went."""
    if not pairs:
        return 0
    if conn.dialect.name == "postgresql":  # one statement for them all
        deleted = conn.exec_driver_sql(
            "DELETE FROM lineage_edge_sets AS s USING json_to_recordset(%(pairs)s::json) "
            "AS k(producer text, target int) WHERE s.producer = k.producer "
            "AND s.target_dataset_id = k.target AND s.origin = %(observed)s",
            {
                "pairs": json_rows(("producer", "target"), pairs),
                "observed": EdgeOrigin.OBSERVED.value,
            },
        ).rowcount
        return max(deleted or 0, 0)
    total = 0
    for producer, target in pairs:
        deleted = conn.execute(
            lineage_edge_sets.delete().where(
                lineage_edge_sets.c.producer == producer,
                lineage_edge_sets.c.target_dataset_id == target,
                lineage_edge_sets.c.origin == EdgeOrigin.OBSERVED.value,
            )
        ).rowcount
        total += max(deleted or 0, 0)
    return total


def known_runs(
    conn: Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], datetime | None]:
    """The stored runs among `keys`, with when each completed (None: not, or not yet)."""
    wanted = set(keys)
    if conn.dialect.name == "postgresql":
        rows = conn.exec_driver_sql(
            "SELECT r.job, r.run_id, r.completed_at FROM lineage_runs AS r "
            "JOIN json_to_recordset(%(keys)s::json) AS k(job text, run_id text) "
            "ON r.job = k.job AND r.run_id = k.run_id",
            {"keys": json_rows(("job", "run_id"), wanted)},
        )
        return {(str(job), str(run)): at for job, run, at in rows}
    query = sa.select(lineage_runs.c.job, lineage_runs.c.run_id, lineage_runs.c.completed_at)
    rows = conn.execute(joined_to_keys(query, lineage_runs, ("job", "run_id"), wanted))
    return {(str(job), str(run)): at for job, run, at in rows}


def upsert_runs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert or update every touched run in one statement."""
    upsert_rows(conn, lineage_runs, _RUN_FIELDS, _RUN_TYPES, ("job", "run_id"), rows)


def output_states(
    conn: Connection, keys: list[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    states: dict[tuple[str, int], dict[str, Any]] = {}
    wanted = set(keys)
    if conn.dialect.name == "postgresql":  # one statement: the pairs joined as arrays
        result = conn.exec_driver_sql(
            f"SELECT {', '.join('o.' + c for c in _OUTPUT_FIELDS)} FROM lineage_outputs AS o "
            "JOIN json_to_recordset(%(keys)s::json) AS k(producer text, dataset_id int) "
            "ON o.producer = k.producer AND o.dataset_id = k.dataset_id",
            {"keys": json_rows(("producer", "dataset_id"), wanted)},
        )
        for row in result:
            values = dict(zip(_OUTPUT_FIELDS, row, strict=True))
            key = (str(values.pop("producer")), int(values.pop("dataset_id")))
            states[key] = values
        return states
    query = joined_to_keys(
        sa.select(lineage_outputs), lineage_outputs, ("producer", "dataset_id"), wanted
    )
    for row in conn.execute(query):
        values = row._asdict()
        key = (str(values.pop("producer")), int(values.pop("dataset_id")))
        states[key] = values
    return states


_OUTPUT_FIELDS = (
    "producer", "dataset_id", "edge_set", "facet_digest", "current_since", "last_run_id",
    "last_completed_at", "gap",
)  # fmt: skip


_OUTPUT_TYPES = ("text", "int", "text", "text", "timestamptz", "text", "timestamptz", "text")


_RUN_FIELDS = (
    "job", "run_id", "state", "event_time", "completed_at", "events", "inputs", "outputs",
    "updated_at",
)  # fmt: skip


_RUN_TYPES = ("text", "text", "text", "timestamptz", "timestamptz", "int", "text", "text",
              "timestamptz")  # fmt: skip


def upsert_outputs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    rows = [{f: r.get(f) for f in _OUTPUT_FIELDS} for r in rows]
    key = ("producer", "dataset_id")
    upsert_rows(conn, lineage_outputs, _OUTPUT_FIELDS, _OUTPUT_TYPES, key, rows)


def drop_index(conn: Connection, chunk: Chunk) -> None:
    if not chunk.dropped_index:
        conn.execute(lineage_index.delete())
        chunk.dropped_index = True


def lock_projection(conn: Connection) -> None:
    """Serialise projections: each transaction takes the 'version' row (SQLite: the file)."""
    conn.execute(
        lineage_state.update()
        .where(lineage_state.c.key == "version")
        .values(value=lineage_state.c.value)
    )


def read_state(conn: Connection, key: str) -> int:
    value = conn.execute(
        sa.select(lineage_state.c.value).where(lineage_state.c.key == key)
    ).scalar()
    return int(value or 0)
