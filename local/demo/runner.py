"""`make demo`: one erasure request through the real gdpr_erasure DAG, in-process.

Embedded defaults: the demo estate on SQLite, an OpenBao dev server started here (and stopped
by its pid), Airflow's metadata DB in var/airflow. The DPO's prompts are answered from the
visible erasure/sample/estate/decisions.yaml, as she would answer them in the UI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from erasure.planner import SUBJECT_SEARCH
from erasure.prompts import NOT_FOUND_PROMPT, PROMPT_PREFIX

REPO = Path(__file__).resolve().parents[2]
DECISIONS = REPO / "erasure" / "sample" / "estate" / "decisions.yaml"
DEMO_DPO = {"id": "demo-dpo", "name": "Demo DPO (decisions.yaml)"}
PROMPT_SETTLE = timedelta(seconds=2)


def airflow_environment(home: Path) -> dict[str, str]:
    """The Airflow settings the demo and the tests run the DAGs under."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        # Empty: the plugin comes from the installed erasure_airflow package, by entry point.
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        # The trigger's audit-log row masks these keys from the start (DESIGN section 6).
        "AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES": "identifier,notes,justification,reason,note",
    }


def erasure_environment(settings: Any) -> dict[str, str]:
    """ERASURE_* variables that make tasks use the same store, Vault and catalog."""
    env = {
        "ERASURE_CATALOG_PATH": str(settings.catalog_path),
        "ERASURE_STORE_URL": settings.store_url,
        "ERASURE_VAULT_ADDR": settings.vault_addr,
        "ERASURE_VAULT_TOKEN": settings.vault_token.get_secret_value(),
        "ERASURE_AIRFLOW_ACCESS": settings.airflow_access,
        "ERASURE_CRM_EXPORT": str(settings.crm_export or ""),
        "ERASURE_REQUIRE_DPO_ROLE": str(settings.require_dpo_role).lower(),
        "ERASURE_VAULT_KV_MOUNT": settings.vault_kv_mount,
        "ERASURE_VAULT_TRANSIT_MOUNT": settings.vault_transit_mount,
        "ERASURE_VAULT_ANCHOR_PATH": settings.vault_anchor_path,
        "ERASURE_KEYSTORE_KIND": settings.keystore_kind,
    }
    return env


def load_decisions(path: Path = DECISIONS) -> dict[str, dict[str, Any]]:
    decisions = yaml.safe_load(path.read_text())
    if not isinstance(decisions, dict) or "default" not in decisions:
        raise SystemExit(f"{path}: expected a mapping of dataset -> answer with a 'default'")
    return decisions


def decision_for(
    subject: str, options: Sequence[str], decisions: Mapping[str, Mapping[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """(dataset, answer) for a prompt, from the decisions file: by the dataset its subject
    names ('subject_search' for a subject found nowhere), else the file's default."""
    dataset = (
        SUBJECT_SEARCH.name if subject == NOT_FOUND_PROMPT else subject.removeprefix(PROMPT_PREFIX)
    )
    choice = dict(decisions.get(dataset) or decisions["default"])
    if choice.get("option") not in options:
        raise ValueError(
            f"decisions for {dataset}: {choice.get('option')!r} is not one of its prompt's "
            f"options ({'; '.join(options)})"
        )
    return dataset, choice


class PromptAnswerer:
    """Answers pending HITL prompts from a decisions mapping, the way the UI would."""

    def __init__(self, decisions: Mapping[str, Mapping[str, Any]]) -> None:
        self.decisions = decisions
        self.answered: list[str] = []
        self._notes: Any = None  # where justifications are sealed, as the plugin seals them
        self._sealed: list[tuple[str, str]] = []  # (handle, binding) of this pass's answers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dpo-answerer", daemon=True)

    def __enter__(self) -> PromptAnswerer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.answer_pending()
            except Exception as exc:  # e.g. a decision that does not fit its prompt: say so
                print(f"cannot answer a prompt: {exc}", file=sys.stderr, flush=True)

    def answer_pending(self) -> None:
        from airflow.utils.session import create_session

        self._sealed: list[tuple[str, str]] = []
        try:
            with create_session() as session:
                for detail, ti in self.parked(session):
                    self.answer(session, detail, ti)
        except BaseException:  # e.g. "database is locked": answered again on the next pass
            for handle, binding in self._sealed:  # as the plugin destroys a refused answer's
                self._notes.destroy_note(handle, binding)
            raise

    @staticmethod
    def parked(session: Any) -> list[tuple[Any, Any]]:
        """(HITL detail, task instance) of every prompt parked long enough to be answered."""
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance

        ready = []
        for detail in session.query(HITLDetail).filter(HITLDetail.responded_at.is_(None)):
            ti = session.get(TaskInstance, detail.ti_id)
            if ti is None or ti.state != "awaiting_input":
                continue  # not parked yet: answering now would race the task
            if datetime.now(UTC) - detail.created_at < PROMPT_SETTLE:
                continue  # Airflow 3.3.2 can fail a prompt answered within ~1 s of parking
            ready.append((detail, ti))
        return ready

    def answer(self, session: Any, detail: Any, ti: Any) -> None:
        """Answer one parked prompt from the decisions, as the demo's DPO."""
        from airflow.models.trigger import handle_event_submit
        from airflow.triggers.base import TriggerEvent

        dataset, choice = decision_for(detail.subject, detail.options, self.decisions)
        detail.chosen_options = [choice.pop("option")]
        detail.params_input = {
            key: (str(choice[key]) if choice.get(key) is not None else None)
            for key in ("justification", "scheduled_by", "exemption", "standing_until")
        }
        # What the plugin does in the API server before Airflow stores an answer: the
        # justification is sealed for this prompt, and the answer holds the handle.
        detail.params_input["justification"] = self.seal(detail.params_input["justification"], ti)
        detail.responded_at = datetime.now(UTC)
        detail.responded_by = dict(DEMO_DPO)
        session.flush()
        handle_event_submit(
            TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session
        )
        self.answered.append(dataset)

    def seal(self, justification: str | None, ti: Any) -> str:
        from erasure.intake import note_binding
        from erasure.services import LazyServices

        if self._notes is None:
            self._notes = LazyServices().submissions()
        binding = note_binding(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        handle = str(self._notes.seal_note(justification or "", binding))
        self._sealed.append((handle, binding))
        return handle


def import_airflow_models() -> None:
    """Import Airflow's models in this thread first: the answerer thread would deadlock on it."""
    import airflow.dag_processing.dagbag
    import airflow.models
    import airflow.serialization.serialized_objects  # noqa: F401
    from airflow.models import import_all_models

    import_all_models()


def run_erasure(
    conf: Mapping[str, Any],
    decisions: Mapping[str, Mapping[str, Any]],
    *,
    logical_date: datetime | None = None,
    answerer: PromptAnswerer | None = None,
) -> Any:
    """Run gdpr_erasure with `conf` under dag.test(), answering prompts (from `decisions`, or
    as `answerer` does); the DagRun.

    The same `logical_date` twice is the same run cleared and run again (a DPO's retry).
    """
    import_airflow_models()
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(REPO / "dags")).get_dag("gdpr_erasure")
    if dag is None:
        raise SystemExit("gdpr_erasure did not load: run `airflow dags list-import-errors`")
    with answerer or PromptAnswerer(decisions):
        if logical_date is None:
            run = dag.test(run_conf=dict(conf))
        else:
            run = dag.test(run_conf=dict(conf), logical_date=logical_date, run_after=logical_date)
    return run


def run_crm_sync() -> dict[str, Any]:
    """The next nightly CRM sync (crm_ingest) over an export that still holds the subject."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dag = DagBag(str(REPO / "dags")).get_dag("crm_ingest")
    run = dag.test()
    with create_session() as session:
        value = session.scalar(
            XComModel.get_many(
                run_id=run.run_id, dag_ids="crm_ingest", key="return_value"
            ).with_only_columns(XComModel.value)
        )
    counts = value if isinstance(value, dict) else {}
    return {"state": str(run.state), **counts}


def main() -> int:
    var = REPO / "var"
    home = var / "airflow"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    os.environ.update(airflow_environment(home))
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # the summary is the story
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    warnings.simplefilter("ignore", DeprecationWarning)
    print("Preparing Airflow's metadata DB in var/airflow ...", flush=True)
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    from erasure.keys.vault import EmbeddedOpenBao
    from erasure.sample.embedded import open_demo
    from erasure.sample.seed import DEMO_SUBJECT
    from erasure.services import Services
    from erasure.submission import ErasureRequest

    with EmbeddedOpenBao() as bao:
        print(f"OpenBao dev server at {bao.address} (pid {bao.pid}).", flush=True)
        settings = open_demo(var / "demo", bao)
        os.environ.update(erasure_environment(settings))
        print(f"Demo estate built in {var / 'demo'}.\n", flush=True)
        submission = ErasureRequest.parse(
            {
                "request_ref": f"DSR-{date.today():%Y%m%d}-0001",
                "identifier_type": DEMO_SUBJECT[0],
                "identifier": DEMO_SUBJECT[1],
                "received_on": date.today().isoformat(),
                "legal_ground": "art17_1_b",
                "notes": "Asked by email to be forgotten.",
                "dry_run": False,
            }
        )
        # What the erasure desk does: seal the submission, start the run with its handle.
        with Services.open(settings) as svc:
            ticket = svc.submissions.seal(submission)
        run = run_erasure(ticket.conf(), load_decisions())
        sync = run_crm_sync()
        from local.demo.summary import print_summary

        return print_summary(settings, ticket.request_ref, run, sync)


if __name__ == "__main__":
    sys.exit(main())
