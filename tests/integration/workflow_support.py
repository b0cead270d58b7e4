"""What the workflow integration tests share: the demo request, the DPO's answers, and a
hand-driven act step (what the DAG wires, in plan order)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from erasure import workflow
from erasure.actions.rebuild import RunOutcome
from erasure.errors import ErasureError, VaultError
from erasure.lineage import LineageStore
from erasure.model import Action, DatasetRef
from erasure.registry.requests import Registration
from erasure.rulings import DpoAnswer, option_for_label
from erasure.sample.rematerialise import rematerialise, table_lineage
from erasure.sample.seed import DEMO_SUBJECT
from erasure.services import Services
from erasure.submission import ErasureRequest

CANARY = DEMO_SUBJECT[1]
CONF = {
    "request_ref": "REQ-2026-0001",
    "identifier_type": "email",
    "identifier": "  Alice.Smith@Example.com ",
    "received_on": "2026-11-20",
    "legal_ground": "art17_1_a",
    "notes": "Customer wrote in on 20 Nov",
}
DPO = {"id": "dana", "name": "Dana DPO"}


def sealed(svc: Services, data: dict[str, Any]) -> dict[str, str]:
    """What the erasure desk puts in a run's conf for `data`: the reference and the handle of
    the submission it sealed."""
    return svc.submissions.seal(ErasureRequest.parse(data)).conf()


def register(svc: Services, data: dict[str, Any], run_id: str) -> Registration:
    """Submit `data` as the desk does, then run the register step over it."""
    return workflow.register(svc, sealed(svc, data), run_id)


def answer(option: str, **params: Any) -> DpoAnswer:
    """The DPO's answer as the DAG hands it to the workflow: the option by its label."""
    return DpoAnswer(
        option=option_for_label(option),
        author_id=DPO["id"],
        author_name=DPO["name"],
        decided_at=datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
        **params,
    )


NOT_HELD = answer(
    "Confirm the subject is not held", justification="checked the CRM by hand: no such customer"
)


ANSWERS = {
    "crm.addresses": answer(
        "Retain under an Art. 17(3) exemption",
        exemption="e",
        justification="household address shared with a current customer",
    ),
    "agg.customers_by_postcode": answer(
        "Delete the artefact", justification="small groups identify people"
    ),
    "backup.crm_nightly": answer(
        "Retain under an Art. 17(3) exemption",
        exemption="b",
        justification="statutory backup; beyond use until it expires "
        "and restores pass through the suppression list",
    ),
    "ml.customer_embeddings": answer(
        "Rebuild or retrain by a date",
        scheduled_by="2026-12-15",
        justification="retrain in the December cycle",
        standing_until="2027-06-30",
    ),
    "recs.customer_recommendations": answer(
        "Accept as non-personal", justification="cache expires in 24 h"
    ),
    # Rule 3a: a customer the archive never sealed events for has no key in Vault.
    "archive.customer_events": answer(
        "Confirm the subject is not held",
        justification="archive owner: no events of this customer were ever archived",
    ),
    # The demo's failed run may have written it before it failed (issue 18).
    "ml.customer_embeddings_v2": answer(
        "Accept as non-personal", justification="the failed v2 run left its output empty"
    ),
}


def trigger(svc: Services) -> workflow.TriggerDag:
    """A rematerialisation DAG run as Airflow runs it: the tables re-created, and the run's
    OpenLineage COMPLETE (the proof of a fresh write verify asks for) reaching the store."""

    def run(dag_id: str, ready_at: datetime) -> RunOutcome:
        rematerialise(svc.catalog, svc.warehouse, dag_id)
        LineageStore(svc.store).ingest_json(completed_run(svc, dag_id))
        return RunOutcome(run_id=f"manual__{dag_id}", state="success")

    return run


def completed_run(svc: Services, dag_id: str) -> list[dict[str, Any]]:
    """The OpenLineage START and COMPLETE the DAG's task reports, as Airflow's provider sends
    them (`processing_engine` and `parent` facets): the tables it read and wrote."""
    written = table_lineage(svc.catalog, svc.warehouse, dag_id)
    read = {edge.source.dataset for edges in written.values() for edge in edges}
    run = {
        "runId": str(uuid.uuid4()),
        "facets": {
            "processing_engine": {"name": "Airflow", "version": "3.3.2"},
            "parent": {"run": {"runId": str(uuid.uuid4())},
                       "job": {"namespace": "airflow", "name": dag_id}},
        },
    }  # fmt: skip
    event = {
        "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.20.3",
        "run": run,
        "job": {"namespace": "airflow", "name": f"{dag_id}.rematerialise"},
        "inputs": [r.as_dict() for r in sorted(read, key=lambda r: r.qualified)],
        "outputs": [r.as_dict() for r in written],
    }
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return [{**event, "eventType": kind, "eventTime": now} for kind in ("START", "COMPLETE")]


def act(svc: Services, ref: str) -> None:
    act_without_dpo(svc, ref)
    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset, ANSWERS[item.dataset.name])


def down_once(owner: object, name: str, error: Exception | None = None) -> None:
    """`owner.name` fails once, as during a short Vault or store outage, then works again."""
    real: Callable[..., Any] = getattr(owner, name)

    def flaky(*args: Any, **kwargs: Any) -> Any:
        setattr(owner, name, real)
        raise error or VaultError("Vault is unreachable")

    setattr(owner, name, flaky)


def failure_callback(svc: Services, ref: str, run_id: str) -> None:
    """What gdpr_erasure's on_failure_callback does once a task failed for good."""
    with suppress(ErasureError):  # the DAG logs it and keeps the task's own failure
        workflow.fail(svc, ref, f"run {run_id}: task failed", run_id)


def rows(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql).fetchone()[0])


def run_request(
    svc: Services, conf: dict[str, Any], answers: dict[str, DpoAnswer] | None = None
) -> Any:
    """One request from registration to its signed record, as the DAG runs it; escalations
    answered from `answers` (then ANSWERS, then NOT_HELD for a subject found nowhere)."""
    ref = str(conf["request_ref"])
    register(svc, conf, f"erasure-{ref}")
    workflow.plan_request(svc, ref)
    act_without_dpo(svc, ref)
    given = {**ANSWERS, "subject_search": NOT_HELD, **(answers or {})}
    for item in workflow.pending_escalations(svc, ref):
        workflow.rule(svc, ref, item.dataset, given[item.dataset.name])
    workflow.verify(svc, ref)
    return workflow.complete(svc, ref)


def act_without_dpo(svc: Services, ref: str) -> None:
    """The plan's actions that need no DPO, as the DAG's tasks run them: the tombstone first
    (the nightly CRM sync must not bring anyone back), then erase, shred, rebuild and confirm
    each aggregate."""
    plan = svc.plans.get(ref, 1)
    workflow.tombstone(svc, ref)
    for name in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, name)
    for name in workflow.items_for(plan, Action.CRYPTO_SHRED):
        workflow.shred(svc, ref, name)
    for name in workflow.items_for(plan, Action.REBUILD):
        workflow.rebuild_artefact(svc, ref, name, trigger(svc))
    for name in workflow.items_for(plan, Action.AGGREGATE_OK):
        workflow.confirm_aggregate(svc, ref, name)


def item_named(svc: Services, ref: str, name: str) -> DatasetRef:
    """The dataset of the request's plan named `name` (how a person refers to it)."""
    return next(i.dataset for i in svc.plans.get(ref, 1).items if i.dataset.name == name)
