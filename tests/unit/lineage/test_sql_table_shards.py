"""Date-sharded tables and wildcard tables, named by their family where the schema names it."""

from __future__ import annotations

import pytest

from erasure.lineage.sql import sql_lineage
from erasure.lineage.sql.table_shards import resolve_shard, shard_family


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("proj.ds.events_20260101", "proj.ds.events_yyyymmdd"),
        ("ga_sessions_20170801", "ga_sessions_yyyymmdd"),
        ("sessions20260101", "sessions_yyyymmdd"),
        ("events_20240229", "events_yyyymmdd"),  # a leap day
        ("events_20260229", None),  # not a date
        ("events_20261301", None),
        ("events_2026_01_01", None),  # BigQuery shards only by YYYYMMDD
        ("events_202601", None),
        ("events_120260101", None),  # nine digits
        ("20260101", None),  # a date, but no table before it
        ("events", None),
    ],
)
def test_only_an_eight_digit_calendar_date_makes_a_shard(name: str, family: str | None) -> None:
    assert shard_family(name) == family


def test_a_wildcard_reads_its_family_and_names_what_else_it_matches() -> None:
    known = [
        "p.ds.events_yyyymmdd",
        "p.ds.events_intraday_yyyymmdd",
        "p.ds.events_archive",
        "p.other.events_yyyymmdd",
    ]
    assert resolve_shard("p.ds.events_*", known) == (
        "p.ds.events_yyyymmdd",
        ("p.ds.events_archive", "p.ds.events_intraday_yyyymmdd"),
    )
    assert resolve_shard("p.ds.events_2026*", known) == ("p.ds.events_yyyymmdd", ())
    assert resolve_shard("p.ds.events_intraday_*", known) == ("p.ds.events_intraday_yyyymmdd", ())
    assert resolve_shard("p.ds.e*", known) == (
        "p.ds.e*",
        ("p.ds.events_archive", "p.ds.events_intraday_yyyymmdd", "p.ds.events_yyyymmdd"),
    )
    assert resolve_shard("p.ds.zzz_*", known) == ("p.ds.zzz_*", ())


def test_a_wildcard_reading_other_known_tables_is_a_gap() -> None:
    lineage = sql_lineage(
        "SELECT user_id FROM `p.ds.events_*` WHERE _TABLE_SUFFIX > '20260101'",
        dialect="bigquery",
        schema={"p.ds.events_yyyymmdd": ["user_id"], "p.ds.events_intraday_yyyymmdd": ["user_id"]},
    )
    assert [e.source for e in lineage.edges] == ["p.ds.events_yyyymmdd.user_id"]
    assert lineage.gaps == [
        "wildcard table p.ds.events_* in statement 1 also reads "
        "p.ds.events_intraday_yyyymmdd: their columns are not traced"
    ]


def test_table_suffix_is_no_column_of_the_family() -> None:
    lineage = sql_lineage(
        "SELECT _TABLE_SUFFIX AS day, count(*) AS n FROM `p.ds.events_*` GROUP BY 1",
        dialect="bigquery",
        schema={"p.ds.events_yyyymmdd": ["user_id"]},
    )
    assert lineage.edges == []
    assert lineage.gaps == []


def test_without_a_family_key_a_shard_is_named_as_written() -> None:
    lineage = sql_lineage(
        "SELECT user_id FROM p.ds.events_20260101",
        dialect="bigquery",
        schema={"p.ds.sessions_yyyymmdd": ["user_id"]},
    )
    assert [e.source for e in lineage.edges] == ["p.ds.events_20260101.user_id"]
