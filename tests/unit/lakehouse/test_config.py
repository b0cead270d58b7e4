"""Lakehouse configs: one kind per engine, relative paths under the catalog's directory,
secrets from the environment, and messages that name fields and variables, never values."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.lakehouse import (
    DeltaConfig,
    IcebergCatalogConfig,
    LakehouseError,
    lakehouse_config,
    open_table,
)
from erasure.lakehouse.config import delta_table_uri, iceberg_properties, load_iceberg_catalog
from tests.unit.lakehouse.support import CANARY, assert_no_canary

BASE = Path("/srv/erasure/estate")


def iceberg(**properties: str) -> IcebergCatalogConfig:
    return IcebergCatalogConfig(properties=properties)


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("warehouse", "file:///srv/erasure/estate/warehouse"),
        ("file:lake/wh", "file:///srv/erasure/estate/lake/wh"),
        ("file:///data/wh", "file:///data/wh"),
        ("/data/wh", "file:///data/wh"),
        ("s3://bucket/wh", "s3://bucket/wh"),
    ],
)
def test_a_relative_warehouse_is_under_the_base_directory(given: str, resolved: str) -> None:
    assert iceberg_properties(iceberg(warehouse=given), "lake", BASE)["warehouse"] == resolved


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("sqlite:///catalog.db", "sqlite:////srv/erasure/estate/catalog.db"),
        ("sqlite:////data/catalog.db", "sqlite:////data/catalog.db"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("postgresql+psycopg://u:p@db/lake", "postgresql+psycopg://u:p@db/lake"),
    ],
)
def test_a_relative_sqlite_catalog_is_under_the_base_directory(given: str, resolved: str) -> None:
    assert iceberg_properties(iceberg(uri=given), "lake", BASE)["uri"] == resolved


def test_secrets_are_read_from_the_environment_at_open_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = IcebergCatalogConfig(
        properties={"type": "rest", "uri": "https://catalog"},
        properties_from_env={"token": "LAKE_TOKEN"},
    )
    monkeypatch.setenv("LAKE_TOKEN", f"{CANARY}-token")
    assert iceberg_properties(config, "lake", BASE)["token"] == f"{CANARY}-token"
    monkeypatch.delenv("LAKE_TOKEN")
    with pytest.raises(LakehouseError, match=r"LAKE_TOKEN.*not set"):
        iceberg_properties(config, "lake", BASE)


def test_a_catalog_that_cannot_be_loaded_never_repeats_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKE_URI", f"postgresql+psycopg://lake:{CANARY}@127.0.0.1:9/lake")
    config = IcebergCatalogConfig(
        properties={"type": "sql", "warehouse": "wh"}, properties_from_env={"uri": "LAKE_URI"}
    )
    with pytest.raises(LakehouseError) as failed:
        load_iceberg_catalog(config, "lake", BASE)
    assert "'lake'" in str(failed.value) and "uri" in str(failed.value)
    assert_no_canary(failed.value, repr(failed.value.__cause__), failed.value.__context__)


def test_configs_are_one_kind_each_and_validated_without_echoing_input() -> None:
    assert isinstance(lakehouse_config({"kind": "delta", "root": "lake"}), DeltaConfig)
    parsed = lakehouse_config({"kind": "iceberg", "properties": {"type": "sql"}})
    assert isinstance(parsed, IcebergCatalogConfig) and parsed.properties_from_env == {}
    for bad in (
        {"kind": "hudi", "root": CANARY},
        {"kind": "delta", "root": "lake", "token": CANARY},
        {"kind": "iceberg", "properties": {"credential": 1}, "extra": CANARY},
        {"kind": "iceberg", "properties": {}, "properties_from_env": {"token": f"{CANARY} x"}},
    ):
        with pytest.raises(LakehouseError) as failed:
            lakehouse_config(bad)
        assert_no_canary(failed.value)
    with pytest.raises(LakehouseError, match="properties_from_env"):
        lakehouse_config({"kind": "iceberg", "properties": {}, "properties_from_env": {"t": "a b"}})


@pytest.mark.parametrize(
    "table", ["../other", "/abs/table", "a//b", "a/./b", "c:\\t", "", "s3://x"]
)
def test_a_delta_table_path_stays_under_its_root(table: str) -> None:
    with pytest.raises(LakehouseError, match="relative path under the root"):
        delta_table_uri(DeltaConfig(root="lake"), table, BASE)


def test_a_delta_root_is_under_the_base_directory() -> None:
    assert delta_table_uri(DeltaConfig(root="lake"), "crm/customers", BASE) == (
        "/srv/erasure/estate/lake/crm/customers"
    )
    assert delta_table_uri(DeltaConfig(root="s3://bucket/lake/"), "t", BASE) == "s3://bucket/lake/t"


def test_opening_names_the_missing_table(tmp_path: Path) -> None:
    config = iceberg(type="sql", uri="sqlite:///catalog.db", warehouse="wh")
    with pytest.raises(LakehouseError, match=r"namespace\.table"):
        open_table(config, "lake", "customers", tmp_path)
    with pytest.raises(LakehouseError, match="no such table"):
        open_table(config, "lake", "shop.customers", tmp_path)
    with pytest.raises(LakehouseError, match="no Delta table"):
        open_table(DeltaConfig(root="lake"), "lake", "crm/customers", tmp_path)
