"""The DPO's desk and the plugin's roles under the FAB auth manager, inside Airflow's own app.

Airflow's `create_app()` loads the plugin as the API server does, with the FAB auth manager
and the chart's roles (helm/values.yaml, applied by `local.up.fab_setup` as `make up` does);
each role logs in with `POST /auth/token`. The desk reads the erasure store (SQLite) and
Airflow's metadata DB: requests are registered as the register step leaves them, their runs
created as the desk creates them, and a prompt waiting or a task failed is written the way
Airflow records it (the task instance's state, the HITL row), since no scheduler runs here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa

from erasure.catalog import load_catalog
from erasure.intake import SubmissionBox, TransitSubmissionKey, ensure_submissions_key
from erasure.keys.keystore import KvKeyStore, KvKeyStoreConfig
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, ensure_transit
from erasure.store import Store, open_store
from erasure.submission import ErasureRequest
from local.up.stack import AUTH_MANAGER, PASSWORDS_FILE, USERS
from tests.integration.airflow_app import (
    GDPR_ERASURE_STANDIN,
    issue_tokens,
    plugin_client,
    sync_dags,
)
from tests.unit.registry_support import Books, books_for, register

REPO = Path(__file__).resolve().parents[2]
# Empty (tests/conftest.py): Airflow loads the plugin by the erasure_airflow entry point.

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault]

RUN = uuid.uuid4().hex[:6]
TODAY = date.today()
CANARY = f"desk.canary.{RUN}@example.org"
NOTE_CANARY = f"desk-note-{RUN}"
CATALOG = REPO / "erasure" / "sample" / "estate" / "catalog.yaml"
# One request per thing the desk shows; the registered ones by days since received.
OVERDUE = f"DESK-{RUN}-OVERDUE"
DUE_SOON = f"DESK-{RUN}-SOON"
EXTENDED = f"DESK-{RUN}-EXT"
WAITING = f"DESK-{RUN}-PROMPT"
FAILED = f"DESK-{RUN}-FAILED"
DRY = f"DESK-{RUN}-DRY"
DONE = f"DESK-{RUN}-DONE"
ENDED = f"DESK-{RUN}-ENDED"  # acting, while its run was marked success
DELETED = f"DESK-{RUN}-DELETED"  # failed, its run deleted
REFUSED = f"DESK-{RUN}-REFUSED"
KEPT = f"DESK-{RUN}-KEPT"  # register failed, its sealed copy kept for a retry
QUEUED = f"DESK-{RUN}-QUEUED"
RECEIVED_DAYS_AGO = {
    OVERDUE: 40, DUE_SOON: 26, EXTENDED: 20, WAITING: 3, FAILED: 2, DRY: 1, DONE: 5, ENDED: 4,
    DELETED: 6,
}  # fmt: skip
BROWSER = {"Accept": "text/html,application/xhtml+xml"}
EXTENSION_REASON = "Complex: three systems' backups must be checked."
PROMPT_SUBJECT = "Erasure: decide on crm.addresses"
REPLAY_DAG = "erasure_restore_replay"

EXTEND_STANDIN = '''
    """Stand-in for the extension DAG: the desk creates its runs."""
    from airflow.sdk import dag, task

    @dag(dag_id="gdpr_erasure_extend", schedule=None)
    def gdpr_erasure_extend():
        @task
        def extend():
            return "extended"

        extend()

    gdpr_erasure_extend()
'''


# ---------------------------------------------------------------------------------------------
# Fixtures: FAB with the chart's roles, the plugin, a desk full of requests


@pytest.fixture(scope="module")
def env(
    airflow_db: Path, openbao: EmbeddedOpenBao, tmp_path_factory: Any
) -> Iterator[dict[str, str]]:
    """The API server's environment under FAB; each user's password in the stack's file."""
    home = tmp_path_factory.mktemp("erasure-desk")
    passwords = {user: f"pw-{user}-{RUN}" for user in USERS}
    (airflow_db / PASSWORDS_FILE).write_text(json.dumps(passwords))
    (home / "webserver_config.py").write_text(
        (REPO / "helm" / "files" / "webserver_config.py").read_text()
    )
    values = {
        "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
        "AIRFLOW__FAB__CONFIG_FILE": str(home / "webserver_config.py"),
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex * 2,
        "ERASURE_STORE_URL": f"sqlite:///{home}/erasure.db",
        "ERASURE_VAULT_ADDR": openbao.address,
        "ERASURE_VAULT_TOKEN": openbao.token,
        "ERASURE_VAULT_KV_MOUNT": f"kv-desk-{RUN}",
        "ERASURE_KEYSTORE_KIND": "kv",  # the registry fixture parks under KvKeyStore
        "ERASURE_VAULT_TRANSIT_MOUNT": f"transit-desk-{RUN}",
        "ERASURE_CATALOG_PATH": str(CATALOG),
        "ERASURE_REQUIRE_DPO_ROLE": "true",
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, value)
        yield {**values, **{f"password:{u}": p for u, p in passwords.items()}}


def run_fab_setup(*first: list[str]) -> list[str]:
    """`local.up.fab_setup` (after `first`, e.g. the migration) as `make up` runs it; its lines."""
    setup = [sys.executable, "-m", "local.up.fab_setup"]
    steps: list[tuple[list[str], Path | None]] = [*((a, None) for a in first), (setup, REPO)]
    for argv, cwd in steps:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=os.environ.copy(), cwd=cwd, timeout=300
        )
        assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [line for line in done.stdout.splitlines() if line.startswith("fab setup:")]


@pytest.fixture(scope="module")
def fab_roles(env: dict[str, str]) -> list[str]:
    """FAB's tables, the chart's roles and one user per role, as `make up` sets them."""
    return run_fab_setup([sys.executable, "-m", "airflow", "db", "migrate"])


@pytest.fixture(scope="module")
def client(env: dict[str, str], fab_roles: list[str]) -> Iterator[Any]:
    """Airflow's API server app under FAB, plugin (and its listener) included."""
    with plugin_client(listener=True) as client:
        yield client


@pytest.fixture(scope="module")
def tokens(client: Any, env: dict[str, str]) -> dict[str, str]:
    return issue_tokens(client, {u: env[f"password:{u}"] for u in USERS})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def store(env: dict[str, str]) -> Iterator[Store]:
    with open_store(env["ERASURE_STORE_URL"]) as store:
        yield store


@pytest.fixture(scope="module")
def registry(env: dict[str, str], store: Store, openbao: EmbeddedOpenBao) -> Books:
    vault = openbao.client()
    keystore = KvKeyStore(KvKeyStoreConfig(mount=env["ERASURE_VAULT_KV_MOUNT"]), vault)
    keystore.ensure_mount()
    PepperStore(vault, env["ERASURE_VAULT_KV_MOUNT"]).initialise()
    ensure_transit(vault, env["ERASURE_VAULT_TRANSIT_MOUNT"])
    ensure_submissions_key(vault, env["ERASURE_VAULT_TRANSIT_MOUNT"])
    return books_for(store, keystore, peppers=PepperStore(vault, env["ERASURE_VAULT_KV_MOUNT"]))


@pytest.fixture(scope="module")
def erasure_dag(client: Any, tmp_path_factory: Any) -> str:
    extend = textwrap.dedent(EXTEND_STANDIN)
    sources = {
        "gdpr_erasure.py": GDPR_ERASURE_STANDIN,
        "gdpr_erasure_extend.py": extend,
        "erasure_reconcile.py": extend.replace("gdpr_erasure_extend", "erasure_reconcile"),
        "erasure_restore_replay.py": extend.replace("gdpr_erasure_extend", REPLAY_DAG),
    }
    sync_dags(tmp_path_factory.mktemp("desk-dags"), sources)
    return "gdpr_erasure"


def _start_run(ref: str, submission: str | None = None) -> str:
    """The run as the desk creates it: conf = the reference and a handle."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    run_id = f"erasure-{ref}"
    with create_session() as session:
        trigger_dag(
            "gdpr_erasure",
            triggered_by=DagRunTriggeredByType.REST_API,
            triggering_user_name="dpo",
            run_id=run_id,
            conf={"request_ref": ref, "submission": submission or f"sub-{uuid.uuid4().hex}"},
            session=session,
        )
    return run_id


def _set_task(run_id: str, task_id: str, state: str, *, prompt: str | None = None) -> None:
    """A task instance's state as Airflow records it; a prompt also gets its HITL row."""
    from airflow.models.dagrun import DagRun
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalars(
            sa.select(TaskInstance).where(
                TaskInstance.run_id == run_id, TaskInstance.task_id == task_id
            )
        ).one()
        ti.state = state
        ti.try_number = 3 if state == "failed" else 1
        if prompt is not None:
            session.add(
                HITLDetail(
                    ti_id=ti.id,
                    options=["Delete this row", "Retain under an Art. 17(3) exemption"],
                    subject=prompt,
                    body="**Artefact** `crm.addresses`",
                    defaults=None,
                    multiple=False,
                    params={},
                    assignees=[{"id": "2", "name": "dpo"}],
                )
            )
        if state == "failed" and task_id == "register":
            run = session.scalars(sa.select(DagRun).where(DagRun.run_id == run_id)).one()
            run.state = "failed"


def _set_run(run_id: str, state: str) -> None:
    """A run's state as marking it from the UI leaves it."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        session.scalars(sa.select(DagRun).where(DagRun.run_id == run_id)).one().state = state


def submission(ref: str, index: int, days: int) -> ErasureRequest:
    return ErasureRequest.parse(
        {
            "request_ref": ref,
            "identifier_type": "email",
            "identifier": CANARY.replace("desk.", f"desk{index}."),
            "received_on": (TODAY - timedelta(days=days)).isoformat(),
            "legal_ground": "art17_1_b",
            "notes": NOTE_CANARY,
            "dry_run": ref == DRY,
        }
    )


@pytest.fixture(scope="module")
def desk(
    registry: Books, erasure_dag: str, client: Any, env: dict[str, str], openbao: EmbeddedOpenBao
) -> dict[str, str]:
    """Requests in every situation the desk shows; ref -> subject hash."""
    catalog = load_catalog(CATALOG)
    hashes = {}
    for index, (ref, days) in enumerate(RECEIVED_DAYS_AGO.items()):
        run_id = f"erasure-{ref}" if ref == DELETED else _start_run(ref)
        done = register(registry, submission(ref, index, days), catalog=catalog, run_id=run_id)
        hashes[ref] = done.subject_hash
    registry.requests.extend(EXTENDED, 2, EXTENSION_REASON)
    for ref, status in ((WAITING, "planned"), (FAILED, "planned"), (DONE, "planned")):
        registry.requests.set_status(ref, status)
    registry.requests.set_status(WAITING, "acting")
    registry.requests.set_status(FAILED, "failed")
    for status in ("acting", "verifying", "complete"):
        registry.requests.set_status(DONE, status)
    _set_task(f"erasure-{DONE}", "dpo_decides", "failed")  # failed once; it completed anyway
    for status in ("planned", "acting"):
        registry.requests.set_status(ENDED, status)
    _set_run(f"erasure-{ENDED}", "success")
    registry.requests.set_status(DELETED, "failed")
    _set_task(f"erasure-{WAITING}", "register", "success")
    _set_task(f"erasure-{WAITING}", "dpo_decides", "awaiting_input", prompt=PROMPT_SUBJECT)
    _set_task(f"erasure-{FAILED}", "register", "failed")
    _start_run(REFUSED)
    _set_task(f"erasure-{REFUSED}", "register", "failed")
    key = TransitSubmissionKey(openbao.client(), env["ERASURE_VAULT_TRANSIT_MOUNT"])
    ticket = SubmissionBox(registry.store, key).seal(submission(KEPT, 99, 0))
    _start_run(KEPT, ticket.submission)
    _set_task(f"erasure-{KEPT}", "register", "failed")
    _start_run(QUEUED)
    return hashes


def desk_json(client: Any, token: str, **params: str) -> dict[str, Any]:
    response = client.get("/erasure/api/v1/desk", params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def entries_by_ref(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["request_ref"]: e for e in body["entries"] if RUN in e["request_ref"]}


# ---------------------------------------------------------------------------------------------
# The desk


def test_every_request_is_on_the_desk_with_its_deadline(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    entries = entries_by_ref(desk_json(client, tokens["dpo"]))
    assert set(entries) == {*RECEIVED_DAYS_AGO, REFUSED, KEPT, QUEUED}
    overdue = entries[OVERDUE]
    assert overdue["deadline"] == "overdue" and overdue["days_left"] < 0
    assert overdue["effective_due_on"] < TODAY.isoformat()
    assert entries[DUE_SOON]["deadline"] == "due_soon" and 0 <= entries[DUE_SOON]["days_left"] <= 7
    extended = entries[EXTENDED]
    assert extended["deadline"] == "on_time" and extended["extension_reason"] == EXTENSION_REASON
    assert extended["effective_due_on"] == extended["extended_until"] > extended["due_on"]
    assert entries[DONE]["deadline"] == "closed" and entries[DONE]["days_left"] is None
    assert entries[DRY]["dry_run"] is True and entries[DRY]["deadline"] == "none"
    for ref, entry in entries.items():
        if ref in RECEIVED_DAYS_AGO:
            assert entry["subject_hash"] == desk[ref]
            assert entry["received_on"] == (TODAY - timedelta(RECEIVED_DAYS_AGO[ref])).isoformat()
            assert entry["evidence_url"] == f"/erasure/api/v1/records/{ref}/export?format=html"
            assert entry["request_url"] == f"/erasure/api/v1/requests/{ref}"
    # Most urgent first: the overdue request, then the one due within a week.
    order = [e["request_ref"] for e in desk_json(client, tokens["dpo"])["entries"]]
    assert order.index(OVERDUE) < order.index(DUE_SOON) < order.index(EXTENDED) < order.index(DONE)


def test_a_waiting_prompt_links_straight_to_it_in_airflow(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    waiting = entries_by_ref(desk_json(client, tokens["dpo"]))[WAITING]
    assert waiting["status"] == "awaiting_dpo"  # the run knows before the registry does
    (prompt,) = waiting["prompts"]
    assert prompt["subject"] == PROMPT_SUBJECT and prompt["assigned_to"] == ["dpo"]
    assert prompt["url"] == (
        f"/dags/gdpr_erasure/runs/erasure-{WAITING}/tasks/dpo_decides/required_actions"
    )
    assert waiting["run_url"] == f"/dags/gdpr_erasure/runs/erasure-{WAITING}"
    # The link opens Airflow's own page for the task instance (served by the UI).
    assert client.get(prompt["url"], headers=bearer(tokens["dpo"])).status_code == 200


def test_a_failed_task_links_to_where_it_is_cleared(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    entries = entries_by_ref(desk_json(client, tokens["dpo"]))
    failed = entries[FAILED]
    assert failed["status"] == "failed" and failed["prompts"] == []
    assert failed["remedy"]["kind"] == "clear_tasks"
    (task,) = failed["failed"]
    assert task["task_id"] == "register" and task["try_number"] == 3
    assert task["url"] == f"/dags/gdpr_erasure/runs/erasure-{FAILED}/tasks/register"


def test_each_request_is_offered_the_remedy_that_works(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    entries = entries_by_ref(desk_json(client, tokens["dpo"]))
    offered = {
        ref: (e["status"], e["remedy"]["kind"], e["remedy"]["url"]) for ref, e in entries.items()
    }
    assert offered[FAILED] == ("failed", "clear_tasks", None)  # each failed task's url
    assert offered[KEPT] == ("submitted", "clear_tasks", None)  # the retry opens the copy
    assert offered[REFUSED] == ("refused", "resubmit", f"/erasure/requests/new?ref={REFUSED}")
    assert offered[ENDED] == ("run_ended", "clear_run", f"/dags/gdpr_erasure/runs/erasure-{ENDED}")
    resume = f"/erasure/api/v1/requests/{DELETED}/resume"
    assert offered[DELETED] == ("failed", "resume", resume)
    assert entries[DELETED]["run_url"] is None  # no link to a run that is gone
    for ref in (DONE, WAITING, QUEUED, DRY, OVERDUE):
        assert offered[ref][1:] == ("none", None), (ref, offered[ref])
    assert entries[DONE]["failed"], "a completed request's failed task is known, not offered"


def test_submissions_not_registered_are_on_the_desk_without_a_subject(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    entries = entries_by_ref(desk_json(client, tokens["dpo"]))
    refused, queued = entries[REFUSED], entries[QUEUED]
    assert refused["status"] == "refused" and refused["failed"][0]["task_id"] == "register"
    assert queued["status"] == "submitted" and queued["run_state"] == "queued"
    for entry in (refused, queued):
        assert entry["subject_hash"] is None and entry["evidence_url"] is None
        assert entry["received_on"] is None and entry["deadline"] == "none"


def test_the_desk_filters_by_status_and_counts_everything(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    every = desk_json(client, tokens["dpo"])
    only = desk_json(client, tokens["dpo"], status="awaiting_dpo")
    assert only["status"] == "awaiting_dpo"
    assert [e["request_ref"] for e in only["entries"] if RUN in e["request_ref"]] == [WAITING]
    assert only["counts"] == every["counts"]  # counts are of the whole desk, not the filter
    counts = every["counts"]
    assert counts["overdue"] >= 1 and counts["due_soon"] >= 1 and counts["prompts"] >= 1
    assert counts["failed"] >= 2 and counts["dry_runs"] >= 1 and counts["closed"] >= 1
    bad = client.get(
        "/erasure/api/v1/desk", params={"status": "sleeping"}, headers=bearer(tokens["dpo"])
    )
    assert bad.status_code == 422 and "sleeping" not in json.dumps(bad.json()["detail"][0]["msg"])


def page_as(client: Any, token: str, path: str, **params: str) -> Any:
    """A page as the browser gets it after logging in to Airflow's UI (the `_token` cookie)."""
    client.cookies.set("_token", token)
    try:
        return client.get(path, params=params, headers=BROWSER)
    finally:
        client.cookies.clear()


def row_of(html: str, ref: str) -> str:
    row = html[html.index(f'data-ref="{ref}"') :]
    return row[: row.index("</tr>")]


def test_the_desk_page_offers_each_row_its_remedy_and_says_why(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    html = page_as(client, tokens["dpo"], "/erasure/desk").text
    refused = row_of(html, REFUSED)
    assert f'href="/erasure/requests/new?ref={REFUSED}">submit a corrected request' in refused
    assert f'href="/dags/gdpr_erasure/runs/erasure-{REFUSED}/tasks/register">why' in refused
    assert 'class="failed"' not in refused and "destroyed its sealed copy" in refused
    kept = row_of(html, KEPT)
    assert 'class="failed"' in kept and "clear register (failed, try 3)" in kept
    done = row_of(html, DONE)
    assert 'class="failed"' not in done and 'class="remedy"' not in done
    ended = row_of(html, ENDED)
    assert "run ended success without completing the request" in ended and "acting" not in ended
    assert f'href="/dags/gdpr_erasure/runs/erasure-{ENDED}">clear the run' in ended
    resume = f'class="resume" data-url="/erasure/api/v1/requests/{DELETED}/resume"'
    assert resume in row_of(html, DELETED)
    # The form the desk links to comes back with the reference filled in, and nothing else.
    form = page_as(client, tokens["dpo"], "/erasure/requests/new", ref=REFUSED).text
    assert f'value="{REFUSED}"' in form
    hostile = page_as(client, tokens["dpo"], "/erasure/requests/new", ref='x"><script>').text
    assert 'value=""' in hostile and "<script>x" not in hostile
    # Starting a run again is the DPO's: an operator reads why, with no button.
    operator = row_of(page_as(client, tokens["operator"], "/erasure/desk").text, DELETED)
    assert 'class="resume"' not in operator and "the DPO does this here" in operator


def test_the_dpo_starts_a_deleted_run_again_from_the_desk(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    url = entries_by_ref(desk_json(client, tokens["dpo"]))[DELETED]["remedy"]["url"]
    # As the desk page's button posts it: `{}` as JSON, with the UI's cookie, from its origin.
    client.cookies.set("_token", tokens["dpo"])
    try:
        bare = client.post(url)  # the old button's bare cookie POST
        started = client.post(url, json={}, headers={"Origin": "http://testserver"})
    finally:
        client.cookies.clear()
    assert bare.status_code == 415 and "Content-Type: application/json" in bare.text
    assert started.status_code == 201 and started.json()["run_id"] == f"erasure-{DELETED}"
    entry = entries_by_ref(desk_json(client, tokens["dpo"]))[DELETED]
    assert entry["run_state"] == "queued" and entry["remedy"]["kind"] == "none"


def test_the_desk_page_marks_what_needs_the_dpo_and_never_the_identifier(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    client.cookies.set("_token", tokens["dpo"])  # as the UI's login leaves it
    try:
        page = client.get("/erasure/desk")
        filtered = client.get("/erasure/desk", params={"status": "failed"})
    finally:
        client.cookies.clear()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    row = html[html.index(f'data-ref="{OVERDUE}"') :]
    assert "overdue" in row[: row.index("</tr>")]
    row = html[html.index(f'data-ref="{DUE_SOON}"') :]
    assert 'class="days warn"' in row[: row.index("</tr>")]
    assert EXTENSION_REASON.replace("'", "&#x27;") in html
    assert f"/dags/gdpr_erasure/runs/erasure-{WAITING}/tasks/dpo_decides/required_actions" in html
    assert 'id="new-request"' in html  # the DPO may submit
    assert f'data-ref="{FAILED}"' in filtered.text and f'data-ref="{OVERDUE}"' not in filtered.text
    for text in (html, filtered.text, json.dumps(desk_json(client, tokens["dpo"]))):
        assert "canary" not in text.casefold() and NOTE_CANARY not in text


# ---------------------------------------------------------------------------------------------
# Roles: every plugin route, every role of the chart


ROLES = tuple(USERS)  # the chart's roles, Admin, and Airflow's Viewer, User and Op
RECORD_ROUTES = (
    "GET /erasure/api/v1/requests",
    f"GET /erasure/api/v1/requests/{DONE}",
    "GET /erasure/api/v1/records",
    "GET /erasure/api/v1/records/verify",
    "GET /erasure/records",
)
DESK_ROUTES = ("GET /erasure/desk", "GET /erasure/api/v1/desk")
SUBMIT_ROUTES = (
    "GET /erasure/requests/new",
    "POST /erasure/api/v1/requests",
    f"POST /erasure/api/v1/requests/{DONE}/resume",
    f"POST /erasure/api/v1/requests/{DONE}/extend",
)
LINEAGE_ROUTES = ("POST /erasure/api/v1/lineage",)
TASK_ROUTES = ("GET /erasure/api/v1/respondents",)
# Who gets through: the rest get 403. Submitting passes to validation (422 on an empty body).
ALLOWED = {
    # Lineage ingest takes the lineage API key only: no login, whatever its role.
    "dpo": {*RECORD_ROUTES, *DESK_ROUTES, *SUBMIT_ROUTES},
    "auditor": {*RECORD_ROUTES},
    "operator": {*RECORD_ROUTES, *DESK_ROUTES},
    "erasure-tasks": {*TASK_ROUTES},
    # FAB gives Admin every permission; submitting also needs the DPO role, which it lacks.
    "admin": {*RECORD_ROUTES, *DESK_ROUTES, *TASK_ROUTES},
    # Airflow's own roles hold nothing of the plugin.
    "viewer": set(),
    "user": set(),
    "op": set(),
}


@pytest.mark.parametrize("user", ROLES)
def test_each_role_reaches_exactly_its_plugin_routes(
    client: Any, tokens: dict[str, str], desk: dict[str, str], user: str
) -> None:
    from erasure_airflow import api as erasure_api

    app_routes: Any = erasure_api.app.routes
    mounted = {f"{m} /erasure{r.path}" for r in app_routes for m in r.methods}
    routes = (*RECORD_ROUTES, *DESK_ROUTES, *SUBMIT_ROUTES, *LINEAGE_ROUTES, *TASK_ROUTES)
    named = {r.replace(DONE, "{ref}") for r in routes}
    assert mounted - named <= {
        "GET /erasure/api/v1/records/{ref}",
        "GET /erasure/api/v1/records/{ref}/export",
    }, "a route is missing from this test"
    seen = {}
    for route in routes:
        method, path = route.split(" ", 1)
        body = [] if path.endswith("/lineage") else {}
        response = client.request(
            method, path, headers=bearer(tokens[user]), json=body if method == "POST" else None
        )
        seen[route] = response.status_code
    refused = {r for r, code in seen.items() if code == 403}
    assert refused == set(routes) - ALLOWED[user], seen
    for route in ALLOWED[user]:
        posted = route == "POST /erasure/api/v1/requests" or route.endswith("/extend")
        expected = 422 if posted else 200  # an empty body, refused once authorised
        if route.endswith("/resume"):
            expected = 409  # a completed request has no run to start again
        assert seen[route] == expected, (route, seen[route])


def test_a_refusal_says_what_the_route_needs(client: Any, tokens: dict[str, str]) -> None:
    desk = client.get("/erasure/desk", headers=bearer(tokens["auditor"])).json()["detail"]
    assert "can_read on Erasure Desk" in desk
    submit = client.post("/erasure/api/v1/requests", json={}, headers=bearer(tokens["admin"]))
    assert "a DPO role (DPO;" in submit.json()["detail"]


def test_the_tasks_learn_who_the_dpos_are(
    client: Any, tokens: dict[str, str], fab_roles: list[str]
) -> None:
    body = client.get("/erasure/api/v1/respondents", headers=bearer(tokens["erasure-tasks"])).json()
    me = client.get("/ui/auth/me", headers=bearer(tokens["dpo"])).json()
    assert body == {
        "dpo_roles": ["DPO"],
        "respondents": [{"id": me["id"], "name": "dpo", "roles": ["DPO"]}],
    }
    assert any("role DPO:" in line for line in fab_roles)


def test_a_person_refused_a_page_gets_a_page_saying_why(
    client: Any, tokens: dict[str, str]
) -> None:
    browser = {**bearer(tokens["auditor"]), "Accept": "text/html,application/xhtml+xml"}
    page = client.get("/erasure/desk", headers=browser)
    assert page.status_code == 403 and page.headers["content-type"].startswith("text/html")
    assert "Not for your role" in page.text and "can_read on Erasure Desk" in page.text
    api = client.get("/erasure/api/v1/desk", headers=browser)  # scripts keep their JSON
    assert api.status_code == 403 and "can_read on Erasure Desk" in api.json()["detail"]


# ---------------------------------------------------------------------------------------------
# Not logged in: to Airflow's login, and back to the page asked for


def login_next(response: Any) -> str:
    """The `next` of the login URL a page redirected to; asserts it is FAB's login page."""
    assert response.status_code == 303, (response.status_code, response.text[:200])
    login = urlsplit(response.headers["location"])
    assert login.path == "/auth/login/", login
    (next_url,) = parse_qs(login.query)["next"]
    return str(next_url)


PAGES = (
    "/erasure/desk?status=failed",
    "/erasure/records?status=complete",
    "/erasure/requests/new",
    f"/erasure/api/v1/records/{DONE}/export?format=html",  # the evidence page
)


# Named without the run's random part: every pytest-xdist worker must collect the same ids.
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.replace(RUN, "RUN"))
def test_a_page_asked_for_before_login_is_where_login_returns(client: Any, page: str) -> None:
    asked = client.get(page, headers=BROWSER, follow_redirects=False)
    assert login_next(asked) == page
    # Scripts are not browsers: they keep their 401.
    assert client.get(page, follow_redirects=False).status_code == 401


def test_logging_in_from_the_redirect_lands_on_the_desk(
    client: Any, env: dict[str, str], desk: dict[str, str]
) -> None:
    asked = client.get("/erasure/desk?status=failed", headers=BROWSER, follow_redirects=False)
    login = asked.headers["location"]
    try:
        form = client.get(login)
        csrf = re.search(r'name="csrf_token"[^>]*value="([^"]+)"', form.text)
        assert csrf is not None, form.text[:500]
        logged_in = client.post(
            login,
            data={"username": "dpo", "password": env["password:dpo"], "csrf_token": csrf[1]},
            follow_redirects=False,
        )
        assert logged_in.status_code == 302, logged_in.text[:300]
        landed = urlsplit(logged_in.headers["location"])
        assert (landed.path, landed.query) == ("/erasure/desk", "status=failed")
        page = client.get(logged_in.headers["location"], headers=BROWSER)
    finally:
        client.cookies.clear()
    assert page.status_code == 200 and f'data-ref="{FAILED}"' in page.text


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
        {"Referer": "https://evil.example/erasure/desk"},
    ],
)
def test_the_login_redirect_never_names_another_host(client: Any, headers: dict[str, str]) -> None:
    asked = [
        client.get(page, headers={**BROWSER, **headers}, follow_redirects=False)
        for page in (
            "/erasure/desk?next=https://evil.example/",
            "/erasure/api/v1/records/%5C%5Cevil.example/export?format=html",
        )
    ]
    for response in asked:
        next_url = login_next(response)
        target = urlsplit(next_url)
        # The desk, or Airflow's home where the path was not reference-like (the backslashes).
        assert next_url in ("/erasure/desk", "/"), next_url
        assert not target.scheme and not target.netloc and "evil" not in next_url
        assert "evil.example" not in urlsplit(response.headers["location"]).netloc


def test_the_roles_job_takes_back_a_grant_made_by_hand(client: Any, fab_roles: list[str]) -> None:
    """The chart owns its roles: an upgrade leaves each with exactly its listed permissions."""
    from airflow.providers.fab.auth_manager.models import Action, Permission, Resource, Role
    from airflow.utils.session import create_session

    def dpo_may_trigger_any_dag() -> bool:
        with create_session() as session:
            role = session.scalars(sa.select(Role).where(Role.name == "DPO")).unique().one()
            return any(
                (p.action.name, p.resource.name) == ("can_create", "DAG Runs")
                for p in role.permissions
            )

    with create_session() as session:  # what an admin's click in Security > Roles does
        role = session.scalars(sa.select(Role).where(Role.name == "DPO")).unique().one()
        role.permissions.append(
            session.scalars(
                sa.select(Permission)
                .join(Permission.action)
                .join(Permission.resource)
                .where(Action.name == "can_create", Resource.name == "DAG Runs")
            )
            .unique()
            .one()
        )
    assert dpo_may_trigger_any_dag()
    lines = run_fab_setup()
    assert any(
        line.startswith("fab setup: role DPO:") and "removed: can_create on DAG Runs" in line
        for line in lines
    ), lines
    assert not dpo_may_trigger_any_dag()


# ---------------------------------------------------------------------------------------------
# Airflow's own routes on the erasure DAG: only the roles granted it by name (erasure_auth)

RUN_PATH = f"/api/v2/dags/gdpr_erasure/dagRuns/erasure-{WAITING}"
TI_PATH = f"{RUN_PATH}/taskInstances/register"
READ_ERASURE = {"dpo", "operator", "admin"}
ACT_ON_ERASURE = {"dpo", "admin"}
# (route, body, who gets through, the status once through: a body malformed on purpose, or a
# run that does not exist, so that nothing is triggered, changed or deleted)
CORE_CELLS = [
    ("POST /api/v2/dags/gdpr_erasure/dagRuns", {"logical_date": "x"}, set(), 422),
    ("POST /api/v2/dags/gdpr_erasure_extend/dagRuns", {"logical_date": "x"}, set(), 422),
    (f"GET {RUN_PATH}", None, READ_ERASURE, 200),
    (f"PATCH {RUN_PATH}", {"state": "not a state"}, ACT_ON_ERASURE, 422),
    ("DELETE /api/v2/dags/gdpr_erasure/dagRuns/no-such-run", None, {"admin"}, 404),
    ("POST /api/v2/dags/gdpr_erasure/clearTaskInstances", {"dry_run": "x"}, ACT_ON_ERASURE, 422),
    (f"GET {TI_PATH}", None, READ_ERASURE, 200),
    (f"PATCH {TI_PATH}", {"new_state": "not a state"}, ACT_ON_ERASURE, 422),
    # XComs (the plan's datasets and prompts) and deleting runs: the chart grants them nobody.
    (f"GET {TI_PATH}/xcomEntries", None, {"admin"}, 200),
    (f"POST {TI_PATH}/xcomEntries", {"key": 1}, set(), 422),  # nobody: what tasks pass on
    ("PATCH /api/v2/dags/gdpr_erasure", {"is_paused": "x"}, ACT_ON_ERASURE, 422),
    # After restoring a backup, the operator replays it: hers (and Admin's) to trigger alone.
    (f"POST /api/v2/dags/{REPLAY_DAG}/dagRuns", {"logical_date": "x"}, {"operator", "admin"}, 422),
]  # fmt: skip


@pytest.mark.parametrize("user", ROLES)
def test_airflows_own_routes_on_an_erasure_run_are_the_dpos_alone(
    client: Any, tokens: dict[str, str], desk: dict[str, str], user: str
) -> None:
    """Issue 19: Viewer, User and Op hold global DAG permissions under FAB; on the erasure
    DAGs they count for nothing. Nobody triggers gdpr_erasure or the extension over the API."""
    wrong = []
    for route, body, allowed, through in CORE_CELLS:
        method, path = route.split(" ", 1)
        response = client.request(method, path, headers=bearer(tokens[user]), json=body)
        expected = through if user in allowed else 403
        if response.status_code != expected:
            wrong.append(f"{route}: {response.status_code}, expected {expected}")
    assert not wrong, f"{user}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("user", ROLES)
def test_lists_of_dags_runs_and_prompts_hide_the_erasure_dags_from_other_roles(
    client: Any, tokens: dict[str, str], desk: dict[str, str], user: str
) -> None:
    headers = bearer(tokens[user])
    dags = client.get("/api/v2/dags", headers=headers)
    runs = client.get("/api/v2/dags/~/dagRuns", headers=headers)
    prompts = client.get("/api/v2/dags/~/dagRuns/~/hitlDetails", headers=headers)
    seen = set()
    if dags.status_code == 200:
        seen |= {d["dag_id"] for d in dags.json()["dags"]}
    if runs.status_code == 200:
        seen |= {r["dag_id"] for r in runs.json()["dag_runs"]}
    if prompts.status_code == 200:
        seen |= {p["task_instance"]["dag_id"] for p in prompts.json()["hitl_details"]}
    if user in READ_ERASURE:
        assert "gdpr_erasure" in seen, (user, dags.text[:300])
    else:
        assert not seen & {"gdpr_erasure", "gdpr_erasure_extend"}, (user, seen)


def test_another_role_cannot_answer_an_erasure_prompt(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    path = f"{RUN_PATH}/taskInstances/dpo_decides/-1/hitlDetails"
    # A whole answer, as the form sends it: refused by Airflow for the role, not at the door.
    answer = {
        "chosen_options": ["Delete this row"],
        "params_input": {
            "justification": "Shared with another customer's order.",
            "scheduled_by": None,
            "exemption": None,
            "standing_until": None,
        },
    }
    for user in ("viewer", "user", "op", "operator", "auditor"):
        response = client.patch(path, headers=bearer(tokens[user]), json=answer)
        assert response.status_code == 403, (user, response.status_code, response.text[:200])


def test_the_dpo_extends_a_deadline_on_the_desk_and_the_run_names_her(
    client: Any, tokens: dict[str, str], desk: dict[str, str]
) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    asked = {"months": 2, "reason": "Three systems' backups must be searched by hand."}
    path = f"/erasure/api/v1/requests/{OVERDUE}/extend"
    for user in ("operator", "admin", "user", "op"):
        assert client.post(path, json=asked, headers=bearer(tokens[user])).status_code == 403
    made = client.post(path, json=asked, headers=bearer(tokens["dpo"]))
    assert made.status_code == 201, made.text
    with create_session() as session:
        run_id = made.json()["run_id"]
        run = session.scalars(sa.select(DagRun).where(DagRun.run_id == run_id)).one()
        assert run.dag_id == "gdpr_erasure_extend" and run.triggering_user_name == "dpo"
        # The reason is sealed for the workers: whatever it says never reaches Airflow.
        assert run.conf["request_ref"] == OVERDUE and run.conf["months"] == 2
        assert run.conf["sealed_reason"].startswith("vault:v1:")
        assert asked["reason"] not in str(run.conf)
    refusals = {
        f"/erasure/api/v1/requests/{EXTENDED}/extend": 409,  # Art. 12(3): once
        f"/erasure/api/v1/requests/{DONE}/extend": 409,  # closed: nothing to extend
        "/erasure/api/v1/requests/DESK-NO-SUCH/extend": 404,
    }
    for refused, status in refusals.items():
        response = client.post(refused, json=asked, headers=bearer(tokens["dpo"]))
        assert response.status_code == status, (refused, response.text)
    bad = client.post(path, json={"months": 3, "reason": "x"}, headers=bearer(tokens["dpo"]))
    assert bad.status_code == 422 and "months" in bad.text


def test_a_run_or_task_set_by_hand_is_recorded_at_once_naming_who(
    client: Any, tokens: dict[str, str], registry: Books, store: Store, desk: dict[str, str]
) -> None:
    """Issue 19: the listener hears the API set an erasure task's and run's state, records who
    did it in the erasure store, and starts the reconciler at once."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from erasure.registry.interventions import InterventionBook

    forced = f"DESK-{RUN}-FORCED"
    register(
        registry,
        ErasureRequest.parse(
            {
                "request_ref": forced,
                "identifier_type": "email",
                "identifier": CANARY.replace("desk.", "forced."),
                "received_on": TODAY.isoformat(),
                "legal_ground": "art17_1_b",
            }
        ),
        catalog=load_catalog(CATALOG),
        run_id=_start_run(forced),
    )
    admin = bearer(tokens["admin"])
    run_path = f"/api/v2/dags/gdpr_erasure/dagRuns/erasure-{forced}"
    marked = client.patch(
        f"{run_path}/taskInstances/dpo_decides", json={"new_state": "success"}, headers=admin
    )
    assert marked.status_code == 200, marked.text
    ended = client.patch(run_path, json={"state": "failed"}, headers=admin)
    assert ended.status_code == 200, ended.text

    heard = InterventionBook(store).for_request(forced)
    assert [(i.target, i.state, i.by) for i in heard] == [
        ("dpo_decides", "success", "admin"),
        ("run", "failed", "admin"),
    ]
    # The desk says so at once: not "acting", and who set what.
    entry = entries_by_ref(desk_json(client, tokens["dpo"]))[forced]
    assert entry["status"] == "run_ended", entry
    assert [(i["target"], i["by"]) for i in entry["interventions"]] == [
        ("dpo_decides", "admin"),
        ("run", "admin"),
    ]
    page = client.get("/erasure/desk", headers=bearer(tokens["dpo"])).text
    assert "the run set to failed by admin" in page
    deadline = time.monotonic() + 30
    while True:  # started by the listener right after the route's transaction ended
        with create_session() as session:
            started = session.scalars(
                sa.select(DagRun.run_id).where(DagRun.dag_id == "erasure_reconcile")
            ).all()
        if [r for r in started if r.startswith("forced-")] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [r for r in started if r.startswith("forced-")], started


# ---------------------------------------------------------------------------------------------
# A prompt's answer: checked, and its justification sealed, before Airflow stores it

ANSWERED = f"DESK-{RUN}-ANSWERED"
JUSTIFICATION = f"Retained while the invoice dispute runs; see case file {NOTE_CANARY}."


def _prompt_path(ref: str) -> str:
    return (
        f"/api/v2/dags/gdpr_erasure/dagRuns/erasure-{ref}/taskInstances/dpo_decides/-1/hitlDetails"
    )


def _answer(justification: Any = JUSTIFICATION, **changes: Any) -> dict[str, Any]:
    params = {
        "justification": justification,
        "scheduled_by": None,
        "exemption": "b",
        "standing_until": None,
    }
    body = {"chosen_options": ["Retain under an Art. 17(3) exemption"], "params_input": params}
    for key, value in changes.items():
        (params if key in params or key.startswith("x_") else body)[key] = value
    return body


def _kept_by_airflow(ref: str) -> str:
    """Everything Airflow's metadata DB holds about the prompt's answers: its HITL row and
    history, and the audit log's rows of the run."""
    from airflow.models.hitl import HITLDetail
    from airflow.models.hitl_history import HITLDetailHistory
    from airflow.models.log import Log
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalars(
            sa.select(TaskInstance).where(
                TaskInstance.run_id == f"erasure-{ref}", TaskInstance.task_id == "dpo_decides"
            )
        ).one()
        detail = session.get(HITLDetail, ti.id)
        history = session.scalars(sa.select(HITLDetailHistory)).all()  # every earlier try
        logs = session.scalars(sa.select(Log).where(Log.run_id == f"erasure-{ref}")).all()
        return json.dumps(
            {
                "detail": [detail.chosen_options, detail.params_input, detail.responded_at],
                "history": [[h.chosen_options, h.params_input] for h in history],
                "log": [[row.event, row.extra] for row in logs],
            },
            default=str,
        )


def _every_log_row() -> str:
    """Airflow's whole audit log, as text."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    with create_session() as session:
        return json.dumps([[r.event, r.extra] for r in session.scalars(sa.select(Log))])


def _notes_held(store: Store) -> int:
    from erasure.store.schema import sealed_notes

    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(sealed_notes)).scalar_one())


@pytest.fixture(scope="module")
def prompt_to_answer(client: Any, desk: dict[str, str]) -> str:
    """The run ANSWERED, its prompt awaiting the DPO: once per worker, whichever of the tests
    that answer it comes first (xdist may send them to different workers)."""
    _start_run(ANSWERED)
    _set_task(f"erasure-{ANSWERED}", "dpo_decides", "awaiting_input", prompt=PROMPT_SUBJECT)
    return ANSWERED


def test_an_answer_that_does_not_fit_the_prompt_is_refused_before_airflow_keeps_any_of_it(
    client: Any, tokens: dict[str, str], store: Store, prompt_to_answer: str
) -> None:
    dpo = bearer(tokens["dpo"])
    held = _notes_held(store)
    refused = {
        "no justification": (_answer(""), "justification: must not be empty"),
        "blank": (_answer(" \u200b\u2060\n"), "justification: must not be empty"),
        "a handle": (_answer("note-" + "a" * 32), "not a handle"),
        "too long": (_answer("x" * 4001), "justification"),
        "not text": (_answer([CANARY]), "justification"),
        "a key named after her": (_answer(**{f"x_{CANARY}": "1"}), "<unknown field>"),
        "her address as a date": (_answer(scheduled_by=CANARY), "scheduled_by"),
        "her address as an exemption": (_answer(exemption=CANARY), "exemption"),
        "her address as an option": (_answer(chosen_options=[CANARY]), "chosen_options"),
        "two options": (
            _answer(chosen_options=["Delete this row", "Delete this row"]),
            "chosen_options",
        ),
        "no params": ({"chosen_options": ["Delete this row"]}, "params_input"),
    }
    for case, (body, says) in refused.items():
        response = client.patch(_prompt_path(ANSWERED), json=body, headers=dpo)
        assert response.status_code == 400, (case, response.status_code, response.text[:300])
        assert says in response.json()["detail"], (case, response.text[:300])
        assert CANARY not in response.text and NOTE_CANARY not in response.text, case
    raw = client.patch(
        _prompt_path(ANSWERED),
        content=f'{{"chosen_options": ["{CANARY}"'.encode(),
        headers={**dpo, "Content-Type": "application/json"},
    )
    assert raw.status_code == 400 and CANARY not in raw.text, raw.text[:300]
    huge = client.patch(_prompt_path(ANSWERED), json=_answer("y" * 70_000), headers=dpo)
    assert huge.status_code == 413, huge.text[:300]
    # The route in other spellings Airflow would take (its map index read loosely; a query
    # string it logs whole), and no credentials at all: refused before anything is sealed.
    leaky = _answer(f"Asked by {CANARY}.")
    for index in ("-1.0", "+0", "-01", "1_0", " -1"):
        path = _prompt_path(ANSWERED).replace("/-1/hitlDetails", f"/{index}/hitlDetails")
        response = client.patch(path, json=leaky, headers=dpo)
        assert response.status_code == 400 and CANARY not in response.text, (index, response.text)
    queried = client.patch(f"{_prompt_path(ANSWERED)}?why={CANARY}", json=leaky, headers=dpo)
    assert queried.status_code == 400 and CANARY not in queried.text, queried.text
    anonymous = client.patch(_prompt_path(ANSWERED), json=leaky)
    assert anonymous.status_code == 401, anonymous.text
    # Nor is a desk-only run backfilled, or given a note, over Airflow's API.
    run_path = f"/api/v2/dags/gdpr_erasure/dagRuns/erasure-{ANSWERED}"
    admin = bearer(tokens["admin"])
    for method, path, body in (
        (
            "POST",
            "/api/v2/backfills",
            {
                "dag_id": "gdpr_erasure",
                "dag_run_conf": {"e": CANARY},
                "from_date": "2026-01-01",
                "to_date": "2026-01-02",
            },
        ),
        (
            "POST",
            "/api/v2/backfills/dry_run",
            {"dag_id": "gdpr_erasure_extend", "from_date": "2026-01-01", "to_date": "2026-01-02"},
        ),
        ("PATCH", run_path, {"note": f"called by {CANARY}"}),
        ("PATCH", f"{run_path}/taskInstances/register", {"note": CANARY}),
        (
            "PATCH",
            "/api/v2/dags/~/dagRuns/~/taskInstances",
            {
                "actions": [
                    {
                        "action": "update",
                        "entities": [
                            {
                                "dag_id": "gdpr_erasure",
                                "dag_run_id": f"erasure-{ANSWERED}",
                                "task_id": "register",
                                "note": CANARY,
                            }
                        ],
                    }
                ]
            },
        ),
    ):
        response = client.request(method, path, json=body, headers=admin)
        assert response.status_code == 403, (path, response.status_code, response.text[:300])
        assert "erasure desk" in response.text and CANARY not in response.text
    # The DAG id spelled with a JSON escape, the note nested deeper: read as Airflow reads them.
    escaped = (
        '{"actions": [{"action": "update", "entities": [{"dag_id": "gdpr\\u005ferasure", '
        f'"dag_run_id": "erasure-{ANSWERED}", "task_id": "register", '
        f'"extra": [[{{"note": "{CANARY}"}}]]}}]}}]}}'
    )
    response = client.patch(
        "/api/v2/dags/~/dagRuns/~/taskInstances",
        content=escaped.encode(),
        headers={**admin, "Content-Type": "application/json"},
    )
    assert response.status_code == 403 and CANARY not in response.text, response.text[:300]

    kept = _kept_by_airflow(ANSWERED)
    assert CANARY not in kept and NOTE_CANARY not in kept, kept[:500]
    assert '"detail": [null, {}, null]' in kept  # still unanswered
    assert CANARY not in _every_log_row()
    assert _notes_held(store) == held  # nothing sealed for a refused answer


def test_the_dpo_answers_and_airflow_keeps_only_the_handle_of_her_sealed_justification(
    client: Any,
    tokens: dict[str, str],
    store: Store,
    env: dict[str, str],
    openbao: Any,
    prompt_to_answer: str,
) -> None:
    from erasure.intake import NOTE_HANDLE, note_binding

    held = _notes_held(store)
    # Another role's whole answer: refused by Airflow, and the note sealed for it destroyed.
    other = client.patch(_prompt_path(ANSWERED), json=_answer(), headers=bearer(tokens["op"]))
    assert other.status_code == 403, other.text[:300]
    assert _notes_held(store) == held

    answered = client.patch(_prompt_path(ANSWERED), json=_answer(), headers=bearer(tokens["dpo"]))
    assert answered.status_code == 200, answered.text[:300]
    handle = answered.json()["params_input"]["justification"]
    assert NOTE_HANDLE.match(handle) and NOTE_CANARY not in answered.text
    kept = _kept_by_airflow(ANSWERED)
    assert handle in kept and NOTE_CANARY not in kept, kept[:500]
    assert '"exemption": "b"' in kept  # what is not free text is stored as given

    # The worker (which may decrypt) opens it for this prompt alone.
    key = TransitSubmissionKey(openbao.client(), env["ERASURE_VAULT_TRANSIT_MOUNT"])
    box = SubmissionBox(store, key)
    prompt = note_binding("gdpr_erasure", f"erasure-{ANSWERED}", "dpo_decides", -1)
    assert box.open_note(handle, prompt) == JUSTIFICATION
    assert box.destroy_note(handle, prompt)
    again = client.patch(_prompt_path(ANSWERED), json=_answer(), headers=bearer(tokens["dpo"]))
    assert again.status_code == 409 and _notes_held(store) == held  # answered once


def test_the_desk_lists_the_restore_replays_on_record(
    client: Any,
    tokens: dict[str, str],
    desk: dict[str, str],
    store: Store,
    env: dict[str, str],
    openbao: EmbeddedOpenBao,
) -> None:
    from datetime import UTC, datetime

    from erasure.audit.records import RecordLedger
    from erasure.audit.signing import TransitSigner
    from erasure.model import DatasetRef
    from erasure.replay import NO_SUBJECT, CitedRequest, ReplayBody, ReplayVerification

    signer = TransitSigner(openbao.client(), env["ERASURE_VAULT_TRANSIT_MOUNT"])
    signer.ensure_key()
    ref, at = f"REPLAY-{RUN}-desk", datetime.now(UTC)
    body = ReplayBody(
        replay_ref=ref,
        dataset=DatasetRef("warehouse", "crm.customers"),
        identifier_columns={"email": ["email"]},
        pepper_versions=[1],
        tombstones_checked=4,
        rows_erased=2,
        cited=[CitedRequest(request_ref=DONE, rows=2, tombstones=[])],
        attempts=[],
        verification=ReplayVerification(
            checked_at=at,
            passed=True,
            rows_read=9,
            tombstoned_rows_remaining=0,
            others_before=9,
            others_after=9,
        ),
        replayed_at=at,
    )
    record = RecordLedger(store, signer).append(ref, NO_SUBJECT, "replayed", body)

    for user in ("dpo", "operator"):
        [shown] = [r for r in desk_json(client, tokens[user])["replays"] if r["replay_ref"] == ref]
        assert shown["dataset"] == {"namespace": "warehouse", "name": "crm.customers"}
        assert (shown["rows_erased"], shown["cited"], shown["verified"]) == (2, [DONE], True)
        assert shown["record_seq"] == record.seq
        assert shown["evidence_url"] == f"/erasure/api/v1/records/{ref}/export?format=html"
    client.cookies.set("_token", tokens["dpo"])
    try:
        page = client.get("/erasure/desk").text
    finally:
        client.cookies.clear()
    row = page[page.index(f'data-replay="{ref}"') :]
    row = row[: row.index("</tr>")]
    assert "warehouse/crm.customers" in row and DONE in row and "verified" in row
    assert "canary" not in page.casefold()
    denied = client.get("/erasure/api/v1/desk", headers=bearer(tokens["auditor"]))
    assert denied.status_code == 403  # auditors read the replay's record, not the desk
