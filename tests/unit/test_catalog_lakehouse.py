"""Lakehouse tables in the catalog: where they live (`lakehouses`), and only what their
erasure can do with them; a bad entry names the field and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.catalog import load_catalog
from erasure.errors import CatalogError
from erasure.lakehouse import DeltaConfig, IcebergCatalogConfig

HEAD = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
lakehouses:
  lake: {kind: iceberg, properties: {type: sql, uri: "sqlite:///lake.db", warehouse: lake}}
  ledger: {kind: delta, root: delta}
datasets:
"""
ENTRY = """  - {namespace: lake, name: events.activity, kind: table, holds_subject: {email: email},
     lakehouse: {catalog: lake, table: events.activity}%s}
"""


def load(tmp_path: Path, extra: str = "", head: str = HEAD) -> object:
    path = tmp_path / "catalog.yaml"
    path.write_text(head + ENTRY % extra)
    return load_catalog(path)


def test_a_lakehouse_table_needs_no_connection_and_no_owner(tmp_path: Path) -> None:
    catalog = load(tmp_path)
    ds = catalog.datasets[0]  # type: ignore[attr-defined]
    assert ds.reachable and ds.connection is None and ds.owner is None
    assert isinstance(catalog.lakehouse(ds), IcebergCatalogConfig)  # type: ignore[attr-defined]
    assert isinstance(catalog.lakehouses["ledger"], DeltaConfig)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        (", connection: warehouse", "connection", "drop 'connection'"),
        (", storage: immutable", "storage", "backup of its own"),
        (", rebuild: {sql: 'CREATE TABLE x AS SELECT 1'}", "rebuild", "dag_id"),
        (
            ", aggregate: {quasi_identifiers: [region], count_column: n}",
            "aggregate",
            "let it escalate",
        ),
        (", kind: view", "kind", "a view holds no rows"),
    ],
)
def test_what_a_lakehouse_table_cannot_be_is_refused_naming_the_field(
    tmp_path: Path, extra: str, field: str, says: str
) -> None:
    entry = extra.replace(", kind: view", "")
    path = tmp_path / "catalog.yaml"
    text = HEAD + ENTRY % entry
    if "kind: view" in extra:
        text = text.replace("kind: table", "kind: view")
    path.write_text(text)
    with pytest.raises(CatalogError) as refused:
        load_catalog(path)
    assert field in str(refused.value) and says in str(refused.value)


def test_a_lakehouse_the_catalog_does_not_declare_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(HEAD + (ENTRY % "").replace("catalog: lake,", "catalog: lakes,"))
    with pytest.raises(CatalogError, match=r"lakehouse.catalog.*allowed: \['lake', 'ledger'\]"):
        load_catalog(path)


def test_a_lakehouse_table_rebuilt_by_its_dag_is_allowed(tmp_path: Path) -> None:
    catalog = load(tmp_path, ", rebuild: {dag_id: export_activity}")
    assert catalog.datasets[0].rebuild.kind == "dag"  # type: ignore[attr-defined]


def test_a_secret_is_named_by_its_variable_never_written(tmp_path: Path) -> None:
    head = HEAD.replace(
        "warehouse: lake}}",
        "warehouse: lake}, properties_from_env: {credential: 'not a name!'}}",
    )
    with pytest.raises(CatalogError, match="environment variable"):
        load(tmp_path, head=head)
