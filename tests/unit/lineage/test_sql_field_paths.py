"""Nested fields: a column of its table, never a table; the edge names the top-level column."""

from __future__ import annotations

from erasure.lineage.sql import sql_lineage, to_lineage_edges
from erasure.model import DatasetRef, FieldRef


def test_the_edge_names_the_top_level_column_the_catalog_lists() -> None:
    lineage = sql_lineage(
        "INSERT INTO ds.contacts (email) SELECT e.payload.customer.email FROM ds.events e",
        dialect="bigquery",
    )
    [edge] = to_lineage_edges(lineage, namespace="warehouse", producer="sql:contacts")
    assert edge.source == FieldRef(DatasetRef("warehouse", "ds.events"), "payload")
    assert edge.target == FieldRef(DatasetRef("warehouse", "ds.contacts"), "email")
    assert lineage.gaps == []


def test_a_struct_field_is_never_read_as_a_table() -> None:
    # main read `payload` as a table here: `<unknown>.user_id`, "payload is not a table"
    lineage = sql_lineage("SELECT payload.user_id AS uid FROM ds.events", dialect="bigquery")
    assert [(e.source, e.target) for e in lineage.edges] == [("ds.events.payload", "<output>.uid")]
    assert lineage.gaps == []


def test_an_array_path_in_from_is_unnested_not_a_table() -> None:
    lineage = sql_lineage(
        "SELECT o.id, i.sku FROM ds.orders o JOIN o.items i ON TRUE", dialect="bigquery"
    )
    assert {e.source for e in lineage.edges} == {"ds.orders.id", "ds.orders.items"}


def test_a_struct_star_goes_to_every_column_and_is_a_gap() -> None:
    lineage = sql_lineage(
        "CREATE TABLE ds.flat AS SELECT e.payload.* FROM ds.events e", dialect="bigquery"
    )
    assert [(e.source, e.target) for e in lineage.edges] == [("ds.events.payload", "ds.flat.*")]
    assert lineage.gaps == [
        "SELECT e.payload.* in statement 1 selects the fields of ds.events.payload, whose "
        "names are unknown: lineage to every column"
    ]


def test_in_dialects_without_dotted_fields_a_dotted_name_needs_the_schema() -> None:
    unknown = sql_lineage("SELECT address.city FROM crm.people", dialect="postgres")
    named = sql_lineage(
        "SELECT address.city FROM crm.people",
        dialect="postgres",
        schema={"crm.people": ["id", "address"]},
    )
    assert [e.source for e in unknown.edges] == ["<unknown>.city"]
    assert "address is not a table or alias in scope" in unknown.gaps[0]
    assert [e.source for e in named.edges] == ["crm.people.address"]
    assert named.gaps == []


def test_a_field_of_a_column_the_schema_lacks_is_the_usual_gap() -> None:
    lineage = sql_lineage(
        "SELECT payload.user_id FROM ds.events",
        dialect="bigquery",
        schema={"ds.events": ["id", "body"]},
    )
    assert [e.source for e in lineage.edges] == ["ds.events.payload"]
    assert lineage.gaps == ["ds.events.payload in statement 1 is not in the schema of ds.events"]
