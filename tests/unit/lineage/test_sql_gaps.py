"""A SQL lineage gap's kind is set where the gap is found, never read back out of its text."""

from __future__ import annotations

import pickle
import random
import re

from erasure.lineage.sql import SqlGap, sql_lineage
from erasure.model import GapKind
from tests.unit.lineage.sql_corpus import load_corpus
from tests.unit.lineage.sql_reach import REACH_DIR, REVIEW_DIR


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


# Statements sqlglot's parser or optimizer once raised on (IndexError, AttributeError,
# TypeError, AssertionError, ValueError): each must be a gap, never an exception.
_ONCE_RAISED = [
    ("snowflake", "INSERT INTO t SELECT OBJECT_CONSTRUCT ( 'email'"),
    ("bigquery", "INSERT INTO ds . t SELECT id , ARRAY ("),
    ("tsql", "INSERT INTO dbo . t SELECT c . id FROM dbo . customers c CROSS APPLY dbo ."),
    ("tsql", "INSERT INTO dbo . t SELECT c . id FROM dbo . c c CROSS APPLY . f ( c . id ) AS ac"),
    ("bigquery", "INSERT INTO ds . t SELECT id , ph FROM ds . p , ( UNNEST [ a , b ] ) AS ph"),
]


def test_sql_the_parser_or_optimizer_fails_on_is_a_gap_not_an_exception() -> None:
    for dialect, sql in _ONCE_RAISED:
        gaps = sql_lineage(sql, dialect=dialect).gaps
        assert GapKind.UNPARSEABLE_SQL in {g.kind for g in gaps}, sql
        assert all("customers" not in g and "phone" not in g for g in gaps)  # no SQL quoted


def test_merge_update_star_is_every_column_not_an_exception() -> None:
    sql = "MERGE INTO tgt USING src ON tgt.id = src.id WHEN MATCHED THEN UPDATE *"
    lineage = sql_lineage(sql, dialect="databricks", schema={"tgt": ["id", "email"]})
    assert ("src.email", "tgt.email") in {(e.source, e.target) for e in lineage.edges}


def test_mutated_corpus_statements_never_raise() -> None:
    """Fuzzing: corpus statements cut short, with a token dropped, doubled or swapped."""
    cases = load_corpus(REACH_DIR) + load_corpus(REVIEW_DIR)
    generator = random.Random(23)
    for case in generator.sample(cases, 80):
        tokens = re.findall(r"\w+|'[^']*'|\S", case.sql)
        for _ in range(6):
            mutated = list(tokens)
            at, other = generator.randrange(len(tokens)), generator.randrange(len(tokens))
            operation = generator.randrange(4)
            if operation == 0:
                mutated = mutated[: at + 1]
            elif operation == 1:
                del mutated[at]
            elif operation == 2:
                mutated.insert(at, mutated[other])
            else:
                mutated[at], mutated[other] = mutated[other], mutated[at]
            sql_lineage(" ".join(mutated), dialect=case.dialect, schema=case.schema)
