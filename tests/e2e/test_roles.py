"""Every role of the chart against every route that matters, on the running `make up` stack.

Airflow runs the FAB auth manager with the roles of helm/values.yaml (`local.up.fab_setup`);
one login per role. The DPO submits a request on the desk whose subject is found nowhere,
so its run asks exactly one question; while it waits, each role tries every cell: the
plugin's routes, triggering gdpr_erasure, a rematerialisation DAG and the extension DAG,
failing or clearing an erasure run, reading a run's conf, listing and answering the prompt.
Then the DPO answers, the run completes, and each role reads (or is refused) the records.

A cell is allowed when Airflow or the plugin lets the call through: 200/201, or 422 for a
body made malformed on purpose so that nothing is triggered, failed or cleared (both check
permissions before they read the body). Refused is 403. Every cell is asserted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from erasure.prompts import NOT_FOUND_PROMPT
from local.bench.load import submission as erasure_request
from local.demo.runner import load_decisions
from local.up.stack import ERASURE_DAG, TASKS_USER, Stack
from tests.e2e.conftest import PROMPT_SETTLE_SECONDS, AirflowApi

pytestmark = [
    pytest.mark.integration,
    pytest.mark.airflow,
    pytest.mark.vault,
    pytest.mark.e2e,
]

REF = f"DSR-ROLES-{uuid.uuid4().hex[:8]}"
RUN_ID = f"erasure-{REF}"
NOBODY = f"nobody.{uuid.uuid4().hex[:8]}@example.invalid"  # held nowhere: one prompt
REBUILD_DAG = "build_marts"
TASK = f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{{run}}/taskInstances/register"
# The erasure prompts among the others (the race DAG's hundred come first in a page of 50).
ERASURE_ONLY = f"dag_id_pattern={ERASURE_DAG}"
# The chart's roles, Admin, and the roles Airflow itself creates (real deployments map most
# people to Viewer, User and Op).
ROLES = ("dpo", "auditor", "operator", TASKS_USER, "admin", "viewer", "user", "op")
NOT_A_DATE = {"logical_date": "not a date"}  # 422 once authorised: nothing is triggered
NOT_HELD = {
    "chosen_options": ["Confirm the subject is not held"],
    "params_input": {
        "justification": "Searched the CRM by hand: no such customer.",
        "scheduled_by": None,
        "exemption": None,
        "standing_until": None,
    },
}


@dataclass(frozen=True)
class Cell:
    """One route tried by every role: who gets through, and with what status."""

    name: str
    method: str
    path: str  # {ref}, {run}, {prompt} filled in
    allowed: frozenset[str]
    ok: int = 200
    body: Any = None
    after_completion: bool = False  # tried once the run has completed (its records exist)
    # For a list: whether the response shows erasure runs (a list is filtered, not refused).
    shows: Callable[[httpx.Response], bool] | None = None


def cell(name: str, route: str, allowed: set[str], **extra: Any) -> Cell:
    method, path = route.split(" ", 1)
    return Cell(name, method, path, frozenset(allowed), **extra)


READERS = {"dpo", "auditor", "operator", "admin"}
DESK = {"dpo", "operator", "admin"}
CELLS = [
    # The plugin: records and evidence (read), the desk, the DPO's submission, the machines.
    cell("requests list", "GET /erasure/api/v1/requests", READERS),
    cell("request detail", "GET /erasure/api/v1/requests/{ref}", READERS),
    cell("records of the request", "GET /erasure/api/v1/records/{ref}", READERS,
         after_completion=True),
    cell("chain verification", "GET /erasure/api/v1/records/verify", READERS),
    cell("evidence pack", "GET /erasure/api/v1/records/{ref}/export?format=json", READERS,
         after_completion=True),
    cell("records page", "GET /erasure/records", READERS),
    cell("desk page", "GET /erasure/desk", DESK),
    cell("desk JSON", "GET /erasure/api/v1/desk", DESK),
    cell("new request page", "GET /erasure/requests/new", {"dpo"}),
    cell("submit a request", "POST /erasure/api/v1/requests", {"dpo"}, ok=422, body={}),
    # Lineage ingest takes the producers' API key only: no login, whatever its role.
    cell("lineage ingest by login", "POST /erasure/api/v1/lineage", set(), body=[]),
    cell("who may answer", "GET /erasure/api/v1/respondents", {TASKS_USER, "admin"}),
    # Airflow: triggers, the DPO's run controls, what a run and its prompt show.
    # Only the desk starts erasure and extension runs, in the API server: nobody over the API.
    cell("trigger gdpr_erasure", f"POST /api/v2/dags/{ERASURE_DAG}/dagRuns", set(),
         ok=422, body=NOT_A_DATE),
    cell("trigger a rematerialisation DAG", f"POST /api/v2/dags/{REBUILD_DAG}/dagRuns",
         {TASKS_USER, "admin"}, ok=422, body=NOT_A_DATE),
    cell("follow a rematerialisation run", f"GET /api/v2/dags/{REBUILD_DAG}/dagRuns",
         {TASKS_USER, "operator", "admin"}),
    cell("trigger the extension DAG", "POST /api/v2/dags/gdpr_erasure_extend/dagRuns",
         set(), ok=422, body=NOT_A_DATE),
    # After restoring a backup the operator replays it (erasure.replay): hers to trigger.
    cell("trigger the restore replay", "POST /api/v2/dags/erasure_restore_replay/dagRuns",
         {"operator", "admin"}, ok=422, body=NOT_A_DATE),
    cell("extend a deadline on the desk", "POST /erasure/api/v1/requests/{ref}/extend",
         {"dpo"}, ok=422, body={"months": 3}),
    cell("fail (discard) an erasure run", f"PATCH /api/v2/dags/{ERASURE_DAG}/dagRuns/{{run}}",
         {"dpo", "admin"}, ok=422, body={"state": "not a state"}),
    cell("clear an erasure task", f"POST /api/v2/dags/{ERASURE_DAG}/clearTaskInstances",
         {"dpo", "admin"}, ok=422, body={"dry_run": "not a boolean"}),
    cell("clear a rematerialisation task", f"POST /api/v2/dags/{REBUILD_DAG}/clearTaskInstances",
         {"operator", "admin"}, ok=422, body={"dry_run": "not a boolean"}),
    cell("read an erasure run's conf", f"GET /api/v2/dags/{ERASURE_DAG}/dagRuns/{{run}}",
         {"dpo", "operator", "admin"}),
    cell("mark an erasure task", f"PATCH {TASK}", {"dpo", "admin"}, ok=422,
         body={"new_state": "not a state"}),
    cell("read an erasure task's log", f"GET {TASK}/logs/1", {"dpo", "operator", "admin"}),
    cell("read an erasure task's XCom", f"GET {TASK}/xcomEntries", {"admin"}),
    cell("write an erasure task's XCom", f"POST {TASK}/xcomEntries", set(), ok=422,
         body={"key": 1}),
    cell("delete an erasure run", f"DELETE /api/v2/dags/{ERASURE_DAG}/dagRuns/no-such-run",
         {"admin"}, ok=404),
    cell("pause the erasure DAG", f"PATCH /api/v2/dags/{ERASURE_DAG}", {"dpo", "admin"},
         ok=422, body={"is_paused": "not a boolean"}),
    # Lists are filtered, not refused: who sees the erasure runs and prompts in them.
    cell("list the DAG runs", "GET /api/v2/dags/~/dagRuns?run_id_prefix_pattern=erasure-",
         {"dpo", "operator", "admin"}, shows=lambda r: ERASURE_DAG in r.text),
    cell("list the prompts", f"GET /api/v2/dags/~/dagRuns/~/hitlDetails?{ERASURE_ONLY}",
         {"dpo", "admin"}, shows=lambda r: ERASURE_DAG in r.text),
    # Airflow's audit log holds every trigger's body: nobody but Admin reads it.
    cell("read the audit log", "GET /api/v2/eventLogs", {"admin"}),
    # Answered for real: the DPO last, her answer completes the run.
    cell("answer the prompt", "PATCH {prompt}", {"dpo"}, body=NOT_HELD),
]  # fmt: skip


@dataclass
class Matrix:
    seen: dict[tuple[str, str], int]  # (role, cell name) -> HTTP status
    details: dict[tuple[str, str], str]
    shown: dict[tuple[str, str], bool]  # (role, list cell) -> whether it showed erasure runs
    state: str
    records: list[dict[str, Any]]


def _clients(stack: Stack) -> Iterator[tuple[str, httpx.Client]]:
    for role in ROLES:
        client = httpx.Client(base_url=stack.base_url, timeout=60, trust_env=False)
        client.headers["Authorization"] = f"Bearer {stack.token(role)}"
        yield role, client


def _try(client: httpx.Client, c: Cell, fill: dict[str, str]) -> httpx.Response:
    return client.request(c.method, c.path.format(**fill), json=c.body)


def _settled_prompt(dpo: AirflowApi, subject: str) -> dict[str, Any]:
    """The run's pending prompt titled `subject` (its plan may ask about more), settled."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        pending = [p for p in dpo.pending_prompts(RUN_ID) if p["subject"] == subject]
        if pending:
            time.sleep(PROMPT_SETTLE_SECONDS)  # Airflow 3.3: never answer a prompt this fresh
            return pending[0]
        state = dpo.run(RUN_ID)["state"]
        assert state not in ("success", "failed"), f"{RUN_ID} ended {state} without asking"
        time.sleep(2)
    raise AssertionError(f"{RUN_ID} asked nothing within 240 s")


@pytest.fixture(scope="module")
def matrix(airflow_standalone: Stack, dpo_api: AirflowApi) -> Matrix:
    stack = airflow_standalone
    dpo_api.submit(erasure_request(REF, NOBODY))
    prompt = _settled_prompt(dpo_api, NOT_FOUND_PROMPT)
    ti = prompt["task_instance"]
    fill = {
        "ref": REF,
        "run": RUN_ID,
        "prompt": f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{RUN_ID}/taskInstances/"
        f"{ti['task_id']}/{ti['map_index']}/hitlDetails",
    }
    seen: dict[tuple[str, str], int] = {}
    details: dict[tuple[str, str], str] = {}
    shown: dict[tuple[str, str], bool] = {}
    clients = dict(_clients(stack))
    try:
        order = sorted(ROLES, key=lambda role: role == "dpo")  # the DPO answers last
        for role in order:
            for c in (c for c in CELLS if not c.after_completion):
                response = _try(clients[role], c, fill)
                seen[role, c.name], details[role, c.name] = response.status_code, response.text
                if c.shows is not None:
                    shown[role, c.name] = response.status_code == 200 and c.shows(response)
        # The plan's other questions (the archive without a key of a nobody, the backup) are
        # answered as the demo's DPO answers them; the cells above answered the search's.
        state, _ = dpo_api.wait(RUN_ID, decisions=load_decisions(), timeout=240)
        for role in ROLES:
            for c in (c for c in CELLS if c.after_completion):
                response = _try(clients[role], c, fill)
                seen[role, c.name], details[role, c.name] = response.status_code, response.text
        records = clients["auditor"].get(f"/erasure/api/v1/records/{REF}").json()
    finally:
        for client in clients.values():
            client.close()
    return Matrix(seen, details, shown, state, records)


def _table(matrix: Matrix) -> str:
    head = f"{'':34}" + "".join(f"{role:>15}" for role in ROLES)
    rows = [
        f"{c.name:34}" + "".join(f"{matrix.seen[role, c.name]:>15}" for role in ROLES)
        for c in CELLS
    ]
    return "\n".join([head, *rows])


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_exactly_its_cells(matrix: Matrix, role: str) -> None:
    wrong = []
    for c in CELLS:
        status = matrix.seen[role, c.name]
        if c.shows is not None:  # a list: the erasure runs in it for exactly the allowed
            if matrix.shown[role, c.name] != (role in c.allowed):
                wrong.append(f"{c.name}: shows erasure runs {matrix.shown[role, c.name]}")
            continue
        expected = c.ok if role in c.allowed else 403
        if status != expected:
            wrong.append(
                f"{c.name}: {status}, expected {expected}: {matrix.details[role, c.name][:300]}"
            )
    assert not wrong, f"{role}:\n" + "\n".join(wrong) + "\n\n" + _table(matrix)


def test_the_dpos_answer_completes_the_request_under_her_name(matrix: Matrix) -> None:
    assert matrix.state == "success", _table(matrix)
    (ruled,) = [
        r for r in matrix.records if r["kind"] == "decided" and r["body"]["rule"] == "not_found"
    ]
    assert ruled["body"]["ruling"]["author_name"] == "dpo", ruled
    completed = [r for r in matrix.records if r["kind"] == "completed"]
    assert completed, [r["kind"] for r in matrix.records]


def test_admin_is_refused_the_prompt_because_it_is_not_assigned_to_it(matrix: Matrix) -> None:
    refusal = matrix.details["admin", "answer the prompt"]
    assert "is not a respondent" in refusal, refusal
