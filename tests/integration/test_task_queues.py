"""Every task runs on the queue of its identity: the erasure DAGs on the chart's erasure
queue, crm_ingest on its own, the rematerialisation DAGs on Airflow's default queue (whose
workers hold no erasure Vault role and no erasure store). Names as the chart sets them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
ERASURE_DAGS = (
    "gdpr_erasure",
    "gdpr_erasure_extend",
    "erasure_reconcile",
    "erasure_reprove",
    "erasure_deadlines",
    "erasure_restore_replay",
)


def test_each_dag_runs_on_its_identitys_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    queues = yaml.safe_load((REPO / "helm" / "values.yaml").read_text())["queues"]
    monkeypatch.setenv("ERASURE_TASK_QUEUE", queues["erasure"])
    monkeypatch.setenv("ERASURE_CRM_INGEST_QUEUE", queues["crmIngest"])
    bag = DagBag(str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    for dag_id in ERASURE_DAGS:
        dag = bag.dags.get(dag_id)
        assert dag is not None, dag_id
        assert {t.queue for t in dag.tasks} == {queues["erasure"]}, dag_id
    crm = bag.dags.get("crm_ingest")
    assert crm is not None and {t.queue for t in crm.tasks} == {queues["crmIngest"]}
    rebuild = bag.dags.get("build_marts")
    assert rebuild is not None and {t.queue for t in rebuild.tasks} == {"default"}


def test_without_the_chart_every_task_uses_the_default_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    for name in ("ERASURE_TASK_QUEUE", "ERASURE_CRM_INGEST_QUEUE"):
        monkeypatch.delenv(name, raising=False)
    bag = DagBag(str(REPO / "dags"))
    assert {t.queue for d in bag.dags.values() for t in d.tasks} == {"default"}
