"""Last of the end-to-end suite: a canary typed everywhere by every role, then found nowhere.

After the role matrix and the other end-to-end modules ran on the session's stack, the DPO
submits a request for a canary address held nowhere (its run asks one question). While it
waits, every role of the chart types the canary wherever a person can: the desk's fields, the
URLs and query strings of the plugin and of Airflow, a trigger of the erasure DAG, an
extension's reason, the prompt's answer (fields that do not fit it; then, as the DPO, a
justification naming the subject in another spelling, which the worker refuses). The DPO
clears her refused answer and answers again; the request completes. An OpenLineage producer
then sends an event whose facets and SQL carry the canary.

Then the canary (typed, normalised, URL-encoded, and its local part alone) is looked for in
every row of Airflow's metadata DB and of the erasure store, every file of the stack (the API
server's log with its access records, task logs, OpenBao's and the estate's files) and every
Vault path and secret: it is found 0 times.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from erasure.prompts import NOT_FOUND_PROMPT
from local.bench.load import submission as erasure_request
from local.demo.runner import decision_for, load_decisions
from local.up.stack import ERASURE_DAG, TASKS_USER, Stack
from tests.e2e.conftest import AirflowApi
from tests.e2e.sweep import airflow_db, files_holding, hits_in_rows, store_file, vault_entries

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault, pytest.mark.e2e]

TAG = uuid.uuid4().hex[:10]
REF = f"DSR-SWEEP-{TAG}"
RUN_ID = f"erasure-{REF}"
CANARY = f"Sweep.Canary.{TAG}@Example.org"  # held nowhere in the estate
NORMALISED = CANARY.lower()
LOCAL_PART = NORMALISED.split("@")[0]
NEEDLES = (NORMALISED, quote(NORMALISED, safe=""), LOCAL_PART)
ROLES = ("dpo", "auditor", "operator", TASKS_USER, "admin", "viewer", "user", "op")
WAIT_SECONDS = 300


def holds(text: str) -> bool:
    lowered = text.lower()
    return any(needle in lowered for needle in NEEDLES)


def _client(stack: Stack, user: str) -> httpx.Client:
    client = httpx.Client(base_url=stack.base_url, timeout=30, trust_env=False)
    client.headers["Authorization"] = f"Bearer {stack.token(user)}"
    return client


def _typed_everywhere(client: httpx.Client, prompt: str) -> list[str]:
    """Every door a person can type the canary into; what answered with it ('' if none)."""
    ref = quote(CANARY, safe="")
    answer = {
        "chosen_options": ["Confirm the subject is not held"],
        "params_input": {
            "justification": "Searched by hand.",
            "scheduled_by": CANARY,
            "exemption": None,
            "standing_until": None,
        },
    }
    calls: list[tuple[str, str, Any]] = [
        ("GET", f"/erasure/api/v1/records?since={ref}", None),
        ("GET", f"/erasure/api/v1/requests/{ref}", None),
        ("GET", f"/erasure/api/v1/records/{ref}", None),
        ("POST", f"/erasure/api/v1/requests/{ref}/resume", {}),
        ("GET", f"/erasure/desk?ref={ref}", None),
        ("GET", f"/erasure/requests/new?ref={ref}", None),
        ("POST", "/erasure/api/v1/requests", {"request_ref": REF, "identifier": CANARY}),
        (
            "POST",
            "/erasure/api/v1/requests",
            erasure_request(f"{REF}-NOTES", CANARY, notes=f"she is {CANARY}"),
        ),
        ("POST", f"/erasure/api/v1/requests/{REF}/extend", {"months": 1, "reason": CANARY}),
        ("POST", f"/api/v2/dags/{ERASURE_DAG}/dagRuns", {"conf": {"e": CANARY}}),
        ("GET", f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{ref}", None),
        ("GET", f"/api/v2/dags/{ERASURE_DAG}/dagRuns?run_id_pattern={ref}", None),
        ("PATCH", prompt, answer),
        ("PATCH", prompt, {**answer, "params_input": {**answer["params_input"], CANARY: "x"}}),
    ]
    echoed = []
    for method, path, body in calls:
        response = client.request(method, path, json=body)
        assert response.status_code < 500, (method, path, response.status_code, response.text)
        # Airflow's own reads answer with what they could not find (to the caller alone, kept
        # nowhere); the erasure's routes and its doors on Airflow's never do.
        theirs = method == "GET" and path.startswith("/api/v2/")
        if holds(response.text) and not theirs:
            echoed.append(f"{method} {path}: {response.status_code} {response.text[:200]}")
    return echoed


def _lineage_event() -> dict[str, Any]:
    """A producer's COMPLETE whose free-form facets and SQL carry the canary."""
    producer = "https://example.org/sweep-producer"
    facet = {"_producer": producer, "_schemaURL": "https://example.org/facets/custom.json"}
    return {
        "eventType": "COMPLETE",
        "eventTime": datetime.now(UTC).isoformat(),
        "producer": producer,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/definitions/RunEvent",
        "run": {"runId": str(uuid.uuid4()), "facets": {"note": {**facet, "who": CANARY}}},
        "job": {
            "namespace": "sweep",
            "name": f"export_{TAG}",
            "facets": {
                "sql": {
                    **facet,
                    "query": f"INSERT INTO exports.sweep_{TAG} SELECT id FROM crm.customers "
                    f"WHERE email = '{CANARY}'",
                }
            },
        },
        "inputs": [
            {
                "namespace": "sweep",
                "name": "crm.customers",
                "facets": {"owner": {**facet, "contact": CANARY}},
            }
        ],
        "outputs": [
            {
                "namespace": "sweep",
                "name": f"exports.sweep_{TAG}",
                "facets": {
                    "schema": {
                        **facet,
                        "fields": [{"name": "id", "type": "text", "description": CANARY}],
                    }
                },
            }
        ],
    }


def _all_parked(dpo: AirflowApi) -> list[dict[str, Any]]:
    """The run's prompts, once every one of them waits for its answer."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        pending = dpo.pending_prompts(RUN_ID)
        asked = [ti for ti in dpo.task_instances(RUN_ID) if ti["task_id"] == "dpo_decides"]
        if pending and len(pending) == len([ti for ti in asked if ti["map_index"] >= 0]):
            return pending
        state = str(dpo.run(RUN_ID)["state"])
        assert state not in ("success", "failed"), dpo.explain_failure(RUN_ID)
        time.sleep(2)
    raise AssertionError(f"{RUN_ID} did not ask all its questions within {WAIT_SECONDS} s")


def _prompt_path(prompt: dict[str, Any]) -> str:
    ti = prompt["task_instance"]
    return (
        f"/api/v2/dags/{ti['dag_id']}/dagRuns/{ti['dag_run_id']}/taskInstances/"
        f"{ti['task_id']}/{ti['map_index']}/hitlDetails"
    )


@pytest.fixture(scope="module")
def swept(airflow_standalone: Stack, dpo_api: AirflowApi) -> list[str]:
    """The canary typed everywhere; the request completed; what echoed it back."""
    stack = airflow_standalone
    assert dpo_api.submit(erasure_request(REF, CANARY, notes="Asked at the counter."))
    prompts = _all_parked(dpo_api)
    [nowhere] = [p for p in prompts if p["subject"] == NOT_FOUND_PROMPT]
    echoed = []
    for role in ROLES:
        with _client(stack, role) as client:
            echoed += [f"{role}: {e}" for e in _typed_everywhere(client, _prompt_path(nowhere))]

    # The DPO names the subject in her justification, spelled so no form could tell: Airflow
    # stores a sealed note's handle, the worker refuses it and destroys the note. Her other
    # answers are the demo's.
    decisions = load_decisions()
    spelled = CANARY.replace("@", " [at] ").replace(".", " (dot) ")
    for prompt in prompts:
        if prompt is nowhere:
            choice = {"option": "Confirm the subject is not held", "justification": spelled}
        else:
            _dataset, choice = decision_for(prompt["subject"], prompt["options"], decisions)
        answered = dpo_api.answer(prompt, choice)
        assert answered.status_code == 200 and not holds(answered.text), answered.text
    state, _ = dpo_api.wait(RUN_ID, timeout=WAIT_SECONDS)
    assert state == "failed", dpo_api.explain_failure(RUN_ID)
    index = nowhere["task_instance"]["map_index"]
    [asked] = [
        ti
        for ti in dpo_api.task_instances(RUN_ID)
        if ti["task_id"] == "dpo_decides" and ti["map_index"] == index
    ]
    assert asked["state"] == "failed", asked
    prompt_log = dpo_api.task_log(RUN_ID, "dpo_decides", index, asked["try_number"])
    assert "justification contains the subject's email" in prompt_log, prompt_log[-2000:]

    cleared = dpo_api.client.post(
        f"/api/v2/dags/{ERASURE_DAG}/clearTaskInstances",
        json={
            "dry_run": False,
            "dag_run_id": RUN_ID,
            "task_ids": [["dpo_decides", index]],
            "include_downstream": True,
            "only_failed": False,
        },
    )
    assert cleared.status_code == 200, cleared.text
    state, answered = dpo_api.wait(RUN_ID, decisions=load_decisions(), timeout=WAIT_SECONDS)
    assert state == "success", dpo_api.explain_failure(RUN_ID)
    assert answered, "the cleared prompt was asked again and answered"

    ingested = httpx.post(
        f"{stack.base_url}/erasure/api/v1/lineage",
        json=_lineage_event(),
        headers={"Authorization": f"Bearer {stack.env['ERASURE_LINEAGE_API_KEY']}"},
        timeout=30,
        trust_env=False,
    )
    assert ingested.status_code < 300, ingested.text
    return echoed


def test_no_answer_repeats_the_canary(swept: list[str]) -> None:
    assert not swept, "\n".join(swept)


def test_airflows_metadata_db_holds_no_canary(swept: list[str], airflow_standalone: Stack) -> None:
    counts, hits = hits_in_rows(airflow_db(airflow_standalone), holds)
    assert counts.get("hitl_detail") and counts.get("log") and counts.get("dag_run")
    assert not hits, "\n".join(hits)


def test_the_erasure_store_holds_no_canary(swept: list[str], airflow_standalone: Stack) -> None:
    counts, hits = hits_in_rows(store_file(airflow_standalone), holds)
    assert counts.get("requests") and counts.get("lineage_events")
    assert not hits, "\n".join(hits)


def test_no_file_of_the_stack_holds_the_canary(swept: list[str], airflow_standalone: Stack) -> None:
    paths = airflow_standalone.paths
    roots: list[Path] = [paths.airflow_home, paths.openbao_dir, paths.estate_dir]
    for root in roots:
        read, hits = files_holding(root, holds)
        assert read, f"nothing read under {root}"
        assert not hits, hits


def test_no_vault_path_or_secret_holds_the_canary(
    swept: list[str], airflow_standalone: Stack
) -> None:
    _mounts, paths, values = vault_entries(airflow_standalone.bao.client())
    assert paths and values
    assert not [p for p in paths if holds(p)]
    assert not [v for v in values if holds(v)]
