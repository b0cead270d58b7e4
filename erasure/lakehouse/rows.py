"""The subject's rows in Arrow record batches: by located values (deletes and counts) or by the
caller's `Match` (proofs), and the distinct values a column holds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from erasure.lakehouse.errors import LakehouseError
from erasure.lakehouse.table import Match, SubjectValues


def typed_values(label: str, schema: pa.Schema, values: SubjectValues) -> dict[str, pa.Array]:
    """The located values of each named column as an Arrow array of that column's type: the one
    reading of `values` that both the count and the delete of a table use."""
    typed: dict[str, pa.Array] = {}
    for column, given in values.items():
        if column not in schema.names:
            raise LakehouseError(
                f"{label}: column {column!r} does not exist (columns: {', '.join(schema.names)}); "
                "re-run locate against the table's current schema"
            )
        items = [v for v in given if v is not None]
        if not items:
            continue
        field_type = schema.field(column).type
        try:
            typed[column] = pa.array(items, type=field_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # `from None`: Arrow's message quotes the value that did not fit.
            raise LakehouseError(
                f"{label}: column {column!r}: {len(items)} located value(s) include one that is "
                f"not a {field_type}; re-run locate (the column's type may have changed)"
            ) from None
    return typed


def without_views(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` with string and binary view columns (delta-rs reads strings as views) cast to
    their large forms: pyarrow has no `is_in` kernel for views, and its `value_counts` and
    `unique` of a string view read a null as "" (pyarrow 26)."""
    views = {
        i: pa.large_string() if pa.types.is_string_view(f.type) else pa.large_binary()
        for i, f in enumerate(batch.schema)
        if pa.types.is_string_view(f.type) or pa.types.is_binary_view(f.type)
    }
    if not views:
        return batch
    arrays = [c.cast(views[i]) if i in views else c for i, c in enumerate(batch.columns)]
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def rows_holding(batches: Iterable[pa.RecordBatch], typed: Mapping[str, pa.Array]) -> int:
    """Rows where any column holds one of its typed values."""
    total = 0
    for batch in map(without_views, batches):
        mask = _any_in(batch, typed)
        if mask is not None:
            total += pc.sum(mask).as_py() or 0
    return total


def _any_in(batch: pa.RecordBatch, typed: Mapping[str, pa.Array]) -> pa.Array | None:
    mask: pa.Array | None = None
    for column, value_set in typed.items():
        array = batch.column(column)
        if value_set.type != array.type:  # an engine may read strings as large or view strings
            value_set = value_set.cast(array.type)
        hit = pc.fill_null(pc.is_in(array, value_set=value_set), False)
        mask = hit if mask is None else pc.or_(mask, hit)
    return mask


def value_counts(
    batches: Iterable[pa.RecordBatch], columns: Sequence[str]
) -> dict[str, dict[object, int]]:
    """Per column, each non-null value and the rows holding it."""
    counts: dict[str, Counter[object]] = {column: Counter() for column in columns}
    for batch in map(without_views, batches):
        for column in columns:
            array = batch.column(column)
            for value, rows in _counted(array):
                counts[column][value] += rows
    return {column: dict(found) for column, found in counts.items()}


def strings_beginning(
    batches: Iterable[pa.RecordBatch], columns: Sequence[str], heads: Iterable[str]
) -> dict[str, set[str]]:
    """Per column, each string value whose first characters, lower-cased, are one of `heads`
    (lower-case, all of one length): filtered in Arrow, so a table of millions of distinct
    values yields the few near one of theirs, never all of them."""
    wanted = sorted(set(heads))
    found: dict[str, set[str]] = {column: set() for column in columns}
    if not wanted:
        return found
    size, value_set = len(wanted[0]), pa.array(wanted, pa.large_string())
    for batch in map(without_views, batches):
        for column in columns:
            array = batch.column(column)
            if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
                continue
            begins = pc.utf8_lower(pc.utf8_slice_codeunits(array, 0, size))
            near = pc.filter(array, pc.is_in(begins.cast(pa.large_string()), value_set=value_set))
            found[column].update(v for v in near.to_pylist() if v is not None)
    return found


def _counted(array: pa.Array) -> Iterable[tuple[object, int]]:
    try:
        pairs = pc.value_counts(array)
    except pa.ArrowNotImplementedError:  # nested types: count in Python
        return [(value, rows) for value, rows in Counter(_hashable(array.to_pylist())).items()]
    found = zip(pairs.field("values").to_pylist(), pairs.field("counts").to_pylist(), strict=True)
    return [(value, rows) for value, rows in found if value is not None]


def _hashable(items: list[object]) -> list[object]:
    return [
        repr(item) if isinstance(item, list | dict) else item for item in items if item is not None
    ]


_MEMO_LIMIT = 20_000


def matchable(kind: pa.DataType) -> bool:
    """Whether a column of this type holds what a `Match` judges: text or whole numbers (a
    binary, nested or other column holds values no identifier is compared to)."""
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_string_view(kind)
        or pa.types.is_integer(kind)
    )


def matching_rows(batches: Iterable[pa.RecordBatch], match: Match, columns: Sequence[str]) -> int:
    """Rows where `match` accepts the value of any of `columns` present in the batches."""
    # Values repeat across batches (an id per event): decided once. Bounded: a memo of every
    # distinct value of 10 million rows costs more per lookup than it saves (bench.lakehouse:
    # the scan took 23 CPU s with it unbounded, 3 without).
    decided: dict[tuple[str, object], bool] = {}

    def accepted(column: str, value: object) -> bool:
        try:
            key = (column, value)
            if key not in decided:
                if len(decided) >= _MEMO_LIMIT:
                    decided.clear()
                decided[key] = bool(match(column, value))
            return decided[key]
        except TypeError:  # an unhashable value: ask every time
            return bool(match(column, value))

    total = 0
    for batch in map(without_views, batches):
        mask: pa.Array | None = None
        for column in columns:
            if column not in batch.schema.names:
                continue
            array = batch.column(column)
            hit = _accepted_rows(array, column, accepted)
            if hit is not None:
                mask = hit if mask is None else pc.or_(mask, hit)
        if mask is not None:
            total += pc.sum(mask).as_py() or 0
    return total


def _accepted_rows(array: pa.Array, column: str, accepted: Match) -> pa.Array | None:
    try:
        distinct = pc.unique(array).to_pylist()
    except pa.ArrowNotImplementedError:
        distinct = None
    if distinct is not None:
        hits = [v for v in distinct if v is not None and accepted(column, v)]
        if not hits:
            return None
        try:
            return pc.fill_null(pc.is_in(array, value_set=pa.array(hits, type=array.type)), False)
        except (pa.ArrowException, TypeError, ValueError):
            pass
    mask = [v is not None and accepted(column, v) for v in array.to_pylist()]
    return pa.array(mask, type=pa.bool_()) if any(mask) else None
