"""Restore replay: after a backup was restored over a table, erase its erased subjects again.

A backup taken before erasures brings back every subject erased since. The operator who
restored the table triggers this DAG with the table's catalog name (`dataset`, and its
`namespace` if the name is ambiguous): its task runs `erasure.replay` through
`erasure.services.Services`, which erases again the rows whose identifiers hash to a tombstone
of a request signed complete that erased this table (under every pepper version), in one
transaction, verifies with a second read and signs a `replayed` record citing those
requests' completion records. Run it before anything reads the restored table (pause the
DAGs that read or write it); a replay that finds nothing is on record too. Retrying the task
resumes the same replay; a second run while one runs is refused.

The conf names a table, never a person, and Airflow stores it as given: the form's `dataset`
and `namespace` are the catalog's replayable tables and their namespaces, nothing else
validates (when the DAG processor cannot read the catalog, ERASURE_CATALOG_PATH, no table
does, and the run is refused until it can), and the task refuses a conf with any other key
before it does anything. The XCom and the log hold the replay's reference and counts only.
Only the Operator role (granted this DAG by name) and Admin may trigger it
(erasure_airflow/auth.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task

from erasure_airflow.queues import erasure_queue

log = logging.getLogger(__name__)

DAG_ID = "erasure_restore_replay"


def restorable_tables() -> tuple[list[str], list[str]] | None:
    """The catalog's tables a replay can erase in, and their namespaces; None: the catalog
    cannot be read here."""
    path = os.environ.get("ERASURE_CATALOG_PATH")
    if not path:
        log.warning("ERASURE_CATALOG_PATH is not set: the restore replay's form offers no table")
        return None
    try:
        from erasure.catalog import load_catalog
        from erasure.replay import replayable

        datasets = [ds for ds in load_catalog(path).datasets if replayable(ds)]
    except Exception:  # a broken catalog must not break the DAG file: no table validates
        log.warning("the catalog %s could not be read: the replay's form offers no table", path)
        return None
    return sorted({ds.name for ds in datasets}), sorted({ds.namespace for ds in datasets})


def _params() -> dict[str, Param]:
    found = restorable_tables()
    tables, namespaces = found if found is not None else ([], [])
    described = "The restored table, as the catalog names it (schema.table)."
    if found is None:
        described += (
            " The catalog could not be read when this DAG was parsed (ERASURE_CATALOG_PATH): "
            "no table can be chosen until it can."
        )
    # No default and an enum only: a value outside the catalog's tables (a person's email
    # typed in the wrong field) fails validation, and nothing else is ever accepted.
    return {
        "dataset": Param(type="string", enum=tables, title="Restored table", description=described),
        "namespace": Param(
            None,
            type=["null", "string"],
            enum=[None, *namespaces],
            title="Namespace",
            description="Only if the table's name is in several namespaces of the catalog.",
        ),
    }


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    catchup=False,
    max_active_runs=1,  # one replay of a table at a time (the replay holds a lock of its own)
    is_paused_upon_creation=False,
    tags=["gdpr", "erasure", "restore"],
    default_args={"queue": erasure_queue()},
    doc_md=__doc__,
    params=_params(),
):

    @task
    def replay_restore() -> dict[str, Any]:
        """Erase the restored table's erased subjects again; the record's reference and counts."""
        from erasure.config import Settings
        from erasure.replay import ReplayConf, dataset_named, replay, replay_lines
        from erasure.services import Services
        from erasure_airflow.connections import postgres_url

        dag_run = get_current_context()["dag_run"]
        conf = ReplayConf.parse(dag_run.conf)  # before anything: no other key, no free value
        with Services.open(Settings(), resolve=postgres_url) as svc:
            dataset = dataset_named(svc.catalog, conf.dataset, conf.namespace)
            done = replay(svc, dataset)
        log.info("restore replay %s of %s", done.record.request_ref, dataset.qualified)
        for line in replay_lines(done.body):
            log.info("  %s", line)
        return {
            "replay_ref": done.record.request_ref,
            "record_seq": done.record.seq,
            "dataset": dataset.as_dict(),
            "rows_erased": done.body.rows_erased,
            "rows_held": sum(h.rows for h in done.body.held),
            "cited": [c.request_ref for c in done.body.cited],
            "resumed": done.resumed,
        }

    replay_restore()
