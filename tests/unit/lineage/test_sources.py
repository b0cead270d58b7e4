"""The lineage a plan walks (`erasure.lineage.sources`): every source the catalog names (rebuild
SQL, lineage SQL files, OpenLineage files and events received), on catalog identities through
explicit aliases only, with what no source could tell as gaps; the same graph from the store
as in memory, re-read only where a source changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.catalog import Catalog, load_catalog
from erasure.lineage.graph import LineageGraph, RetainedView
from erasure.lineage.openlineage import parse_event
from erasure.lineage.sources import (
    build_lineage,
    declared_sources,
    declared_table_lineage,
)
from erasure.lineage.store import LineageStore
from erasure.model import DatasetRef, EdgeOrigin, EdgeSubtype, EdgeType, Gap, GapKind
from erasure.store import open_store
from erasure.warehouse import Warehouse

PG = "postgres://wh:5432"  # how Airflow's OpenLineage provider names the warehouse
CATALOG = f"""
version: 1
identifiers: {{email: {{normalise: email}}, customer_id: {{normalise: strip}}}}
connections: {{warehouse: {{url: "sqlite:///wh.db"}}}}
datasets:
  - {{namespace: w, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {{email: [email], customer_id: id}},
     aliases: [{{namespace: "{PG}", name: crm.customers}}]}}
  - {{namespace: w, name: marts.ltv, connection: warehouse, kind: table,
     rebuild: {{sql: "CREATE TABLE marts.ltv AS SELECT * FROM crm.customers"}}}}
  - {{namespace: w, name: reports.segments, connection: warehouse, kind: table}}
  - {{namespace: w, name: marts.observed, connection: warehouse, kind: table,
     aliases: [{{namespace: "{PG}", name: marts.observed}}]}}
  - {{namespace: w, name: ml.features, kind: feature_store,
     producer: {{name: features.py, opaque: true}}}}
  - {{namespace: w, name: partner.export, kind: file, producer: {{name: partner_export.py}}}}
  - {{namespace: w, name: crm.imports, connection: warehouse, kind: table,
     holds_subject: {{email: [email]}}, producer: {{name: importer.py}}}}
lineage:
  sql: [{{path: "sql/*.sql"}}]
  openlineage: [lineage/*.jsonl]
"""
SEGMENTS_SQL = (
    "SELECT l.id AS customer_id, nosuch.x AS y FROM marts.ltv AS l"
    " WHERE l.email LIKE '%@example.org'"
)

CUSTOMERS = DatasetRef("w", "crm.customers")
LTV = DatasetRef("w", "marts.ltv")
SEGMENTS = DatasetRef("w", "reports.segments")
OBSERVED = DatasetRef("w", "marts.observed")


def run_event(run_id: str, kind: str, output: str, namespace: str = PG) -> dict[str, Any]:
    """A run of `build.observed` deriving `<output>.email_hash` from the customers' email."""
    columns = {"email_hash": {"inputFields": [{"namespace": PG, "name": "crm.customers",
                                                "field": "email"}]}}  # fmt: skip
    return {
        "eventType": kind,
        "eventTime": "2026-11-01T02:00:00Z",
        "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.20.3",
        "run": {"runId": run_id},
        "job": {"namespace": "airflow", "name": "build.observed"},
        "inputs": [{"namespace": PG, "name": "crm.customers"}],
        "outputs": [
            {"namespace": namespace, "name": output,
             "facets": {"columnLineage": {"fields": columns}}}
        ],
    }  # fmt: skip


@pytest.fixture
def estate(tmp_path: Path) -> tuple[Catalog, Warehouse]:
    (tmp_path / "sql").mkdir()
    (tmp_path / "lineage").mkdir()
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    (tmp_path / "sql" / "reports.segments.sql").write_text(SEGMENTS_SQL)
    events = [
        run_event("01937a10-0000-7000-8000-00000000c0a1", "COMPLETE", "marts.observed"),
        run_event("01937a10-0000-7000-8000-00000000c0a2", "FAIL", "marts.failed_output"),
    ]
    (tmp_path / "lineage" / "runs.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    catalog = load_catalog(tmp_path / "catalog.yaml")
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.customers (id TEXT, email TEXT, region TEXT)"))
    return catalog, warehouse


def edges(graph: LineageGraph, into: DatasetRef) -> set[tuple[str, str, EdgeType, EdgeSubtype]]:
    """The current edges into `into`, as (source column, target column, type, subtype)."""
    return {
        (str(e.source), str(e.target), e.type, e.subtype)
        for e in graph.edges_into(into)
        if e.valid_to is None
    }


def every_edge(graph: LineageGraph) -> list[tuple[str, ...]]:
    return sorted(
        (e.source.dataset.qualified, str(e.source.column), e.target.dataset.qualified,
         str(e.target.column), e.type, e.subtype, e.origin, e.producer)
        for e in graph.edges()
    )  # fmt: skip


def kinds(gaps: list[Gap]) -> set[tuple[GapKind, str | None]]:
    return {(g.kind, g.dataset.name if g.dataset else None) for g in gaps}


def test_rebuild_sql_declares_the_lineage_of_its_artefact_with_star_expanded(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    graph = build_lineage(catalog, warehouse).graph
    # `SELECT *` expands with the warehouse's columns: the catalog lists none for customers.
    assert edges(graph, LTV) == {
        (f"crm.customers.{c}", f"marts.ltv.{c}", EdgeType.DIRECT, EdgeSubtype.IDENTITY)
        for c in ("id", "email", "region")
    }
    [edge] = [e for e in graph.edges_into(LTV) if e.target.column == "email"]
    assert (edge.origin, edge.producer) == (EdgeOrigin.DECLARED, "catalog:marts.ltv.rebuild")


def test_a_lineage_sql_file_declares_lineage_into_the_table_it_is_named_after(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    lineage = build_lineage(catalog, warehouse)
    found = edges(lineage.graph, SEGMENTS)
    assert ("marts.ltv.id", "reports.segments.customer_id", EdgeType.DIRECT,
            EdgeSubtype.IDENTITY) in found  # fmt: skip
    # The WHERE clause is a dependency too: INDIRECT, so erasure follows it.
    assert ("marts.ltv.email", "reports.segments.customer_id", EdgeType.INDIRECT,
            EdgeSubtype.FILTER) in found  # fmt: skip
    # What the parser cannot resolve is a gap on the target, naming the file: never a guess.
    [unresolved] = [g for g in lineage.gaps if g.kind is GapKind.UNRESOLVED_COLUMN]
    assert unresolved.dataset == SEGMENTS
    assert unresolved.detail.startswith("sql:reports.segments.sql: <unknown>.x")


def test_observed_runs_land_on_catalog_identities_and_failed_runs_publish_only_to_erasure(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    graph = build_lineage(catalog, warehouse).graph
    [observed] = graph.edges_into(OBSERVED)
    assert (observed.source.dataset, observed.source.column) == (CUSTOMERS, "email")
    assert (observed.origin, observed.run_state) == (EdgeOrigin.OBSERVED, "COMPLETE")
    assert observed.run_id == "01937a10-0000-7000-8000-00000000c0a1"
    # The failed run publishes no lineage: today's view and every instant's lack its output...
    [failed] = [d for d in graph.datasets() if d.name == "marts.failed_output"]
    assert graph.edges_into(failed) == []
    assert all(graph.edges_into(failed, as_of=e.valid_from) == [] for e in graph.edges())
    # ...but it may have written before it failed: the erasure view keeps it, table-level.
    view = RetainedView(at=datetime(2100, 1, 1, tzinfo=UTC))
    [attempt] = graph.edges_into(failed, as_of=view)
    assert (attempt.run_state, attempt.source.column, attempt.target.column) == ("FAIL", None, None)
    # Nothing stays under the provider's namespace: the aliases are explicit and complete here
    # (the failed run's output is not catalogued, so an erasure reaching it escalates).
    assert {d.namespace for d in graph.datasets() if d != failed} == {"w"}


def test_what_no_source_tells_is_a_gap_and_a_dataset_holding_the_subject_needs_none(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    gaps = kinds(build_lineage(catalog, warehouse).gaps)
    assert (GapKind.OPAQUE_PRODUCER, "ml.features") in gaps
    assert (GapKind.NO_EVENTS, "ml.features") in gaps
    assert (GapKind.NO_EVENTS, "partner.export") in gaps
    # Located directly, whatever writes it: its silent producer is no gap.
    assert not [g for g in gaps if g[1] == "crm.imports"]


def test_an_event_received_over_http_closes_the_no_events_gap(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    received = parse_event(
        run_event("01937a10-0000-7000-8000-00000000c0a3", "COMPLETE", "partner.export", "w")
    )
    lineage = build_lineage(catalog, warehouse, [received])
    assert (GapKind.NO_EVENTS, "partner.export") not in kinds(lineage.gaps)
    assert lineage.graph.upstream(DatasetRef("w", "partner.export")) == {CUSTOMERS}


def test_the_store_gives_the_same_graph_and_gaps_as_memory_and_follows_a_changed_file(
    estate: tuple[Catalog, Warehouse], tmp_path: Path
) -> None:
    catalog, warehouse = estate
    in_memory = build_lineage(catalog, warehouse)
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        lineage_store = LineageStore(store)
        stored = build_lineage(catalog, warehouse, store=lineage_store)
        assert every_edge(stored.graph) == every_edge(in_memory.graph)
        assert kinds(stored.gaps) == kinds(in_memory.gaps)
        assert every_edge(build_lineage(catalog, warehouse, store=lineage_store).graph) == (
            every_edge(in_memory.graph)
        )  # a second sync changes nothing

        (tmp_path / "sql" / "reports.segments.sql").write_text(
            "SELECT l.region AS region FROM marts.ltv AS l"
        )
        changed = build_lineage(catalog, warehouse, store=lineage_store)
        assert edges(changed.graph, SEGMENTS) == {
            ("marts.ltv.region", "reports.segments.region", EdgeType.DIRECT, EdgeSubtype.IDENTITY)
        }
        assert edges(changed.graph, SEGMENTS) == edges(
            build_lineage(catalog, warehouse).graph, SEGMENTS
        )
        assert GapKind.UNRESOLVED_COLUMN not in {g.kind for g in changed.gaps}


def test_a_declared_source_digest_changes_exactly_with_what_its_parse_reads(
    estate: tuple[Catalog, Warehouse], tmp_path: Path
) -> None:
    catalog, warehouse = estate

    def digests() -> dict[str, str]:
        return {s.key: s.digest for s in declared_sources(catalog, Warehouse(catalog))}

    before = digests()
    segments_key = f"sql:{(tmp_path / 'sql' / 'reports.segments.sql').resolve()}"
    assert set(before) == {"rebuild:w/marts.ltv", segments_key}
    assert digests() == before  # stable: nothing is parsed again
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.unrelated (sku TEXT)"))
    assert digests() == before  # a table no script names changes nothing
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("ALTER TABLE crm.customers ADD COLUMN phone TEXT"))
    after = digests()
    assert after["rebuild:w/marts.ltv"] != before["rebuild:w/marts.ltv"]  # its `*` grew
    assert after[segments_key] == before[segments_key]  # it does not read crm.customers


def test_the_lineage_of_one_select_is_given_on_catalog_identities(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    [edge] = declared_table_lineage(
        catalog, warehouse, "marts.observed", "SELECT c.email AS email_hash FROM crm.customers c"
    )
    assert (edge.source.dataset, edge.source.column) == (CUSTOMERS, "email")
    assert (edge.target.dataset, edge.target.column) == (OBSERVED, "email_hash")
    assert (edge.type, edge.origin) == (EdgeType.DIRECT, EdgeOrigin.DECLARED)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"SELECT \xff\xfe id FROM marts.ltv", "is not UTF-8 text (byte 7"),
        (("SELECT " + "(" * 3000 + "id" + ")" * 3000 + " AS id FROM marts.ltv").encode(),
         "nests too deeply for the SQL parser"),
        (("SELECT " + " + ".join(["l.id"] * 3000) + " AS id FROM marts.ltv AS l").encode(),
         "nests too deeply for the SQL parser"),
        (b"SELECT id\x00 FROM marts.ltv", "holds a NUL character"),
    ],
    ids=["not-utf8", "deep-parentheses", "deep-operators", "nul"],
)  # fmt: skip
@pytest.mark.parametrize("kept", ["memory", "store"])
def test_an_unreadable_lineage_sql_file_is_a_gap_on_its_dataset_only(
    estate: tuple[Catalog, Warehouse], tmp_path: Path, content: bytes, reason: str, kept: str
) -> None:
    """A bad file under `lineage.sql` costs its own dataset's lineage (a gap naming the
    file, so that dataset escalates), never every plan."""
    catalog, warehouse = estate
    (tmp_path / "sql" / "reports.segments.sql").write_bytes(content)
    if kept == "store":
        with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
            lineage = build_lineage(catalog, warehouse, store=LineageStore(store))
            graph_edges = edges(lineage.graph, LTV)
    else:
        lineage = build_lineage(catalog, warehouse)
        graph_edges = edges(lineage.graph, LTV)
    [gap] = [g for g in lineage.gaps if g.kind is GapKind.UNPARSEABLE_SQL]
    assert gap.dataset == SEGMENTS
    assert gap.detail.startswith("sql:reports.segments.sql: ") and reason in gap.detail
    # The rest of the lineage is as it was: the rebuild SQL still declares marts.ltv.
    assert ("crm.customers.email", "marts.ltv.email", EdgeType.DIRECT,
            EdgeSubtype.IDENTITY) in graph_edges  # fmt: skip
