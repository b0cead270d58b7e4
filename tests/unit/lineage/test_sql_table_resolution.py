"""Table names completed with a default database and schema, as each warehouse resolves them."""

from __future__ import annotations

import re

import pytest

from erasure.errors import LineageError
from erasure.lineage.sql import SqlLineage, sql_lineage

Edge = tuple[str, str, str, str]


def edges(lineage: SqlLineage) -> set[Edge]:
    return {(e.source, e.target, e.type.value, e.subtype.value) for e in lineage.edges}


def sources(lineage: SqlLineage) -> set[str]:
    return {e.source for e in lineage.edges}


def test_without_defaults_names_stay_as_written_and_use_is_ignored() -> None:
    lineage = sql_lineage(
        "USE crm; INSERT INTO report (id) SELECT id FROM customers", dialect="mysql"
    )
    assert edges(lineage) == {("customers.id", "report.id", "DIRECT", "IDENTITY")}
    assert lineage.gaps == []


@pytest.mark.parametrize(
    ("dialect", "database", "schema", "written", "completed"),
    [
        ("postgres", "shop", "crm", "customers", "shop.crm.customers"),
        ("postgres", "shop", "crm", "sales.orders", "shop.sales.orders"),
        ("snowflake", "analytics", "public", "RAW.EVENTS", "analytics.raw.events"),
        ("tsql", "erp", "dbo", "sales..orders", "sales.dbo.orders"),
        ("snowflake", "analytics", "marts", "warehouse..events", "warehouse.public.events"),
        ("bigquery", "acme-data", "raw", "events", "acme-data.raw.events"),
        ("bigquery", "acme-data", "raw", "staging.events", "acme-data.staging.events"),
        ("spark", "main", "sales", "events", "main.sales.events"),
        ("databricks", "main", "sales", "crm.customers", "main.crm.customers"),
        ("mysql", "shop", None, "orders", "shop.orders"),
        ("mysql", None, "shop", "crm.customers", "crm.customers"),
        ("hive", "ods", None, "visits", "ods.visits"),
        ("oracle", None, "hr", "employees", "hr.employees"),
    ],
)
def test_names_are_completed_per_dialect(
    dialect: str, database: str | None, schema: str | None, written: str, completed: str
) -> None:
    lineage = sql_lineage(
        f"SELECT a FROM {written}", dialect=dialect, default_db=database, default_schema=schema
    )
    assert sources(lineage) == {f"{completed}.a"}
    assert lineage.gaps == []


def test_a_name_whose_schema_no_default_gives_is_kept_as_written_and_a_gap() -> None:
    lineage = sql_lineage(
        "INSERT INTO report (a) SELECT a FROM customers", dialect="postgres", default_db="shop"
    )
    assert edges(lineage) == {("customers.a", "report.a", "DIRECT", "IDENTITY")}
    assert lineage.gaps == [
        "report in statement 1 names no schema and no --default-schema or USE gives one: "
        "kept as written",
        "customers in statement 1 names no schema and no --default-schema or USE gives one: "
        "kept as written",
    ]


def test_schema_keys_match_by_the_completed_name_only() -> None:
    schema = {"shop.crm.customers": ["id", "email"]}
    same = sql_lineage(
        "SELECT * FROM customers",
        dialect="postgres",
        schema=schema,
        default_db="shop",
        default_schema="crm",
    )
    other = sql_lineage(
        "SELECT * FROM customers",
        dialect="postgres",
        schema=schema,
        default_db="shop",
        default_schema="staging",
    )
    assert sources(same) == {"shop.crm.customers.id", "shop.crm.customers.email"}
    assert sources(other) == {"shop.staging.customers.*"}


def test_quoted_name_is_another_table_than_the_key_it_shares_a_name_with() -> None:
    lineage = sql_lineage(
        'SELECT * FROM "events"',
        dialect="snowflake",
        schema={"EVENTS": ["id", "email"]},
        default_db="analytics",
        default_schema="public",
    )
    assert sources(lineage) == {"analytics.public.events.*"}
    assert lineage.gaps[0] == (
        '"events" in statement 1 means ANALYTICS.PUBLIC.events, the known '
        "analytics.public.events is ANALYTICS.PUBLIC.EVENTS: a different table to the "
        "warehouse (quoted names keep their case), so its columns are not used"
    )


def test_cte_names_fold_as_the_dialect_folds_them() -> None:
    query = 'WITH "recent" AS (SELECT id FROM events) SELECT id FROM {}'
    kwargs = {"dialect": "snowflake", "default_db": "analytics", "default_schema": "public"}
    # Snowflake reads unquoted `recent` as RECENT: a table, not the CTE "recent"
    assert sources(sql_lineage(query.format("recent"), **kwargs)) == {"analytics.public.recent.id"}
    assert sources(sql_lineage(query.format('"recent"'), **kwargs)) == {
        "analytics.public.events.id"
    }


def test_use_and_set_change_the_defaults_of_later_statements() -> None:
    script = """
        USE SCHEMA staging;
        INSERT INTO marts.daily (id) SELECT id FROM events;
        USE DATABASE archive;
        INSERT INTO marts.daily (id) SELECT id FROM events;
        USE archive.raw;
        INSERT INTO marts.daily (id) SELECT id FROM events;
    """
    lineage = sql_lineage(
        script, dialect="snowflake", default_db="analytics", default_schema="public"
    )
    assert edges(lineage) == {
        ("analytics.staging.events.id", "analytics.marts.daily.id", "DIRECT", "IDENTITY"),
        ("events.id", "archive.marts.daily.id", "DIRECT", "IDENTITY"),
        ("archive.raw.events.id", "archive.marts.daily.id", "DIRECT", "IDENTITY"),
    }
    assert lineage.gaps[0] == (
        "statement 3 (line 4) USE DATABASE archive leaves the current schema to the "
        "warehouse: names it would complete are kept as written until a USE SCHEMA"
    )


def test_a_search_path_of_several_schemas_is_a_gap() -> None:
    lineage = sql_lineage(
        "SET search_path TO crm, public; SELECT id FROM customers",
        dialect="postgres",
        default_db="shop",
        default_schema="crm",
    )
    assert sources(lineage) == {"shop.crm.customers.id"}
    assert lineage.gaps == [
        "statement 1 (line 1) sets search_path to several schemas: an unqualified name "
        "resolves to the first of them that has it, which lineage cannot see; names stay "
        "completed with schema crm"
    ]


def test_oracle_alter_session_sets_the_schema() -> None:
    lineage = sql_lineage(
        "ALTER SESSION SET CURRENT_SCHEMA = payroll; SELECT id FROM staff",
        dialect="oracle",
        default_schema="hr",
    )
    assert sources(lineage) == {"payroll.staff.id"}


@pytest.mark.parametrize(
    ("dialect", "database", "schema", "message"),
    [
        (
            "mysql",
            "shop",
            "crm",
            "mysql names tables database.table, where a schema is a "
            "database: --default-db shop and --default-schema crm name two; give one of them",
        ),
        (
            "oracle",
            "prod",
            "hr",
            "oracle names tables schema.table, without a database: give "
            "--default-schema instead of --default-db",
        ),
        ("postgres", "shop.crm", None, "--default-db 'shop.crm' is not one name"),
        ("postgres", None, "", "--default-schema '' is not one name"),
    ],
)
def test_defaults_that_cannot_name_a_table_are_refused(
    dialect: str, database: str | None, schema: str | None, message: str
) -> None:
    with pytest.raises(LineageError, match=re.escape(message)):
        sql_lineage("SELECT a FROM t", dialect=dialect, default_db=database, default_schema=schema)


def test_a_quoted_default_may_hold_a_dot_and_keeps_its_case_for_matching() -> None:
    lineage = sql_lineage(
        "SELECT * FROM t",
        dialect="postgres",
        default_db="shop",
        default_schema='"Sales.EU"',
        schema={'shop."Sales.EU".t': ["a"]},
    )
    assert sources(lineage) == {"shop.sales.eu.t.a"}


def test_two_schema_keys_naming_one_table_with_other_columns_are_refused() -> None:
    message = "schema keys 'customers' and 'crm.customers' both name shop.crm.customers"
    with pytest.raises(LineageError, match=re.escape(message)):
        sql_lineage(
            "SELECT 1",
            dialect="postgres",
            default_db="shop",
            default_schema="crm",
            schema={"customers": ["id"], "crm.customers": ["id", "email"]},
        )
