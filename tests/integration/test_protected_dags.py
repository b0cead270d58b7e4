"""The DAGs a catalog has the erasure trigger are protected like the erasure's own (only the
roles granted them by name trigger them or set their runs' state): an entry's or a default's
`dag_id`, a dbt source's, and every DAG a producer policy's `dags` patterns allow."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("airflow")

from erasure_airflow import auth

pytestmark = pytest.mark.airflow

CATALOG = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: marts.ltv, connection: warehouse, kind: table,
     rebuild: {dag_id: build_marts}}
defaults:
  - {match: {name: "reports.*"}, kind: table, rebuild: {dag_id: build_reports}}
  - {match: {name: "lake.*"}, kind: table, rebuild: {kind: producer, dags: ["lake_*"]}}
lineage:
  dbt: [{manifest: "dbt/target/manifest.json", dag_id: dbt_shop}]
"""


def test_every_dag_the_catalog_has_the_erasure_trigger_is_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    monkeypatch.setenv("ERASURE_CATALOG_PATH", str(tmp_path / "catalog.yaml"))
    auth._catalog_rebuild_dags.cache_clear()
    try:
        for dag_id in ("gdpr_erasure", "build_marts", "build_reports", "dbt_shop", "lake_nightly"):
            assert auth.is_protected(dag_id), dag_id
        for dag_id in ("example_dag", "lakehouse_sync", "build"):
            assert not auth.is_protected(dag_id), dag_id
    finally:
        auth._catalog_rebuild_dags.cache_clear()
