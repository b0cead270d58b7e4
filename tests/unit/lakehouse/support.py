"""What the lakehouse tests share: the subject's values (with a canary no message or evidence
may ever contain), a `Match` over them, and a search of a table's files written apart from
erasure.lakehouse.files, so the two cannot share a blind spot."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow.parquet as pq
from pyiceberg.avro.file import AvroFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import Record

from erasure.lakehouse import Match

CANARY = "zqcanary"
# Longer than 16 characters: Iceberg manifests keep it as a truncated (and rounded up) bound.
SUBJECT = f"o'hara.{CANARY}7f3a@example.com"
NEIGHBOUR = "neighbour@example.com"  # the same domain: must stay
# Values that break a predicate spliced into SQL text, and values close to them that must stay.
HOSTILE = [
    "o'brien@example.com",
    "quote\"and'both",
    "back\\slash\\",
    "100%_sure",
    "%",
    "_",
    "Zoë.Ünïcödé@例え.jp",
    "nul\x00inside",
    "long-" + "x" * 5000,
]
NEAR_MISSES = ["o''brien@example.com", "back\\\\slash\\\\", "100x_sure", "a%b", "x_y", "long-"]


def match_of(values: Mapping[str, Iterable[object]]) -> Match:
    """The caller's match: a stored value is the subject's when it is one of theirs."""
    theirs = {column: set(given) for column, given in values.items()}
    return lambda column, value: value in theirs.get(column, ())


def files_holding(root: Path, needle: str = CANARY) -> list[str]:
    """Files under `root` in which `needle` appears, each read by its format."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if needle in _readable(path):
            found.append(str(path.relative_to(root)))
    return found


def _readable(path: Path) -> str:
    if path.suffix == ".parquet":
        return json.dumps(pq.read_table(path).to_pylist(), default=repr)
    if path.suffix == ".avro":
        with AvroFile[Record](PyArrowFileIO().new_input(str(path))) as reader:
            return repr(reader.header.meta) + repr([_plain(record) for record in reader])
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


def _plain(node: object) -> object:
    if isinstance(node, Record):
        return [_plain(node[i]) for i in range(len(node))]
    if isinstance(node, Mapping):
        return {repr(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bytes):
        return node.decode("utf-8", "replace")
    return node


def assert_no_canary(*texts: object) -> None:
    for text in texts:
        assert CANARY not in str(text), "a message or evidence repeats the subject's value"
