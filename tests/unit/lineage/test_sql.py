"""Declared lineage from SQL: the edges and gaps `erasure lineage sql` shows a user."""

from __future__ import annotations

import pytest

from erasure.errors import LineageError
from erasure.lineage.sql import SqlColumnEdge, SqlLineage, sql_lineage, to_lineage_edges
from erasure.model import DatasetRef, EdgeOrigin, EdgeSubtype, EdgeType, FieldRef

SCHEMA = {
    "crm.customers": ["id", "email", "name", "region"],
    "crm.orders": ["id", "customer_id", "amount", "status", "ordered_at"],
}

Edge = tuple[str, str, str, str]


def edges(lineage: SqlLineage) -> set[Edge]:
    return {(e.source, e.target, e.type.value, e.subtype.value) for e in lineage.edges}


def direct(source: str, target: str, subtype: str) -> Edge:
    return (source, target, "DIRECT", subtype)


def indirect(source: str, targets: list[str], subtype: str) -> set[Edge]:
    """One INDIRECT edge per target column (the OpenLineage convention)."""
    return {(source, target, "INDIRECT", subtype) for target in targets}


def test_ctas_with_rename_expression_aggregate_and_group_by() -> None:
    lineage = sql_lineage("""
        CREATE TABLE marts.customer_ltv AS
        SELECT o.customer_id AS cid, upper(o.status) AS status_u,
               sum(o.amount) AS ltv, count(*) AS orders
        FROM crm.orders o
        GROUP BY o.customer_id, o.status
    """)
    targets = [
        "marts.customer_ltv.cid",
        "marts.customer_ltv.status_u",
        "marts.customer_ltv.ltv",
        "marts.customer_ltv.orders",
    ]
    assert edges(lineage) == {
        direct("crm.orders.customer_id", "marts.customer_ltv.cid", "IDENTITY"),
        direct("crm.orders.status", "marts.customer_ltv.status_u", "TRANSFORMATION"),
        direct("crm.orders.amount", "marts.customer_ltv.ltv", "AGGREGATION"),
        # count(*) reads no column: `orders` has only the GROUP BY dependencies
        *indirect("crm.orders.customer_id", targets, "GROUP_BY"),
        *indirect("crm.orders.status", targets, "GROUP_BY"),
    }
    assert lineage.gaps == []


def test_count_star_depends_only_on_the_filter() -> None:
    lineage = sql_lineage("SELECT count(*) AS n FROM crm.customers WHERE region = 'EU'")
    assert edges(lineage) == {("crm.customers.region", "<output>.n", "INDIRECT", "FILTER")}


def test_star_expands_with_the_schema() -> None:
    lineage = sql_lineage(
        "CREATE TABLE backup.customers AS SELECT * FROM crm.customers", schema=SCHEMA
    )
    assert edges(lineage) == {
        direct(f"crm.customers.{c}", f"backup.customers.{c}", "IDENTITY")
        for c in ("id", "email", "name", "region")
    }
    assert lineage.gaps == []


def test_star_without_schema_is_table_level_lineage_and_a_gap() -> None:
    lineage = sql_lineage("CREATE TABLE backup.customers AS SELECT * FROM crm.customers")
    assert edges(lineage) == {direct("crm.customers.*", "backup.customers.*", "IDENTITY")}
    assert lineage.gaps == [
        "SELECT * over crm.customers without schema in statement 1: table-level lineage only"
    ]


def test_join_on_and_where_are_indirect_for_every_output_column() -> None:
    lineage = sql_lineage("""
        SELECT c.email, o.amount
        FROM crm.customers c JOIN crm.orders o ON o.customer_id = c.id
        WHERE o.status = 'paid'
    """)
    targets = ["<output>.email", "<output>.amount"]
    assert edges(lineage) == {
        direct("crm.customers.email", "<output>.email", "IDENTITY"),
        direct("crm.orders.amount", "<output>.amount", "IDENTITY"),
        *indirect("crm.orders.customer_id", targets, "JOIN"),
        *indirect("crm.customers.id", targets, "JOIN"),
        *indirect("crm.orders.status", targets, "FILTER"),
    }


def test_cte_and_derived_table_are_traced_to_base_tables() -> None:
    lineage = sql_lineage("""
        CREATE TABLE marts.eu_spend AS
        WITH eu AS (SELECT id, email FROM crm.customers WHERE region = 'EU')
        SELECT eu.email, t.total
        FROM eu
        JOIN (SELECT customer_id, sum(amount) AS total FROM crm.orders GROUP BY customer_id) t
          ON t.customer_id = eu.id
    """)
    targets = ["marts.eu_spend.email", "marts.eu_spend.total"]
    assert edges(lineage) == {
        direct("crm.customers.email", "marts.eu_spend.email", "IDENTITY"),
        direct("crm.orders.amount", "marts.eu_spend.total", "AGGREGATION"),
        *indirect("crm.customers.region", targets, "FILTER"),
        *indirect("crm.orders.customer_id", targets, "GROUP_BY"),
        *indirect("crm.orders.customer_id", targets, "JOIN"),
        *indirect("crm.customers.id", targets, "JOIN"),
    }
    assert lineage.gaps == []


def test_correlated_and_in_subqueries_filter_the_output() -> None:
    lineage = sql_lineage("""
        SELECT c.email FROM crm.customers c
        WHERE EXISTS (SELECT 1 FROM crm.orders o WHERE o.customer_id = c.id)
          AND c.region IN (SELECT region FROM ref.regions WHERE active)
    """)
    assert edges(lineage) == {
        direct("crm.customers.email", "<output>.email", "IDENTITY"),
        *indirect("crm.orders.customer_id", ["<output>.email"], "FILTER"),
        *indirect("crm.customers.id", ["<output>.email"], "FILTER"),
        *indirect("crm.customers.region", ["<output>.email"], "FILTER"),
        *indirect("ref.regions.region", ["<output>.email"], "FILTER"),
        *indirect("ref.regions.active", ["<output>.email"], "FILTER"),
    }


def test_bare_columns_in_a_correlated_subquery_without_schema_still_resolve() -> None:
    # sqlglot's qualify refuses this query without the tables' columns; the tracer does not
    lineage = sql_lineage("""
        SELECT c.region, count(*) AS n
        FROM crm.customers c JOIN crm.orders o USING (id)
        WHERE NOT EXISTS (SELECT 1 FROM crm.optouts x WHERE x.customer_id = c.id AND active)
        GROUP BY 1
    """)
    targets = ["<output>.region", "<output>.n"]
    assert edges(lineage) == {
        direct("crm.customers.region", "<output>.region", "IDENTITY"),
        *indirect("crm.customers.region", targets, "GROUP_BY"),
        *indirect("crm.customers.id", targets, "JOIN"),
        *indirect("crm.orders.id", targets, "JOIN"),
        *indirect("crm.optouts.customer_id", targets, "FILTER"),
        *indirect("crm.optouts.active", targets, "FILTER"),
        *indirect("crm.customers.id", targets, "FILTER"),
    }
    assert lineage.gaps == []


def test_recursive_cte_is_traced_to_its_anchor_table() -> None:
    lineage = sql_lineage("""
        WITH RECURSIVE chain AS (
            SELECT id, manager_id FROM hr.staff WHERE manager_id IS NULL
            UNION ALL
            SELECT s.id, s.manager_id FROM hr.staff s JOIN chain ON s.manager_id = chain.id
        )
        SELECT id FROM chain
    """)
    assert edges(lineage) == {
        direct("hr.staff.id", "<output>.id", "IDENTITY"),
        *indirect("hr.staff.manager_id", ["<output>.id"], "FILTER"),
        *indirect("hr.staff.manager_id", ["<output>.id"], "JOIN"),
        *indirect("hr.staff.id", ["<output>.id"], "JOIN"),
    }
    assert lineage.gaps == []


def test_scalar_subquery_flows_into_its_column() -> None:
    lineage = sql_lineage("""
        SELECT c.id, (SELECT max(o.amount) FROM crm.orders o WHERE o.customer_id = c.id) AS top
        FROM crm.customers c
    """)
    assert direct("crm.orders.amount", "<output>.top", "AGGREGATION") in edges(lineage)
    assert direct("crm.customers.id", "<output>.id", "IDENTITY") in edges(lineage)


def test_insert_with_a_column_list_maps_by_position() -> None:
    lineage = sql_lineage("""
        INSERT INTO marts.contacts (contact_email, display_name)
        SELECT email, name || ' <' || email || '>' FROM crm.customers
    """)
    assert edges(lineage) == {
        direct("crm.customers.email", "marts.contacts.contact_email", "IDENTITY"),
        direct("crm.customers.name", "marts.contacts.display_name", "TRANSFORMATION"),
        direct("crm.customers.email", "marts.contacts.display_name", "TRANSFORMATION"),
    }
    assert lineage.gaps == []


def test_insert_without_column_list_into_an_unknown_table_is_a_gap() -> None:
    lineage = sql_lineage("INSERT INTO marts.contacts SELECT email FROM crm.customers")
    assert edges(lineage) == {direct("crm.customers.email", "marts.contacts.email", "IDENTITY")}
    assert lineage.gaps == [
        "INSERT INTO marts.contacts without a column list in statement 1: marts.contacts is "
        "not in the schema, target columns are taken from the SELECT's output names"
    ]


def test_a_table_written_then_read_is_target_and_source_and_its_columns_become_schema() -> None:
    lineage = sql_lineage(
        """
        CREATE TABLE staging.eu AS SELECT * FROM crm.customers WHERE region = 'EU';
        CREATE TABLE marts.eu_emails AS SELECT * FROM staging.eu;
        """,
        schema={"crm.customers": ["id", "email", "region"]},
    )
    staging = ["staging.eu.id", "staging.eu.email", "staging.eu.region"]
    assert edges(lineage) == {
        direct("crm.customers.id", "staging.eu.id", "IDENTITY"),
        direct("crm.customers.email", "staging.eu.email", "IDENTITY"),
        direct("crm.customers.region", "staging.eu.region", "IDENTITY"),
        *indirect("crm.customers.region", staging, "FILTER"),
        # the second `*` expands over the columns the first statement produced
        direct("staging.eu.id", "marts.eu_emails.id", "IDENTITY"),
        direct("staging.eu.email", "marts.eu_emails.email", "IDENTITY"),
        direct("staging.eu.region", "marts.eu_emails.region", "IDENTITY"),
    }
    assert lineage.gaps == []


def test_create_table_ddl_declares_columns_for_a_later_insert() -> None:
    lineage = sql_lineage("""
        CREATE TABLE marts.t (customer_email TEXT, customer_name TEXT);
        INSERT INTO marts.t SELECT email, name FROM crm.customers;
    """)
    assert edges(lineage) == {
        direct("crm.customers.email", "marts.t.customer_email", "IDENTITY"),
        direct("crm.customers.name", "marts.t.customer_name", "IDENTITY"),
    }
    assert lineage.gaps == []


def test_bare_select_targets_output_or_the_declared_target() -> None:
    sql = "SELECT email AS contact FROM crm.customers"
    assert edges(sql_lineage(sql)) == {
        direct("crm.customers.email", "<output>.contact", "IDENTITY")
    }
    assert edges(sql_lineage(sql, default_target="marts.Contacts")) == {
        direct("crm.customers.email", "marts.contacts.contact", "IDENTITY")
    }


def test_unresolved_column_is_unknown_and_a_gap() -> None:
    lineage = sql_lineage(
        "SELECT email, amount FROM crm.customers c JOIN crm.orders o ON o.customer_id = c.id"
    )
    assert edges(lineage) == {
        direct("<unknown>.email", "<output>.email", "IDENTITY"),
        direct("<unknown>.amount", "<output>.amount", "IDENTITY"),
        *indirect("crm.orders.customer_id", ["<output>.email", "<output>.amount"], "JOIN"),
        *indirect("crm.customers.id", ["<output>.email", "<output>.amount"], "JOIN"),
    }
    assert lineage.gaps == [
        f"<unknown>.{column} in statement 1: table not resolved (ambiguous between "
        "crm.customers, crm.orders); declare the tables' columns in the schema"
        for column in ("email", "amount")
    ]


def test_postgres_schema_qualified_names_resolve_bare_columns() -> None:
    lineage = sql_lineage(
        'SELECT "email", amount FROM CRM.Customers c JOIN "crm"."orders" o ON o.customer_id = c.id',
        dialect="postgres",
        schema=SCHEMA,
    )
    targets = ["<output>.email", "<output>.amount"]
    assert edges(lineage) == {
        direct("crm.customers.email", "<output>.email", "IDENTITY"),
        direct("crm.orders.amount", "<output>.amount", "IDENTITY"),
        *indirect("crm.orders.customer_id", targets, "JOIN"),
        *indirect("crm.customers.id", targets, "JOIN"),
    }
    assert lineage.gaps == []


def test_column_missing_from_the_schema_is_a_gap() -> None:
    lineage = sql_lineage("SELECT phone FROM crm.customers", schema=SCHEMA)
    assert edges(lineage) == {direct("crm.customers.phone", "<output>.phone", "IDENTITY")}
    assert lineage.gaps == [
        "crm.customers.phone in statement 1 is not in the schema of crm.customers"
    ]


def test_udf_keeps_argument_edges_and_is_an_opaque_gap() -> None:
    lineage = sql_lineage("SELECT hash_email(email, 'salt') AS h FROM crm.customers")
    assert edges(lineage) == {direct("crm.customers.email", "<output>.h", "TRANSFORMATION")}
    assert lineage.gaps == ["opaque function hash_email in statement 1"]


def test_unparseable_statement_is_a_gap_and_the_others_are_still_read() -> None:
    lineage = sql_lineage(
        "CREATE TABLE a AS SELECT id FROM crm.customers;\n"
        "SELEC broken FROM;\n"
        "CREATE TABLE b AS SELECT id FROM a;\n"
    )
    assert edges(lineage) == {
        direct("crm.customers.id", "a.id", "IDENTITY"),
        direct("a.id", "b.id", "IDENTITY"),
    }
    assert len(lineage.gaps) == 1
    assert lineage.gaps[0].startswith("statement 2 (line 2) could not be parsed: ")


def test_unterminated_string_is_a_gap_not_an_error() -> None:
    lineage = sql_lineage("SELECT id FROM crm.customers; SELECT 'oops FROM crm.orders")
    assert edges(lineage) == {direct("crm.customers.id", "<output>.id", "IDENTITY")}
    assert lineage.gaps == [
        "statement 2 (line 1) could not be parsed: unterminated string, quoted name or comment"
    ]


def test_window_partition_and_order_are_window_dependencies() -> None:
    lineage = sql_lineage("""
        SELECT id,
               sum(amount) OVER (PARTITION BY customer_id ORDER BY ordered_at) AS running,
               lag(amount) OVER (PARTITION BY customer_id ORDER BY ordered_at) AS previous
        FROM crm.orders
    """)
    targets = ["<output>.id", "<output>.running", "<output>.previous"]
    assert edges(lineage) == {
        direct("crm.orders.id", "<output>.id", "IDENTITY"),
        direct("crm.orders.amount", "<output>.running", "AGGREGATION"),
        # lag copies another row's value: a transformation, not an aggregate
        direct("crm.orders.amount", "<output>.previous", "TRANSFORMATION"),
        *indirect("crm.orders.customer_id", targets, "WINDOW"),
        *indirect("crm.orders.ordered_at", targets, "WINDOW"),
    }


def test_case_when_condition_is_conditional_and_branches_flow() -> None:
    lineage = sql_lineage("""
        SELECT id, CASE WHEN region = 'EU' THEN email ELSE name END AS contact
        FROM crm.customers
    """)
    targets = ["<output>.id", "<output>.contact"]
    assert edges(lineage) == {
        direct("crm.customers.id", "<output>.id", "IDENTITY"),
        direct("crm.customers.email", "<output>.contact", "TRANSFORMATION"),
        direct("crm.customers.name", "<output>.contact", "TRANSFORMATION"),
        *indirect("crm.customers.region", targets, "CONDITIONAL"),
    }


def test_order_by_is_sort_and_group_by_alias_resolves_to_its_expression() -> None:
    lineage = sql_lineage(
        "SELECT lower(email) AS e, count(*) AS n FROM crm.customers GROUP BY e ORDER BY n DESC"
    )
    targets = ["<output>.e", "<output>.n"]
    assert edges(lineage) == {
        direct("crm.customers.email", "<output>.e", "TRANSFORMATION"),
        *indirect("crm.customers.email", targets, "GROUP_BY"),
    }


def test_union_takes_values_from_every_branch() -> None:
    lineage = sql_lineage("""
        CREATE VIEW marts.all_contacts AS
        SELECT email AS contact FROM crm.customers
        UNION ALL
        SELECT address FROM crm.newsletter
    """)
    assert edges(lineage) == {
        direct("crm.customers.email", "marts.all_contacts.contact", "IDENTITY"),
        direct("crm.newsletter.address", "marts.all_contacts.contact", "IDENTITY"),
    }


def test_update_and_merge_write_the_assigned_columns() -> None:
    lineage = sql_lineage(
        """
        UPDATE crm.customers SET email = lower(s.email) FROM staging.fixes s
        WHERE crm.customers.id = s.id;
        MERGE INTO crm.customers t USING staging.fixes s ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET name = s.name
        WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name);
        """,
        dialect="postgres",
    )
    merged = ["crm.customers.name", "crm.customers.id"]
    assert edges(lineage) == {
        direct("staging.fixes.email", "crm.customers.email", "TRANSFORMATION"),
        *indirect("crm.customers.id", ["crm.customers.email"], "FILTER"),
        *indirect("staging.fixes.id", ["crm.customers.email"], "FILTER"),
        direct("staging.fixes.name", "crm.customers.name", "IDENTITY"),
        direct("staging.fixes.id", "crm.customers.id", "IDENTITY"),
        *indirect("crm.customers.id", merged, "JOIN"),
        *indirect("staging.fixes.id", merged, "JOIN"),
    }
    assert lineage.gaps == []


def test_statements_without_column_flow_are_skipped_and_unknown_ones_are_gaps() -> None:
    lineage = sql_lineage(
        """
        DROP TABLE IF EXISTS marts.x;
        CREATE TABLE marts.x AS SELECT id FROM crm.customers;
        DELETE FROM marts.x WHERE id IS NULL;
        COPY marts.x TO '/tmp/x.csv';
        """,
        dialect="postgres",
    )
    assert edges(lineage) == {direct("crm.customers.id", "marts.x.id", "IDENTITY")}
    assert lineage.gaps == ["unsupported statement COPY in statement 4 was not analysed"]


def test_table_function_reading_outside_data_is_an_opaque_gap() -> None:
    lineage = sql_lineage(
        "CREATE TABLE staging.imported AS SELECT * FROM read_parquet('s3://bucket/x.parquet')",
        dialect="duckdb",
    )
    assert edges(lineage) == set()
    assert lineage.gaps == [
        "table function read_parquet in statement 1: what it reads is not traced"
    ]


def test_snowflake_upper_cased_identifiers_come_out_lower_case() -> None:
    lineage = sql_lineage(
        "SELECT Email FROM CRM.Customers", dialect="snowflake", schema={"crm.customers": ["email"]}
    )
    assert edges(lineage) == {direct("crm.customers.email", "<output>.email", "IDENTITY")}


def test_output_is_sorted_deduplicated_and_json_shaped() -> None:
    sql = """
        SELECT region, count(*) AS n FROM crm.customers GROUP BY region;
        SELECT region, count(*) AS n FROM crm.customers GROUP BY region;
    """
    lineage = sql_lineage(sql)
    assert lineage.edges == sorted(set(lineage.edges))
    assert lineage.as_json() == {
        "edges": [
            {
                "source": "crm.customers.region",
                "target": "<output>.n",
                "type": "INDIRECT",
                "subtype": "GROUP_BY",
            },
            {
                "source": "crm.customers.region",
                "target": "<output>.region",
                "type": "DIRECT",
                "subtype": "IDENTITY",
            },
            {
                "source": "crm.customers.region",
                "target": "<output>.region",
                "type": "INDIRECT",
                "subtype": "GROUP_BY",
            },
        ],
        "gaps": [],
    }
    assert sql_lineage(sql) == lineage


def test_to_lineage_edges_are_declared_and_skip_unknown_and_output_ends() -> None:
    lineage = SqlLineage(
        edges=[
            SqlColumnEdge(
                "crm.customers.email", "marts.x.email", EdgeType.DIRECT, EdgeSubtype.IDENTITY
            ),
            SqlColumnEdge("crm.orders.*", "marts.x.*", EdgeType.DIRECT, EdgeSubtype.IDENTITY),
            SqlColumnEdge(
                "<unknown>.phone", "marts.x.phone", EdgeType.DIRECT, EdgeSubtype.IDENTITY
            ),
            SqlColumnEdge(
                "crm.customers.email", "<output>.email", EdgeType.DIRECT, EdgeSubtype.IDENTITY
            ),
        ]
    )
    converted = to_lineage_edges(lineage, namespace="warehouse", producer="sql:marts.x.sql")
    assert [(str(e.source), str(e.target)) for e in converted] == [
        ("crm.customers.email", "marts.x.email"),
        ("crm.orders.*", "marts.x.*"),
    ]
    first, table_level = converted
    assert first.source == FieldRef(DatasetRef("warehouse", "crm.customers"), "email")
    assert table_level.source.column is None  # `*`: table-level lineage
    assert first.origin is EdgeOrigin.DECLARED
    assert first.producer == "sql:marts.x.sql"


def test_input_that_is_not_text_or_an_unknown_dialect_is_a_lineage_error() -> None:
    with pytest.raises(LineageError, match="as text"):
        sql_lineage(b"SELECT 1")  # type: ignore[arg-type]
    with pytest.raises(LineageError, match="unknown SQL dialect 'postgresqlx'"):
        sql_lineage("SELECT 1", dialect="postgresqlx")


def test_unaliased_expressions_are_named_as_written() -> None:
    lineage = sql_lineage(
        """
        INSERT INTO marts.t
        SELECT max( s.amount ), count(*), s.a + s.b, CAST(s.c AS int), s.c::text
        FROM crm.s AS s WHERE s.ok
        """,
        dialect="postgres",
    )
    names = ["max(s.amount)", "count(*)", "s.a + s.b", "cast(s.c as int)", "c"]
    assert edges(lineage) == {
        direct("crm.s.amount", "marts.t.max(s.amount)", "AGGREGATION"),
        direct("crm.s.a", "marts.t.s.a + s.b", "TRANSFORMATION"),
        direct("crm.s.b", "marts.t.s.a + s.b", "TRANSFORMATION"),
        direct("crm.s.c", "marts.t.cast(s.c as int)", "TRANSFORMATION"),
        direct("crm.s.c", "marts.t.c", "TRANSFORMATION"),  # `::` keeps the column's name
        *indirect("crm.s.ok", [f"marts.t.{name}" for name in names], "FILTER"),
    }


def test_to_lineage_edges_keep_a_dotted_expression_name_whole() -> None:
    lineage = sql_lineage("INSERT INTO marts.t SELECT a.x + a.y FROM crm.s a")
    converted = to_lineage_edges(lineage, namespace="warehouse", producer="sql")
    assert {(e.target.dataset.name, e.target.column) for e in converted} == {
        ("marts.t", "a.x + a.y")
    }


def test_procedure_body_is_traced_and_its_parameters_are_not_columns() -> None:
    lineage = sql_lineage(
        """
        CREATE PROCEDURE ds.refresh(p_day DATE)
        BEGIN
          DECLARE n INT64 DEFAULT 0;
          IF p_day IS NULL THEN SET p_day = CURRENT_DATE(); END IF;
          INSERT INTO ds.daily (cid, total)
          SELECT o.cid, sum(o.amount) FROM ds.orders o JOIN ds.customers c ON c.id = o.cid
          WHERE o.day = p_day AND o.amount > n GROUP BY o.cid;
        END;
        INSERT INTO ds.report (cid) SELECT cid FROM ds.daily;
        """,
        dialect="bigquery",
    )
    daily = ["ds.daily.cid", "ds.daily.total"]
    assert edges(lineage) == {
        direct("ds.orders.cid", "ds.daily.cid", "IDENTITY"),
        direct("ds.orders.amount", "ds.daily.total", "AGGREGATION"),
        *indirect("ds.orders.cid", daily, "JOIN"),
        *indirect("ds.customers.id", daily, "JOIN"),
        *indirect("ds.orders.day", daily, "FILTER"),
        *indirect("ds.orders.amount", daily, "FILTER"),
        *indirect("ds.orders.cid", daily, "GROUP_BY"),
        direct("ds.daily.cid", "ds.report.cid", "IDENTITY"),  # the statement after the body
    }
    assert lineage.gaps == []


def test_what_a_body_hands_elsewhere_is_a_gap() -> None:
    lineage = sql_lineage(
        """
        CREATE PROCEDURE dbo.load AS
        BEGIN
          DECLARE @n INT;
          SELECT @n = count(*) FROM dbo.s;
          EXEC dbo.other @n;
          INSERT INTO dbo.t (x) SELECT a FROM dbo.s;
        END
        """,
        dialect="tsql",
    )
    assert edges(lineage) == {direct("dbo.s.a", "dbo.t.x", "IDENTITY")}
    assert lineage.gaps == [
        "statement 1 sets variable @n from a query: values passed on through variables "
        "are not traced",
        "statement 2 (line 6) runs EXEC: what it runs is not traced",
    ]
    python = sql_lineage(
        "CREATE PROCEDURE ml.train() RETURNS STRING LANGUAGE PYTHON AS $$ print(1) $$;",
        dialect="snowflake",
    )
    assert python.edges == []
    assert python.gaps == [
        "statement 1 (line 1) defines a procedure in LANGUAGE python, not analysed"
    ]


def test_tsql_update_of_an_alias_writes_the_table_from_names() -> None:
    lineage = sql_lineage(
        """
        UPDATE o SET o.status = s.status FROM crm.orders AS o JOIN staging.fixes s ON s.id = o.id;
        SELECT id INTO #seen FROM crm.orders;
        """,
        dialect="tsql",
    )
    assert edges(lineage) == {
        direct("staging.fixes.status", "crm.orders.status", "IDENTITY"),
        *indirect("staging.fixes.id", ["crm.orders.status"], "JOIN"),
        *indirect("crm.orders.id", ["crm.orders.status"], "JOIN"),
        direct("crm.orders.id", "#seen.id", "IDENTITY"),  # a temporary table keeps its `#`
    }


def test_mysql_multi_table_update_and_postgres_row_assignment() -> None:
    mysql = sql_lineage(
        "UPDATE crm.orders o JOIN crm.customers c ON o.customer_id = c.id SET o.region = c.region",
        dialect="mysql",
    )
    assert edges(mysql) == {
        direct("crm.customers.region", "crm.orders.region", "IDENTITY"),
        *indirect("crm.orders.customer_id", ["crm.orders.region"], "JOIN"),
        *indirect("crm.customers.id", ["crm.orders.region"], "JOIN"),
    }
    postgres = sql_lineage(
        "UPDATE crm.customers c SET (email, name) = (SELECT f.email, upper(f.name) "
        "FROM staging.fixes f WHERE f.id = c.id)",
        dialect="postgres",
    )
    written = ["crm.customers.email", "crm.customers.name"]
    assert edges(postgres) == {
        direct("staging.fixes.email", "crm.customers.email", "IDENTITY"),
        direct("staging.fixes.name", "crm.customers.name", "TRANSFORMATION"),
        *indirect("staging.fixes.id", written, "FILTER"),
        *indirect("crm.customers.id", written, "FILTER"),
    }
