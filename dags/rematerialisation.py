"""The demo's rematerialisation DAGs (build_marts, build_reports): gdpr_erasure's `rebuild`
tasks trigger them to re-create derived tables from the cleaned sources.

Each run reports its lineage through Airflow's OpenLineage provider (`make up` points its
http transport at the erasure plugin's `/erasure/api/v1/lineage`): the operator names the
tables it read and wrote, with column lineage from its own SQL, so the next plan's closure
holds the edges this run produced.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, BaseOperator

from erasure.sample.rematerialise import REMATERIALISATION_DAGS


class RematerialiseOperator(BaseOperator):
    """Drop and re-create one DAG's tables from the declared SQL, in one transaction each."""

    def __init__(self, *, rebuild_dag_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rebuild_dag_id = rebuild_dag_id

    def execute(self, context: Any) -> dict[str, int]:
        from erasure.sample.rematerialise import rematerialise

        catalog, warehouse = _estate()
        try:
            return rematerialise(catalog, warehouse, self.rebuild_dag_id)
        finally:
            warehouse.dispose()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The tables this run wrote, each with the column lineage of its SELECT."""
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
        from openlineage.client.facet_v2 import column_lineage_dataset as facet

        from erasure.sample.rematerialise import table_lineage

        catalog, warehouse = _estate()
        try:
            inputs: dict[tuple[str, str], Dataset] = {}
            outputs = []
            for table, edges in table_lineage(catalog, warehouse, self.rebuild_dag_id).items():
                fields: dict[str, list[Any]] = {}
                for edge in edges:
                    source = edge.source.dataset
                    inputs.setdefault(
                        (source.namespace, source.name), Dataset(source.namespace, source.name)
                    )
                    if edge.target.column is None or edge.source.column is None:
                        continue
                    fields.setdefault(edge.target.column, []).append(
                        facet.InputField(
                            namespace=source.namespace,
                            name=source.name,
                            field=edge.source.column,
                            transformations=[
                                facet.Transformation(
                                    type=edge.type.value, subtype=edge.subtype.value
                                )
                            ],
                        )
                    )
                columns = facet.ColumnLineageDatasetFacet(
                    fields={c: facet.Fields(inputFields=f) for c, f in fields.items()}
                )
                outputs.append(
                    Dataset(table.namespace, table.name, facets={"columnLineage": columns})
                )
            return OperatorLineage(inputs=list(inputs.values()), outputs=outputs)
        finally:
            warehouse.dispose()


def _estate() -> tuple[Any, Any]:
    from erasure.catalog import load_catalog
    from erasure.config import Settings
    from erasure.errors import ConfigError
    from erasure_airflow.connections import warehouse as task_warehouse

    path = Settings().catalog_path
    if path is None:
        raise ConfigError("ERASURE_CATALOG_PATH is not set")
    catalog = load_catalog(path)
    return catalog, task_warehouse(catalog)


def _rematerialisation_dag(dag_id: str) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        is_paused_upon_creation=False,
        # One at a time: the next run queues while one works, and every erasure done meanwhile
        # joins it (erasure.actions.coalesce), so N requests need about two runs, not N.
        max_active_runs=1,
        tags=["demo", "rematerialisation"],
        doc_md=__doc__,
    ) as dag:
        RematerialiseOperator(task_id="rematerialise", rebuild_dag_id=dag_id)
    return dag


for _dag_id in REMATERIALISATION_DAGS:
    globals()[_dag_id] = _rematerialisation_dag(_dag_id)
