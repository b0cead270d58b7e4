"""Measuring k-anonymity live (`erasure.kanon`): the smallest group decides, every group below
k is counted, a group whose size is unknown never passes, and the numbers name the content
and the query they hold for. Each test runs on SQLite and on the local Postgres."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.catalog import Catalog
from erasure.errors import WarehouseError
from erasure.kanon import KAnonymity, measure_k
from erasure.warehouse import Warehouse


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def warehouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/wh.db"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def schema(warehouse_url: str) -> Iterator[str]:
    """A schema of its own for each test (Postgres: one database for the whole session)."""
    name = f"agg_{uuid.uuid4().hex[:10]}"
    if warehouse_url.startswith("sqlite"):
        yield name
        return
    engine = sa.create_engine(warehouse_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
    try:
        yield name
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')
        engine.dispose()


def aggregate(
    tmp_path: Path,
    url: str,
    schema: str,
    rows: Sequence[tuple[str | None, int | None]],
    *,
    count_column: str = "n",
) -> tuple[Warehouse, Catalog]:
    """An aggregate `<schema>.by_region (region, n)` holding `rows`, in its catalog."""
    catalog = Catalog.model_validate(
        {
            "version": 1,
            "identifiers": {"email": {"normalise": "email"}},
            "connections": {"warehouse": {"url": url}},
            "datasets": [
                {
                    "namespace": "w",
                    "name": f"{schema}.by_region",
                    "connection": "warehouse",
                    "kind": "table",
                    "aggregate": {"quasi_identifiers": ["region"], "count_column": count_column},
                }
            ],
            "base_dir": tmp_path,
        }
    )
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {schema}.by_region (region TEXT, n INTEGER)")
        if rows:
            conn.execute(
                sa.text(f"INSERT INTO {schema}.by_region VALUES (:region, :n)"),
                [{"region": region, "n": n} for region, n in rows],
            )
    return warehouse, catalog


def measure(warehouse: Warehouse, catalog: Catalog, k: int) -> KAnonymity:
    return measure_k(warehouse, catalog.datasets[0], k)


def test_the_smallest_group_at_exactly_k_passes(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    warehouse, catalog = aggregate(tmp_path, warehouse_url, schema, [("north", 5), ("south", 9)])
    measured = measure(warehouse, catalog, 5)
    assert (measured.k, measured.min_group_size, measured.groups, measured.groups_below_k) == (
        5,
        5,
        2,
        0,
    )
    assert measured.passes
    assert (measured.quasi_identifiers, measured.count_column) == (["region"], "n")


def test_one_below_k_fails_and_every_group_below_is_counted(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    rows = [("north", 4), ("south", 1), ("east", 30), ("west", 5)]
    warehouse, catalog = aggregate(tmp_path, warehouse_url, schema, rows)
    measured = measure(warehouse, catalog, 5)
    assert (measured.min_group_size, measured.groups, measured.groups_below_k) == (1, 4, 2)
    assert not measured.passes
    # The same table against a lower k: the boundary moves with k, nothing else does.
    lower = measure(warehouse, catalog, 4)
    assert (lower.groups_below_k, lower.passes) == (1, False)
    assert measure(warehouse, catalog, 1).passes


def test_a_group_whose_quasi_identifier_is_null_is_a_group_like_any_other(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    small = aggregate(tmp_path, warehouse_url, schema, [("north", 12), (None, 2)])
    measured = measure(*small, 10)
    assert (measured.min_group_size, measured.groups, measured.groups_below_k) == (2, 2, 1)
    assert not measured.passes


def test_a_group_whose_size_is_null_is_never_taken_as_large_enough(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    # A NULL count says nothing about how many people the row stands for: k is not shown.
    warehouse, catalog = aggregate(
        tmp_path, warehouse_url, schema, [("north", 40), ("south", None), ("east", 25)]
    )
    measured = measure(warehouse, catalog, 10)
    assert measured.groups == 3
    assert measured.groups_below_k == 1
    assert not measured.passes


def test_an_aggregate_of_only_null_sizes_is_not_taken_for_an_empty_one(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    warehouse, catalog = aggregate(tmp_path, warehouse_url, schema, [("north", None)])
    measured = measure(warehouse, catalog, 10)
    assert (measured.min_group_size, measured.groups, measured.groups_below_k) == (None, 1, 1)
    assert not measured.passes


def test_an_empty_aggregate_holds_nobody_and_passes(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    warehouse, catalog = aggregate(tmp_path, warehouse_url, schema, [])
    measured = measure(warehouse, catalog, 10)
    assert (measured.min_group_size, measured.groups, measured.groups_below_k) == (None, 0, 0)
    assert measured.passes


def test_the_recorded_query_gives_the_recorded_numbers_when_an_auditor_reruns_it(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    rows = [("north", 3), ("south", 11), ("east", 7)]
    warehouse, catalog = aggregate(tmp_path, warehouse_url, schema, rows)
    measured = measure(warehouse, catalog, 8)
    assert "8" in measured.query and f"{schema}.by_region" in measured.query
    with warehouse.engine("warehouse").connect() as conn:
        rerun = conn.exec_driver_sql(measured.query).one()
    assert (rerun[0], rerun[1], rerun[2]) == (3, 3, 2)
    assert (measured.min_group_size, measured.groups, measured.groups_below_k) == (3, 3, 2)


def test_the_table_version_names_the_content_measured(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    warehouse, catalog = aggregate(tmp_path, warehouse_url, schema, [("north", 12), ("south", 15)])
    first = measure(warehouse, catalog, 10)
    assert first.table_version.startswith("sha256:")
    assert measure(warehouse, catalog, 10).table_version == first.table_version
    assert measure(warehouse, catalog, 3).table_version == first.table_version  # k is not content
    with warehouse.engine("warehouse").begin() as conn:
        conn.exec_driver_sql(f"UPDATE {schema}.by_region SET n = 13 WHERE region = 'north'")
    changed = measure(warehouse, catalog, 10)
    assert changed.table_version != first.table_version
    assert changed.passes  # the numbers pass as before: only the version tells them apart


def test_a_missing_table_or_column_is_named(
    tmp_path: Path, warehouse_url: str, schema: str
) -> None:
    warehouse, catalog = aggregate(
        tmp_path, warehouse_url, schema, [("north", 12)], count_column="n_people"
    )
    with pytest.raises(WarehouseError, match=r"columns \['n_people'\].*columns are: region, n"):
        measure(warehouse, catalog, 10)
    with warehouse.engine("warehouse").begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {schema}.by_region")
    fresh = Warehouse(catalog)
    with pytest.raises(WarehouseError, match=r"by_region.*table does not exist"):
        measure(fresh, catalog, 10)
