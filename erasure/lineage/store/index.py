"""The projected lineage as columns: what a plan loads instead of a million edge objects.

`ColumnarEdges` holds every edge of the store as parallel numpy arrays (datasets, columns,
producers and run ids interned), serialises to one blob for `lineage_index`, and takes the
rows changed since it was built. `StoredLineageGraph` is the `LineageGraph` over it: the
closure machinery of the in-memory graph, with edges turned into `LineageEdge` objects only
where a caller reads them (evidence, `edges_into`), and coverage counted on the arrays.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from json.encoder import encode_basestring
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from erasure.errors import LineageError
from erasure.lineage import instants
from erasure.lineage.graph import (
    SMALL_CLOSURE,
    IncomingColumns,
    InMemoryLineageGraph,
    RetainedView,
    View,
    is_valid,
)
from erasure.lineage.instants import OPEN_END, OPEN_START
from erasure.lineage.walk import IntArray
from erasure.model import DatasetRef, EdgeOrigin, EdgeSubtype, EdgeType, FieldRef, LineageEdge

_NONE_TIME = OPEN_START  # observed_at None
_FORMAT = 1
_TYPES = list(EdgeType)
_SUBTYPES = list(EdgeSubtype)
_ORIGINS = list(EdgeOrigin)
_INT_FIELDS = (
    "eid", "src", "src_col", "dst", "dst_col", "type", "subtype", "origin",
    "producer", "run", "state", "valid_from", "valid_to", "observed",
)  # fmt: skip


def _micros(dt: datetime | None, none: int) -> int:
    return none if dt is None else instants.micros(dt)


def _datetime(value: int, none: int) -> datetime | None:
    return None if value == none else instants.EPOCH + timedelta(microseconds=value)


@dataclass
class ColumnarEdges:
    """Every stored edge as parallel arrays; strings and datasets interned."""

    datasets: list[DatasetRef]
    strings: list[str | None]  # index 0 is None
    eid: IntArray  # store edge id, ascending
    src: IntArray
    src_col: IntArray
    dst: IntArray
    dst_col: IntArray
    type: IntArray
    subtype: IntArray
    origin: IntArray
    producer: IntArray
    run: IntArray
    state: IntArray
    valid_from: IntArray
    valid_to: IntArray
    observed: IntArray
    digest: npt.NDArray[np.bytes_] | None = None  # edge_digest per row, once computed

    def edge_digests(self) -> npt.NDArray[np.bytes_]:
        """`graph.edge_digest` of every row; computed once, then kept (and saved) with them."""
        if self.digest is None:
            self.digest = self.digests()
        return self.digest

    @property
    def size(self) -> int:
        return int(self.eid.size)

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def from_rows(
        cls, rows: Sequence[tuple[Any, ...]], datasets: Mapping[int, DatasetRef]
    ) -> ColumnarEdges:
        """From `lineage_edge_sets` rows (id, target dataset, producer, origin, run id, run
        state, valid_from, valid_to, observed_at, links JSON), one edge per link."""
        builder = _Builder([], [None])
        return builder.build(rows, datasets)

    def updated(
        self, rows: Sequence[tuple[Any, ...]], datasets: Mapping[int, DatasetRef]
    ) -> ColumnarEdges:
        """These arrays with the given sets replacing theirs (same id) or added."""
        if not rows:
            return self
        builder = _Builder(list(self.datasets), list(self.strings))
        delta = builder.build(rows, datasets)
        keep = ~np.isin(self.eid, np.array([int(r[0]) for r in rows], dtype=np.int64))
        arrays = {
            name: np.concatenate([getattr(self, name)[keep], getattr(delta, name)])
            for name in _INT_FIELDS
        }
        order = np.argsort(arrays["eid"], kind="stable")
        digest = None
        if self.digest is not None:  # only the new rows are digested
            digest = np.concatenate([self.digest[keep], delta.edge_digests()])[order]
        return ColumnarEdges(
            datasets=delta.datasets,
            strings=delta.strings,
            digest=digest,
            **{name: value[order] for name, value in arrays.items()},
        )

    def with_edges(self, edges: Iterable[LineageEdge]) -> ColumnarEdges:
        """These arrays plus edges that are not in the store (ids above every stored one)."""
        start = int(self.eid.max()) + 1 if self.eid.size else 1
        ids = {ref: i for i, ref in enumerate(self.datasets)}
        rows = []
        for k, e in enumerate(edges):
            for ref in (e.source.dataset, e.target.dataset):
                if ref not in ids:
                    ids[ref] = -len(ids) - 1
            link = [ids[e.source.dataset], e.source.column, e.target.column, e.type.value,
                    e.subtype.value]  # fmt: skip
            rows.append(
                (
                    start + k, ids[e.target.dataset], e.producer, e.origin.value, e.run_id,
                    e.run_state, e.valid_from, e.valid_to, e.observed_at, [link],
                )
            )  # fmt: skip
        refs = {i: ref for ref, i in ids.items()}
        return self.updated(rows, refs)

    def remapped(self, canonical: Callable[[DatasetRef], DatasetRef]) -> ColumnarEdges:
        """The same edges with every dataset replaced by `canonical(dataset)` (aliases merged)."""
        mapped = [canonical(ref) for ref in self.datasets]
        if mapped == self.datasets:
            return self
        unique: dict[DatasetRef, int] = {}
        position = np.array([unique.setdefault(r, len(unique)) for r in mapped], dtype=np.int64)
        arrays = {name: getattr(self, name) for name in _INT_FIELDS}
        arrays["src"], arrays["dst"] = position[self.src], position[self.dst]
        return ColumnarEdges(datasets=list(unique), strings=self.strings, **arrays)

    # -- serialising ----------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        header = {
            "format": _FORMAT,
            "datasets": [[r.namespace, r.name] for r in self.datasets],
            "strings": self.strings,
        }
        np.savez(
            buffer,
            header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
            digest=self.edge_digests(),
            **{name: getattr(self, name) for name in _INT_FIELDS},
        )
        return zlib.compress(buffer.getvalue(), 1)

    @classmethod
    def from_bytes(cls, blob: bytes) -> ColumnarEdges:
        try:
            data = np.load(io.BytesIO(zlib.decompress(blob)), allow_pickle=False)
            header = json.loads(data["header"].tobytes())
        except (zlib.error, ValueError, KeyError, OSError) as exc:
            raise LineageError(
                f"the stored lineage index cannot be read ({type(exc).__name__}); delete the "
                "lineage_index row and the next plan rebuilds it"
            ) from None
        if header.get("format") != _FORMAT:
            raise LineageError(
                "the stored lineage index has another format; delete the lineage_index row"
            )
        return cls(
            datasets=[DatasetRef(ns, name) for ns, name in header["datasets"]],
            strings=header["strings"],
            digest=data.get("digest"),
            **{name: data[name].astype(np.int64) for name in _INT_FIELDS},
        )

    # -- reading --------------------------------------------------------------------------------

    def valid(self, as_of: datetime | None) -> npt.NDArray[np.bool_]:
        """Mask of the edges valid at `as_of` (None: current, i.e. not ended)."""
        if as_of is None:
            mask: npt.NDArray[np.bool_] = self.valid_to == OPEN_END
            return mask
        t = _micros(as_of, 0)
        both: npt.NDArray[np.bool_] = (self.valid_from <= t) & (t < self.valid_to)
        return both

    def edge(self, k: int) -> LineageEdge:
        """Row `k` as a LineageEdge."""
        s, refs = self.strings, self.datasets
        return LineageEdge(
            source=FieldRef(refs[int(self.src[k])], s[int(self.src_col[k])]),
            target=FieldRef(refs[int(self.dst[k])], s[int(self.dst_col[k])]),
            type=_TYPES[int(self.type[k])],
            subtype=_SUBTYPES[int(self.subtype[k])],
            origin=_ORIGINS[int(self.origin[k])],
            producer=s[int(self.producer[k])] or "",
            run_id=s[int(self.run[k])],
            run_state=s[int(self.state[k])],
            valid_from=_datetime(int(self.valid_from[k]), OPEN_START),
            valid_to=_datetime(int(self.valid_to[k]), OPEN_END),
            observed_at=_datetime(int(self.observed[k]), _NONE_TIME),
        )

    def digests(self) -> npt.NDArray[np.bytes_]:
        """`graph.edge_digest` of every row, computed from the interned strings."""
        quoted = ["null" if v is None else encode_basestring(v) for v in self.strings]
        ns = [encode_basestring(r.namespace) for r in self.datasets]
        names = [encode_basestring(r.name) for r in self.datasets]
        types = [encode_basestring(t.value) for t in _TYPES]
        subtypes = [encode_basestring(t.value) for t in _SUBTYPES]
        origins = [encode_basestring(o.value) for o in _ORIGINS]
        times: dict[int, str] = {}

        def iso(value: int, none: int) -> str:
            text = times.get(value)
            if text is None:
                dt = _datetime(value, none)
                text = times[value] = "null" if dt is None else encode_basestring(dt.isoformat())
            return text

        sha = hashlib.sha256
        out = bytearray()
        # The fields after the target column are a set's (and the target dataset): built
        # once per run of equal ones, not per edge; a source end's text once per pair.
        per_set = (
            self.dst, self.origin, self.producer, self.run, self.state, self.valid_from,
            self.valid_to, self.observed,
        )  # fmt: skip
        size = self.size
        starts = np.zeros(size, dtype=bool)
        if size:
            starts[0] = True
            for column in per_set:
                starts[1:] |= column[1:] != column[:-1]
        bounds = [*np.flatnonzero(starts).tolist(), size]
        sources: dict[tuple[int, int], str] = {}
        kinds: dict[tuple[int, int], str] = {}
        src, src_col = self.src.tolist(), self.src_col.tolist()
        dst_col, kind, subtype = self.dst_col.tolist(), self.type.tolist(), self.subtype.tolist()
        for first, end in itertools.pairwise(bounds):
            d, o, p, r, rs, vf, vt, ob = (int(column[first]) for column in per_set)
            target = f"{ns[d]},{names[d]},"
            tail = (
                f",{origins[o]},{quoted[p]},{quoted[r]},{quoted[rs]},{iso(vf, OPEN_START)},"
                f"{iso(vt, OPEN_END)},{iso(ob, _NONE_TIME)}]"
            )
            for k in range(first, end):
                s, sc = src[k], src_col[k]
                head = sources.get((s, sc))
                if head is None:
                    head = sources[(s, sc)] = f"[{ns[s]},{names[s]},{quoted[sc]},"
                t, st = kind[k], subtype[k]
                how = kinds.get((t, st))
                if how is None:
                    how = kinds[(t, st)] = f",{types[t]},{subtypes[st]}"
                out += sha(f"{head}{target}{quoted[dst_col[k]]}{how}{tail}".encode()).digest()
        return np.frombuffer(bytes(out), dtype="S32")


class _Builder:
    """Interns datasets and strings while turning rows into arrays."""

    def __init__(self, datasets: list[DatasetRef], strings: list[str | None]) -> None:
        self.datasets = datasets
        self.dataset_ids = {r: i for i, r in enumerate(datasets)}
        self.strings = strings
        self.string_ids: dict[str | None, int] = {s: i for i, s in enumerate(strings)}

    def build(
        self, rows: Sequence[tuple[Any, ...]], datasets: Mapping[int, DatasetRef]
    ) -> ColumnarEdges:
        dataset_ids, known = self.dataset_ids, self.datasets

        def ds(store_id: int) -> int:
            ref = datasets[store_id]
            i = dataset_ids.get(ref)
            if i is None:
                i = dataset_ids[ref] = len(known)
                known.append(ref)
            return i

        strings, string_ids = self.strings, self.string_ids

        def text(value: str | None) -> int:
            i = string_ids[value] = len(strings)
            strings.append(value)
            return i

        # Looked up a set's links at a time through `map` (in C): a miss interns the value.
        local = _Interned(ds)
        texts = _Interned(text, string_ids)
        type_ids = {t.value: i for i, t in enumerate(_TYPES)}
        subtype_ids = {t.value: i for i, t in enumerate(_SUBTYPES)}
        origin_ids = {o.value: i for i, o in enumerate(_ORIGINS)}
        times: dict[object, int] = {}

        def micros(value: datetime | None, none: int) -> int:
            if value is None:
                return none
            found = times.get(value)
            if found is None:
                found = times[value] = _micros(value, none)
            return found

        # Machine integers from the start: numpy copies them whole, where a list of a
        # million Python ints took it longer than the loop that made them.
        values: dict[str, array[int]] = {name: array("q") for name in _INT_FIELDS}
        eid, src, src_col, dst, dst_col = (
            values[n] for n in ("eid", "src", "src_col", "dst", "dst_col")
        )
        kinds, subtypes, origins = values["type"], values["subtype"], values["origin"]
        producers, runs, states = values["producer"], values["run"], values["state"]
        starts, ends, observed = values["valid_from"], values["valid_to"], values["observed"]
        decode = msgspec.json.decode
        for set_id, target, producer, origin, run_id, state, vf, vt, ob, links in rows:
            links = decode(links) if isinstance(links, str) else links
            n = len(links)
            target_id = local[int(target)]
            eid += array("q", (int(set_id),)) * n
            dst += array("q", (target_id,)) * n
            producers += array("q", (texts[producer],)) * n
            origins += array("q", (origin_ids[origin],)) * n
            runs += array("q", (texts[run_id],)) * n
            states += array("q", (texts[state],)) * n
            starts += array("q", (micros(vf, OPEN_START),)) * n
            ends += array("q", (micros(vt, OPEN_END),)) * n
            observed += array("q", (micros(ob, _NONE_TIME),)) * n
            if not n:
                continue
            sources, source_columns, target_columns, link_kinds, link_subtypes = zip(
                *links, strict=True
            )
            src.extend(map(local.__getitem__, map(int, sources)))
            # Interned in the order the links name them (source column, target column, ...).
            columns = list(
                map(
                    texts.__getitem__,
                    chain.from_iterable(zip(source_columns, target_columns, strict=True)),
                )
            )
            src_col.extend(columns[0::2])
            dst_col.extend(columns[1::2])
            kinds.extend(map(type_ids.__getitem__, link_kinds))
            subtypes.extend(map(subtype_ids.__getitem__, link_subtypes))
        cols: dict[str, Any] = {n: np.array(values[n], dtype=np.int64) for n in _INT_FIELDS}
        return ColumnarEdges(datasets=known, strings=strings, **cols)


class _Interned(dict[Any, int]):
    """A dict whose missing keys are interned by `add` (it returns the new index)."""

    def __init__(self, add: Callable[[Any], int], known: dict[Any, int] | None = None) -> None:
        super().__init__(known or {})
        self._add = add

    def __missing__(self, key: Any) -> int:
        i = self[key] = self._add(key)
        return i


class StoredLineageGraph(InMemoryLineageGraph):
    """A LineageGraph over the store's columnar index; edges become objects when read."""

    def __init__(
        self,
        columns: ColumnarEdges,
        *,
        snapshot: str | None = None,
        small_closure: int = SMALL_CLOSURE,
    ) -> None:
        super().__init__(small_closure=small_closure)
        self._load(columns)
        self._stored_snapshot = snapshot

    def _load(self, columns: ColumnarEdges) -> None:
        self._columns = columns
        used = np.zeros(len(columns.datasets), dtype=bool)
        used[columns.src] = True
        used[columns.dst] = True
        # Datasets no edge names any more (purged) are left out, as in the in-memory graph.
        keep = np.flatnonzero(used)
        remap = np.full(len(columns.datasets), -1, dtype=np.int64)
        remap[keep] = np.arange(keep.size, dtype=np.int64)
        self._refs = [columns.datasets[i] for i in keep.tolist()]
        self._ids = {r: i for i, r in enumerate(self._refs)}
        self._src_ids = remap[columns.src]
        self._dst_ids = remap[columns.dst]
        self._src = self._src_ids  # type: ignore[assignment]  # arrays serve as well
        self._dst = self._dst_ids  # type: ignore[assignment]
        self._valid_from = columns.valid_from  # type: ignore[assignment]
        self._valid_to = columns.valid_to  # type: ignore[assignment]
        self._by_target: tuple[IntArray, IntArray] | None = None
        self._invalidate()

    @property
    def columns(self) -> ColumnarEdges:
        return self._columns

    def canonical(self, canonical: Callable[[DatasetRef], DatasetRef]) -> StoredLineageGraph:
        """This graph with datasets re-addressed by `canonical` (the catalog's aliases)."""
        columns = self._columns.remapped(canonical)
        if columns is self._columns:
            return self
        return StoredLineageGraph(columns, small_closure=self._small_closure)

    def add_edges(self, edges: Iterable[LineageEdge]) -> None:
        """Add edges in memory only (the store is not written); equal ones are ignored."""
        edges = list(edges)
        if not edges:
            return
        known = set(self.edges())
        fresh = list(dict.fromkeys(e for e in edges if e not in known))
        if fresh:
            self._load(self._columns.with_edges(fresh))
            self._stored_snapshot = None

    def add_unstored_edges(self, edges: Iterable[LineageEdge]) -> None:
        """Add edges the store cannot hold (a failed run's, valid over [t, t)) in memory,
        without comparing them with every stored edge."""
        fresh = list(dict.fromkeys(edges))
        if fresh:
            self._load(self._columns.with_edges(fresh))
            self._stored_snapshot = None

    def edges(self) -> Iterator[LineageEdge]:
        """Every stored edge in store order, superseded ones included."""
        columns = self._columns
        return (columns.edge(k) for k in range(columns.size))

    def edges_into(self, ds: DatasetRef, *, as_of: View = None) -> list[LineageEdge]:
        """Valid edges whose target is a column of ``ds`` (or ``ds`` as a whole)."""
        i = self._ids.get(ds)
        if i is None:
            return []
        order, indptr = self._target_rows()
        rows = order[indptr[i] : indptr[i + 1]].tolist()
        edges = [self._columns.edge(k) for k in rows]
        return [e for e in edges if is_valid(e, as_of)]

    def incoming_columns(
        self, datasets: Iterable[DatasetRef], *, as_of: View = None
    ) -> IncomingColumns:
        """Column reach and table-level producers of the datasets' valid incoming edges,
        counted on the arrays: no edge objects, no set of names unless asked for."""
        wanted = np.zeros(len(self._refs), dtype=bool)
        picked = [self._ids[d] for d in datasets if d in self._ids]
        columns = self._columns
        strings = columns.strings
        if not picked:
            return IncomingColumns({}, {}, lambda _: set())
        wanted[np.array(picked, dtype=np.int64)] = True
        if isinstance(as_of, RetainedView):
            valid = as_of.mask(
                self._refs, self._ids, self._dst_ids, columns.valid_from, columns.valid_to
            )
        else:
            valid = columns.valid(as_of)
        mask = valid & wanted[self._dst_ids]
        dst, col = self._dst_ids[mask], columns.dst_col[mask]
        table = col == 0
        width = len(strings)
        pairs = np.unique(dst[~table] * width + col[~table])
        per_dataset = np.bincount(pairs // width, minlength=len(self._refs))
        counts = {self._refs[i]: int(per_dataset[i]) for i in np.flatnonzero(per_dataset).tolist()}
        producers: dict[DatasetRef, set[str]] = {}
        table_pairs = np.unique(dst[table] * width + columns.producer[mask][table])
        for key in table_pairs.tolist():
            d, p = divmod(key, width)
            producers.setdefault(self._refs[d], set()).add(strings[p] or "")
        order, indptr = self._target_rows()

        def names(ds: DatasetRef) -> set[str]:
            i = self._ids.get(ds)
            if i is None:
                return set()
            rows = order[indptr[i] : indptr[i + 1]]
            rows = rows[valid[rows] & (columns.dst_col[rows] != 0)]
            return {strings[c] or "" for c in np.unique(columns.dst_col[rows]).tolist()}

        return IncomingColumns(counts, producers, names)

    def snapshot_id(self) -> str:
        """Content hash of the stored edge set, equal to ``snapshot_digest(self.edges())``."""
        if self._stored_snapshot is None:
            ordered = np.sort(self._columns.edge_digests())
            if ordered.size:
                first = np.ones(ordered.size, dtype=bool)
                first[1:] = ordered[1:] != ordered[:-1]
                ordered = ordered[first]
            self._stored_snapshot = hashlib.sha256(ordered.tobytes()).hexdigest()
        return self._stored_snapshot

    def _target_rows(self) -> tuple[IntArray, IntArray]:
        if self._by_target is None:
            order = np.argsort(self._dst_ids, kind="stable")
            indptr = np.zeros(len(self._refs) + 1, dtype=np.int64)
            np.cumsum(np.bincount(self._dst_ids, minlength=len(self._refs)), out=indptr[1:])
            self._by_target = (order, indptr)
        return self._by_target
