"""Lineage graph: column-level edges indexed by dataset; forward closure, cycles, coverage.

Edges are kept whole (column level, DIRECT/INDIRECT, subtype, origin, run, validity) because
plans and evidence cite them. Closure works at *dataset* level: every column of a subject's row
is subject data, so a dataset depends on a root as soon as any edge - DIRECT or INDIRECT,
column- or table-level - reaches it.

Validity: an edge counts for closure when it is current (``valid_to`` is None), or, given
``as_of``, when ``valid_from <= as_of < valid_to`` (None = open). Naive datetimes are read as UTC.
An erasure plan asks another question (``RetainedView``): every edge whose output may still
hold rows it wrote, superseded and failed runs' edges included, bounded by output retention.

Speed (the engine is `walk`): datasets are interned to integers. Each validity view gets an
index, built lazily after ``add_edges``: CSR adjacency both ways (numpy) plus one topological
order and the strongly connected components of the whole graph. A closure is then a walk and a
sort: a small one is walked in plain Python, a large one level by level with array operations,
so a closure of thousands of datasets costs a few dozen numpy calls rather than a Python step
per edge.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from json.encoder import encode_basestring
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from erasure.lineage.instants import OPEN_END, OPEN_START, micros
from erasure.lineage.walk import IntArray, Walk, WalkIndex, walk_arrays, walk_small
from erasure.model import Cycle, CycleKind, DatasetRef, Gap, GapKind, LineageEdge

_V = TypeVar("_V")

_AS_OF_CACHE = 8  # indexes kept for distinct as_of instants (plans reuse a few)
# Below this many datasets a closure is walked in plain Python: numpy's per-call cost
# exceeds the whole walk. Measured crossover on the bench estate; see local/bench/closure.py.
SMALL_CLOSURE = 256
_DIGEST = hashlib.sha256().digest_size
_json_string: Callable[[str], str] = encode_basestring  # a JSON string literal, non-ASCII kept


@dataclass
class Closure:
    """The datasets that depend on the roots, in an order that is safe to rebuild in.

    ``depth`` and ``upstreams`` are read-only mappings over ``datasets`` whose values are
    computed when read: a closure can hold tens of thousands of datasets and most readers
    look at a few.
    """

    roots: list[DatasetRef]
    datasets: list[DatasetRef]  # roots first; upstreams before downstreams except in a cycle
    depth: Mapping[DatasetRef, int]  # fewest edges from any root
    upstreams: Mapping[DatasetRef, set[DatasetRef]]  # in-closure direct upstreams
    truncated: bool = False
    truncated_at: list[DatasetRef] = field(default_factory=list)  # walk stopped here
    cycles: list[Cycle] = field(default_factory=list)
    as_of: View = None  # the lineage view the walk used (None = current)


class _ClosureView(Mapping[DatasetRef, _V]):
    """A read-only mapping over a closure's datasets, each value computed when read."""

    __slots__ = ("_keys", "_position", "_value")

    def __init__(
        self,
        keys: Sequence[DatasetRef],
        position: Callable[[object], int],
        value: Callable[[int], _V],
    ) -> None:
        self._keys = keys
        self._position = position  # closure-local index of a dataset, -1 if outside
        self._value = value

    def __getitem__(self, ds: DatasetRef) -> _V:
        k = self._position(ds)
        if k < 0:
            raise KeyError(ds)
        return self._value(k)

    def __contains__(self, ds: object) -> bool:
        return self._position(ds) >= 0

    def __iter__(self) -> Iterator[DatasetRef]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return repr(dict(self))


class LineageGraph(Protocol):
    """What the planner needs from a lineage store; in memory now, persistent later."""

    def add_edges(self, edges: Iterable[LineageEdge]) -> None:
        """Add edges; an edge equal in every attribute to a stored one is ignored."""
        ...

    def edges(self) -> Iterator[LineageEdge]:
        """Every stored edge, superseded ones included."""
        ...

    def datasets(self) -> set[DatasetRef]:
        """Every dataset named by any stored edge."""
        ...

    def upstream(self, ds: DatasetRef, *, as_of: View = None) -> set[DatasetRef]:
        """Datasets with a valid edge into ``ds``."""
        ...

    def downstream(self, ds: DatasetRef, *, as_of: View = None) -> set[DatasetRef]:
        """Datasets with a valid edge from ``ds``."""
        ...

    def edges_into(self, ds: DatasetRef, *, as_of: View = None) -> list[LineageEdge]:
        """Valid edges whose target is a column of ``ds`` (or ``ds`` as a whole)."""
        ...

    def forward_closure(
        self,
        roots: Iterable[DatasetRef],
        *,
        max_nodes: int | None = None,
        max_depth: int | None = None,
        as_of: View = None,
        is_materialised: Callable[[DatasetRef], bool] | None = None,
    ) -> Closure:
        """Every dataset reachable from ``roots`` over valid edges, bounded and ordered."""
        ...

    def snapshot_id(self) -> str:
        """Content hash of the stored edge set, independent of insertion order."""
        ...


@dataclass(frozen=True, eq=False)
class RetainedView:
    """The erasure view (DESIGN section 4): edges whose output may still hold rows they wrote.

    An edge counts when it began by ``at`` and is still valid, or ended (was superseded, or
    belongs to a failed or partial run) less than its output's retention before ``at``. An
    output with no retention keeps every edge ever observed: its old rows may still be there.
    """

    at: datetime
    retention_days: Mapping[DatasetRef, int] = field(default_factory=dict)  # per output
    current: datetime | None = None  # the point-in-time view it is compared with (None: now)

    def cutoff(self, output: DatasetRef) -> int:
        """An edge into ``output`` counts if it ended after this instant (epoch microseconds)."""
        days = self.retention_days.get(output)
        if days is None:
            return OPEN_START
        return micros(self.at - timedelta(days=days))

    def mask(
        self,
        refs: Sequence[DatasetRef],
        ids: Mapping[DatasetRef, int],
        dst: IntArray,
        valid_from: IntArray,
        valid_to: IntArray,
    ) -> npt.NDArray[np.bool_]:
        """Which rows (target dataset id, interval) count, on arrays."""
        cutoff = np.full(len(refs), OPEN_START, dtype=np.int64)
        for ref in self.retention_days:
            i = ids.get(ref)
            if i is not None:
                cutoff[i] = self.cutoff(ref)
        begun: npt.NDArray[np.bool_] = valid_from <= micros(self.at)
        kept: npt.NDArray[np.bool_] = begun & (valid_to > cutoff[dst])
        return kept


View = datetime | RetainedView | None  # current (None), an instant, or the erasure view


def is_valid(edge: LineageEdge, as_of: View = None) -> bool:
    """Whether ``edge`` counts: current if ``as_of`` is None, else from <= as_of < to; in a
    ``RetainedView``, begun by its instant and not ended longer than the retention before."""
    if as_of is None:
        return edge.valid_to is None
    if isinstance(as_of, RetainedView):
        begun = edge.valid_from is None or micros(edge.valid_from) <= micros(as_of.at)
        ended = OPEN_END if edge.valid_to is None else micros(edge.valid_to)
        return begun and ended > as_of.cutoff(edge.target.dataset)
    t = micros(as_of)
    start = OPEN_START if edge.valid_from is None else micros(edge.valid_from)
    end = OPEN_END if edge.valid_to is None else micros(edge.valid_to)
    return start <= t < end


def edge_digest(edge: LineageEdge) -> bytes:
    """SHA-256 of the edge's canonical form: the JSON array of every attribute, in field order.

    Compact separators, non-ASCII kept, datetimes as ISO 8601 (aware ones in UTC), None as
    null; identical to ``json.dumps(fields, ensure_ascii=False, separators=(",", ":"))``.
    """
    source, target = edge.source, edge.target
    fields = (
        source.dataset.namespace,
        source.dataset.name,
        source.column,
        target.dataset.namespace,
        target.dataset.name,
        target.column,
        # _value_ is the plain str behind the enum member
        edge.type._value_,
        edge.subtype._value_,
        edge.origin._value_,
        edge.producer,
        edge.run_id,
        edge.run_state,
        _iso(edge.valid_from),
        _iso(edge.valid_to),
        _iso(edge.observed_at),
    )
    # Quoting field by field in C is a third faster than the encoder's Python wrapper.
    text = "[" + ",".join(["null" if f is None else _json_string(f) for f in fields]) + "]"
    return hashlib.sha256(text.encode()).digest()


def snapshot_digest(edges: Iterable[LineageEdge]) -> str:
    """Order-independent content hash of an edge set: SHA-256 over its sorted edge digests.

    Any store computes the same id for the same edges, so a plan's pinned snapshot can be
    checked against the persistent store later.
    """
    digests = sorted({edge_digest(edge) for edge in edges})
    return hashlib.sha256(b"".join(digests)).hexdigest()


class InMemoryLineageGraph:
    """A LineageGraph held in process memory; fine for millions of edges."""

    def __init__(
        self, edges: Iterable[LineageEdge] = (), *, small_closure: int = SMALL_CLOSURE
    ) -> None:
        """``small_closure``: closures up to this many datasets are walked in plain Python."""
        self._edges: dict[LineageEdge, None] = {}  # an insertion-ordered set
        self._ids: dict[DatasetRef, int] = {}
        self._refs: list[DatasetRef] = []
        self._into: list[list[LineageEdge]] = []  # by target dataset id
        # One entry per stored edge, parallel to self._edges; the index is built from these.
        self._src = array("q")
        self._dst = array("q")
        self._valid_from = array("q")
        self._valid_to = array("q")
        self._digests = bytearray()  # edge_digest of the first self._digested edges
        self._digested = 0
        self._small_closure = small_closure
        self._invalidate()
        self.add_edges(edges)

    # -- building ---------------------------------------------------------------------------

    def add_edges(self, edges: Iterable[LineageEdge]) -> None:
        """Add edges (any iterable, streamed); the bulk path for loading a whole estate."""
        known, ids, refs, into = self._edges, self._ids, self._refs, self._into
        src, dst, vfrom, vto = self._src, self._dst, self._valid_from, self._valid_to
        added = 0
        for edge in edges:
            size = len(known)
            known[edge] = None  # one hash per edge: a duplicate leaves the size unchanged
            if len(known) == size:
                continue
            s_ref, t_ref = edge.source.dataset, edge.target.dataset
            s = ids.get(s_ref)
            if s is None:
                s = ids[s_ref] = len(refs)
                refs.append(s_ref)
                into.append([])
            t = ids.get(t_ref)
            if t is None:
                t = ids[t_ref] = len(refs)
                refs.append(t_ref)
                into.append([])
            into[t].append(edge)
            src.append(s)
            dst.append(t)
            vfrom.append(OPEN_START if edge.valid_from is None else micros(edge.valid_from))
            vto.append(OPEN_END if edge.valid_to is None else micros(edge.valid_to))
            added += 1
        if added:
            self._invalidate()

    def _invalidate(self) -> None:
        self._intervals: tuple[IntArray, IntArray, IntArray] | None = None
        self._rank: IntArray | None = None
        self._current: WalkIndex | None = None
        self._as_of: dict[int, WalkIndex] = {}
        self._retained: tuple[RetainedView, WalkIndex] | None = None  # the last erasure view
        self._snapshot: str | None = None

    # -- reading ----------------------------------------------------------------------------

    def edges(self) -> Iterator[LineageEdge]:
        """Every stored edge in insertion order, superseded ones included."""
        return iter(tuple(self._edges))

    def datasets(self) -> set[DatasetRef]:
        """Every dataset named by any stored edge."""
        return set(self._refs)

    def upstream(self, ds: DatasetRef, *, as_of: View = None) -> set[DatasetRef]:
        """Datasets with a valid edge into ``ds``."""
        i = self._ids.get(ds)
        if i is None:
            return set()
        return set(self._index(as_of).upstream_set(i))

    def has_upstream(self, ds: DatasetRef, *, as_of: View = None) -> bool:
        """Whether any valid edge leads into ``ds`` (no set of upstreams is made)."""
        i = self._ids.get(ds)
        return i is not None and int(self._index(as_of).in_degree[i]) > 0

    def downstream(self, ds: DatasetRef, *, as_of: View = None) -> set[DatasetRef]:
        """Datasets with a valid edge from ``ds``."""
        i = self._ids.get(ds)
        if i is None:
            return set()
        index = self._index(as_of)
        ids = index.out_indices[index.out_indptr[i] : index.out_indptr[i + 1]]
        return {self._refs[j] for j in ids.tolist()}

    def edges_into(self, ds: DatasetRef, *, as_of: View = None) -> list[LineageEdge]:
        """Valid edges whose target is a column of ``ds`` (or ``ds`` as a whole), as stored."""
        i = self._ids.get(ds)
        if i is None:
            return []
        return [edge for edge in self._into[i] if is_valid(edge, as_of)]

    def ended_into(self, view: RetainedView) -> set[DatasetRef]:
        """Datasets with an edge that ``view`` keeps but its current view does not."""
        key, valid_from, valid_to = self._interval_table()
        n = len(self._refs)
        if not n:
            return set()
        dst = key % n
        kept = view.mask(self._refs, self._ids, dst, valid_from, valid_to)
        if view.current is None:
            now = valid_to == OPEN_END
        else:
            t = micros(view.current)
            now = (valid_from <= t) & (t < valid_to)
        return {self._refs[i] for i in np.unique(dst[kept & ~now]).tolist()}

    def snapshot_id(self) -> str:
        """Content hash of the stored edge set, equal to ``snapshot_digest(self.edges())``.

        Each edge is digested once; a later call only digests the edges added since.
        """
        if self._snapshot is None:
            fresh = islice(self._edges, self._digested, None)
            self._digests += b"".join(map(edge_digest, fresh))
            self._digested = len(self._edges)
            ordered = np.unique(np.frombuffer(self._digests, dtype=f"S{_DIGEST}"))
            self._snapshot = hashlib.sha256(ordered.tobytes()).hexdigest()
        return self._snapshot

    # -- closure ----------------------------------------------------------------------------

    def forward_closure(
        self,
        roots: Iterable[DatasetRef],
        *,
        max_nodes: int | None = None,
        max_depth: int | None = None,
        as_of: View = None,
        is_materialised: Callable[[DatasetRef], bool] | None = None,
    ) -> Closure:
        """Every dataset reachable from ``roots`` over valid edges, breadth first.

        Order: roots with no upstream in the closure first, by name; then every dataset after
        its in-closure upstreams, a cycle's members together, following one topological order
        of the whole graph (ties by name), so the closures of one graph agree with each other.
        ``depth`` counts edges from the nearest root.

        Bounds: roots are always included, even beyond ``max_nodes``; when ``max_nodes``
        admits only part of a level, datasets are admitted by name. When a bound stops the
        walk, ``truncated_at`` lists the closure datasets that still have a valid edge to a
        dataset outside it, so ``truncated`` is exact: a bound that cut nothing does not
        truncate.

        Cycles: strongly connected components of the closure of size > 1 or with a self-loop;
        FEEDBACK when ``is_materialised`` (default: always true) holds for a member, else ERROR.
        """
        if max_nodes is not None and max_nodes < 1:
            raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
        if max_depth is not None and max_depth < 0:
            raise ValueError(f"max_depth must be at least 0, got {max_depth}")
        root_list = sorted(set(roots), key=_name_key)
        known = [self._ids[r] for r in root_list if r in self._ids]
        # A root no edge names is still the subject's data: it is in the closure, alone.
        unknown = [r for r in root_list if r not in self._ids]
        index = self._index(as_of)
        walk = None
        if len(known) <= self._small_closure:
            walk = walk_small(index, known, len(unknown), max_nodes, max_depth, self._small_closure)
        if walk is None:
            walk = walk_arrays(index, known, len(unknown), max_nodes, max_depth)
        return self._closure(root_list, unknown, index, walk, as_of, is_materialised or _always)

    def _closure(
        self,
        roots: list[DatasetRef],
        unknown: list[DatasetRef],
        index: WalkIndex,
        walk: Walk,
        as_of: View,
        is_materialised: Callable[[DatasetRef], bool],
    ) -> Closure:
        """The public Closure for a walk; unknown roots lead, with no lineage of their own."""
        refs, ids, offset = self._refs, self._ids, len(unknown)
        datasets = unknown + list(map(refs.__getitem__, walk.ordered))
        extra = {r: k for k, r in enumerate(unknown)}
        locate, ordered, whole = walk.locate, walk.ordered, walk.whole

        def position(ds: object) -> int:
            if not isinstance(ds, DatasetRef):
                return -1
            i = ids.get(ds)
            k = locate(i) if i is not None else -1
            return k + offset if k >= 0 else extra.get(ds, -1)

        def upstreams_of(k: int) -> set[DatasetRef]:
            if k < offset:
                return set()
            i = ordered[k - offset]
            if whole[k - offset]:
                return set(index.upstream_set(i))
            return {refs[j] for j in index.upstream_ids(i) if locate(j) >= 0}

        cycles = []
        for component in walk.components:
            members = [refs[i] for i in component]
            kind = CycleKind.FEEDBACK if any(map(is_materialised, members)) else CycleKind.ERROR
            cycles.append(Cycle(kind=kind, datasets=sorted(members, key=_name_key)))
        cycles.sort(key=lambda c: [_name_key(r) for r in c.datasets])
        truncated_at = sorted((refs[i] for i in walk.frontier), key=_name_key)
        return Closure(
            roots=roots,
            datasets=datasets,
            depth=_ClosureView(datasets, position, ([0] * offset + walk.depth).__getitem__),
            upstreams=_ClosureView(datasets, position, upstreams_of),
            truncated=bool(truncated_at),
            truncated_at=truncated_at,
            cycles=cycles,
            as_of=as_of,
        )

    # -- index ------------------------------------------------------------------------------

    def _index(self, as_of: View) -> WalkIndex:
        """The index of the dataset pairs valid at ``as_of`` (None = current), cached."""
        if as_of is None:
            if self._current is None:
                key, _, valid_to = self._interval_table()
                self._current = WalkIndex(self._refs, key[valid_to == OPEN_END], self._name_rank())
            return self._current
        if isinstance(as_of, RetainedView):
            if self._retained is None or self._retained[0] is not as_of:
                key, valid_from, valid_to = self._interval_table()
                n = len(self._refs)
                dst = key % n if n else key
                kept = as_of.mask(self._refs, self._ids, dst, valid_from, valid_to)
                self._retained = (as_of, WalkIndex(self._refs, key[kept], self._name_rank()))
            return self._retained[1]
        t = micros(as_of)
        cached = self._as_of.get(t)
        if cached is None:
            key, valid_from, valid_to = self._interval_table()
            valid = key[(valid_from <= t) & (t < valid_to)]
            cached = WalkIndex(self._refs, valid, self._name_rank())
            if len(self._as_of) >= _AS_OF_CACHE:
                self._as_of.pop(next(iter(self._as_of)))
            self._as_of[t] = cached
        return cached

    def _interval_table(self) -> tuple[IntArray, IntArray, IntArray]:
        """Distinct (dataset pair, valid_from, valid_to) rows sorted by pair.

        Millions of column edges collapse to a few hundred thousand rows, so a new ``as_of``
        view is one mask and one pass, not a scan of every edge.
        """
        if self._intervals is None:
            n = len(self._refs)
            key = np.array(self._src, dtype=np.int64) * n + np.array(self._dst, dtype=np.int64)
            start = np.array(self._valid_from, dtype=np.int64)
            end = np.array(self._valid_to, dtype=np.int64)
            order = np.lexsort((end, start, key))
            key, start, end = key[order], start[order], end[order]
            keep = np.ones(key.size, dtype=bool)
            keep[1:] = (key[1:] != key[:-1]) | (start[1:] != start[:-1]) | (end[1:] != end[:-1])
            self._intervals = (key[keep], start[keep], end[keep])
        return self._intervals

    def _name_rank(self) -> IntArray:
        """Each dataset id's position in name order, so ties break the same on every load."""
        if self._rank is None:
            refs = self._refs
            by_name = sorted(range(len(refs)), key=lambda i: _name_key(refs[i]))
            rank = np.empty(len(refs), dtype=np.int64)
            rank[np.array(by_name, dtype=np.int64)] = np.arange(len(refs), dtype=np.int64)
            self._rank = rank
        return self._rank


def coverage(
    closure: Closure,
    graph: LineageGraph,
    *,
    columns_of: Callable[[DatasetRef], Sequence[str] | None],
) -> tuple[float, list[Gap]]:
    """Share of the closure's derived columns whose origin is known, and the lineage gaps.

    Counted over the non-root closure datasets. A dataset's columns are its catalog columns
    (``columns_of``; None when the catalog does not list them) plus every column some valid
    edge targets. A column is known when at least one valid column-level edge (target column
    set) leads into it. A dataset whose valid incoming edges are all table-level (target
    column None) is a TABLE_ONLY_LINEAGE gap; if it has no columns at all it counts as one
    unknown column, so it still lowers the share. No columns anywhere gives 1.0.
    """
    roots = set(closure.roots)
    total = known_total = 0
    gaps: list[Gap] = []
    derived = [ds for ds in closure.datasets if ds not in roots]
    summary = _incoming(graph, derived, closure.as_of)
    for ds in derived:
        producers = summary.producers.get(ds, set())
        listed = columns_of(ds)
        if listed:
            known = summary.names(ds)
            width = len(set(listed) | known)
            found = len(known)
        else:  # no catalog columns: the count is enough, no set of names is made
            width = found = summary.counts.get(ds, 0)
        if not width and producers:
            width = 1  # nothing to name: the table as a whole is one unknown column
        total += width
        known_total += found
        if producers and not found:
            gaps.append(
                Gap(
                    kind=GapKind.TABLE_ONLY_LINEAGE,
                    dataset=ds,
                    detail=(
                        f"only table-level lineage (from {', '.join(sorted(producers))}): "
                        f"origin of {width} column(s) unknown"
                    ),
                )
            )
    share = known_total / total if total else 1.0
    return share, sorted(gaps, key=lambda g: _name_key(g.dataset) if g.dataset else ("", ""))


@dataclass
class IncomingColumns:
    """What valid edges say about the columns of some datasets (coverage reads this)."""

    counts: dict[DatasetRef, int]  # distinct columns reached by column-level edges
    producers: dict[DatasetRef, set[str]]  # producers of table-level edges
    names: Callable[[DatasetRef], set[str]]  # the columns behind a count, when needed


def _incoming(graph: LineageGraph, datasets: list[DatasetRef], as_of: View) -> IncomingColumns:
    """Column-level reach and table-level producers of each dataset's valid incoming edges.

    A graph that can count this on its own arrays (the store's) does; others are read edge
    by edge.
    """
    counted = getattr(graph, "incoming_columns", None)
    if counted is not None:
        result: IncomingColumns = counted(datasets, as_of=as_of)
        return result
    known: dict[DatasetRef, set[str]] = {}
    producers: dict[DatasetRef, set[str]] = {}
    for ds in datasets:
        incoming = graph.edges_into(ds, as_of=as_of)
        known[ds] = {e.target.column for e in incoming if e.target.column is not None}
        table = {e.producer for e in incoming if e.target.column is None}
        if table:
            producers[ds] = table
    return IncomingColumns(
        counts={ds: len(names) for ds, names in known.items()},
        producers=producers,
        names=lambda ds: known.get(ds, set()),
    )


def _iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return dt.isoformat() if dt.tzinfo is None else dt.astimezone(UTC).isoformat()


def _name_key(ds: DatasetRef) -> tuple[str, str]:
    return (ds.name, ds.namespace)


def _always(_: DatasetRef) -> bool:
    return True
