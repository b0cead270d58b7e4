"""The persistent, incremental lineage store: raw events in, projected edge intervals out.

Ingest validates each OpenLineage event, stores it raw once (content hash, immutable) and
projects it in the same transaction: the run's state goes to `lineage_runs`; a COMPLETE
publishes the run's edges into each output, superseding the same job's earlier edges into
that output (their `valid_to` becomes the new run's time). A run that publishes the edge set
its job already has only moves `lineage_outputs.last_*`: a year of repeated runs costs no
edge rows. FAIL/ABORT runs are evidence without edges. Malformed events are quarantined
with their reason. Declared lineage (SQL, rebuild SQL, dbt) is stored per source and parsed
again only when the source's digest changes.

Plans read the projection through `LineageStore.graph()`: the columnar index persisted in
`lineage_index`, plus the edge sets changed since it was built (`lineage_edge_sets.version`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence, Sized
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Connection

from erasure.errors import LineageError
from erasure.lineage import event_json
from erasure.lineage.openlineage import (
    EventElement,
    EventItem,
    ObservedEvent,
    OutputLineage,
    RunEvent,
    RunLineage,
    RunSummary,
    decoded_element,
    event_id,
    event_text,
    link_key,
    parse_decoded,
    read_event_elements,
    run_lineage,
    timeline,
)
from erasure.model import DatasetRef, EdgeOrigin, FieldRef, Gap, LineageEdge
from erasure.store.database import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import (
    COLUMN_LENGTH,
    LINEAGE_JOB_LENGTH,
    LINEAGE_RUN_ID_LENGTH,
    lineage_datasets,
    lineage_edge_sets,
    lineage_events,
    lineage_index,
    lineage_outputs,
    lineage_quarantine,
    lineage_runs,
    lineage_sources,
    lineage_state,
)

if TYPE_CHECKING:  # numpy, which the index needs, is imported only to read or build one
    from erasure.lineage.index import ColumnarEdges, StoredLineageGraph

BATCH_SIZE = 2_000  # events per transaction
MAX_QUARANTINED_BODY = 1024 * 1024  # characters of a refused body kept for inspection
_IN_CHUNK = 500  # values per IN (...) list
_DATASET_COLUMNS = (lineage_datasets.c.id, lineage_datasets.c.namespace, lineage_datasets.c.name)
# Persist a fresh index once this many edge rows changed since the stored one.
REINDEX_AFTER = 20_000
_INDEX_ROW = 1

_Link = tuple[FieldRef, FieldRef, Any, Any]  # (source, target, EdgeType, EdgeSubtype)


class QuarantinedEvent(BaseModel):
    """A refused event: where it came from, why, and its text."""

    id: int
    received_at: datetime
    origin: str
    reason: str
    body: str


class IngestReport(BaseModel):
    """What one ingest did; per-event outcomes in input order (`results`)."""

    received: int = 0
    stored: int = 0
    duplicates: int = 0
    quarantined: int = 0
    runs: int = 0  # runs whose state the new events changed
    edges_opened: int = 0
    edges_closed: int = 0
    results: list[dict[str, Any]] = []  # {"event_id", "stored"} or {"error"}
    touched: list[dict[str, Any]] = []  # runs the new events changed: run_id, job, state, outputs

    def merge(self, other: IngestReport) -> None:
        for name in ("received", "stored", "duplicates", "quarantined", "runs"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.edges_opened += other.edges_opened
        self.edges_closed += other.edges_closed
        self.results.extend(other.results)
        self.touched.extend(other.touched)


class PurgeReport(BaseModel):
    cutoff: datetime
    events: int
    runs: int
    edges: int
    quarantined: int


@dataclass(frozen=True)
class DeclaredSource:
    """One declared lineage source: its key, what it is, a digest, and how to parse it."""

    key: str  # e.g. "sql:/abs/path/marts.x.sql", "rebuild:warehouse/marts.x"
    kind: str  # "sql" | "rebuild_sql" | "dbt_manifest"
    digest: str  # of everything the parse depends on
    parse: Callable[[], tuple[list[LineageEdge], list[Gap]]]


@dataclass
class _Incoming:
    """One event on its way in: parsed, refused (`error`), or an element not yet validated."""

    origin: str
    event: RunEvent | ObservedEvent | None  # observed: validated in a worker process
    error: str | None
    text: str
    element: EventElement | None = None
    identity: str | None = None  # its event id, once known

    def validate(self) -> None:
        """Validate a pending element (once it is known not to be stored)."""
        if self.element is None:
            return
        item, self.element = self.element.parse(), None
        self.text = item.text
        if isinstance(item.parsed, LineageError):
            self.error = str(item.parsed)
        else:
            self.event = item.parsed


@dataclass
class _Chunk:
    """One transaction's worth of work, and what it changed."""

    report: IngestReport = field(default_factory=IngestReport)
    version: int | None = None  # set once the chunk changes an edge
    dropped_index: bool = False


class LineageStore:
    """The lineage tables of one erasure store."""

    def __init__(self, store: Store, *, batch_size: int = BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._store = store
        self._batch = batch_size
        self._ids: dict[DatasetRef, int] = {}
        self._refs: dict[int, DatasetRef] = {}
        self._backfilled = False
        # Threads sharing one store (the API server's) take turns: the id cache is theirs.
        self._writing = threading.Lock()

    @property
    def store(self) -> Store:
        return self._store

    # -- ingest -------------------------------------------------------------------------------

    def ingest(
        self, events: Iterable[RunEvent | EventItem | EventElement], *, origin: str = "api"
    ) -> IngestReport:
        """Store and project events: parsed ones, file items that may be errors, or elements
        validated only if they are not stored yet."""
        self._ensure_backfilled()
        batches = _batches(events, origin, self._batch)
        if not isinstance(events, Sized) or len(events) > self._batch:
            batches = _read_ahead(batches)
        return self._ingest_batches(batches)

    def _ingest_batches(self, batches: Generator[list[_Incoming]]) -> IngestReport:
        report = IngestReport()
        with _collector_paused(), closing(batches):  # closing: the reader stops with us
            for chunk in batches:
                report.merge(self._ingest_chunk(chunk))
                del chunk  # gone before the next is handed over, and before the collector
        return report

    def ingest_json(self, data: Any, *, origin: str = "api") -> IngestReport:
        """Ingest decoded JSON: one event object, or an array of them (Marquez's batch)."""
        items = data if isinstance(data, list) else [data]
        decoded = [(event_json.Decoded(item, False), "") for item in items]
        elements = list(_json_items(decoded, origin, isinstance(data, list)))
        return self.ingest(elements, origin=origin)

    def ingest_body(self, body: bytes, *, origin: str = "api") -> IngestReport:
        """Ingest an HTTP body: one event object, or a JSON array of them (Marquez's batch).

        Each element is decoded, hashed and stored as the text it was sent in. A body that is
        not JSON at all is quarantined whole and raises LineageError with the reason.
        """
        with _collector_paused():
            try:
                elements, many = event_json.decode_event_body(body)
            except LineageError as exc:
                self.quarantine(origin, str(exc), body.decode("utf-8", errors="replace"))
                raise
            pending = list(_json_items(elements, origin, many))
            del elements
            report = self.ingest(pending, origin=origin)
            del pending  # the batch goes before the collector is back, or it would walk it
        return report

    def ingest_file(self, path: Path, *, scope: str = "files", workers: int = 0) -> IngestReport:
        """Ingest an event file; malformed elements are quarantined and counted, not fatal.

        `workers`: processes to fork that decode, hash and validate a large JSON-lines file
        while this one writes (`ingest_workers`); the same result as 0, which reads it here.
        The file's size and modification time are recorded, so a plan whose catalog names
        the same file does not read it again (`ingest_file_if_changed`).
        """
        signature = _file_signature(path)
        judged = None
        if workers:
            from erasure.lineage.ingest_workers import judged_batches

            self._ensure_backfilled()  # before the file is opened, or a failure leaves it open
            judged = judged_batches(path, self._batch, workers)
        if judged is None:
            report = self.ingest(read_event_elements(path), origin=str(path))
        else:
            report = self._ingest_batches(judged)
        values = {
            "kind": "openlineage_file",
            "scope": scope,
            "digest": signature,
            "gaps": "[]",
            "edges": report.edges_opened,
            "seen_at": datetime.now(UTC),
        }
        with (
            store_errors(self._store, "record an ingested event file"),
            self._store.engine.begin() as conn,
        ):
            insert = conflict_insert(lineage_sources, self._store.dialect)
            conn.execute(
                insert.values(source_key=_file_key(path), **values).on_conflict_do_update(
                    index_elements=["source_key"], set_=values
                )
            )
        return report

    def ingest_file_if_changed(self, path: Path, *, scope: str) -> IngestReport:
        """Ingest an event file the catalog names unless it is unchanged since last time."""
        with (
            store_errors(self._store, "read the lineage sources"),
            self._store.engine.connect() as conn,
        ):
            seen = conn.execute(
                sa.select(lineage_sources.c.digest).where(
                    lineage_sources.c.source_key == _file_key(path)
                )
            ).scalar()
        if seen == _file_signature(path):
            return IngestReport()
        return self.ingest_file(path, scope=scope)

    def quarantine(self, origin: str, reason: str, body: str) -> None:
        """Keep a body that is not an event at all (not JSON, too large) with its reason."""
        with (
            store_errors(self._store, "quarantine an OpenLineage event"),
            self._store.engine.begin() as conn,
        ):
            conn.execute(lineage_quarantine.insert(), [_quarantine_row(origin, reason, body)])

    def quarantined(self, limit: int = 100) -> list[QuarantinedEvent]:
        """The newest refused events first."""
        query = sa.select(lineage_quarantine).order_by(lineage_quarantine.c.id.desc()).limit(limit)
        with (
            store_errors(self._store, "read the lineage quarantine"),
            self._store.engine.connect() as conn,
        ):
            return [QuarantinedEvent.model_validate(row._asdict()) for row in conn.execute(query)]

    def counts(self) -> dict[str, int]:
        """Rows per lineage table: what `erasure lineage status` shows."""
        tables = {
            "events": lineage_events,
            "runs": lineage_runs,
            "edges": lineage_edge_sets,
            "datasets": lineage_datasets,
            "quarantined": lineage_quarantine,
            "sources": lineage_sources,  # declared sources and event files, by digest
        }
        with (
            store_errors(self._store, "count the lineage rows"),
            self._store.engine.connect() as conn,
        ):
            out = {
                name: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
                for name, t in tables.items()
            }
            total = sa.func.coalesce(sa.func.sum(lineage_edge_sets.c.edges), 0)
            out["edges"] = int(conn.execute(sa.select(total)).scalar_one())
            out["current_edges"] = int(
                conn.execute(
                    sa.select(total).where(lineage_edge_sets.c.valid_to.is_(None))
                ).scalar_one()
            )
            out["version"] = _state(conn, "version")
        return out

    def _ingest_chunk(self, items: list[_Incoming]) -> IngestReport:
        with self._writing:
            return self._ingest_locked(items)

    def _ingest_locked(self, items: list[_Incoming]) -> IngestReport:
        ids = [i.identity for i in items if i.identity is not None]
        with (
            store_errors(self._store, "look up OpenLineage events"),
            self._store.engine.connect() as conn,
        ):
            # Before the lock, in a read of its own: a batch that is stored already writes
            # nothing, so it takes no lock and costs no commit to disk.
            known = _stored_ids(conn, ids)
        try:
            with (
                store_errors(self._store, "store OpenLineage events"),
                self._store.engine.begin() as conn,
            ):
                chunk = _Chunk()
                if any(i.identity not in known for i in items):  # to store or quarantine
                    _lock(conn)
                    known |= _stored_ids(conn, [i for i in ids if i not in known])
                self._store_chunk(conn, chunk, items, known)
                return chunk.report
        except BaseException:
            self._ids.clear()  # ids handed out in the rolled-back transaction are gone
            self._refs.clear()
            raise

    def _store_chunk(
        self, conn: Connection, chunk: _Chunk, items: list[_Incoming], known: set[str]
    ) -> None:
        """Store the events not stored yet and project them; stored ones are only counted.

        `known`: which of their ids are stored, looked up under the projection lock unless
        all are. An element already stored is never validated again: re-reading a file
        costs its decoding and hashing.
        """
        report = chunk.report
        report.received = len(items)
        base = datetime.now(UTC)
        rows: dict[str, dict[str, Any]] = {}
        events: dict[str, RunEvent | ObservedEvent] = {}
        quarantine: list[dict[str, Any]] = []
        for position, item in enumerate(items):
            if item.identity is not None and item.identity in known:
                report.results.append({"event_id": item.identity, "stored": False})
                continue
            item.validate()
            if item.event is None:
                quarantine.append(_quarantine_row(item.origin, item.error or "?", item.text))
                report.results.append({"error": item.error})
                continue
            try:
                received = base + timedelta(microseconds=position)
                row = event_row(item.event, received, item.text, identity=item.identity)
            except LineageError as exc:
                body = _dump(item.event.raw) if isinstance(item.event, RunEvent) else item.text
                quarantine.append(_quarantine_row(item.origin, str(exc), body))
                report.results.append({"error": str(exc)})
                continue
            report.results.append({"event_id": row["event_id"], "stored": False})
            if row["event_id"] not in rows:
                rows[row["event_id"]] = row
                events[row["event_id"]] = item.event
        if quarantine:
            conn.execute(lineage_quarantine.insert(), quarantine)
        report.quarantined = len(quarantine)
        _insert_events(conn, list(rows.values()))
        new = set(rows)
        for result in report.results:
            if result.get("event_id") in new:
                result["stored"] = True
                new.discard(result["event_id"])  # a duplicate within the batch is not new
        fresh = {r["event_id"] for r in report.results if r.get("stored")}
        report.stored = len(fresh)
        report.duplicates = report.received - report.quarantined - report.stored
        by_run: dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]] = {}
        for identity in fresh:
            event = events[identity]
            key = _run_key(event)
            by_run.setdefault(key, []).append((identity, event))
        if by_run:
            self._project(conn, chunk, by_run)

    # -- projection ---------------------------------------------------------------------------

    def _project(
        self,
        conn: Connection,
        chunk: _Chunk,
        by_run: dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]],
        *,
        load_all: bool = False,
    ) -> None:
        """Merge each touched run with its stored events, record it, publish what completed."""
        known = {} if load_all else _known_runs(conn, list(by_run))
        prior = _stored_events(conn, [k for k in by_run if load_all or k in known])
        runs: list[RunLineage] = []
        now = datetime.now(UTC)
        run_rows = []
        for key, fresh in by_run.items():
            merged = dict(prior.get(key, []))
            merged.update(fresh)
            ordered = sorted(merged.items(), key=lambda kv: kv[1].event_time)
            run = run_lineage([e for _, e in ordered], [i for i, _ in ordered])
            runs.append(run)
            chunk.report.touched.append(
                {
                    "run_id": key[1],
                    "job": key[0],
                    "state": run.summary.state,
                    "outputs": [r.qualified for r in run.summary.outputs],
                    "output_names": [r.name for r in run.summary.outputs],
                }
            )
            run_rows.append(
                {
                    "job": key[0],
                    "run_id": key[1],
                    "state": run.summary.state,
                    "event_time": run.summary.event_time,
                    "completed_at": run.completed_at,
                    "events": len(merged),
                    "inputs": _dump([r.qualified for r in run.summary.inputs]),
                    "outputs": _dump([r.qualified for r in run.summary.outputs]),
                    "updated_at": now,
                }
            )
        _upsert_runs(conn, run_rows)
        chunk.report.runs += len(run_rows)
        # A run that had completed before was published in its place then: an event of it
        # now (a later COMPLETE, a FAIL after the COMPLETE) means replaying where it went.
        republished = {key for key, completed_at in known.items() if completed_at is not None}
        withdrawn = [
            (run.producer, output)
            for run in runs
            if run.completed_at is None and (run.producer, run.summary.run_id) in republished
            for output in run.summary.outputs
        ]
        completed = [r for r in runs if r.completed_at is not None]
        self._publish(conn, chunk, completed, republished=republished, withdrawn=withdrawn)

    def _publish(
        self,
        conn: Connection,
        chunk: _Chunk,
        runs: list[RunLineage],
        *,
        republished: set[tuple[str, str]],
        withdrawn: list[tuple[str, DatasetRef]],
    ) -> None:
        """Apply completed runs to their producers' output timelines (set by set); replay
        the outputs of runs that had completed before (`republished`) and of runs that no
        longer complete (`withdrawn`: a FAIL after the COMPLETE).

        A run whose facets digest like the current set's is a repetition: its links are not
        even read. Otherwise its links are compared by their own digest.
        """
        series: dict[tuple[str, DatasetRef], list[tuple[datetime, str, OutputLineage]]] = {}
        for run in runs:
            assert run.completed_at is not None
            for published in run.outputs:
                series.setdefault((run.producer, published.output), []).append(
                    (run.completed_at, run.summary.run_id, published)
                )
        if not series and not withdrawn:
            return
        ids = self._dataset_ids(conn, {o for _, o in series} | {o for _, o in withdrawn})
        states = _output_states(conn, [(producer, ids[output]) for producer, output in series])
        opened: list[_Set] = []
        closes: list[tuple[datetime, str, int]] = []  # (at, producer, target id): end current
        output_rows: list[dict[str, Any]] = []
        rebuild: list[tuple[str, DatasetRef]] = []
        for (producer, output), publications in series.items():
            publications.sort(key=lambda p: (p[0], p[1]))
            target = ids[output]
            state = states.get((producer, target))
            if state is not None:
                again = any((producer, run_id) in republished for _, run_id, _ in publications)
                kept = None if again else _without_late_repetitions(publications, state)
                if kept is None:
                    rebuild.append((producer, output))  # late or ended again: replay it
                    continue
                if not kept:
                    continue  # only late runs that change no interval
                publications = kept
            pending: _Set | None = None
            for completed_at, run_id, published in publications:
                facets = published.facet_digest()
                if state is None or facets != state.get("facet_digest"):
                    links = frozenset(published.links)
                    digest = link_set_digest(links)
                    if state is None or digest != state["edge_set"]:
                        if pending is not None:
                            pending.valid_to = completed_at  # superseded within this chunk
                        elif state is not None:
                            closes.append((completed_at, producer, target))
                        pending = _Set(target, producer, links, run_id, completed_at)
                        opened.append(pending)
                        state = {**(state or {}), "edge_set": digest, "current_since": completed_at}
                    gap = published.gap
                    state = {
                        **state,
                        "facet_digest": facets,
                        "gap": None if gap is None else gap.model_dump_json(),
                    }
                state = {**state, "last_run_id": run_id, "last_completed_at": completed_at}
            assert state is not None
            output_rows.append({"producer": producer, "dataset_id": target, **state})
        if opened or closes:
            version = self._bump(conn, chunk)
            chunk.report.edges_closed += _close_current(conn, closes, version)
            chunk.report.edges_opened += self._insert_sets(conn, opened, version)
        _upsert_outputs(conn, output_rows)
        for producer, output in dict.fromkeys(rebuild + withdrawn):
            self._replay(conn, chunk, producer, output, ids[output])

    def _replay(
        self, conn: Connection, chunk: _Chunk, producer: str, output: DatasetRef, output_id: int
    ) -> None:
        """Recompute one producer's edge sets into one output from every completed run."""
        run_ids = [
            str(r)
            for r in conn.execute(
                sa.select(lineage_runs.c.run_id).where(
                    lineage_runs.c.job == producer, lineage_runs.c.completed_at.is_not(None)
                )
            ).scalars()
        ]
        stored = _stored_events(conn, [(producer, r) for r in run_ids])
        publications = []
        latest: tuple[datetime, str, Gap | None] | None = None
        for events in stored.values():
            ordered = sorted(events, key=lambda kv: kv[1].event_time)
            run = run_lineage([e for _, e in ordered], [i for i, _ in ordered])
            if run.completed_at is None:
                continue
            for out in run.outputs:
                if out.output == output:
                    at = (run.completed_at, run.summary.run_id)
                    publications.append((*at, frozenset(out.links)))
                    if latest is None or (latest[0], latest[1]) <= at:
                        latest = (*at, out.gap)
        version = self._bump(conn, chunk)
        removed = conn.execute(
            lineage_edge_sets.delete().where(
                lineage_edge_sets.c.producer == producer,
                lineage_edge_sets.c.target_dataset_id == output_id,
                lineage_edge_sets.c.origin == EdgeOrigin.OBSERVED.value,
            )
        ).rowcount
        intervals = timeline(publications)
        sets = [
            _Set(output_id, producer, links, r, since, until)
            for links, r, since, until in intervals
        ]
        chunk.report.edges_opened += self._insert_sets(conn, sets, version)
        chunk.report.edges_closed += max(removed or 0, 0)
        _drop_index(conn, chunk)  # rows were deleted: the next plan rebuilds the index whole
        if latest is None or not intervals:  # no completed run writes it any more
            conn.execute(
                lineage_outputs.delete().where(
                    lineage_outputs.c.producer == producer,
                    lineage_outputs.c.dataset_id == output_id,
                )
            )
            return
        links, _, since, _ = intervals[-1]
        _upsert_outputs(
            conn,
            [
                {
                    "producer": producer,
                    "dataset_id": output_id,
                    "edge_set": link_set_digest(links),
                    "facet_digest": None,
                    "current_since": since,
                    "last_run_id": latest[1],
                    "last_completed_at": latest[0],
                    "gap": None if latest[2] is None else latest[2].model_dump_json(),
                }
            ],
        )

    def _bump(self, conn: Connection, chunk: _Chunk) -> int:
        if chunk.version is None:
            conn.execute(
                lineage_state.update()
                .where(lineage_state.c.key == "version")
                .values(value=lineage_state.c.value + 1)
            )
            chunk.version = _state(conn, "version")
        return chunk.version

    def _insert_sets(self, conn: Connection, sets: Sequence[_Set], version: int) -> int:
        """Insert edge sets (ids taken under the projection lock); how many edges they hold."""
        if not sets:
            return 0
        ids = self._dataset_ids(conn, {link[0].dataset for s in sets for link in s.links})
        start = int(conn.execute(sa.select(sa.func.max(lineage_edge_sets.c.id))).scalar() or 0)
        rows = [s.row(start + k + 1, ids, version) for k, s in enumerate(sets)]
        if conn.dialect.name == "postgresql" and _copy_cursor(conn) is not None:
            _copy(conn, "lineage_edge_sets", _SET_FIELDS, _SET_TYPES, rows)
        else:
            conn.execute(
                lineage_edge_sets.insert(), [dict(zip(_SET_FIELDS, r, strict=True)) for r in rows]
            )
        return sum(len(s.links) for s in sets)

    def _dataset_ids(self, conn: Connection, refs: Iterable[DatasetRef]) -> dict[DatasetRef, int]:
        """Store ids of datasets, adding the new ones (the projection lock is held)."""
        if not self._ids:
            self._load_all_ids(conn)
        known = self._ids
        # Not `set - keys`: that walks every cached key, however few are wanted.
        unknown = {r for r in refs if r not in known}
        for part in _chunks(sorted(unknown), _IN_CHUNK):
            # Another process may have stored some since this cache was read (the lock is
            # held now): take theirs rather than insert them again.
            names = {r.name for r in part}
            query = sa.select(*_DATASET_COLUMNS).where(lineage_datasets.c.name.in_(names))
            self._remember(conn.execute(query))
        missing = sorted(r for r in unknown if r not in known)
        for part in _chunks(missing, _IN_CHUNK):
            self._remember(
                conn.execute(
                    lineage_datasets.insert()
                    .values([r.as_dict() for r in part])
                    .returning(*_DATASET_COLUMNS)
                )
            )
        return known

    def _load_all_ids(self, conn: Connection) -> None:
        self._remember(conn.execute(sa.select(*_DATASET_COLUMNS)))

    def _remember(self, rows: Iterable[Any]) -> None:
        """Cache (id, namespace, name) rows."""
        for id_, namespace, name in rows:
            ref = DatasetRef(namespace, name)
            self._ids[ref] = int(id_)
            self._refs[int(id_)] = ref

    def _dataset_refs(self, conn: Connection, ids: set[int]) -> dict[int, DatasetRef]:
        if any(i not in self._refs for i in ids):
            self._load_all_ids(conn)
        return self._refs

    # -- events stored before this projection existed -------------------------------------------

    def _ensure_backfilled(self) -> None:
        if self._backfilled:
            return
        with (
            store_errors(self._store, "read the lineage projection state"),
            self._store.engine.connect() as conn,
        ):
            done = _state(conn, "backfilled")
        if not done:
            self.reproject(unless_backfilled=True)
        self._backfilled = True

    def reproject(self, *, unless_backfilled: bool = False) -> int:
        """Project every stored event again, from scratch (observed edges only); runs seen.
        `unless_backfilled`: not if another process did the first backfill meanwhile."""
        keys_query = sa.select(lineage_events.c.job, lineage_events.c.run_id).distinct()
        with (
            store_errors(self._store, "reproject the stored OpenLineage events"),
            self._store.engine.begin() as conn,
        ):
            _lock(conn)
            if unless_backfilled and _state(conn, "backfilled"):
                return 0
            chunk = _Chunk()
            conn.execute(
                lineage_edge_sets.delete().where(
                    lineage_edge_sets.c.origin == EdgeOrigin.OBSERVED.value
                )
            )
            conn.execute(lineage_outputs.delete())
            conn.execute(lineage_runs.delete())
            _drop_index(conn, chunk)
            self._bump(conn, chunk)
            keys = [(str(r.job), str(r.run_id)) for r in conn.execute(keys_query)]
            for part in _chunks(keys, self._batch):
                self._project(conn, chunk, {k: [] for k in part}, load_all=True)
            conn.execute(
                lineage_state.update().where(lineage_state.c.key == "backfilled").values(value=1)
            )
        return len(keys)

    # -- declared lineage -----------------------------------------------------------------------

    def sync_declared(self, scope: str, sources: Sequence[DeclaredSource]) -> list[Gap]:
        """Store the declared sources of one catalog (`scope`), parsing only changed ones.

        A changed source's edges that it no longer declares end (valid_to = now) and new ones
        start now; a source seen for the first time has always been valid; a source gone from
        the catalog ends all its edges. Returns the gaps of every source.
        """
        now = datetime.now(UTC)
        with (
            store_errors(self._store, "store declared lineage"),
            self._store.engine.begin() as conn,
        ):
            known = _declared(conn, scope)
            if _unchanged(known, sources):
                return [g for s in sources for g in _gaps(known[s.key].gaps)]
            _lock(conn)
            # Read again under the lock: a plan running beside this one may have stored the
            # same sources since (inserting them again would break their key).
            known = _declared(conn, scope)
            if _unchanged(known, sources):
                return [g for s in sources for g in _gaps(known[s.key].gaps)]
            chunk = _Chunk()
            gaps: list[Gap] = []
            for source in sources:
                row = known.pop(source.key, None)
                if row is not None and row.digest == source.digest:
                    gaps += _gaps(row.gaps)
                    continue
                edges, source_gaps = source.parse()
                gaps += source_gaps
                self._replace_declared(conn, chunk, source.key, edges, now, first=row is None)
                values = {
                    "kind": source.kind,
                    "scope": scope,
                    "digest": source.digest,
                    "gaps": _dump([g.model_dump(mode="json") for g in source_gaps]),
                    "edges": len(edges),
                    "seen_at": now,
                }
                if row is None:
                    conn.execute(lineage_sources.insert().values(source_key=source.key, **values))
                else:
                    conn.execute(
                        lineage_sources.update()
                        .where(lineage_sources.c.source_key == source.key)
                        .values(**values)
                    )
            for gone in known:
                self._replace_declared(conn, chunk, gone, [], now, first=False)
                conn.execute(lineage_sources.delete().where(lineage_sources.c.source_key == gone))
            return gaps

    def _replace_declared(
        self,
        conn: Connection,
        chunk: _Chunk,
        key: str,
        edges: list[LineageEdge],
        now: datetime,
        *,
        first: bool,
    ) -> None:
        """Per target dataset: keep an unchanged set, end a changed one, open the new one."""
        by_target: dict[tuple[DatasetRef, str], set[_Link]] = {}
        for e in edges:
            link = (e.source, e.target, e.type, e.subtype)
            by_target.setdefault((e.target.dataset, e.producer), set()).add(link)
        ids = self._dataset_ids(conn, {t for t, _ in by_target})
        current = {
            (int(r.target_dataset_id), str(r.producer)): (int(r.id), str(r.links))
            for r in conn.execute(
                sa.select(
                    lineage_edge_sets.c.id,
                    lineage_edge_sets.c.target_dataset_id,
                    lineage_edge_sets.c.producer,
                    lineage_edge_sets.c.links,
                ).where(
                    lineage_edge_sets.c.source_key == key, lineage_edge_sets.c.valid_to.is_(None)
                )
            )
        }
        self._dataset_ids(conn, {link[0].dataset for links in by_target.values() for link in links})
        wanted = {(ids[t], p): (t, p, frozenset(links)) for (t, p), links in by_target.items()}
        ends: list[int] = []
        sets: list[_Set] = []
        start = None if first else now
        for target_key, (set_id, _) in current.items():
            if target_key not in wanted:
                ends.append(set_id)
        for target_key, (_, producer, links) in wanted.items():
            existing = current.get(target_key)
            if existing is not None:
                if existing[1] == _links_text(links, ids):
                    continue
                ends.append(existing[0])
            sets.append(_Set(target_key[0], producer, links, None, start, None, key))
        if not ends and not sets:
            return
        version = self._bump(conn, chunk)
        for part in _chunks(ends, _IN_CHUNK):
            conn.execute(
                lineage_edge_sets.update()
                .where(lineage_edge_sets.c.id.in_(part))
                .values(valid_to=now, version=version)
            )
        self._insert_sets(conn, sets, version)

    # -- reading --------------------------------------------------------------------------------

    def graph(self) -> StoredLineageGraph:
        """The projected graph: the persisted index plus every edge changed since it was built."""
        from erasure.lineage.index import ColumnarEdges, StoredLineageGraph

        self._ensure_backfilled()
        with (
            store_errors(self._store, "read the lineage index"),
            self._store.engine.connect() as conn,
        ):
            version = _state(conn, "version")
            row = conn.execute(
                sa.select(lineage_index).where(lineage_index.c.id == _INDEX_ROW)
            ).first()
            columns: ColumnarEdges | None = None
            if row is not None and int(row.version) <= version:
                columns = ColumnarEdges.from_bytes(bytes(row.blob))
                if int(row.version) == version:
                    return StoredLineageGraph(columns, snapshot=str(row.snapshot))
                changed = _set_rows(conn, lineage_edge_sets.c.version > int(row.version))
                columns = columns.updated(changed, self._datasets(conn))
                if len(changed) < REINDEX_AFTER:
                    return StoredLineageGraph(columns)
            else:
                columns = ColumnarEdges.from_rows(_set_rows(conn, None), self._datasets(conn))
        graph = StoredLineageGraph(columns)
        self._save_index(columns, graph.snapshot_id(), version)
        return graph

    def refresh_index(self) -> str:
        """Build and persist the index now (after a bulk ingest); returns the snapshot id."""
        return self.graph().snapshot_id()

    def refresh_index_if_due(self) -> bool:
        """Persist a fresh index when the next plan would otherwise build one: none stored, or
        at least REINDEX_AFTER edge sets changed since (fewer are applied as plans read it,
        and loading the index only to apply them here saved nothing). True if it did."""
        with (
            store_errors(self._store, "read the lineage index"),
            self._store.engine.connect() as conn,
        ):
            version = _state(conn, "version")
            built = conn.execute(
                sa.select(lineage_index.c.version).where(lineage_index.c.id == _INDEX_ROW)
            ).scalar()
            if built is not None and int(built) <= version:
                changed = conn.execute(
                    sa.select(sa.func.count())
                    .select_from(lineage_edge_sets)
                    .where(lineage_edge_sets.c.version > int(built))
                ).scalar_one()
                if int(changed) < REINDEX_AFTER:
                    return False
        self.graph()
        return True

    def _save_index(self, columns: ColumnarEdges, snapshot: str, version: int) -> None:
        values = {
            "version": version,
            "snapshot": snapshot,
            "edges": columns.size,
            "built_at": datetime.now(UTC),
            "blob": columns.to_bytes(),
        }
        with (
            store_errors(self._store, "save the lineage index"),
            self._store.engine.begin() as conn,
        ):
            # One statement: plans building the index beside each other all save it, the
            # newest version wins (a read, then an insert, broke the row's key).
            conn.execute(
                conflict_insert(lineage_index, self._store.dialect)
                .values(id=_INDEX_ROW, **values)
                .on_conflict_do_update(
                    index_elements=["id"],
                    set_=values,
                    where=lineage_index.c.version < version,
                )
            )

    def _datasets(self, conn: Connection) -> dict[int, DatasetRef]:
        return {
            int(r.id): DatasetRef(r.namespace, r.name)
            for r in conn.execute(sa.select(lineage_datasets))
        }

    def output_gaps(self) -> list[Gap]:
        """Gaps of each producer's latest completed run into each output (table-only lineage)."""
        with (
            store_errors(self._store, "read the lineage gaps"),
            self._store.engine.connect() as conn,
        ):
            rows = conn.execute(
                sa.select(lineage_outputs.c.gap).where(lineage_outputs.c.gap.is_not(None))
            ).scalars()
            gaps = [Gap.model_validate_json(str(text)) for text in rows]
        return sorted(gaps, key=lambda g: (g.dataset or DatasetRef("", ""), g.detail))

    def unpublished_runs(self) -> list[RunSummary]:
        """Runs with inputs and outputs that published no edges (FAIL, ABORT, a FAIL after
        the COMPLETE, still open), as their events tell: the erasure view keeps what they
        may have written. One run per job and datasets, the latest: a job that fails every
        night reads one run's events, not a year of them."""
        runs = lineage_runs.c
        query = (
            sa.select(runs.job, runs.run_id, runs.inputs, runs.outputs)
            .where(runs.completed_at.is_(None), runs.outputs != "[]", runs.inputs != "[]")
            .order_by(runs.event_time.desc(), runs.run_id.desc())
        )
        with (
            store_errors(self._store, "read the unpublished lineage runs"),
            self._store.engine.connect() as conn,
        ):
            latest: dict[tuple[str, str, str], tuple[str, str]] = {}
            for row in conn.execute(query):
                shape = (str(row.job), str(row.inputs), str(row.outputs))
                latest.setdefault(shape, (str(row.job), str(row.run_id)))
            keys = list(latest.values())
            stored = _stored_events(conn, keys)
        summaries = []
        for key in keys:
            ordered = sorted(stored.get(key, []), key=lambda kv: kv[1].event_time)
            if ordered:
                summaries.append(run_lineage([e for _, e in ordered]).summary)
        return summaries

    def runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs seen, newest first: job, run id, state, time, datasets."""
        query = sa.select(lineage_runs).order_by(lineage_runs.c.event_time.desc())
        if limit is not None:
            query = query.limit(limit)
        with (
            store_errors(self._store, "read the lineage runs"),
            self._store.engine.connect() as conn,
        ):
            return [_run(r) for r in conn.execute(query)]

    def completed_writes(
        self, dataset: DatasetRef, after: datetime, until: datetime
    ) -> list[dict[str, Any]]:
        """Runs that reported COMPLETE writing `dataset`, completed in (after, until]: job,
        run id, completion time and inputs, earliest first (a rebuild's proof of a fresh
        write, erasure.verify)."""
        name = _dump(dataset.qualified)  # as it stands in the outputs' JSON list
        query = (
            sa.select(lineage_runs)
            .where(
                lineage_runs.c.state == "COMPLETE",
                lineage_runs.c.completed_at > after,
                lineage_runs.c.completed_at <= until,
                lineage_runs.c.outputs.contains(name, autoescape=True),
            )
            .order_by(lineage_runs.c.completed_at)
        )
        with (
            store_errors(self._store, "read the lineage runs"),
            self._store.engine.connect() as conn,
        ):
            runs = [_run(r) for r in conn.execute(query)]
        return [run for run in runs if dataset.qualified in run["outputs"]]

    # -- retention ------------------------------------------------------------------------------

    def purge(self, retention_days: int, *, now: datetime | None = None) -> PurgeReport:
        """Delete what is older than the retention: raw events, finished runs, ended edges.

        Current edges stay whatever their age (they are today's lineage); an edge that ended
        before the cutoff can no longer answer a closure inside the retention window.
        """
        if retention_days < 1:
            raise LineageError("lineage retention must be at least 1 day")
        cutoff = (now or datetime.now(UTC)) - timedelta(days=retention_days)
        with (
            store_errors(self._store, "purge old lineage"),
            self._store.engine.begin() as conn,
        ):
            _lock(conn)
            chunk = _Chunk()
            events = conn.execute(
                lineage_events.delete().where(lineage_events.c.event_time < cutoff)
            ).rowcount
            runs = conn.execute(
                lineage_runs.delete().where(lineage_runs.c.event_time < cutoff)
            ).rowcount
            edges = int(
                conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(lineage_edge_sets.c.edges), 0)).where(
                        lineage_edge_sets.c.valid_to < cutoff
                    )
                ).scalar_one()
            )
            conn.execute(lineage_edge_sets.delete().where(lineage_edge_sets.c.valid_to < cutoff))
            quarantined = conn.execute(
                lineage_quarantine.delete().where(lineage_quarantine.c.received_at < cutoff)
            ).rowcount
            if edges:
                self._bump(conn, chunk)
                _drop_index(conn, chunk)
        return PurgeReport(
            cutoff=cutoff,
            events=max(events or 0, 0),
            runs=max(runs or 0, 0),
            edges=max(edges or 0, 0),
            quarantined=max(quarantined or 0, 0),
        )


# -- rows -------------------------------------------------------------------------------------


def _without_late_repetitions(
    publications: list[tuple[datetime, str, OutputLineage]], state: Mapping[str, Any]
) -> list[tuple[datetime, str, OutputLineage]] | None:
    """The publications (in time order) less the late ones that change no interval, or None
    when the producer's series must be replayed from every stored run.

    A late run (completed before the output's latest) whose links are those of the current
    edge set and which completed inside that set's interval (after `current_since`: at the
    same instant, run ids would decide which run opened it) only repeats it: the timeline
    is the same with or without it: a late day of a job whose lineage did not change costs
    what a new day does. Any other late run needs the replay. (A run published before, the
    latest among them, is replayed before this is asked: `_publish`'s `republished`.)
    """
    latest = (state["last_completed_at"], state["last_run_id"])
    kept = []
    for publication in publications:
        completed_at, run_id, published = publication
        if (completed_at, run_id) > latest:
            kept.append(publication)
        elif completed_at <= state["current_since"] or not _repeats_current(published, state):
            return None
    return kept


def _repeats_current(published: OutputLineage, state: Mapping[str, Any]) -> bool:
    """Whether a run published the output's current edge set (by facets, else by links)."""
    if state.get("facet_digest") is not None and published.facet_digest() == state["facet_digest"]:
        return True
    return bool(link_set_digest(frozenset(published.links)) == state["edge_set"])


def event_row(
    event: RunEvent | ObservedEvent,
    received_at: datetime,
    text: str = "",
    *,
    identity: str | None = None,
) -> dict[str, Any]:
    """The `lineage_events` row of an event (its id, if known, as `identity`; an observed
    event's with its text); LineageError when it cannot be stored as is."""
    job, run_id = _run_key(event)
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
        # The text as received when there is one (a file's line), else the event re-serialised
        # in its own key order; either reads back to the same event and content hash.
        "raw": text,
        "received_at": received_at,
    }


_SET_FIELDS = (
    "id", "target_dataset_id", "producer", "origin", "run_id", "run_state", "valid_from",
    "valid_to", "observed_at", "source_key", "edges", "links", "version",
)  # fmt: skip


_SET_TYPES = (
    "int8", "int4", "text", "text", "text", "text", "timestamptz", "timestamptz",
    "timestamptz", "text", "int4", "text", "int8",
)  # fmt: skip


@dataclass
class _Set:
    """An edge set to insert: one producer's links into one dataset over an interval."""

    target_id: int
    producer: str
    links: frozenset[_Link]
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
            _links_text(self.links, ids), version,
        )  # fmt: skip


def _links_text(links: Iterable[_Link], ids: dict[DatasetRef, int]) -> str:
    """The links of a set as compact JSON, in a fixed order (equal sets, equal text)."""
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


def link_set_digest(links: Iterable[_Link]) -> str:
    """Order-independent digest of an edge set: equal sets of links, equal digests."""
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


def _set_rows(conn: Connection, where: Any) -> list[tuple[Any, ...]]:
    query = sa.select(*_SET_COLUMNS).order_by(lineage_edge_sets.c.id)
    if where is not None:
        query = query.where(where)
    return [tuple(r) for r in conn.execute(query)]


def _file_key(path: Path) -> str:
    return f"openlineage:{path.resolve()}"


def _file_signature(path: Path) -> str:
    """Size and modification time of an event file (its content is too large to hash often)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise LineageError(f"{path}: cannot read OpenLineage events: {exc}") from exc
    text = f"{stat.st_size}:{stat.st_mtime_ns}:{_file_key(path)}"
    return hashlib.sha256(text.encode()).hexdigest()


def _incoming(event: RunEvent | EventItem | EventElement, origin: str) -> _Incoming:
    """The event with its id (hashed here, outside the transaction) or why it has none."""
    if isinstance(event, EventElement):
        if event.error is not None:
            return _Incoming(event.where, None, str(event.error), event.text)
        try:
            identity = event.event_id()
        except LineageError as exc:
            reason = f"{event.where}: {exc}" if event.located else str(exc)
            return _Incoming(event.where, None, reason, event.text or _dump(event.value))
        return _Incoming(event.where, None, None, event.text, element=event, identity=identity)
    if isinstance(event, RunEvent):
        parsed, item = event, _Incoming(origin, event, None, "")
    elif isinstance(event.parsed, LineageError):
        return _Incoming(event.where, None, str(event.parsed), event.text)
    else:
        parsed = event.parsed
        item = _Incoming(event.where, parsed, None, event.text)
    with suppress(LineageError):  # if it cannot be hashed, event_row says why (quarantined)
        item.identity = event_id(parsed)
    return item


def _batches(
    events: Iterable[RunEvent | EventItem | EventElement], origin: str, size: int
) -> Generator[list[_Incoming]]:
    chunk: list[_Incoming] = []
    for event in events:
        chunk.append(_incoming(event, origin))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


_Batch = TypeVar("_Batch")


def _read_ahead(batches: Iterator[_Batch]) -> Generator[_Batch]:
    """The batches, the next one read (decoded and hashed) in a thread while this one is
    stored: the database's time overlaps reading instead of following it. The reader's
    errors are raised here; stopping early stops it."""
    ready: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not hand_over((True, batch)):
                    return
            hand_over((False, None))
        except BaseException as exc:  # handed to the consumer, which raises it
            hand_over((False, exc))

    reader = threading.Thread(target=read, name="lineage-ingest-reader", daemon=True)
    reader.start()
    try:
        while True:
            more, value = ready.get()
            if more:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        stop.set()
        reader.join()


def _json_items(
    elements: Iterable[tuple[event_json.Decoded, str]], origin: str, many: bool
) -> Iterator[EventElement]:
    """Decoded elements of a body, not yet validated."""
    for number, (decoded, text) in enumerate(elements):
        where = f"{origin}[{number}]" if many else origin
        yield decoded_element(where, decoded, text, located=False)


_COLLECTOR = threading.Lock()
_PAUSED = 0  # ingests running with the collector paused


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while events are decoded and stored.

    Decoding an event makes hundreds of dicts and lists; with the collector on, a full
    collection every few events walked every live object (the process, the batch being
    built, the report) and took half of ingest's time. Decoded JSON holds no cycles: a
    batch leaves about five cyclic objects (its transaction's), which wait for the collector
    to be back, once the last ingest running in the process is done. (Collecting even the
    young generations after each batch cost a tenth of a second: the batch read ahead is
    young and alive.)
    """
    global _PAUSED
    with _COLLECTOR:
        if _PAUSED == 0 and not gc.isenabled():
            paused = False  # someone else turned it off: leave it to them
        else:
            _PAUSED += 1
            paused = True
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _COLLECTOR:
                _PAUSED -= 1
                if _PAUSED == 0:
                    gc.enable()


def _quarantine_row(origin: str, reason: str, body: str) -> dict[str, Any]:
    return {
        "received_at": datetime.now(UTC),
        "origin": origin[:1024],
        "reason": reason,
        # A lone surrogate escape decodes to text no database encoding takes: keep it escaped.
        "body": body[:MAX_QUARANTINED_BODY].encode("utf-8", "backslashreplace").decode("utf-8"),
    }


def _stored_ids(conn: Connection, ids: Sequence[str]) -> set[str]:
    """Which of these event ids are stored, in one statement on Postgres.

    Every writer holds the projection lock (`_lock`), so the ids not found here cannot be
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
    for part in _chunks(sorted(set(ids)), _IN_CHUNK):
        stored.update(
            str(i)
            for i in conn.execute(
                sa.select(lineage_events.c.event_id).where(lineage_events.c.event_id.in_(part))
            ).scalars()
        )
    return stored


def _insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert events known not to be stored (`_stored_ids`, under the projection lock)."""
    if rows and conn.dialect.name == "postgresql" and _copy_cursor(conn) is not None:
        _copy(
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


def _copy_cursor(conn: Connection) -> Any:
    driver = conn.connection.driver_connection
    cursor = driver.cursor() if driver is not None else None
    return cursor if cursor is not None and hasattr(cursor, "copy") else None


def _copy(
    conn: Connection,
    table: str,
    names: Sequence[str],
    types: Sequence[str],
    rows: Sequence[Sequence[Any]],
) -> None:
    """psycopg 3's binary COPY FROM STDIN: values go as they are, nothing to escape; an order
    of magnitude above row-by-row INSERTs, and five times text COPY for event-sized rows."""
    cursor = _copy_cursor(conn)
    with cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(list(types))
        for row in rows:
            copy.write_row(row)


def _close_current(conn: Connection, closes: list[tuple[datetime, str, int]], version: int) -> int:
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
                "closes": _json_rows(("at", "producer", "target"), closes),
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


def _known_runs(
    conn: Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], datetime | None]:
    """The stored runs among `keys`, with when each completed (None: not, or not yet)."""
    wanted = set(keys)
    if conn.dialect.name == "postgresql":
        rows = conn.exec_driver_sql(
            "SELECT r.job, r.run_id, r.completed_at FROM lineage_runs AS r "
            "JOIN json_to_recordset(%(keys)s::json) AS k(job text, run_id text) "
            "ON r.job = k.job AND r.run_id = k.run_id",
            {"keys": _json_rows(("job", "run_id"), wanted)},
        )
        return {(str(job), str(run)): at for job, run, at in rows}
    query = sa.select(lineage_runs.c.job, lineage_runs.c.run_id, lineage_runs.c.completed_at)
    rows = conn.execute(_joined_to_keys(query, lineage_runs, ("job", "run_id"), wanted))
    return {(str(job), str(run)): at for job, run, at in rows}


def _joined_to_keys(
    query: sa.Select[Any], table: sa.Table, columns: Sequence[str], keys: Iterable[Sequence[Any]]
) -> sa.Select[Any]:
    """SQLite: `query` over `table` joined to the keys bound as one JSON array (json_each),
    one primary-key probe each; IN lists per column made it probe every combination."""
    key = sa.func.json_each(sa.bindparam("keys", _json_rows(columns, keys))).table_valued("value")
    match = [table.c[c] == sa.func.json_extract(key.c.value, f"$.{c}") for c in columns]
    return query.select_from(key).join(table, sa.and_(*match))


def _stored_events(
    conn: Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]]:
    out: dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]] = {}
    wanted = set(keys)
    for part in _chunks(sorted({k[1] for k in keys}), _IN_CHUNK):
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
        decoded = event_json.decode(row.raw)
        return parse_decoded(decoded.value, native=decoded.native)
    except (LineageError, json.JSONDecodeError) as exc:
        raise LineageError(
            f"stored OpenLineage event {row.event_id} cannot be read ({exc}); restore it from "
            "a backup or delete it"
        ) from None


def _upsert_runs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert or update every touched run in one statement."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        _pg_upsert(conn, "lineage_runs", _RUN_FIELDS, _RUN_TYPES, ("job", "run_id"), rows)
        return
    insert = conflict_insert(lineage_runs, conn.dialect.name)
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=["job", "run_id"],
            set_={c: insert.excluded[c] for c in rows[0] if c not in ("job", "run_id")},
        ),
        rows,
    )


def _output_states(
    conn: Connection, keys: list[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    states: dict[tuple[str, int], dict[str, Any]] = {}
    wanted = set(keys)
    if conn.dialect.name == "postgresql":  # one statement: the pairs joined as arrays
        result = conn.exec_driver_sql(
            f"SELECT {', '.join('o.' + c for c in _OUTPUT_FIELDS)} FROM lineage_outputs AS o "
            "JOIN json_to_recordset(%(keys)s::json) AS k(producer text, dataset_id int) "
            "ON o.producer = k.producer AND o.dataset_id = k.dataset_id",
            {"keys": _json_rows(("producer", "dataset_id"), wanted)},
        )
        for row in result:
            values = dict(zip(_OUTPUT_FIELDS, row, strict=True))
            key = (str(values.pop("producer")), int(values.pop("dataset_id")))
            states[key] = values
        return states
    query = _joined_to_keys(
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


def _pg_upsert(
    conn: Connection,
    table: str,
    fields: Sequence[str],
    types: Sequence[str],
    key: Sequence[str],
    rows: list[dict[str, Any]],
) -> None:
    """INSERT ... SELECT FROM json_to_recordset ON CONFLICT DO UPDATE: one statement per
    batch, its rows one JSON parameter (encoded in C, where arrays were built value by value
    in Python and took longer than the statement)."""
    columns = ", ".join(fields)
    shape = ", ".join(f"{f} {t}" for f, t in zip(fields, types, strict=True))
    updates = ", ".join(f"{f} = EXCLUDED.{f}" for f in fields if f not in key)
    conn.exec_driver_sql(
        f"INSERT INTO {table} ({columns}) SELECT {columns} "
        f"FROM json_to_recordset(%(rows)s::json) AS r({shape}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}",
        {"rows": _json_rows(fields, ([r.get(f) for f in fields] for r in rows))},
    )


def _json_rows(fields: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows as a JSON array of objects: one bound parameter for json_to_recordset."""
    return event_json.sql_parameter([dict(zip(fields, r, strict=True)) for r in rows])


def _upsert_outputs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    rows = [{k: v for k, v in r.items() if k != "new"} for r in rows]
    if conn.dialect.name == "postgresql":
        _pg_upsert(
            conn, "lineage_outputs", _OUTPUT_FIELDS, _OUTPUT_TYPES, ("producer", "dataset_id"), rows
        )
        return
    rows = [{f: r.get(f) for f in _OUTPUT_FIELDS} for r in rows]
    insert = conflict_insert(lineage_outputs, conn.dialect.name)
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=["producer", "dataset_id"],
            set_={c: insert.excluded[c] for c in rows[0] if c not in ("producer", "dataset_id")},
        ),
        rows,
    )


def _drop_index(conn: Connection, chunk: _Chunk) -> None:
    if not chunk.dropped_index:
        conn.execute(lineage_index.delete())
        chunk.dropped_index = True


def _declared(conn: Connection, scope: str) -> dict[str, Any]:
    """The stored declared sources of `scope`, by key."""
    query = sa.select(lineage_sources).where(lineage_sources.c.scope == scope)
    return {str(r.source_key): r for r in conn.execute(query)}


def _unchanged(known: Mapping[str, Any], sources: Sequence[DeclaredSource]) -> bool:
    """Whether `known` holds exactly `sources`, each with the same digest."""
    keys = {s.key for s in sources}
    return len(known) == len(keys) and all(
        s.key in known and known[s.key].digest == s.digest for s in sources
    )


def _lock(conn: Connection) -> None:
    """Serialise projections: each transaction takes the 'version' row (SQLite: the file)."""
    conn.execute(
        lineage_state.update()
        .where(lineage_state.c.key == "version")
        .values(value=lineage_state.c.value)
    )


def _state(conn: Connection, key: str) -> int:
    value = conn.execute(
        sa.select(lineage_state.c.value).where(lineage_state.c.key == key)
    ).scalar()
    return int(value or 0)


def _gaps(text: str) -> list[Gap]:
    return [Gap.model_validate(g) for g in json.loads(text)]


def _run_key(event: RunEvent | ObservedEvent) -> tuple[str, str]:
    """(job, run id): which run an event belongs to."""
    if isinstance(event, ObservedEvent):
        return event.producer, event.run_id
    return f"{event.job.namespace}/{event.job.name}", event.run.run_id


def _run(row: sa.Row[Any]) -> dict[str, Any]:
    """A `lineage_runs` row as `runs()` and `completed_writes()` return it."""
    return {
        "job": row.job,
        "run_id": row.run_id,
        "state": row.state,
        "event_time": row.event_time,
        "completed_at": row.completed_at,
        "events": row.events,
        "inputs": json.loads(row.inputs),
        "outputs": json.loads(row.outputs),
    }


def _dump(value: Any) -> str:
    """Canonical JSON: the same text `event_id` hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
