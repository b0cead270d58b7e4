"""The column-lineage conformance corpus: every case gives exactly the edges it declares.

The cases (`data/sql_corpus/`) are written in the shapes public column-lineage suites test;
`python -m local.bench sql_lineage` prints the same corpus per class, beside sqlglot's `lineage()`.
"""

from __future__ import annotations

import pytest

from erasure.lineage.sql import sql_lineage
from tests.unit.lineage.sql_corpus import CorpusCase, load_corpus, parse_edges

CASES = load_corpus()

# Issue 11's classes of input, each a file of the corpus.
CLASSES = {
    "case_when",
    "window",
    "filter_having",
    "unaliased",
    "wildcard",
    "set_operation",
    "update",
    "names",
    "procedure",
    "dml",
    "merge",
    "subquery_cte",
    "join",
    "basic",
    "default_names",
    "nested_fields",
    "date_shards",
}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case_gives_exactly_the_expected_edges(case: CorpusCase) -> None:
    lineage = sql_lineage(
        case.sql,
        dialect=case.dialect,
        schema=case.schema,
        default_db=case.default_db,
        default_schema=case.default_schema,
    )
    got = {(e.source, e.target, e.type.value, e.subtype.value) for e in lineage.edges}
    assert got == case.edges
    if any(source.startswith("<unknown>.") for source, *_ in got):
        assert lineage.gaps, "an unresolved source column must also be a gap"


def test_corpus_covers_every_class() -> None:
    assert {case.klass for case in CASES} == CLASSES
    assert len(CASES) >= 150


def test_edge_shorthand_expands_to_every_pair_or_pairs_them() -> None:
    assert parse_edges(["s.{a;b} -> t.{x;y} INDIRECT JOIN"]) == {
        (f"s.{s}", f"t.{t}", "INDIRECT", "JOIN") for s in "ab" for t in "xy"
    }
    assert parse_edges(["s.{a;b} => t.{x;y} DIRECT IDENTITY"]) == {
        ("s.a", "t.x", "DIRECT", "IDENTITY"),
        ("s.b", "t.y", "DIRECT", "IDENTITY"),
    }
    with pytest.raises(ValueError, match="is not `source -> target TYPE SUBTYPE`"):
        parse_edges(["s.a to t.b"])
