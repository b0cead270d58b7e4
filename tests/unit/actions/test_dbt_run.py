"""The dbt rebuild's checks of what a run did, as dbt's own files report it (the run itself is
tested against the real dbt CLI in tests/integration/test_dbt_project.py)."""

from __future__ import annotations

from typing import Any

import pytest

from erasure.actions.dbt_run import _the_node_that_ran, _wrote_what_was_planned
from erasure.catalog import DbtLineageSource, DbtRebuild
from erasure.errors import RebuildFailed

PLANNED = DbtRebuild(
    select="path:models/marts/ltv.sql",
    project_dir="dbt",
    node="model.shop.ltv",
    materialized="table",
    checksum="abc",
    depends_on=["model.shop.stg_customers"],
)


def node(**changed: Any) -> dict[str, Any]:
    """The model as the run's own manifest has it."""
    return {
        "resource_type": "model", "database": "warehouse_db", "schema": "marts", "alias": "ltv",
        "config": {"materialized": "table"}, "checksum": {"name": "sha256", "checksum": "abc"},
        "depends_on": {"nodes": ["model.shop.stg_customers"]}, **changed,
    }  # fmt: skip


def test_a_run_that_wrote_the_planned_model_the_planned_way_passes() -> None:
    _wrote_what_was_planned(PLANNED, "marts.ltv", node(), "warehouse_db", "dbt run")


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        ({"database": "other_db"}, "in another database than the connection"),
        ({"schema": "dev"}, "it wrote 'dev.ltv', not 'marts.ltv'"),
        ({"config": {"materialized": "view"}}, "materialized 'view' now, not table"),
        ({"checksum": {"name": "sha256", "checksum": "def"}}, "the model's code changed"),
        ({"depends_on": {"nodes": ["model.shop.archive"]}}, "reads other nodes"),
    ],
)
def test_a_run_that_wrote_otherwise_than_planned_is_no_rebuild(
    changed: dict[str, Any], why: str
) -> None:
    with pytest.raises(RebuildFailed, match=why):
        _wrote_what_was_planned(PLANNED, "marts.ltv", node(**changed), "warehouse_db", "dbt run")


def test_the_projects_own_run_hooks_are_not_other_models() -> None:
    results = {"results": [
        {"unique_id": "operation.shop.shop-on-run-start-0", "status": "success"},
        {"unique_id": "model.shop.ltv", "status": "success"},
        {"unique_id": "operation.shop.shop-on-run-end-0", "status": "success"},
    ]}  # fmt: skip
    assert _the_node_that_ran(PLANNED, "marts.ltv", 0, results, "dbt run") == "model.shop.ltv"
    results["results"].append({"unique_id": "model.shop.ltv_daily", "status": "success"})
    with pytest.raises(RebuildFailed, match="2 nodes ran where only"):
        _the_node_that_ran(PLANNED, "marts.ltv", 0, results, "dbt run")


@pytest.mark.parametrize(
    "name", ["VAULT_TOKEN", "erasure_vault_token", "AIRFLOW__CORE__FERNET_KEY", "DBT_TARGET",
             "dbt_empty", "DBT_DEFER"],
)  # fmt: skip
def test_what_dbt_is_never_given_cannot_be_named_for_it(name: str) -> None:
    with pytest.raises(ValueError, match="may not be given to dbt"):
        DbtLineageSource(manifest="m.json", environment=[name])
    assert DbtLineageSource(manifest="m.json", environment=["DBT_PASSWORD"]).environment
