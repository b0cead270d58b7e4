"""Nightly CRM sync: load the CRM export into the warehouse, erased subjects kept out.

A thin adapter over `erasure.crm_ingest.ingest_crm_export`: it resolves settings, the
catalog's warehouse connection (the Postgres provider hook for `airflow_conn_id`), the
erasure store and the peppers, then calls the domain function. Its XCom and log hold counts
only, never an identifier.

Settings (environment): ERASURE_CATALOG_PATH, ERASURE_STORE_URL, ERASURE_CRM_EXPORT (the
default export file; the `export_path` param overrides it), and the ERASURE_VAULT_* knobs
for the pepper.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import Param, dag, task

from erasure_airflow.queues import crm_ingest_queue

if TYPE_CHECKING:  # the domain is imported inside the task: parsing this file stays cheap
    from sqlalchemy.engine import Engine

    from erasure.catalog import Catalog, DatasetSpec
    from erasure.pseudonym import Pepper


def vault_peppers() -> Sequence[Pepper]:
    """Every pepper version from Vault: tombstones hashed under any of them must match."""
    from erasure.config import Settings
    from erasure.keys.pepper import PepperStore
    from erasure.keys.vault import connect

    settings = Settings()
    return PepperStore(connect(settings), settings.vault_kv_mount).all_versions()


# Where the task gets its peppers; tests point it at fixed ones.
pepper_source: Callable[[], Sequence[Pepper]] = vault_peppers


@dag(
    dag_id="crm_ingest",
    schedule="0 2 * * *",
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["erasure", "crm"],
    default_args={"queue": crm_ingest_queue()},  # its own workers: pepper read, nothing else
    doc_md=__doc__,
    params={
        "export_path": Param(
            "",
            type="string",
            title="CRM export file",
            description="CSV or JSON lines on the worker; empty: ERASURE_CRM_EXPORT",
        ),
        "dataset": Param(
            "crm.customers",
            type="string",
            title="Target table",
            description="The catalog dataset (schema.table) the export is loaded into",
        ),
    },
)
def crm_ingest() -> None:
    @task
    def load_crm_export(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Upsert the export minus suppressed subjects; returns the counts."""
        from erasure.catalog import load_catalog
        from erasure.config import Settings, env_name
        from erasure.crm_ingest import ingest_crm_export
        from erasure.errors import ConfigError
        from erasure.store import open_store
        from erasure.suppression import SuppressionList, identifier_columns

        params = params or {}
        settings = Settings()
        if settings.catalog_path is None:
            raise ConfigError(f"{env_name('catalog_path')} is not set: point it at the catalog")
        export = params.get("export_path") or settings.crm_export
        if not export:
            raise ConfigError(
                f"no CRM export given: set the export_path param or {env_name('crm_export')}"
            )
        catalog = load_catalog(settings.catalog_path)
        dataset = catalog.by_name(params.get("dataset") or "crm.customers")
        engine = _warehouse_engine(catalog, dataset)
        try:
            with open_store(settings.store_url) as store:
                counts = ingest_crm_export(
                    export,
                    engine=engine,
                    table=dataset.name,
                    identifier_columns=identifier_columns(catalog, dataset),
                    peppers=pepper_source(),
                    suppression=SuppressionList(store),
                )
        finally:
            engine.dispose()
        return counts.model_dump()

    load_crm_export()


def _warehouse_engine(catalog: Catalog, dataset: DatasetSpec) -> Engine:
    """The dataset's warehouse: through the Airflow connection if the catalog names one."""
    from erasure.errors import CatalogError
    from erasure_airflow.connections import warehouse

    if dataset.connection is None:
        raise CatalogError(f"dataset {dataset.name!r} names no connection to load it through")
    return warehouse(catalog).engine(dataset.connection)


crm_ingest_dag = crm_ingest()
