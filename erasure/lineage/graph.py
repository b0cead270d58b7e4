"""Lineage graph: column-level edges indexed by dataset; forward closure, cycles, coverage.

Edges are kept whole (column level, DIRECT/INDIRECT, subtype, origin, run, validity) because
plans and evidence cite them. Closure works at *dataset* level: every column of a subject's row
is subject data, so a dataset depends on a root as soon as any edge - DIRECT or INDIRECT,
column- or table-level - reaches it.

Validity: an edge counts for closure when it is current (``valid_to`` is None), or, given
``as_of``, when ``valid_from <= as_of < valid_to`` (None = open). Naive datetimes are read as UTC.

Speed: datasets are interned to integers and the dataset adjacency is a pair of CSR arrays
(numpy), rebuilt lazily after ``add_edges``. The walk, the boundary, the topological levels and
the cycle pre-filter are level-synchronous array operations, so a closure of thousands of
datasets costs a few dozen numpy calls, not a Python loop per edge.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from erasure.model import Cycle, CycleKind, DatasetRef, Gap, GapKind, LineageEdge

IntArray = npt.NDArray[np.int64]
_V = TypeVar("_V")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# Open interval ends as sentinels, so "valid at t" is two integer comparisons in numpy.
_OPEN_START = int(np.iinfo(np.int64).min)
_OPEN_END = int(np.iinfo(np.int64).max)
_AS_OF_CACHE = 8  # adjacency views kept for distinct as_of instants (plans reuse a few)
_DIGEST = hashlib.sha256().digest_size
# Built once: json.dumps with non-default options builds a new encoder on every call.
_canonical_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass
class Closure:
    """The datasets that depend on the roots, in an order that is safe to rebuild in."""

    roots: list[DatasetRef]
    datasets: list[DatasetRef]  # roots first; upstreams before downstreams except in a cycle
    depth: Mapping[DatasetRef, int]  # fewest edges from any root
    upstreams: Mapping[DatasetRef, set[DatasetRef]]  # in-closure direct upstreams
    truncated: bool = False
    truncated_at: list[DatasetRef] = field(default_factory=list)  # walk stopped here
    cycles: list[Cycle] = field(default_factory=list)
    as_of: datetime | None = None  # the lineage instant the walk used (None = current)


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

    def upstream(self, ds: DatasetRef, *, as_of: datetime | None = None) -> set[DatasetRef]:
        """Datasets with a valid edge into ``ds``."""
        ...

    def downstream(self, ds: DatasetRef, *, as_of: datetime | None = None) -> set[DatasetRef]:
        """Datasets with a valid edge from ``ds``."""
        ...

    def edges_into(self, ds: DatasetRef, *, as_of: datetime | None = None) -> list[LineageEdge]:
        """Valid edges whose target is a column of ``ds`` (or ``ds`` as a whole)."""
        ...

    def forward_closure(
        self,
        roots: Iterable[DatasetRef],
        *,
        max_nodes: int | None = None,
        max_depth: int | None = None,
        as_of: datetime | None = None,
        is_materialised: Callable[[DatasetRef], bool] | None = None,
    ) -> Closure:
        """Every dataset reachable from ``roots`` over valid edges, bounded and ordered."""
        ...

    def snapshot_id(self) -> str:
        """Content hash of the stored edge set, independent of insertion order."""
        ...


def is_valid(edge: LineageEdge, as_of: datetime | None = None) -> bool:
    """Whether ``edge`` counts: current if ``as_of`` is None, else from <= as_of < to."""
    if as_of is None:
        return edge.valid_to is None
    t = _micros(as_of)
    start = _OPEN_START if edge.valid_from is None else _micros(edge.valid_from)
    end = _OPEN_END if edge.valid_to is None else _micros(edge.valid_to)
    return start <= t < end


def edge_digest(edge: LineageEdge) -> bytes:
    """SHA-256 of the edge's canonical JSON form (every attribute, datetimes in ISO 8601)."""
    source, target = edge.source, edge.target
    doc = [
        source.dataset.namespace,
        source.dataset.name,
        source.column,
        target.dataset.namespace,
        target.dataset.name,
        target.column,
        # _value_ is the plain str: the encoder takes a slow path for str subclasses
        edge.type._value_,
        edge.subtype._value_,
        edge.origin._value_,
        edge.producer,
        edge.run_id,
        edge.run_state,
        _iso(edge.valid_from),
        _iso(edge.valid_to),
        _iso(edge.observed_at),
    ]
    return hashlib.sha256(_canonical_json(doc).encode()).digest()


def snapshot_digest(edges: Iterable[LineageEdge]) -> str:
    """Order-independent content hash of an edge set: SHA-256 over its sorted edge digests.

    Any store computes the same id for the same edges, so a plan's pinned snapshot can be
    checked against the persistent store later.
    """
    digests = sorted({edge_digest(edge) for edge in edges})
    return hashlib.sha256(b"".join(digests)).hexdigest()


class _Index:
    """One validity view of the graph at dataset level, built once and shared by every walk.

    CSR adjacency both ways, plus a topological order and the strongly connected components of
    the whole graph: restricted to a closure, a topological order is still one, and a closure
    that was not truncated is closed downstream, so its cycles are whole global components.
    """

    __slots__ = (
        "_in_sets",
        "_refs",
        "comp",
        "cyclic",
        "in_degree",
        "in_indices",
        "in_indptr",
        "n",
        "out_degree",
        "out_indices",
        "out_indptr",
        "position",
        "rank",
    )

    def __init__(self, refs: list[DatasetRef], keys: IntArray, rank: IntArray) -> None:
        """From sorted pair keys ``src * n + dst`` (duplicates allowed) and name ranks."""
        n = self.n = len(refs)
        if keys.size:
            keep = np.ones(keys.size, dtype=bool)
            keep[1:] = keys[1:] != keys[:-1]
            keys = keys[keep]
        src, dst = (keys // n, keys % n) if n else (keys, keys)
        self.out_indptr, self.out_indices = _indptr(src, n), dst
        self.in_indptr, self.in_indices = _indptr(dst, n), src[np.argsort(dst, kind="stable")]
        self.out_degree, self.in_degree = np.diff(self.out_indptr), np.diff(self.in_indptr)
        self.rank = rank
        comp, level, cyclic = _condense(n, src, dst)
        self.comp = comp
        self.position = np.empty(n, dtype=np.int64)
        self.position[_topological_order(comp, level, rank)] = np.arange(n, dtype=np.int64)
        self.cyclic = np.zeros(n, dtype=bool)
        for members in cyclic:
            self.cyclic[np.array(members, dtype=np.int64)] = True
        self._refs = refs  # append-only in the graph, so ids below n stay valid
        self._in_sets: list[frozenset[DatasetRef] | None] = [None] * n

    def upstream_set(self, i: int) -> frozenset[DatasetRef]:
        """Dataset ``i``'s upstreams, built once: copying a set later does not rehash its refs."""
        cached = self._in_sets[i]
        if cached is None:
            ids = self.in_indices[self.in_indptr[i] : self.in_indptr[i + 1]].tolist()
            cached = self._in_sets[i] = frozenset(self._refs[j] for j in ids)
        return cached


class InMemoryLineageGraph:
    """A LineageGraph held in process memory; fine for millions of edges."""

    def __init__(self, edges: Iterable[LineageEdge] = ()) -> None:
        self._edges: dict[LineageEdge, None] = {}  # an insertion-ordered set
        self._ids: dict[DatasetRef, int] = {}
        self._refs: list[DatasetRef] = []
        self._into: list[list[LineageEdge]] = []  # by target dataset id
        # One entry per stored edge, parallel to self._edges; the CSR is built from these.
        self._src = array("q")
        self._dst = array("q")
        self._valid_from = array("q")
        self._valid_to = array("q")
        self._digests = bytearray()  # edge_digest of the first self._digested edges
        self._digested = 0
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
            vfrom.append(_OPEN_START if edge.valid_from is None else _micros(edge.valid_from))
            vto.append(_OPEN_END if edge.valid_to is None else _micros(edge.valid_to))
            added += 1
        if added:
            self._invalidate()

    def _invalidate(self) -> None:
        self._intervals: tuple[IntArray, IntArray, IntArray] | None = None
        self._rank: IntArray | None = None
        self._current: _Index | None = None
        self._as_of: dict[int, _Index] = {}
        self._snapshot: str | None = None

    # -- reading ----------------------------------------------------------------------------

    def edges(self) -> Iterator[LineageEdge]:
        """Every stored edge in insertion order, superseded ones included."""
        return iter(tuple(self._edges))

    def datasets(self) -> set[DatasetRef]:
        """Every dataset named by any stored edge."""
        return set(self._refs)

    def upstream(self, ds: DatasetRef, *, as_of: datetime | None = None) -> set[DatasetRef]:
        """Datasets with a valid edge into ``ds``."""
        i = self._ids.get(ds)
        if i is None:
            return set()
        return set(self._index(as_of).upstream_set(i))

    def downstream(self, ds: DatasetRef, *, as_of: datetime | None = None) -> set[DatasetRef]:
        """Datasets with a valid edge from ``ds``."""
        i = self._ids.get(ds)
        if i is None:
            return set()
        index = self._index(as_of)
        ids = index.out_indices[index.out_indptr[i] : index.out_indptr[i + 1]]
        return {self._refs[j] for j in ids.tolist()}

    def edges_into(self, ds: DatasetRef, *, as_of: datetime | None = None) -> list[LineageEdge]:
        """Valid edges whose target is a column of ``ds`` (or ``ds`` as a whole), as stored."""
        i = self._ids.get(ds)
        if i is None:
            return []
        return [edge for edge in self._into[i] if is_valid(edge, as_of)]

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
        as_of: datetime | None = None,
        is_materialised: Callable[[DatasetRef], bool] | None = None,
    ) -> Closure:
        """Every dataset reachable from ``roots`` over valid edges, breadth first.

        Roots are always included, even beyond ``max_nodes``. ``max_depth`` counts edges from
        the nearest root. When a bound stops the walk, ``truncated_at`` lists the closure
        datasets that still have a valid edge to a dataset outside it (so ``truncated`` is
        exact: a bound that cut nothing does not truncate). When ``max_nodes`` admits only part
        of a level, datasets are admitted by name. Cycles are the closure's strongly connected
        components of size > 1 or with a self-loop: FEEDBACK when ``is_materialised`` (default:
        always true) holds for a member, ERROR otherwise.
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
        root_ids = np.array(known, dtype=np.int64)

        in_closure, depth = _walk(index, root_ids, len(unknown), max_nodes, max_depth)
        nodes = np.flatnonzero(in_closure)
        n = nodes.size
        local = np.full(index.n, -1, dtype=np.int64)
        local[nodes] = np.arange(n, dtype=np.int64)

        # Every valid edge out of the closure: inside ones are its subgraph, outside ones mark
        # where the walk stopped short.
        tails = np.repeat(nodes, index.out_degree[nodes])
        heads = _gather(index.out_indptr, index.out_indices, nodes)
        inside = in_closure[heads]
        frontier = np.unique(tails[~inside])
        src, dst = local[tails[inside]], local[heads[inside]]
        in_degree = np.bincount(dst, minlength=n)

        # Roots with no upstream in the closure lead, by name; the rest follow the global order.
        first = np.zeros(n, dtype=bool)
        first[local[root_ids]] = True
        first &= in_degree == 0
        order = np.lexsort((np.where(first, index.rank[nodes], index.position[nodes]), ~first))

        if frontier.size == 0:
            members = nodes[index.cyclic[nodes]]
            members = members[np.argsort(index.comp[members], kind="stable")]
            cuts = np.flatnonzero(np.diff(index.comp[members])) + 1
            components = [group.tolist() for group in np.split(members, cuts)] if n else []
            components = [group for group in components if group]
        else:  # a cut-off walk may hold only part of a global cycle: find its own
            components = [nodes[group].tolist() for group in _condense(n, src, dst)[2]]

        refs = [self._refs[i] for i in nodes.tolist()]
        datasets = unknown + [refs[k] for k in order.tolist()]
        # Depth and upstreams are views computed on access: building tens of thousands of
        # sets of DatasetRef up front would cost more than the whole walk.
        ids, extra = self._ids, {r: n + i for i, r in enumerate(unknown)}

        def position(ref: object) -> int:
            if not isinstance(ref, DatasetRef):
                return -1
            gid = ids.get(ref)
            k = int(local[gid]) if gid is not None and gid < local.size else -1
            return k if k >= 0 else extra.get(ref, -1)

        depths = depth[nodes].tolist() + [0] * len(unknown)
        gids = nodes.tolist()
        # Where every upstream is in the closure (the common case) the cached set is exact.
        whole = (in_degree == index.in_degree[nodes]).tolist()

        def upstreams_of(k: int) -> set[DatasetRef]:
            if k >= n:
                return set()
            if whole[k]:
                return set(index.upstream_set(gids[k]))
            ups = index.in_indices[index.in_indptr[gids[k]] : index.in_indptr[gids[k] + 1]]
            return {self._refs[j] for j in ups[in_closure[ups]].tolist()}

        materialised = is_materialised or _always
        cycles = []
        for component in components:
            member_refs = [self._refs[i] for i in component]
            kind = (
                CycleKind.FEEDBACK if any(materialised(r) for r in member_refs) else CycleKind.ERROR
            )
            cycles.append(Cycle(kind=kind, datasets=sorted(r.name for r in member_refs)))
        cycles.sort(key=lambda c: c.datasets)

        truncated_at = sorted((self._refs[i] for i in frontier.tolist()), key=_name_key)
        return Closure(
            roots=root_list,
            datasets=datasets,
            depth=_ClosureView(datasets, position, depths.__getitem__),
            upstreams=_ClosureView(datasets, position, upstreams_of),
            truncated=bool(truncated_at),
            truncated_at=truncated_at,
            cycles=cycles,
            as_of=as_of,
        )

    # -- index ------------------------------------------------------------------------------

    def _index(self, as_of: datetime | None) -> _Index:
        """The index of the dataset pairs valid at ``as_of`` (None = current), cached."""
        if as_of is None:
            if self._current is None:
                key, _, valid_to = self._interval_table()
                self._current = _Index(self._refs, key[valid_to == _OPEN_END], self._name_rank())
            return self._current
        t = _micros(as_of)
        cached = self._as_of.get(t)
        if cached is None:
            key, valid_from, valid_to = self._interval_table()
            valid = key[(valid_from <= t) & (t < valid_to)]
            cached = _Index(self._refs, valid, self._name_rank())
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
    for ds in closure.datasets:
        if ds in roots:
            continue
        incoming = graph.edges_into(ds, as_of=closure.as_of)
        known = {e.target.column for e in incoming if e.target.column is not None}
        table_level = [e for e in incoming if e.target.column is None]
        columns = set(columns_of(ds) or ()) | known
        if not columns and table_level:
            columns = {"*"}  # nothing to name: the table as a whole is one unknown column
        total += len(columns)
        known_total += len(known)
        if table_level and not known:
            producers = sorted({e.producer for e in table_level})
            gaps.append(
                Gap(
                    kind=GapKind.TABLE_ONLY_LINEAGE,
                    dataset=ds.name,
                    detail=(
                        f"only table-level lineage (from {', '.join(producers)}): "
                        f"origin of {len(columns)} column(s) unknown"
                    ),
                )
            )
    share = known_total / total if total else 1.0
    return share, sorted(gaps, key=lambda g: g.dataset or "")


# -- array kernels --------------------------------------------------------------------------


def _walk(
    index: _Index,
    roots: IntArray,
    extra_nodes: int,
    max_nodes: int | None,
    max_depth: int | None,
) -> tuple[npt.NDArray[np.bool_], IntArray]:
    """Level-synchronous BFS; returns the closure mask and each dataset's depth (-1 outside)."""
    in_closure = np.zeros(index.n, dtype=bool)
    depth = np.full(index.n, -1, dtype=np.int64)
    in_closure[roots] = True
    depth[roots] = 0
    count = int(np.count_nonzero(in_closure)) + extra_nodes
    frontier = np.unique(roots)
    level = 0
    while frontier.size and (max_depth is None or level < max_depth):
        reached = _gather(index.out_indptr, index.out_indices, frontier)
        new = np.unique(reached[~in_closure[reached]])
        if new.size == 0:
            break
        level += 1
        if max_nodes is not None and count + new.size > max_nodes:
            room = max(max_nodes - count, 0)
            new = new[np.argsort(index.rank[new], kind="stable")[:room]]
            in_closure[new] = True
            depth[new] = level
            break
        in_closure[new] = True
        depth[new] = level
        count += new.size
        frontier = new
    return in_closure, depth


def _gather(indptr: IntArray, indices: IntArray, rows: IntArray) -> IntArray:
    """Concatenate the CSR rows ``rows`` without a Python loop."""
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    offsets = np.repeat(starts - (ends - lengths), lengths)
    gathered: IntArray = indices[np.arange(total, dtype=np.int64) + offsets]
    return gathered


def _indptr(rows: IntArray, n: int) -> IntArray:
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr


def _kahn_levels(n: int, src: IntArray, dst: IntArray) -> IntArray:
    """Kahn's algorithm a level at a time: each node's longest distance from a source.

    Nodes on or after a cycle are never freed and keep level -1.
    """
    level = np.full(n, -1, dtype=np.int64)
    indegree = np.bincount(dst, minlength=n)
    by_src = np.argsort(src, kind="stable")
    indptr, targets = _indptr(src, n), dst[by_src]
    frontier = np.flatnonzero(indegree == 0)
    step = 0
    while frontier.size:
        level[frontier] = step
        reached, hits = np.unique(_gather(indptr, targets, frontier), return_counts=True)
        indegree[reached] -= hits
        frontier = reached[indegree[reached] == 0]
        step += 1
    return level


def _condense(n: int, src: IntArray, dst: IntArray) -> tuple[IntArray, IntArray, list[list[int]]]:
    """Strongly connected components and condensation levels of a local subgraph.

    Returns (component of each node, level of each component id, cyclic components). Kahn
    from both ends strips every node that is on no cycle (almost all of a real lineage
    graph), so Tarjan only runs on the small core that remains.
    """
    forward = _kahn_levels(n, src, dst)
    comp = np.arange(n, dtype=np.int64)
    if n == 0 or bool((forward >= 0).all()):
        return comp, forward, []
    stuck = forward < 0
    mask = stuck[src] & stuck[dst]
    backward = _kahn_levels(n, dst[mask], src[mask])
    core = np.flatnonzero(stuck & (backward < 0))
    core_local = np.full(n, -1, dtype=np.int64)
    core_local[core] = np.arange(core.size, dtype=np.int64)
    in_core = (core_local[src] >= 0) & (core_local[dst] >= 0)
    c_src, c_dst = core_local[src[in_core]], core_local[dst[in_core]]
    order = np.argsort(c_src, kind="stable")
    self_loops = set(c_src[c_src == c_dst].tolist())
    cyclic: list[list[int]] = []
    core_ids = core.tolist()
    for members in _tarjan(core.size, _indptr(c_src, core.size).tolist(), c_dst[order].tolist()):
        if len(members) > 1 or members[0] in self_loops:
            nodes = [core_ids[m] for m in members]
            comp[np.array(nodes, dtype=np.int64)] = min(nodes)
            cyclic.append(sorted(nodes))
    between = comp[src] != comp[dst]
    return comp, _kahn_levels(n, comp[src[between]], comp[dst[between]]), cyclic


def _tarjan(n: int, indptr: list[int], indices: list[int]) -> list[list[int]]:
    """Tarjan's strongly connected components, iterative so deep graphs cannot overflow."""
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for start in range(n):
        if index[start] != -1:
            continue
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack[start] = True
        work = [(start, indptr[start])]
        while work:
            v, i = work[-1]
            if i < indptr[v + 1]:
                work[-1] = (v, i + 1)
                w = indices[i]
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, indptr[w]))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    members.append(w)
                    if w == v:
                        break
                components.append(members)
    return components


def _topological_order(comp: IntArray, level: IntArray, rank: IntArray) -> IntArray:
    """Node order by condensation level, then name, each component's members together."""
    n = comp.size
    first_name = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_name, comp, rank)  # a component sorts by its first member's name
    order: IntArray = np.lexsort((rank, first_name[comp], level[comp]))
    return order


def _micros(dt: datetime) -> int:
    """Microseconds since the epoch, exact; naive datetimes are taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MICROSECOND


def _iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return dt.isoformat() if dt.tzinfo is None else dt.astimezone(UTC).isoformat()


def _name_key(ds: DatasetRef) -> tuple[str, str]:
    return (ds.name, ds.namespace)


def _always(_: DatasetRef) -> bool:
    return True
