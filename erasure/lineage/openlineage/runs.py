"""Runs and their edges: a run publishes lineage only through its terminal COMPLETE event;
START, RUNNING and OTHER events add facets to the same run (merged per run id), and
FAIL/ABORT runs are kept as evidence without edges. A job's runs into one output make a
timeline of edge sets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from erasure.lineage.openlineage import event_json
from erasure.lineage.openlineage.column_facets import (
    Link,
    PlainLinks,
    declared_links,
    link_key,
    output_links,
    plain_links,
)
from erasure.lineage.openlineage.spec import TERMINAL_STATES, RunEvent, RunState, event_id
from erasure.model import DatasetRef, EdgeOrigin, EdgeSubtype, EdgeType, FieldRef, Gap, LineageEdge


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as evidence: its state, when, and what it read and wrote."""

    run_id: str
    job: str  # "<job namespace>/<job name>"
    state: str  # terminal state if any, else the latest event type
    event_time: datetime
    inputs: tuple[DatasetRef, ...]
    outputs: tuple[DatasetRef, ...]
    event_ids: tuple[str, ...] = ()


@dataclass
class ObservedLineage:
    """Edges published by completed runs, the gaps they leave, and every run seen."""

    edges: list[LineageEdge] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ObservedEvent:
    """What projection reads of one validated event (`observed`).

    Output facets may be msgspec.Raw, their text as msgspec encodes it (`transferable`): a
    worker process hands an event over as a few strings and bytes, and links are decoded
    from them only when a run's facets changed.
    """

    producer: str  # "<job namespace>/<job name>"
    run_id: str
    event_type: RunState | None
    event_time: datetime
    inputs: tuple[DatasetRef, ...]
    outputs: tuple[tuple[DatasetRef, Mapping[str, Any]], ...]  # dataset, its facets
    native: bool  # decoded by msgspec, no float (event_json.Decoded)
    streaming: bool = False  # its job's `jobType` facet says processingType STREAMING

    def __reduce__(self) -> tuple[type[ObservedEvent], tuple[Any, ...]]:
        # A frozen dataclass unpickles field by field through setattr: this is its __init__.
        return ObservedEvent, (
            self.producer, self.run_id, self.event_type, self.event_time, self.inputs,
            self.outputs, self.native, self.streaming,
        )  # fmt: skip


# Bumped whenever `output_links` reads the same facets into other links (2: declared inputs
# a column facet leaves out reach the output): part of `facet_digest`, so a job's next run
# after an upgrade is read again, not taken for a repetition of what the old rules projected.
LINK_RULES = 2
# The output facets links are read from (`output_links`, `OutputLineage.facet_digest`).
_LINK_FACETS = ("columnLineage", "schema")


def observed(event: RunEvent | ObservedEvent) -> ObservedEvent:
    """The parts of `event` projection reads (nothing is copied)."""
    if isinstance(event, ObservedEvent):
        return event
    return _observed(event, [(entry.ref, entry.facets) for entry in event.outputs])


def transferable(event: RunEvent) -> ObservedEvent:
    """`observed(event)` less the output facets links are not read from, those encoded once
    (when native) so the event pickles as text: cheap to send from a worker process."""
    outputs = []
    for entry in event.outputs:
        facets = {name: entry.facets[name] for name in _LINK_FACETS if name in entry.facets}
        if event._native:
            facets = {name: event_json.raw(value) for name, value in facets.items()}
        outputs.append((entry.ref, facets))
    return _observed(event, outputs)


def _observed(
    event: RunEvent, outputs: Sequence[tuple[DatasetRef, Mapping[str, Any]]]
) -> ObservedEvent:
    return ObservedEvent(
        f"{event.job.namespace}/{event.job.name}",
        event.run.run_id,
        event.event_type,
        event.event_time,
        tuple(entry.ref for entry in event.inputs),
        tuple(outputs),
        event._native,
        _streaming(event.job.facets),
    )


def _streaming(job_facets: Mapping[str, Any]) -> bool:
    """The OpenLineage `jobType` job facet's processingType: Flink and Spark Structured
    Streaming jobs say STREAMING, and run for days with no terminal event."""
    job_type = job_facets.get("jobType")
    processing = job_type.get("processingType") if isinstance(job_type, Mapping) else None
    return isinstance(processing, str) and processing.upper() == "STREAMING"


@dataclass
class _MergedRun:
    producer: str
    run_id: str
    inputs: dict[DatasetRef, None]  # in first-seen order
    outputs: dict[DatasetRef, dict[str, Any]]  # dataset -> merged facets
    terminal: ObservedEvent | None
    latest: ObservedEvent
    streaming_since: datetime | None  # a streaming run's first RUNNING event


def _merge_run(events: list[ObservedEvent]) -> _MergedRun:
    ordered = sorted(events, key=lambda e: e.event_time)  # stable: arrival order breaks ties
    inputs: dict[DatasetRef, None] = {}
    outputs: dict[DatasetRef, dict[str, Any]] = {}
    terminal: ObservedEvent | None = None
    running = [e.event_time for e in ordered if e.event_type is RunState.RUNNING]
    for event in ordered:
        inputs.update(dict.fromkeys(event.inputs))
        for ref, facets in event.outputs:
            # Later events win per facet name, as Marquez merges facets of a run.
            outputs.setdefault(ref, {}).update(facets)
        if event.event_type in TERMINAL_STATES:
            terminal = event
    last = ordered[-1]
    streaming = running[0] if running and any(e.streaming for e in ordered) else None
    return _MergedRun(last.producer, last.run_id, inputs, outputs, terminal, last, streaming)


class OutputLineage:
    """What one completed run says about one of its outputs: links, or a gap without columns.

    Read lazily: a run that repeats its job's facets is recognised by `facet_digest` alone,
    and its links are never built.
    """

    __slots__ = ("_facets", "_inputs", "_native", "_plain", "_producer", "_read_links", "output")

    def __init__(
        self,
        output: DatasetRef,
        facets: Mapping[str, Any],
        inputs: Sequence[DatasetRef],
        producer: str,
        *,
        native: bool = False,
    ) -> None:
        self.output = output
        self._facets = facets  # values may be msgspec.Raw (`transferable`)
        self._inputs = inputs
        self._producer = producer
        self._native = native  # the facets were decoded by msgspec (event_json)
        self._read_links: tuple[tuple[Link, ...], Gap | None] | None = None
        self._plain: PlainLinks | None = None

    @property
    def links(self) -> tuple[Link, ...]:
        """Distinct links, in facet order."""
        return self._read()[0]

    @property
    def gap(self) -> Gap | None:
        if self._plain is not None:
            return None  # read from a well-formed `fields` facet: columns are known
        return self._read()[1]

    def link_set(self) -> frozenset[Link] | PlainLinks:
        """The distinct links as the store digests and writes them: `PlainLinks` when they
        come from a well-formed `fields` facet naming every declared input (no object per
        link), else the links."""
        if self._plain is None and self._read_links is None:
            plain = plain_links(
                self.output, {"columnLineage": event_json.unraw(self._facets.get("columnLineage"))}
            )
            if plain is not None and not declared_links(self.output, self._inputs, plain):
                self._plain = plain  # else the declared inputs it leaves out are added below
        if self._plain is not None:
            return self._plain
        return frozenset(self.links)

    def facet_digest(self) -> str:
        """Digest of everything the links are read from: equal digests, equal links."""
        columns, schema = self._facets.get("columnLineage"), self._facets.get("schema")
        if not self._native:  # the standard library spells them: msgspec.Raw decoded first
            columns, schema = event_json.unraw(columns), event_json.unraw(schema)
        basis = [LINK_RULES, columns, schema, [r.qualified for r in self._inputs], self._producer]
        # Key order as sent: a producer repeats its own order, and a digest that differs only
        # by order makes the links be read and compared, never a wrong answer.
        return hashlib.sha256(event_json.digest_text(basis, native=self._native)).hexdigest()

    def _read(self) -> tuple[tuple[Link, ...], Gap | None]:
        if self._read_links is None:
            facets = {name: event_json.unraw(value) for name, value in self._facets.items()}
            self._read_links = output_links(self._producer, self.output, facets, self._inputs)
        return self._read_links


@dataclass(frozen=True, slots=True)
class RunLineage:
    """One run: its summary as evidence and, when it completed, the lineage it published."""

    summary: RunSummary
    producer: str  # "<job namespace>/<job name>"
    # When its edges were published: the COMPLETE event's time, or a streaming run's first
    # RUNNING (it may never end, and its end moves nothing); None: no edges (a batch run
    # that failed, was aborted, or is still open).
    completed_at: datetime | None
    outputs: tuple[OutputLineage, ...] = ()


def run_lineage(
    events: Sequence[RunEvent | ObservedEvent], event_ids: Sequence[str] = ()
) -> RunLineage:
    """Merge the events of one run (same job and run id) into its summary and lineage."""
    parts = [observed(e) for e in events]
    run = _merge_run(parts)
    state_event = run.terminal or run.latest
    state = state_event.event_type.value if state_event.event_type else RunState.OTHER.value
    summary = RunSummary(
        run_id=run.run_id,
        job=run.producer,
        state=state,
        event_time=state_event.event_time,
        inputs=tuple(run.inputs),
        outputs=tuple(run.outputs),
        event_ids=tuple(event_ids),
    )
    if run.streaming_since is not None:
        # A streaming job (Flink, Spark Structured Streaming) writes while RUNNING, for days:
        # its edges are published from then, however it ends (it wrote until it did).
        published = run.streaming_since
    elif run.terminal is not None and run.terminal.event_type is RunState.COMPLETE:
        published = run.terminal.event_time
    else:
        # FAIL/ABORT outputs were not (reliably) written; START alone says nothing
        return RunLineage(summary, run.producer, None)
    inputs = tuple(run.inputs)
    native = all(e.native for e in parts)
    outputs = tuple(
        OutputLineage(o, facets, inputs, run.producer, native=native)
        for o, facets in run.outputs.items()
    )
    return RunLineage(summary, run.producer, published, outputs)


def runs_from_events(events: Iterable[RunEvent]) -> list[RunLineage]:
    """Group events by run (duplicates ignored) and merge each run, in first-seen order."""
    seen: set[str] = set()
    by_run: dict[tuple[str, str, str], list[RunEvent]] = {}
    ids: dict[tuple[str, str, str], list[str]] = {}
    for event in events:
        identity = event_id(event)
        if identity in seen:
            continue
        seen.add(identity)
        key = (event.job.namespace, event.job.name, event.run.run_id)
        by_run.setdefault(key, []).append(event)
        ids.setdefault(key, []).append(identity)
    return [run_lineage(run_events, ids[key]) for key, run_events in by_run.items()]


def link_edge(
    producer: str,
    run_id: str,
    link: Link,
    valid_from: datetime | None,
    valid_to: datetime | None,
) -> LineageEdge:
    """The observed edge for one link, valid over [valid_from, valid_to)."""
    source, target, kind, subtype = link
    return LineageEdge(
        source=source,
        target=target,
        type=kind,
        subtype=subtype,
        origin=EdgeOrigin.OBSERVED,
        producer=producer,
        run_id=run_id,
        run_state=RunState.COMPLETE.value,
        valid_from=valid_from,
        valid_to=valid_to,
        observed_at=valid_from,
    )


def edges_from_events(events: Iterable[RunEvent]) -> ObservedLineage:
    """Merge events per run and publish the edges of completed runs (duplicates ignored).

    Each completed run's edges as it published them (observed_at = its COMPLETE), with no
    validity interval; `timeline_edges` gives the point-in-time view.
    """
    result = ObservedLineage()
    edges: dict[LineageEdge, None] = {}
    gaps: dict[Gap, None] = {}
    for run in runs_from_events(events):
        result.runs.append(run.summary)
        for output in run.outputs:
            for source, target, kind, subtype in output.links:
                edge = LineageEdge(
                    source=source,
                    target=target,
                    type=kind,
                    subtype=subtype,
                    origin=EdgeOrigin.OBSERVED,
                    producer=run.producer,
                    run_id=run.summary.run_id,
                    run_state=RunState.COMPLETE.value,
                    observed_at=run.completed_at,
                )
                edges[edge] = None
            if output.gap is not None:
                gaps[output.gap] = None
    result.edges = list(edges)
    result.gaps = list(gaps)
    return result


Publication = tuple[datetime, str, frozenset[Link]]  # (completed at, run id, links)


def timeline(
    publications: Iterable[Publication],
) -> list[tuple[frozenset[Link], str, datetime, datetime | None]]:
    """Validity intervals of one producer's edge sets into one output.

    Each completed run supersedes the producer's previous edges into that output: runs in a
    row that publish the same set extend one interval (no new edges); a run that publishes
    another set ends the previous one at its time (valid_to) and opens its own. Returns
    (links, opening run id, valid_from, valid_to or None while current).
    """
    ordered = sorted(publications, key=lambda p: (p[0], p[1]))
    out: list[tuple[frozenset[Link], str, datetime, datetime | None]] = []
    current: tuple[frozenset[Link], str, datetime] | None = None
    for completed_at, run_id, links in ordered:
        if current is not None and current[0] == links:
            continue
        if current is not None:
            out.append((current[0], current[1], current[2], completed_at))
        current = (links, run_id, completed_at)
    if current is not None:
        out.append((current[0], current[1], current[2], None))
    return out


def timeline_edges(runs: Iterable[RunLineage]) -> ObservedLineage:
    """The point-in-time view of observed lineage: every run, and edges with their intervals.

    A later COMPLETE of the same job supersedes the job's earlier edges into the outputs it
    wrote again (valid_to = its time); gaps are those of each output's latest completed run.
    """
    result = ObservedLineage()
    series: dict[tuple[str, DatasetRef], list[Publication]] = {}
    latest_gap: dict[tuple[str, DatasetRef], tuple[datetime, Gap | None]] = {}
    for run in runs:
        result.runs.append(run.summary)
        if run.completed_at is None:
            continue
        for output in run.outputs:
            key = (run.producer, output.output)
            series.setdefault(key, []).append(
                (run.completed_at, run.summary.run_id, frozenset(output.links))
            )
            if key not in latest_gap or latest_gap[key][0] <= run.completed_at:
                latest_gap[key] = (run.completed_at, output.gap)
    edges: dict[LineageEdge, None] = {}
    for (producer, _), publications in series.items():
        for links, run_id, since, until in timeline(publications):
            for link in sorted(links, key=link_key):
                edges[link_edge(producer, run_id, link, since, until)] = None
    result.edges = list(edges)
    gaps = dict.fromkeys(g for _, g in latest_gap.values() if g is not None)
    result.gaps = sorted(gaps, key=lambda g: (g.dataset or "", g.detail))  # as the store does
    return result


def attempt_edges(runs: Iterable[RunSummary]) -> list[LineageEdge]:
    """Table-level edges of the runs that published none (FAIL, ABORT, still open): every
    input a run listed into every output it listed.

    A failed or partial run may have written rows before it ended, and a FAIL after a
    COMPLETE withdraws what the run published: the rows stay. Each edge is valid over the
    empty interval [t, t) at the run's latest event, so no point-in-time view counts it; the
    erasure view (`graph.RetainedView`) keeps it for its output's retention.
    """
    edges: dict[LineageEdge, None] = {}
    for run in runs:
        if run.state == RunState.COMPLETE.value or not run.inputs:
            continue
        for output in run.outputs:
            target = FieldRef(output, None)
            for source in run.inputs:
                edge = LineageEdge(
                    source=FieldRef(source, None),
                    target=target,
                    type=EdgeType.DIRECT,  # unknown: over-stating a disclosure is the safe error
                    subtype=EdgeSubtype.UNKNOWN,
                    origin=EdgeOrigin.OBSERVED,
                    producer=run.job,
                    run_id=run.run_id,
                    run_state=run.state,
                    valid_from=run.event_time,
                    valid_to=run.event_time,
                    observed_at=run.event_time,
                )
                edges[edge] = None
    return list(edges)
