"""The daily re-proof against a real OpenBao and the demo estate: a request completed end to
end proves again; a tombstone removed by someone holding the store's owner rights, or a key
restored in Vault, fails it loudly, named by request reference and never by identifier;
and the erasure_reprove DAG's task fails the same way under dag.test()."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure import workflow
from erasure.audit.records import RecordKind
from erasure.keys.vault import EmbeddedOpenBao
from erasure.reprove import ReproofError, destroyed_keys
from erasure.sample.embedded import open_demo
from erasure.services import Services
from local.demo.runner import erasure_environment, import_airflow_models
from tests.integration.workflow_support import CANARY, CONF, run_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]
REF = str(CONF["request_ref"])
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def svc(tmp_path: Path, openbao: EmbeddedOpenBao) -> Iterator[Services]:
    settings = open_demo(tmp_path / "demo", openbao)
    with Services.open(settings) as services:
        run_request(services, CONF)
        yield services


def restore_a_destroyed_key(svc: Services) -> str:
    """What a Vault snapshot restore does to one shredded key: it is back. Its key id."""
    [record] = svc.ledger.list(kind=RecordKind.COMPLETED)
    key_id = next(k for k in destroyed_keys(record.body) if k.startswith("transit:"))
    svc.keystore.create(key_id.rsplit("subject-", 1)[1])
    return key_id


def remove_the_tombstones(svc: Services) -> None:
    """Someone with the store owner's rights drops the guard and deletes the tombstones."""
    with svc.store.engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER suppression_list_no_delete"))
        conn.execute(sa.text("DELETE FROM suppression_list WHERE request_ref = :ref"), {"ref": REF})


def test_a_completed_request_proves_again_until_its_proof_is_undone(svc: Services) -> None:
    proof = workflow.reprove(svc).require()
    assert proof.requests == 1 and proof.tombstones >= 1
    assert proof.keys >= 2  # at least one shredded key and the request-scoped key

    key_id = restore_a_destroyed_key(svc)
    remove_the_tombstones(svc)
    again = workflow.reprove(svc)
    assert {m.request_ref for m in again.missing} == {REF}
    whats = [m.what for m in again.missing]
    assert f"key {key_id} exists again in Vault (restored from a snapshot, or re-created)" in whats
    assert "tombstone (email, pepper version 1) is no longer in the suppression list" in whats
    with pytest.raises(ReproofError) as failed:
        again.require()
    message = str(failed.value).lower()
    assert f"request {REF.lower()}:" in message
    assert CANARY not in message and "alice" not in message  # never the identifier


def test_the_daily_dag_fails_when_a_proof_no_longer_holds(svc: Services, airflow_db: Path) -> None:
    import_airflow_models()
    from airflow.dag_processing.dagbag import DagBag

    saved = dict(os.environ)
    os.environ.update(erasure_environment(svc.settings))
    try:
        dag = DagBag(str(REPO / "dags")).get_dag("erasure_reprove")
        assert dag is not None and dag.schedule == "@daily"
        assert str(dag.test().state) == "success"
        restore_a_destroyed_key(svc)
        assert str(dag.test().state) == "failed"
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_cut_ledger_fails_the_proof_instead_of_leaving_nothing_to_prove(
    svc: Services,
) -> None:
    """The store's owner deletes the completed record (and rewinds the head): the request is
    still registered as completed, and the published head says the record existed."""
    [completed] = svc.ledger.list(kind=RecordKind.COMPLETED)
    with svc.store.engine.begin() as conn:
        for trigger in ("completion_records_no_delete", "completion_chain_head_forward_only"):
            conn.execute(sa.text(f"DROP TRIGGER {trigger}"))
        conn.execute(sa.text("DELETE FROM completion_records WHERE seq = :s"), {"s": completed.seq})
        conn.execute(
            sa.text(
                "UPDATE completion_chain_head SET seq = :s, record_hash = "
                "(SELECT record_hash FROM completion_records WHERE seq = :s)"
            ),
            {"s": completed.seq - 1},
        )
    proof = workflow.reprove(svc)
    whats = {(m.request_ref, m.what.split(":")[0]) for m in proof.missing}
    assert ("(all)", "the records") in whats  # the chain no longer matches its heads
    assert (REF, "registered as completed, but no completed record is on the chain") in whats
    with pytest.raises(ReproofError):
        proof.require()
