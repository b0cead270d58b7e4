"""A SQL lineage gap's kind is set where the gap is found, never read back out of its text."""

from __future__ import annotations

import pickle

from erasure.lineage.sql import SqlGap, sql_lineage
from erasure.model import GapKind


def test_a_table_whose_name_reads_like_another_kind_keeps_the_gaps_kind() -> None:
    # The name holds "function", "opaque" and "parse": words the text once was searched for.
    (gap,) = sql_lineage("INSERT INTO opaque_function_parsed SELECT a FROM t").gaps
    assert "without a column list" in gap
    assert gap.kind is GapKind.UNRESOLVED_COLUMN


def test_each_kind_comes_from_where_the_gap_was_found() -> None:
    kinds = {
        "SELECT hash_email(email) AS h FROM crm.customers": GapKind.OPAQUE_PRODUCER,
        "INSERT INTO out (a) SELECT * FROM src": GapKind.TABLE_ONLY_LINEAGE,
        "SELEC broken FROM": GapKind.UNPARSEABLE_SQL,
        "INSERT INTO out (a) SELECT x.a FROM nowhere_alias": GapKind.UNRESOLVED_COLUMN,
    }
    for script, kind in kinds.items():
        gaps = sql_lineage(script).gaps
        assert gaps and {g.kind for g in gaps} == {kind}, (script, gaps)


def test_a_gap_reads_as_its_text_and_survives_a_copy() -> None:
    gap = SqlGap("statement 1 could not be parsed", GapKind.UNPARSEABLE_SQL)
    assert gap == "statement 1 could not be parsed"
    copied = pickle.loads(pickle.dumps(gap))
    assert (copied, copied.kind) == (gap, GapKind.UNPARSEABLE_SQL)
