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

import json
import threading
from collections.abc import Generator, Iterable, Sequence, Sized
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Connection

from erasure.errors import LineageError
from erasure.lineage.openlineage import (
    EventElement,
    EventItem,
    LastWriter,
    ObservedEvent,
    OutputLineage,
    RunEvent,
    RunLineage,
    RunState,
    RunSummary,
    airflow_dag,
    event_json,
    newest_first,
    read_event_elements,
    run_lineage,
    timeline,
)
from erasure.lineage.store.bulk import (
    IN_CHUNK,
    chunks,
    copy_cursor,
    copy_rows,
    insert_datasets,
    stored_datasets,
)
from erasure.lineage.store.declared import (
    DeclaredSource,
    declared_unchanged,
    stored_declared,
    stored_gaps,
)
from erasure.lineage.store.events import (
    QuarantinedEvent,
    canonical_json,
    event_row,
    insert_events,
    quarantine_row,
    run_key,
    stored_events,
    stored_ids,
)
from erasure.lineage.store.intake import (
    Incoming,
    IngestReport,
    collector_paused,
    file_key,
    file_signature,
    incoming_batches,
    json_items,
    read_ahead,
)
from erasure.lineage.store.projection import (
    SET_FIELDS,
    SET_TYPES,
    Chunk,
    EdgeSet,
    Link,
    close_current,
    delete_observed_sets,
    drop_index,
    known_runs,
    link_set_digest,
    link_sources,
    links_text,
    lock_projection,
    output_states,
    read_state,
    set_rows,
    upsert_outputs,
    upsert_runs,
    without_late_repetitions,
)
from erasure.model import DatasetRef, EdgeOrigin, Gap, LineageEdge
from erasure.store.database import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import (
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
    from erasure.lineage.store.index import ColumnarEdges, StoredLineageGraph


BATCH_SIZE = 2_000  # events per transaction
_DATASET_COLUMNS = (lineage_datasets.c.id, lineage_datasets.c.namespace, lineage_datasets.c.name)
# Persist a fresh index once this many edge rows changed since the stored one.
REINDEX_AFTER = 20_000
_INDEX_ROW = 1


class PurgeReport(BaseModel):
    cutoff: datetime
    events: int
    runs: int
    edges: int
    quarantined: int


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
        batches = incoming_batches(events, origin, self._batch)
        if not isinstance(events, Sized) or len(events) > self._batch:
            batches = read_ahead(batches)
        return self._ingest_batches(batches)

    def _ingest_batches(self, batches: Generator[list[Incoming]]) -> IngestReport:
        report = IngestReport()
        with collector_paused(), closing(batches):  # closing: the reader stops with us
            for chunk in batches:
                report.merge(self._ingest_chunk(chunk))
                del chunk  # gone before the next is handed over, and before the collector
        return report

    def ingest_json(self, data: Any, *, origin: str = "api") -> IngestReport:
        """Ingest decoded JSON: one event object, or an array of them (Marquez's batch)."""
        items = data if isinstance(data, list) else [data]
        decoded = [(event_json.Decoded(item, False), "") for item in items]
        elements = list(json_items(decoded, origin, isinstance(data, list)))
        return self.ingest(elements, origin=origin)

    def ingest_body(self, body: bytes, *, origin: str = "api") -> IngestReport:
        """Ingest an HTTP body: one event object, or a JSON array of them (Marquez's batch).

        Each element is decoded, hashed and stored as its event encoded again. A body that is
        not JSON at all is quarantined whole and raises LineageError with the reason.
        """
        with collector_paused():
            try:
                elements, many = event_json.decode_event_body(body)
            except LineageError as exc:
                self.quarantine(origin, str(exc), body.decode("utf-8", errors="replace"))
                raise
            pending = list(json_items(elements, origin, many))
            del elements
            report = self.ingest(pending, origin=origin)
            del pending  # the batch goes before the collector is back, or it would walk it
        return report

    def ingest_file(self, path: Path, *, scope: str = "files", workers: int = 0) -> IngestReport:
        """Ingest an event file; malformed elements are quarantined and counted, not fatal.

        `workers`: processes to fork that decode, hash and validate a large JSON-lines file
        while this one writes (`workers`); the same result as 0, which reads it here.
        The file's size and modification time are recorded, so a plan whose catalog names
        the same file does not read it again (`ingest_file_if_changed`).
        """
        signature = file_signature(path)
        judged = None
        if workers:
            from erasure.lineage.store.workers import judged_batches

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
                insert.values(source_key=file_key(path), **values).on_conflict_do_update(
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
                    lineage_sources.c.source_key == file_key(path)
                )
            ).scalar()
        if seen == file_signature(path):
            return IngestReport()
        return self.ingest_file(path, scope=scope)

    def quarantine(self, origin: str, reason: str, body: str) -> None:
        """Keep a body that is not an event at all (not JSON, too large) with its reason."""
        with (
            store_errors(self._store, "quarantine an OpenLineage event"),
            self._store.engine.begin() as conn,
        ):
            conn.execute(lineage_quarantine.insert(), [quarantine_row(origin, reason, body)])

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
            out["version"] = read_state(conn, "version")
        return out

    def _ingest_chunk(self, items: list[Incoming]) -> IngestReport:
        with self._writing:
            return self._ingest_locked(items)

    def _ingest_locked(self, items: list[Incoming]) -> IngestReport:
        ids = [i.identity for i in items if i.identity is not None]
        with (
            store_errors(self._store, "look up OpenLineage events"),
            self._store.engine.connect() as conn,
        ):
            # Before the lock, in a read of its own: a batch that is stored already writes
            # nothing, so it takes no lock and costs no commit to disk.
            known = stored_ids(conn, ids)
        try:
            with (
                store_errors(self._store, "store OpenLineage events"),
                self._store.engine.begin() as conn,
            ):
                chunk = Chunk()
                if any(i.identity not in known for i in items):  # to store or quarantine
                    lock_projection(conn)
                    known |= stored_ids(conn, [i for i in ids if i not in known])
                self._store_chunk(conn, chunk, items, known)
                return chunk.report
        except BaseException:
            self._ids.clear()  # ids handed out in the rolled-back transaction are gone
            self._refs.clear()
            raise

    def _store_chunk(
        self, conn: Connection, chunk: Chunk, items: list[Incoming], known: set[str]
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
                quarantine.append(quarantine_row(item.origin, item.error or "?", item.text))
                report.results.append({"error": item.error})
                continue
            try:
                received = base + timedelta(microseconds=position)
                row = event_row(item.event, received, item.text, identity=item.identity)
            except LineageError as exc:
                body = (
                    canonical_json(item.event.raw)
                    if isinstance(item.event, RunEvent)
                    else item.text
                )
                quarantine.append(quarantine_row(item.origin, str(exc), body))
                report.results.append({"error": str(exc)})
                continue
            report.results.append({"event_id": row["event_id"], "stored": False})
            if row["event_id"] not in rows:
                rows[row["event_id"]] = row
                events[row["event_id"]] = item.event
        if quarantine:
            conn.execute(lineage_quarantine.insert(), quarantine)
        report.quarantined = len(quarantine)
        insert_events(conn, list(rows.values()))
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
            key = run_key(event)
            by_run.setdefault(key, []).append((identity, event))
        if by_run:
            self._project(conn, chunk, by_run)

    # -- projection ---------------------------------------------------------------------------

    def _project(
        self,
        conn: Connection,
        chunk: Chunk,
        by_run: dict[tuple[str, str], list[tuple[str, RunEvent | ObservedEvent]]],
        *,
        load_all: bool = False,
    ) -> None:
        """Merge each touched run with its stored events, record it, publish what completed."""
        known = {} if load_all else known_runs(conn, list(by_run))
        prior = stored_events(conn, [k for k in by_run if load_all or k in known])
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
                    "inputs": canonical_json([r.qualified for r in run.summary.inputs]),
                    "outputs": canonical_json([r.qualified for r in run.summary.outputs]),
                    "updated_at": now,
                }
            )
        upsert_runs(conn, run_rows)
        chunk.report.runs += len(run_rows)
        # A run that had completed before was published in its place then: an event of it
        # now that moves or withdraws that place (a later COMPLETE, a FAIL after the
        # COMPLETE) means replaying where it went. A streaming run's heartbeat moves nothing:
        # its repetition is recognised as any run's is, with no replay.
        published_at = {(run.producer, run.summary.run_id): run.completed_at for run in runs}
        republished = {
            key
            for key, completed_at in known.items()
            if completed_at is not None and published_at.get(key) != completed_at
        }
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
        chunk: Chunk,
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
        states = output_states(conn, [(producer, ids[output]) for producer, output in series])
        opened: list[EdgeSet] = []
        closes: list[tuple[datetime, str, int]] = []  # (at, producer, target id): end current
        output_rows: list[dict[str, Any]] = []
        rebuild: list[tuple[str, DatasetRef]] = []
        for (producer, output), publications in series.items():
            publications.sort(key=lambda p: (p[0], p[1]))
            target = ids[output]
            state = states.get((producer, target))
            if state is not None:
                again = any((producer, run_id) in republished for _, run_id, _ in publications)
                kept = None if again else without_late_repetitions(publications, state)
                if kept is None:
                    rebuild.append((producer, output))  # late or ended again: replay it
                    continue
                if not kept:
                    continue  # only late runs that change no interval
                publications = kept
            pending: EdgeSet | None = None
            for completed_at, run_id, published in publications:
                facets = published.facet_digest()
                if state is None or facets != state.get("facet_digest"):
                    links = published.link_set()
                    digest = link_set_digest(links)
                    if state is None or digest != state["edge_set"]:
                        if pending is not None:
                            pending.valid_to = completed_at  # superseded within this chunk
                        elif state is not None:
                            closes.append((completed_at, producer, target))
                        pending = EdgeSet(target, producer, links, run_id, completed_at)
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
            chunk.report.edges_closed += close_current(conn, closes, version)
            chunk.report.edges_opened += self._insert_sets(conn, opened, version)
        upsert_outputs(conn, output_rows)
        replays = dict.fromkeys(rebuild + withdrawn)
        self._replay(conn, chunk, [(producer, output, ids[output]) for producer, output in replays])

    def _replay(
        self, conn: Connection, chunk: Chunk, outputs: list[tuple[str, DatasetRef, int]]
    ) -> None:
        """Recompute producers' edge sets into outputs from every completed run, each
        (producer, output) alone, in a few statements for all of them: a late day replays
        hundreds, and a round of statements each cost more than the replay itself."""
        if not outputs:
            return
        producers = sorted({producer for producer, _, _ in outputs})
        keys: list[tuple[str, str]] = []
        for part in chunks(producers, IN_CHUNK):
            keys += [
                (str(job), str(run_id))
                for job, run_id in conn.execute(
                    sa.select(lineage_runs.c.job, lineage_runs.c.run_id).where(
                        lineage_runs.c.job.in_(part), lineage_runs.c.completed_at.is_not(None)
                    )
                )
            ]
        completed: dict[str, list[RunLineage]] = {}
        for (job, _), events in stored_events(conn, keys).items():
            ordered = sorted(events, key=lambda kv: kv[1].event_time)
            run = run_lineage([e for _, e in ordered], [i for i, _ in ordered])
            if run.completed_at is not None:
                completed.setdefault(job, []).append(run)
        version = self._bump(conn, chunk)
        removed = delete_observed_sets(conn, [(p, output_id) for p, _, output_id in outputs])
        sets: list[EdgeSet] = []
        current: list[dict[str, Any]] = []
        gone: list[tuple[str, int]] = []
        for producer, output, output_id in outputs:
            publications = []
            latest: tuple[datetime, str, Gap | None] | None = None
            for run in completed.get(producer, []):
                assert run.completed_at is not None
                for out in run.outputs:
                    if out.output == output:
                        at = (run.completed_at, run.summary.run_id)
                        publications.append((*at, frozenset(out.links)))
                        if latest is None or (latest[0], latest[1]) <= at:
                            latest = (*at, out.gap)
            intervals = timeline(publications)
            sets += [
                EdgeSet(output_id, producer, links, r, since, until)
                for links, r, since, until in intervals
            ]
            if latest is None or not intervals:  # no completed run writes it any more
                gone.append((producer, output_id))
                continue
            links, _, since, _ = intervals[-1]
            current.append(
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
            )
        chunk.report.edges_opened += self._insert_sets(conn, sets, version)
        chunk.report.edges_closed += removed
        drop_index(conn, chunk)  # rows were deleted: the next plan rebuilds the index whole
        for producer, output_id in gone:
            conn.execute(
                lineage_outputs.delete().where(
                    lineage_outputs.c.producer == producer,
                    lineage_outputs.c.dataset_id == output_id,
                )
            )
        upsert_outputs(conn, current)

    def _bump(self, conn: Connection, chunk: Chunk) -> int:
        if chunk.version is None:
            conn.execute(
                lineage_state.update()
                .where(lineage_state.c.key == "version")
                .values(value=lineage_state.c.value + 1)
            )
            chunk.version = read_state(conn, "version")
        return chunk.version

    def _insert_sets(self, conn: Connection, sets: Sequence[EdgeSet], version: int) -> int:
        """Insert edge sets (ids taken under the projection lock); how many edges they hold."""
        if not sets:
            return 0
        ids = self._dataset_ids(conn, {ref for s in sets for ref in link_sources(s.links)})
        start = int(conn.execute(sa.select(sa.func.max(lineage_edge_sets.c.id))).scalar() or 0)
        rows = [s.row(start + k + 1, ids, version) for k, s in enumerate(sets)]
        if conn.dialect.name == "postgresql" and copy_cursor(conn) is not None:
            copy_rows(conn, "lineage_edge_sets", SET_FIELDS, SET_TYPES, rows)
        else:
            conn.execute(
                lineage_edge_sets.insert(), [dict(zip(SET_FIELDS, r, strict=True)) for r in rows]
            )
        return sum(len(s.links) for s in sets)

    def _dataset_ids(self, conn: Connection, refs: Iterable[DatasetRef]) -> dict[DatasetRef, int]:
        """Store ids of datasets, adding the new ones (the projection lock is held)."""
        if not self._ids:
            self._load_all_ids(conn)
        known = self._ids
        # Not `set - keys`: that walks every cached key, however few are wanted.
        unknown = sorted({r for r in refs if r not in known})
        if unknown:
            # Another process may have stored some since this cache was read (the lock is
            # held now): take theirs rather than insert them again.
            self._remember(stored_datasets(conn, unknown))
            missing = [r for r in unknown if r not in known]
            if missing:
                self._remember(insert_datasets(conn, missing))
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
            done = read_state(conn, "backfilled")
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
            lock_projection(conn)
            if unless_backfilled and read_state(conn, "backfilled"):
                return 0
            chunk = Chunk()
            conn.execute(
                lineage_edge_sets.delete().where(
                    lineage_edge_sets.c.origin == EdgeOrigin.OBSERVED.value
                )
            )
            conn.execute(lineage_outputs.delete())
            conn.execute(lineage_runs.delete())
            drop_index(conn, chunk)
            self._bump(conn, chunk)
            keys = [(str(r.job), str(r.run_id)) for r in conn.execute(keys_query)]
            for part in chunks(keys, self._batch):
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
            known = stored_declared(conn, scope)
            if declared_unchanged(known, sources):
                return [g for s in sources for g in stored_gaps(known[s.key].gaps)]
            lock_projection(conn)
            # Read again under the lock: a plan running beside this one may have stored the
            # same sources since (inserting them again would break their key).
            known = stored_declared(conn, scope)
            if declared_unchanged(known, sources):
                return [g for s in sources for g in stored_gaps(known[s.key].gaps)]
            chunk = Chunk()
            gaps: list[Gap] = []
            for source in sources:
                row = known.pop(source.key, None)
                if row is not None and row.digest == source.digest:
                    gaps += stored_gaps(row.gaps)
                    continue
                edges, source_gaps = source.parse()
                gaps += source_gaps
                self._replace_declared(conn, chunk, source.key, edges, now, first=row is None)
                values = {
                    "kind": source.kind,
                    "scope": scope,
                    "digest": source.digest,
                    "gaps": canonical_json([g.model_dump(mode="json") for g in source_gaps]),
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
        chunk: Chunk,
        key: str,
        edges: list[LineageEdge],
        now: datetime,
        *,
        first: bool,
    ) -> None:
        """Per target dataset: keep an unchanged set, end a changed one, open the new one."""
        by_target: dict[tuple[DatasetRef, str], set[Link]] = {}
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
        sets: list[EdgeSet] = []
        start = None if first else now
        for target_key, (set_id, _) in current.items():
            if target_key not in wanted:
                ends.append(set_id)
        for target_key, (_, producer, links) in wanted.items():
            existing = current.get(target_key)
            if existing is not None:
                if existing[1] == links_text(links, ids):
                    continue
                ends.append(existing[0])
            sets.append(EdgeSet(target_key[0], producer, links, None, start, None, key))
        if not ends and not sets:
            return
        version = self._bump(conn, chunk)
        for part in chunks(ends, IN_CHUNK):
            conn.execute(
                lineage_edge_sets.update()
                .where(lineage_edge_sets.c.id.in_(part))
                .values(valid_to=now, version=version)
            )
        self._insert_sets(conn, sets, version)

    # -- reading --------------------------------------------------------------------------------

    def graph(self) -> StoredLineageGraph:
        """The projected graph: the persisted index plus every edge changed since it was built."""
        from erasure.lineage.store.index import ColumnarEdges, StoredLineageGraph

        self._ensure_backfilled()
        with (
            store_errors(self._store, "read the lineage index"),
            self._store.engine.connect() as conn,
        ):
            version = read_state(conn, "version")
            row = conn.execute(
                sa.select(lineage_index).where(lineage_index.c.id == _INDEX_ROW)
            ).first()
            columns: ColumnarEdges | None = None
            if row is not None and int(row.version) <= version:
                columns = ColumnarEdges.from_bytes(bytes(row.blob))
                if int(row.version) == version:
                    return StoredLineageGraph(columns, snapshot=str(row.snapshot))
                changed = set_rows(conn, lineage_edge_sets.c.version > int(row.version))
                columns = columns.updated(changed, self._datasets(conn))
                if len(changed) < REINDEX_AFTER:
                    return StoredLineageGraph(columns)
            else:
                columns = ColumnarEdges.from_rows(set_rows(conn, None), self._datasets(conn))
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
            version = read_state(conn, "version")
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
            stored = stored_events(conn, keys)
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

    def writers(self, names: Sequence[DatasetRef]) -> list[LastWriter]:
        """Each job's run that last published writing the dataset known by `names` (its
        identity and aliases), newest first, with the Airflow DAG it ran in when its stored
        events say so (declared sources publish no outputs here)."""
        datasets, outputs = lineage_datasets.c, lineage_outputs.c
        query = (
            sa.select(outputs.producer, outputs.last_run_id, outputs.last_completed_at)
            .join(lineage_datasets, datasets.id == outputs.dataset_id)
            .where(
                sa.or_(
                    *[sa.and_(datasets.namespace == n.namespace, datasets.name == n.name)
                      for n in names]
                )
            )
        )  # fmt: skip
        with (
            store_errors(self._store, "read who wrote a dataset"),
            self._store.engine.connect() as conn,
        ):
            rows = list(conn.execute(query))
            keys = [(str(r.producer), str(r.last_run_id)) for r in rows]
            stored = stored_events(conn, keys)
        latest: dict[str, LastWriter] = {}
        for row, key in zip(rows, keys, strict=True):
            # A run whose events were purged still wrote it: a writer no DAG is known of.
            events = [e for _, e in stored.get(key, []) if isinstance(e, RunEvent)]
            known = latest.get(key[0])
            if known is None or known.completed_at < row.last_completed_at:
                latest[key[0]] = LastWriter(
                    key[0], key[1], row.last_completed_at, airflow_dag(events)
                )
        return newest_first(latest.values())

    def completed_writes(
        self, dataset: DatasetRef, after: datetime, until: datetime
    ) -> list[dict[str, Any]]:
        """Runs that reported COMPLETE writing `dataset`, completed in (after, until]: job,
        run id, completion time, inputs, `started_at` (its START event's time; None without
        one) and `dag_id` (the Airflow DAG its events name, `airflow_dag`), earliest first (a
        rebuild's proof of a fresh write, erasure.verify)."""
        name = canonical_json(dataset.qualified)  # as it stands in the outputs' JSON list
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
            runs = [run for run in runs if dataset.qualified in run["outputs"]]
            stored = stored_events(conn, [(r["job"], r["run_id"]) for r in runs])
        found = []
        for run in runs:
            events = [e for _, e in stored.get((run["job"], run["run_id"]), [])]
            runs_events = [e for e in events if isinstance(e, RunEvent)]
            starts = [e.event_time for e in runs_events if e.event_type is RunState.START]
            found.append(
                {
                    **run,
                    "started_at": min(starts) if starts else None,
                    "dag_id": airflow_dag(runs_events),
                }
            )
        return found

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
            lock_projection(conn)
            chunk = Chunk()
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
                drop_index(conn, chunk)
        return PurgeReport(
            cutoff=cutoff,
            events=max(events or 0, 0),
            runs=max(runs or 0, 0),
            edges=max(edges or 0, 0),
            quarantined=max(quarantined or 0, 0),
        )


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
