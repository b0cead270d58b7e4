"""A `sql` job facet's statement as it is stored: no value and no comment of it kept, and the
same column lineage read from it as from the statement the producer ran."""

from __future__ import annotations

import pytest

from erasure.lineage.sql import sql_lineage
from erasure.lineage.sql.literals import MAX_STRIPPED_QUERY, without_literals

CANARY = "ann.canary@example.org"


@pytest.mark.parametrize(
    ("dialect", "query", "stored"),
    [
        (
            None,
            f"SELECT c.id, 'x' AS tag FROM crm.customers AS c WHERE c.email = '{CANARY}' "
            "AND c.age > 41 LIMIT 10 -- for the request",
            "SELECT c.id, ? AS tag FROM crm.customers AS c WHERE c.email = ? AND c.age > ? LIMIT ?",
        ),
        (
            "postgres",
            f"/* {CANARY} */ DELETE FROM crm.orders WHERE email = $${CANARY}$$ AND id = $1",
            "DELETE FROM crm.orders WHERE email = %s AND id = $1",
        ),
        (
            "bigquery",
            f"SELECT * FROM `p.crm.customers` WHERE email IN (r'{CANARY}', @other)",
            "SELECT * FROM `p.crm.customers` WHERE email IN (?, @other)",
        ),
        (
            "mysql",
            f'SELECT id FROM crm.customers WHERE email = "{CANARY}"',  # a string in MySQL
            "SELECT id FROM crm.customers WHERE email = ?",
        ),
        (
            "not-a-dialect",  # read as generic SQL
            f"SELECT id FROM crm.customers WHERE phone = N'{CANARY}'",
            "SELECT id FROM crm.customers WHERE phone = ?",
        ),
    ],
)
def test_values_and_comments_become_placeholders(
    dialect: str | None, query: str, stored: str
) -> None:
    assert without_literals(query, dialect) == stored


def test_a_statement_without_values_is_kept_as_written() -> None:
    query = "INSERT INTO marts.ltv\nSELECT o.customer_id, SUM(o.amount)  FROM crm.orders AS o"
    assert without_literals(query) is query


@pytest.mark.parametrize(
    "query",
    [
        f"SELEC '{CANARY}' FROM ((",  # not SQL sqlglot reads
        f"SELECT '{CANARY}",  # an unterminated string
        f"SELECT '{CANARY}' AS e" + " " * MAX_STRIPPED_QUERY,  # too long to parse
    ],
)
def test_a_statement_that_cannot_be_read_is_not_kept(query: str) -> None:
    assert without_literals(query) is None


@pytest.mark.parametrize(
    ("dialect", "script"),
    [
        (
            None,
            "INSERT INTO marts.vip SELECT c.id AS id, CASE WHEN o.amount > 1000 THEN 'gold' "
            "ELSE c.tier END AS tier FROM crm.customers AS c JOIN crm.orders AS o "
            f"ON o.customer_id = c.id WHERE c.email <> '{CANARY}'",
        ),
        (
            "postgres",
            "CREATE TABLE marts.segments AS SELECT c.region AS region, COUNT(*) AS n "
            "FROM crm.customers AS c WHERE c.created_at > DATE '2026-01-01' "
            "GROUP BY c.region HAVING COUNT(*) >= 10;\n"
            "INSERT INTO marts.latest SELECT s.region AS region FROM marts.segments AS s "
            "WHERE s.n > 3 ORDER BY s.n DESC LIMIT 5",
        ),
    ],
)
def test_lineage_read_from_the_stored_statement_is_the_statements(
    dialect: str | None, script: str
) -> None:
    stored = without_literals(script, dialect)
    assert stored is not None and CANARY not in stored
    original = sql_lineage(script, dialect=dialect).as_json()
    assert original["edges"]
    assert sql_lineage(stored, dialect=dialect).as_json() == original


@pytest.mark.parametrize(
    "query",
    [
        'SELECT * FROM t WHERE email = "ann@example.com"',  # a string in MySQL, Spark
        "SELECT * FROM t WHERE email = $$ann@example.com$$",  # a string in Postgres
        "SELECT * FROM t WHERE email = r'ann@example.com'",  # a raw string in BigQuery
    ],
)
def test_without_a_dialect_a_statement_read_otherwise_holding_values_is_not_kept(
    query: str,
) -> None:
    """The `sql` facet's `dialect` is optional: what some dialect reads as a value is not kept
    when none is named; named, it is stripped as that dialect reads it."""
    assert without_literals(query) is None
    assert without_literals('SELECT * FROM t WHERE email = "ann@example.com"', "mysql") == (
        "SELECT * FROM t WHERE email = ?"
    )
