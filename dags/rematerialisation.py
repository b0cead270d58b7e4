"""The demo's rematerialisation DAGs (build_marts, build_reports): gdpr_erasure's `rebuild`
tasks trigger them to re-create derived tables from the cleaned sources."""

from __future__ import annotations

from airflow.sdk import DAG, task

from erasure.demo.rematerialise import REMATERIALISATION_DAGS


def _rematerialisation_dag(dag_id: str) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        is_paused_upon_creation=False,
        tags=["demo", "rematerialisation"],
        doc_md=__doc__,
    ) as dag:

        @task(task_id="rematerialise")
        def rematerialise_tables() -> dict[str, int]:
            from erasure_connections import warehouse as task_warehouse

            from erasure.catalog import load_catalog
            from erasure.config import Settings
            from erasure.demo.rematerialise import rematerialise
            from erasure.errors import ConfigError

            path = Settings().catalog_path
            if path is None:
                raise ConfigError("ERASURE_CATALOG_PATH is not set")
            catalog = load_catalog(path)
            warehouse = task_warehouse(catalog)
            try:
                return rematerialise(catalog, warehouse, dag_id)
            finally:
                warehouse.dispose()

        rematerialise_tables()
    return dag


for _dag_id in REMATERIALISATION_DAGS:
    globals()[_dag_id] = _rematerialisation_dag(_dag_id)
