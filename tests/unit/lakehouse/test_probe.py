"""How one path, text or bound is judged to name the subject: a `col=value` segment or summary
key by the caller's match (typed, whatever values were located), a neighbour's value that
contains theirs never, and every partition value redacted from what evidence shows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from erasure.lakehouse.files import search_file
from erasure.lakehouse.probe import Probe, has_token, path_holds, redact, text_holds
from tests.unit.lakehouse.support import CANARY, SUBJECT, assert_no_canary, match_of

FS = pafs.LocalFileSystem()


def lower_match(column: str, value: object) -> bool:
    """A caller's match that reads the stored value its own way (case-insensitive email)."""
    return column == "email" and isinstance(value, str) and value.lower() == "ann@ex.io"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("ann@ex.io", True),
        ("to: ann@ex.io, cc: bob", True),
        ("'ann@ex.io'", True),
        ("joann@ex.io", False),  # a neighbour's address that contains theirs
        ("ann@ex.io.au", False),
        ("ann@ex.io-old", False),
        ("x_ann@ex.io", False),
        ("+ann@ex.io", False),
        ("%ann@ex.io", False),
    ],
)
def test_a_value_is_found_in_text_only_as_a_whole_token(text: str, found: bool) -> None:
    assert has_token(text, "ann@ex.io") is found


def test_a_partition_segment_is_judged_by_match_whatever_was_located() -> None:
    # A retry: nothing located now (values {}), the stored value in another case.
    probe = Probe.build(lower_match, ["email"], {})
    assert path_holds("data/email=Ann%40Ex.io/00000-0.parquet", probe)
    assert path_holds("email=ANN%40EX.IO", probe)
    assert not path_holds("data/email=joann%40ex.io/00000-0.parquet", probe)
    assert not path_holds("data/other=Ann%40Ex.io/00000-0.parquet", probe)  # not their column
    # Iceberg's snapshot summary key of a partition.
    assert text_holds("partitions.email=Ann%40Ex.io", probe)


def test_a_partition_value_is_matched_as_its_type() -> None:
    by_id = match_of({"customer_id": {42}})  # an int column: "42" in a path is 42
    probe = Probe.build(by_id, ["customer_id"], {"customer_id": {42}})
    assert path_holds("customer_id=42/part-0.parquet", probe)
    assert not path_holds("customer_id=420/part-0.parquet", probe)
    assert not path_holds("customer_id=__HIVE_DEFAULT_PARTITION__/part-0.parquet", probe)


def test_a_partition_named_otherwise_is_its_source_column() -> None:
    probe = Probe.build(lower_match, ["email"], {}, partition_columns={"email_part": "email"})
    assert path_holds("data/email_part=ann%40ex.io/f.parquet", probe)


def test_a_neighbour_holding_a_superstring_is_clean_everywhere(tmp_path: Path) -> None:
    values = {"email": {"ann@ex.io"}}
    probe = Probe.build(match_of(values), ["email"], values)
    stats = json.dumps(
        {"minValues": {"email": "joann@ex.io"}, "maxValues": {"email": "joann@ex.io"}}
    )
    (tmp_path / "0.json").write_text(
        json.dumps({"add": {"path": "email=joann%40ex.io/p.parquet", "stats": stats}}) + "\n"
    )
    pq.write_table(pa.table({"note": ["wrote to joann@ex.io"]}), tmp_path / "n.parquet")
    (tmp_path / "v1.metadata.json").write_text(json.dumps({"x": "joann@ex.io"}))
    for name in ("0.json", "n.parquet", "v1.metadata.json"):
        assert search_file(FS, str(tmp_path), name, probe) == "clean", name
    (tmp_path / "v2.metadata.json").write_text(json.dumps({"x": "mail ann@ex.io"}))
    assert search_file(FS, str(tmp_path), "v2.metadata.json", probe) == "holds"


def test_a_keyed_value_is_judged_by_match_not_by_its_text(tmp_path: Path) -> None:
    """A stats value under their column is theirs when match says so, spelled as it may be."""
    probe = Probe.build(lower_match, ["email"], {})
    stats = json.dumps({"maxValues": {"email": "ANN@EX.IO"}})
    (tmp_path / "0.json").write_text(json.dumps({"add": {"stats": stats}}))
    assert search_file(FS, str(tmp_path), "0.json", probe) == "holds"


def test_every_partition_value_is_redacted_from_what_is_shown() -> None:
    probe = Probe.build(match_of({"email": {SUBJECT}}), ["email"], {"email": {SUBJECT}})
    shown = redact("data/email=anyone%40x.io/id=42/f.parquet", probe)
    assert shown == "data/email=…/id=…/f.parquet"
    assert_no_canary(redact(f"data/{SUBJECT}.parquet", probe))
    assert CANARY not in redact(f"email={SUBJECT}/x", None)
