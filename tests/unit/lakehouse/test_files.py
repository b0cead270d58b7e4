"""The file search behind `residue`: each format read as it stores values, where a raw search
would miss them (JSON escapes, compression, truncated bounds, renamed columns, partition
paths), and every file it cannot read counted as unverifiable."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from erasure.lakehouse.errors import LakehouseError
from erasure.lakehouse.files import (
    Probe,
    list_files,
    redact,
    search_file,
    truncated_bound_of,
)
from erasure.lakehouse.rows import matching_rows, typed_values, value_counts
from tests.unit.lakehouse.support import CANARY, SUBJECT, assert_no_canary, match_of

VALUES = {"email": {SUBJECT}}
PROBE = Probe.build(match_of(VALUES), ["email"], VALUES)
FS = pafs.LocalFileSystem()


def verdict(root: Path, relative: str, probe: Probe = PROBE) -> str:
    return search_file(FS, str(root), relative, probe)


@pytest.mark.parametrize(
    ("bound", "found"),
    [
        (SUBJECT[:16], True),  # a lower bound: the value cut to 16 characters
        (SUBJECT[:15] + chr(ord(SUBJECT[15]) + 1), True),  # an upper bound: cut, rounded up
        (SUBJECT[:8], True),
        (SUBJECT[:7], False),  # too short to be taken for theirs
        (SUBJECT[:15] + chr(ord(SUBJECT[15]) + 2), False),
        ("neighbour@exampl", False),
        (SUBJECT, False),  # the whole value is a substring match, not a truncation
        (SUBJECT[:16].upper(), True),  # stored in another case than the identity's
        (SUBJECT[:15].upper() + chr(ord(SUBJECT[15].upper()) + 1), True),
    ],
)
def test_a_truncated_bound_is_recognised(bound: str, found: bool) -> None:
    assert truncated_bound_of(bound, SUBJECT) is found


def test_json_escapes_and_embedded_stats_do_not_hide_a_value(tmp_path: Path) -> None:
    value = 'o"hara\\back@example.com'  # a quote and a backslash: both escaped in JSON
    probe = Probe.build(match_of({"email": {value}}), ["email"], {"email": {value}})
    # Escaped once in the file, twice in the stats string inside it.
    stats = json.dumps({"minValues": {"email": value}})
    (tmp_path / "commit.json").write_text(json.dumps({"add": {"stats": stats}}) + "\n")
    assert value not in (tmp_path / "commit.json").read_text()
    assert verdict(tmp_path, "commit.json", probe) == "holds"
    (tmp_path / "other.json").write_text(json.dumps({"add": {"stats": "{}"}}))
    assert verdict(tmp_path, "other.json", probe) == "clean"


def test_a_typed_value_is_found_under_its_column_key(tmp_path: Path) -> None:
    probe = Probe.build(match_of({"id": {4242}}), ["id"], {"id": {4242}})
    (tmp_path / "1.json").write_text(json.dumps({"stats": json.dumps({"maxValues": {"id": 4242}})}))
    (tmp_path / "2.json").write_text(json.dumps({"size": 4242}))  # a size, not an id
    assert verdict(tmp_path, "1.json", probe) == "holds"
    assert verdict(tmp_path, "2.json", probe) == "clean"


def test_compressed_metadata_is_read(tmp_path: Path) -> None:
    (tmp_path / "v1.gz.metadata.json").write_bytes(
        gzip.compress(json.dumps({"x": SUBJECT}).encode())
    )
    assert verdict(tmp_path, "v1.gz.metadata.json") == "holds"


def test_parquet_columns_are_judged_by_match_and_free_text_by_substring(tmp_path: Path) -> None:
    table = pa.table({"email": ["jo" + SUBJECT], "note": ["fine"]})
    pq.write_table(table, tmp_path / "neighbour.parquet")
    # A neighbour's address that contains theirs is not theirs ...
    assert verdict(tmp_path, "neighbour.parquet") == "clean"
    pq.write_table(pa.table({"email": ["x"], "note": [f"call {SUBJECT}"]}), tmp_path / "n.parquet")
    # ... but their address in free text is.
    assert verdict(tmp_path, "n.parquet") == "holds"


def test_nested_stats_and_partition_maps_of_a_checkpoint_are_read(tmp_path: Path) -> None:
    add = pa.array(
        [{"path": "part-0.parquet", "stats": json.dumps({"maxValues": {"email": SUBJECT}})}]
    )
    pq.write_table(pa.table({"add": add}), tmp_path / "stats.parquet")
    assert verdict(tmp_path, "stats.parquet") == "holds"
    partitions = pa.array([[("email", SUBJECT)]], type=pa.map_(pa.string(), pa.string()))
    pq.write_table(pa.table({"partitionValues": partitions}), tmp_path / "map.parquet")
    short = Probe.build(match_of(VALUES), ["email"], {})  # by match only: no text to search
    assert verdict(tmp_path, "map.parquet", short) == "holds"


def test_a_renamed_iceberg_column_is_found_by_its_field_id(tmp_path: Path) -> None:
    field = pa.field("mail", pa.string(), metadata={b"PARQUET:field_id": b"2"})
    pq.write_table(pa.table({"mail": ["x" * 3]}, schema=pa.schema([field])), tmp_path / "a.parquet")
    probe = Probe.build(match_of({"email": {"xxx"}}), ["email"], {}, field_names={2: "email"})
    assert verdict(tmp_path, "a.parquet", probe) == "holds"
    assert verdict(
        tmp_path, "a.parquet", Probe.build(match_of({"email": {"xxx"}}), ["email"], {})
    ) == ("clean")


def test_a_path_that_spells_the_value_holds_it_and_is_redacted(tmp_path: Path) -> None:
    from urllib.parse import quote

    directory = tmp_path / f"email={quote(SUBJECT, safe='')}"
    directory.mkdir()
    pq.write_table(pa.table({"id": [1]}), directory / "part-0.parquet")
    [relative] = list_files(FS, str(tmp_path))
    assert verdict(tmp_path, relative) == "holds"
    assert_no_canary(redact(relative, PROBE))
    assert redact(relative, PROBE).endswith("/part-0.parquet")


def test_what_cannot_be_read_is_unverifiable_never_clean(tmp_path: Path) -> None:
    (tmp_path / "blob.puffin").write_bytes(b"PFA1\x00\x01\x02")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / "broken.avro").write_bytes(b"Obj\x01 truncated")
    (tmp_path / ".part-0.parquet.crc").write_bytes(b"crc\x00\x00\x00\x02\x00\x12\x34")
    assert verdict(tmp_path, "blob.puffin") == "unreadable"
    assert verdict(tmp_path, "broken.parquet") == "unreadable"
    assert verdict(tmp_path, "broken.avro") == "unreadable"
    assert verdict(tmp_path, ".part-0.parquet.crc") == "clean"  # Hadoop's checksum: no values


def test_short_values_are_searched_only_where_typed() -> None:
    probe = Probe.build(match_of({"email": {"%", "ann"}}), ["email"], {"email": {"%", "ann"}})
    assert probe.texts == ()
    assert SUBJECT in PROBE.texts and CANARY in PROBE.texts[1]  # and its percent-encoded form


def test_rows_read_nulls_of_string_views_as_nulls() -> None:
    """pyarrow 26 counts a null of a string view as "": delta-rs reads strings as views."""
    batch = pa.record_batch({"email": pa.array([SUBJECT, None, SUBJECT], pa.string_view())})
    assert value_counts([batch], ["email"]) == {"email": {SUBJECT: 2}}
    seen = []
    match = match_of(VALUES)
    assert matching_rows([batch], lambda c, v: seen.append(v) or match(c, v), ["email"]) == 2
    assert seen == [SUBJECT]  # asked once per distinct value, never about a null


def test_a_value_of_the_wrong_type_names_the_column_only() -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(LakehouseError) as failed:
        typed_values("delta t", schema, {"id": {SUBJECT}})
    assert "'id'" in str(failed.value) and "int64" in str(failed.value)
    assert_no_canary(failed.value)
