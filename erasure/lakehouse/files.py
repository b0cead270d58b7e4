"""The file-level search behind `residue`: every file of a table read by its format and
searched for the subject, whatever the table's metadata says the file is for.

A file holds the subject when its path has a partition segment of theirs or spells one of
their string values (see erasure.lakehouse.probe for how keyed and unkeyed places are told
apart); when a Parquet column (nested ones included: a Delta checkpoint's `add.stats`,
`partitionValues`) that is a subject column holds a value `match` accepts, or another string
column names them; when a JSON or text file names them (in its parsed strings: JSON escapes
hide a quote or a backslash from a raw search; a key of theirs, a partition summary key);
when a decoded Avro record (an Iceberg manifest or manifest list) names them, has a partition
value of theirs, or carries a column bound that decodes to a value `match` accepts or that is
the truncated prefix of a string value (Iceberg truncates string bounds to 16 characters by
default, and rounds the upper one up). A file this search cannot read is unverifiable, never
clean. Values that are not strings (ids as numbers) are searched only where keyed: their
digits occur in every size and timestamp of a metadata file, and so do short strings.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pyiceberg.avro.file import AvroFile
from pyiceberg.io import InputFile, InputStream
from pyiceberg.typedef import Record

from erasure.lakehouse.probe import (
    TEXT_MIN_CHARS,
    TRUNCATED_BOUND_MIN_CHARS,
    Probe,
    cut_short,
    document_holds,
    has_token,
    path_holds,
    redact,
    text_holds,
    truncated_bound_of,
)

__all__ = [
    "TEXT_MIN_CHARS",
    "TRUNCATED_BOUND_MIN_CHARS",
    "UNNAMED_MIN_AGE",
    "Located",
    "Probe",
    "Verdict",
    "directories_naming",
    "full_path",
    "json_holds",
    "kinds_count",
    "list_directories",
    "list_files",
    "older_than",
    "redact",
    "remove_empty_directories_naming",
    "search_all",
    "search_file",
    "search_located",
    "search_path",
    "truncated_bound_of",
]

Verdict = Literal["holds", "clean", "unreadable"]

# A file holding the subject that no metadata or log entry ever named may be a concurrent
# writer's, not yet committed: it is removed only once older than this (Iceberg's
# remove_orphan_files default), and until then left, and reported by `residue`.
UNNAMED_MIN_AGE = timedelta(days=3)
_TEXT_SUFFIXES = (".json", ".crc", ".txt", ".text", ".checksum")
_TEXT_NAMES = ("_last_checkpoint", "version-hint.text", "_SUCCESS")
_HADOOP_CRC_MAGIC = b"crc\x00"  # Hadoop's .crc side files: checksums of bytes, no values
_GZIP_MAGIC = b"\x1f\x8b"
_BATCH_ROWS = 8192


@dataclass(frozen=True)
class Located:
    """A file to search: its file system, its path there, and how evidence shows it (relative
    to the table root, or its whole path when it lives elsewhere)."""

    fs: pafs.FileSystem
    path: str
    shown: str


def list_files(fs: pafs.FileSystem, root: str) -> list[str]:
    """Every file under `root`, as paths relative to it, sorted."""
    return _listed(fs, root, pafs.FileType.File)


def list_directories(fs: pafs.FileSystem, root: str) -> list[str]:
    """Every directory under `root` (a local or HDFS tree; object stores have none), relative."""
    return _listed(fs, root, pafs.FileType.Directory)


def _listed(fs: pafs.FileSystem, root: str, kind: pafs.FileType) -> list[str]:
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    prefix = root.rstrip("/") + "/" if root else ""
    found = []
    for info in fs.get_file_info(selector):
        if info.type == kind:
            path = info.path
            found.append(path[len(prefix) :] if prefix and path.startswith(prefix) else path)
    return sorted(found)


def directories_naming(fs: pafs.FileSystem, root: str, probe: Probe) -> list[str]:
    """The directories whose path names the subject (a partition of theirs), relative, with
    a trailing slash: a listing shows the name even when the directory is empty."""
    return [f"{d}/" for d in list_directories(fs, root) if path_holds(d, probe)]


def remove_empty_directories_naming(fs: pafs.FileSystem, root: str, probe: Probe) -> int:
    """Remove the empty directories whose path names the subject, deepest first; how many."""
    removed = 0
    for relative in sorted(directories_naming(fs, root, probe), key=len, reverse=True):
        path = full_path(root, relative.rstrip("/"))
        if not fs.get_file_info(pafs.FileSelector(path, recursive=True)):
            fs.delete_dir(path)
            removed += 1
    return removed


def full_path(root: str, relative: str) -> str:
    """`relative` under `root`, as the file system names it."""
    return f"{root.rstrip('/')}/{relative}" if root else relative


def older_than(fs: pafs.FileSystem, path: str, age: timedelta) -> bool:
    """Whether the file at `path` was last written more than `age` ago (unknown: not)."""
    mtime = fs.get_file_info(path).mtime
    if mtime is None:
        return False
    if mtime.tzinfo is None:
        mtime = mtime.replace(tzinfo=UTC)
    return bool(mtime < datetime.now(UTC) - age)


def search_file(fs: pafs.FileSystem, root: str, relative: str, probe: Probe) -> Verdict:
    """Whether the file at `relative` (under `root`) holds the subject, by its format."""
    return search_path(fs, full_path(root, relative), probe, relative)


def search_path(fs: pafs.FileSystem, path: str, probe: Probe, shown: str | None = None) -> Verdict:
    """Whether the file at `path` holds the subject, by its format; `shown` is the part of
    its path that may name them (relative to the table root), the whole path by default."""
    if path_holds(shown if shown is not None else path, probe):
        return "holds"
    name = path.rsplit("/", 1)[-1]
    try:
        if name.endswith(".parquet"):
            return _search_parquet(fs, path, probe)
        data = _read(fs, path)
        if name.endswith(".avro"):
            return _search_avro(path, data, probe)
        if data.startswith(_HADOOP_CRC_MAGIC) and name.endswith(".crc"):
            return "clean"
        if data.startswith(_GZIP_MAGIC):
            data = gzip.decompress(data)
        if name.endswith(_TEXT_SUFFIXES) or name in _TEXT_NAMES or b"\x00" not in data:
            return _search_text(data, probe)
    except FileNotFoundError:
        # Named by an older metadata file or log entry, and gone from the store: a file that
        # is not there holds no one (a retained snapshot missing it cannot be read, and is
        # reported so by the snapshot scan).
        return "clean"
    except Exception:  # any other failure to read is "unverifiable", never "clean"
        return "unreadable"
    return "unreadable"


def _read(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as stream:
        data: bytes = stream.read()
    return data


# Text and JSON ----------------------------------------------------------------------------


def _search_text(data: bytes, probe: Probe) -> Verdict:
    """A JSON document or JSON lines walked by key; text that is neither searched whole."""
    text = data.decode("utf-8")
    documents, leftover = _json_documents(text)
    if any(_json_holds(document, probe, None) for document in documents):
        return "holds"
    if leftover and document_holds(leftover, probe):
        return "holds"
    return "clean"


def _json_documents(text: str) -> tuple[list[Any], str]:
    """The JSON documents of `text` (one, or one a line: a Delta commit) and what is not."""
    stripped = text.strip()
    if not stripped:
        return [], ""
    if stripped[0] in "[{":
        try:
            return [json.loads(stripped)], ""
        except ValueError:
            pass
    documents, leftover = [], []
    for line in stripped.splitlines():
        if line.lstrip()[:1] in ("[", "{"):
            try:
                documents.append(json.loads(line))
                continue
            except ValueError:
                pass
        leftover.append(line)
    return documents, "\n".join(leftover)


def json_holds(node: Any, probe: Probe) -> bool:
    """Whether parsed JSON (an Iceberg snapshot's summary) names the subject."""
    return _json_holds(node, probe, None)


def _json_holds(node: Any, probe: Probe, key: str | None) -> bool:
    """A parsed JSON value: under a subject column's key judged by `match` (or as a
    truncated stat of theirs); elsewhere, its strings and keys as unkeyed text."""
    if isinstance(node, dict):
        return any(
            text_holds(str(k), probe) or _json_holds(value, probe, str(k))
            for k, value in node.items()
        )
    if isinstance(node, list):
        return any(_json_holds(item, probe, key) for item in node)
    if node is None:
        return False
    if key is not None and key in probe.columns:
        if probe.accepts(key, node):
            return True
        return isinstance(node, str) and cut_short(node, probe)
    if isinstance(node, str):
        if node[:1] in ("{", "["):  # a JSON document in a string: Delta's `stats`
            documents, leftover = _json_documents(node)
            if documents:
                return any(_json_holds(doc, probe, None) for doc in documents) or bool(
                    leftover and document_holds(leftover, probe)
                )
        return text_holds(node, probe)
    return False


# Parquet -----------------------------------------------------------------------------------


def _search_parquet(fs: pafs.FileSystem, path: str, probe: Probe) -> Verdict:
    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        metadata = parquet.schema_arrow.metadata or {}
        for raw in metadata.values():
            if _bytes_hold(raw, probe):
                return "holds"
        for batch in parquet.iter_batches(batch_size=_BATCH_ROWS):
            for index, column in enumerate(batch.columns):
                leaf_field = batch.schema.field(index)
                for name, array in _leaves(leaf_field, column, probe):
                    if _array_holds(name, array, probe):
                        return "holds"
    return "clean"


def _leaves(arrow_field: pa.Field, array: pa.Array, probe: Probe) -> Iterator[tuple[str, pa.Array]]:
    """Each primitive leaf of a column, named by its Iceberg field id when it has one."""
    name = _field_name(arrow_field, probe)
    kind = arrow_field.type
    if pa.types.is_dictionary(kind):
        yield from _leaves(
            pa.field(arrow_field.name, kind.value_type, metadata=arrow_field.metadata),
            array.dictionary_decode(),
            probe,
        )
    elif pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            child = kind.field(i)
            yield from _leaves(child, _struct_child(array, i), probe)
    elif pa.types.is_map(kind):
        yield from _map_pairs(array, probe)
        yield from _leaves(kind.key_field, array.keys, probe)
        yield from _leaves(kind.item_field, array.items, probe)
    elif (
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or pa.types.is_list_view(kind)
        or pa.types.is_large_list_view(kind)
    ):
        yield from _leaves(kind.value_field, array.flatten(), probe)
    else:
        yield name, array


def _struct_child(array: pa.Array, index: int) -> pa.Array:
    child: pa.Array = pc.struct_field(array, [index])
    return child


def _map_pairs(array: pa.Array, probe: Probe) -> Iterator[tuple[str, pa.Array]]:
    """A map keyed by column names (Delta's `partitionValues`) as one leaf per named key."""
    keys, items = array.keys, array.items
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        return
    for column in probe.columns:
        chosen = pc.fill_null(pc.equal(keys, column), False)
        if pc.any(chosen).as_py():
            yield column, items.filter(chosen)


# A leaf whose Iceberg field id is no known column: never taken for a subject column.
_UNKNOWN_FIELD = "\x00field "


def _field_name(arrow_field: pa.Field, probe: Probe) -> str:
    """A leaf's column: by its Iceberg field id where it has one (a column renamed since the
    file was written, or a new column given an old one's name, is told by its id)."""
    raw = (arrow_field.metadata or {}).get(b"PARQUET:field_id")
    if raw is not None and probe.field_names:
        try:
            return probe.field_names.get(int(raw), f"{_UNKNOWN_FIELD}{int(raw)}")
        except ValueError:
            pass
    return str(arrow_field.name)


def _array_holds(name: str, array: pa.Array, probe: Probe) -> bool:
    if len(array) == 0 or array.null_count == len(array):
        return False
    if pa.types.is_string_view(array.type):  # see erasure.lakehouse.rows.without_views
        array = array.cast(pa.large_string())
    elif pa.types.is_binary_view(array.type):
        array = array.cast(pa.large_binary())
    # A subject column is judged by `match` alone: a neighbour's "joann@x.com" contains
    # "ann@x.com" without being hers.
    if name in probe.columns:
        return any(
            value is not None and probe.accepts(name, value)
            for value in pc.unique(array).to_pylist()
        )
    kind = array.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return any(_bytes_hold(v, probe) for v in _containing(array, probe.texts))
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return False
    # Any other string column: unkeyed text (paths with partition segments, free text, JSON).
    candidates = _containing(array, (*probe.texts, *probe.segment_needles()))
    if any(text_holds(text, probe) for text in candidates):
        return True
    documents = array.filter(pc.fill_null(pc.starts_with(array, "{"), False))
    for text in pc.unique(documents).to_pylist():
        if text is not None and _json_holds(text, probe, None):
            return True
    return False


def _containing(array: pa.Array, needles: Iterable[str]) -> list[Any]:
    """The distinct values of a string or binary array that contain any of `needles`."""
    mask: pa.Array | None = None
    for needle in needles:
        hit = pc.fill_null(pc.match_substring(array, needle), False)
        mask = hit if mask is None else pc.or_(mask, hit)
    if mask is None or not pc.any(mask).as_py():
        return []
    return [v for v in pc.unique(array.filter(mask)).to_pylist() if v is not None]


# Avro --------------------------------------------------------------------------------------


class _MemoryInputFile(InputFile):
    """An Avro file already read, for pyiceberg's reader."""

    def __init__(self, location: str, data: bytes) -> None:
        super().__init__(location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._data)


def _search_avro(location: str, data: bytes, probe: Probe) -> Verdict:
    with AvroFile[Record](_MemoryInputFile(location, data)) as reader:
        meta = reader.header.meta
        for key, raw in meta.items():
            if key != "avro.schema" and _string_holds(str(raw), probe):
                return "holds"
        layout = _IcebergLayout.of(meta, probe)
        for record in reader:
            if layout.holds(record, probe):
                return "holds"
    return "clean"


# A manifest entry's status of a removed file (Iceberg spec: 0 existing, 1 added, 2 deleted).
_DELETED = 2
# A partition field keeping a subject column's values: the column, and whether it truncates.
_Keyed = tuple[str, bool]


@dataclass(frozen=True)
class _IcebergLayout:
    """Where an Iceberg manifest keeps each entry's partition values (`data_file.partition`,
    in the order of the header's partition spec) and a manifest list each manifest's
    partition bounds (`partitions`, in the order of its spec `partition_spec_id`)."""

    data_file: int | None = None
    status: int | None = None
    file_path: int | None = None
    partition: int | None = None
    partition_columns: tuple[_Keyed | None, ...] = ()
    spec_id: int | None = None
    summaries: int | None = None
    lower: int | None = None
    upper: int | None = None

    @classmethod
    def of(cls, meta: Mapping[str, Any], probe: Probe) -> _IcebergLayout:
        try:
            schema = json.loads(meta.get("avro.schema", "{}"))
            fields = _field_positions(schema)
            if "data_file" in fields:
                data_file = _record_of(schema["fields"][fields["data_file"]]["type"])
                inner = _field_positions(data_file)
                spec = json.loads(meta.get("partition-spec", "[]"))
                by_id = {f["field-id"]: f for f in spec}
                struct = _record_of(data_file["fields"][inner["partition"]]["type"])
                columns = tuple(
                    _keyed_column(by_id.get(f.get("field-id")), probe)
                    for f in struct.get("fields", [])
                )
                return cls(
                    data_file=fields["data_file"],
                    status=fields.get("status"),
                    file_path=inner.get("file_path"),
                    partition=inner["partition"],
                    partition_columns=columns,
                )
            if "partition_spec_id" in fields and "partitions" in fields:
                summary = _record_of(schema["fields"][fields["partitions"]]["type"])
                bounds = _field_positions(summary)
                return cls(
                    spec_id=fields["partition_spec_id"],
                    summaries=fields["partitions"],
                    lower=bounds["lower_bound"],
                    upper=bounds["upper_bound"],
                )
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
        return cls()

    def holds(self, record: Any, probe: Probe) -> bool:
        if self.data_file is not None and self.partition is not None:
            data_file = record[self.data_file]
            if (
                probe.others
                and self.status is not None
                and record[self.status] != _DELETED
                and self.file_path is not None
                and data_file[self.file_path] in probe.live_files
            ):
                # A file the current snapshot uses: its bounds are its rows', and a value
                # another person there holds explains them (a removed file's: nothing does).
                probe = replace(probe, shared=probe.others)
            partition = data_file[self.partition]
            unkeyed = []  # a partition value no subject column keys: bucket, truncate, ...
            for position in range(len(partition)):
                keyed, value = self._column(position), partition[position]
                if keyed is None:
                    unkeyed.append(value)
                elif probe.accepts(keyed[0], value) or (
                    keyed[1]  # truncate[W]: the value cut short
                    and isinstance(value, str)
                    and cut_short(value, probe)
                ):
                    return True
            others = [data_file[i] for i in range(len(data_file)) if i != self.partition]
            others += unkeyed
            rest = [record[i] for i in range(len(record)) if i != self.data_file]
            return _avro_holds([*rest, *others], probe)
        if self.summaries is not None and probe.decode_summary_bound is not None:
            spec_id, summaries = record[self.spec_id], record[self.summaries] or []
            for position, summary in enumerate(summaries):
                for raw in (summary[self.lower], summary[self.upper]):
                    decoded = probe.decode_summary_bound(spec_id, position, raw) if raw else None
                    if decoded is not None and probe.accepts(*decoded):
                        return True
        return _avro_holds(record, probe)

    def _column(self, position: int) -> _Keyed | None:
        if position < len(self.partition_columns):
            return self.partition_columns[position]
        return None


def _field_positions(record_schema: Mapping[str, Any]) -> dict[str, int]:
    return {f["name"]: i for i, f in enumerate(record_schema.get("fields", []))}


def _record_of(avro_type: Any) -> dict[str, Any]:
    """The record type of a field's type (through a union with null, or an array's items)."""
    if isinstance(avro_type, list):
        for branch in avro_type:
            if branch != "null":
                return _record_of(branch)
    if isinstance(avro_type, dict):
        if avro_type.get("type") == "record":
            return avro_type
        if avro_type.get("type") == "array":
            return _record_of(avro_type.get("items"))
    raise TypeError("not a record")


def _keyed_column(spec_field: Mapping[str, Any] | None, probe: Probe) -> _Keyed | None:
    """The subject column an identity or truncate[W] partition field keeps values of, and
    whether it cuts them short."""
    if spec_field is None:
        return None
    transform = str(spec_field.get("transform"))
    if transform != "identity" and not transform.startswith("truncate["):
        return None
    column = probe.field_names.get(spec_field.get("source-id", -1))
    return (column, transform != "identity") if column in probe.columns else None


def _avro_holds(node: Any, probe: Probe) -> bool:
    if isinstance(node, Record):
        return any(_avro_holds(node[i], probe) for i in range(len(node)))
    if isinstance(node, Mapping):
        items = list(node.items())
        if items and all(isinstance(k, int) and isinstance(v, bytes) for k, v in items):
            return any(_bound_holds(k, v, probe) for k, v in items)
        return any(_avro_holds(k, probe) or _avro_holds(v, probe) for k, v in items)
    if isinstance(node, list | tuple):
        return any(_avro_holds(item, probe) for item in node)
    if isinstance(node, bytes):
        return _bytes_hold(node, probe)
    if isinstance(node, str):
        return text_holds(node, probe)
    return False


def _bound_holds(field_id: int, raw: bytes, probe: Probe) -> bool:
    """A manifest's lower or upper bound of one column (Iceberg's single-value serialisation):
    a subject column's by `match` on its decoded value, or as a truncated value of theirs."""
    if probe.decode_bound is not None:
        decoded = probe.decode_bound(field_id, raw)
        if decoded is not None:
            column, value = decoded
            if column in probe.columns:
                return probe.accepts(column, value) or (
                    isinstance(value, str) and cut_short(value, probe)
                )
    return _bytes_hold(raw, probe)


def _string_holds(text: str, probe: Probe) -> bool:
    if text[:1] in ("{", "["):
        documents, leftover = _json_documents(text)
        if documents:
            return any(_json_holds(d, probe, None) for d in documents) or bool(
                leftover and document_holds(leftover, probe)
            )
    return text_holds(text, probe)


def _bytes_hold(raw: bytes, probe: Probe) -> bool:
    """Unkeyed bytes (a bound of another column, a file's metadata): one of their values as a
    whole token, or the truncated prefix of one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        return any(has_token(text, t) for t in probe.texts)
    return _string_holds(text, probe) or cut_short(text, probe)


def search_located(files: Iterable[Located], probe: Probe) -> tuple[int, list[str], list[str]]:
    """(files checked, shown paths of the files holding, of those unreadable)."""
    checked, holding, unreadable = 0, [], []
    for located in files:
        verdict = search_path(located.fs, located.path, probe, located.shown)
        checked += 1
        if verdict == "holds":
            holding.append(located.shown)
        elif verdict == "unreadable":
            unreadable.append(located.shown)
    return checked, holding, unreadable


def search_all(
    fs: pafs.FileSystem, root: str, relatives: Iterable[str], probe: Probe
) -> tuple[int, list[str], list[str]]:
    """(files checked, files and directories holding, files unreadable) of `relatives`, and of
    every directory under `root` (by its name)."""
    located = (Located(fs, full_path(root, r), r) for r in relatives)
    checked, holding, unreadable = search_located(located, probe)
    return checked, directories_naming(fs, root, probe) + holding, unreadable


def kinds_count(kinds: Sequence[str]) -> dict[str, int]:
    """How many of each kind, for `files_removed`."""
    counted: dict[str, int] = {}
    for kind in kinds:
        counted[kind] = counted.get(kind, 0) + 1
    return counted
