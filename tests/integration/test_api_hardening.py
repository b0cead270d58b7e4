"""The plugin's HTTP surface against the people who will attack it: forged cross-site
requests, a wrong lineage key, identifiers typed into URLs and echoed back or logged.

The plugin runs inside Airflow's own API server app (`create_app()`, simple auth manager,
real logins); the erasure store is SQLite, Vault the session's OpenBao. The access log is
checked on a real `airflow api-server` and a real uvicorn server on 127.0.0.1, started here
and stopped by their pid.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from erasure.catalog import load_catalog
from erasure.config import Settings
from erasure.intake import ensure_submissions_key
from erasure.keys.keystore import KvKeyStore, KvKeyStoreConfig
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, ensure_transit
from erasure.store import open_store
from erasure.submission import ErasureRequest
from erasure_airflow.api import access_log, csrf
from erasure_airflow.api.backend import ErasureBackend
from local.bench.load import submission
from tests.integration.airflow_app import (
    GDPR_ERASURE_STANDIN,
    issue_tokens,
    plugin_client,
    simple_auth_environment,
    sync_dags,
)
from tests.unit.registry_support import books_for, register

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "erasure" / "sample" / "estate" / "catalog.yaml"

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault]

USERS = {"auditor": "viewer", "clerk": "user", "dpo": "op"}
# The same in every pytest-xdist worker of one run (parametrize ids carry it), new each run.
RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)[:8]
LINEAGE_KEY = "ol-" + "h" * 29
MARKER = "marker-" + RUN.translate(str.maketrans("0123456789", "ghijklmnop"))  # no digit run
CANARY = f"mallory.canary.{RUN}@example.org"
REF = f"HARD-{RUN}-1"  # registered: the extend and resume routes find it
SAME_ORIGIN = {"Origin": "http://testserver"}  # TestClient's host
ELSEWHERE = {"Origin": "https://evil.example"}


# ---------------------------------------------------------------------------------------------
# Fixtures: Airflow's API server app with the plugin, logins, one registered request


@pytest.fixture(scope="module")
def env(
    airflow_db: Path, openbao: EmbeddedOpenBao, tmp_path_factory: Any
) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("erasure-hardening")
    auth, passwords = simple_auth_environment(home, USERS, RUN)
    values = {
        **auth,
        "ERASURE_STORE_URL": f"sqlite:///{home}/erasure.db",
        "ERASURE_VAULT_ADDR": openbao.address,
        "ERASURE_VAULT_TOKEN": openbao.token,
        "ERASURE_VAULT_KV_MOUNT": f"kv-hard-{RUN}",
        "ERASURE_VAULT_TRANSIT_MOUNT": f"transit-hard-{RUN}",
        "ERASURE_LINEAGE_API_KEY": LINEAGE_KEY,
        "ERASURE_CATALOG_PATH": str(CATALOG),
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, value)
        yield {**values, **{f"password:{u}": p for u, p in passwords.items()}}


@pytest.fixture(scope="module")
def client(env: dict[str, str]) -> Iterator[Any]:
    """Airflow's API server app, built as `airflow api-server` builds it, plugin included."""
    with plugin_client() as client:
        yield client


@pytest.fixture(scope="module")
def tokens(client: Any, env: dict[str, str]) -> dict[str, str]:
    return issue_tokens(client, {u: env[f"password:{u}"] for u in USERS})


@pytest.fixture(scope="module")
def registered(env: dict[str, str], openbao: EmbeddedOpenBao) -> str:
    """REF, as the DAG's register step leaves it."""
    vault = openbao.client()
    keystore = KvKeyStore(KvKeyStoreConfig(mount=env["ERASURE_VAULT_KV_MOUNT"]), vault)
    keystore.ensure_mount()
    peppers = PepperStore(vault, env["ERASURE_VAULT_KV_MOUNT"])
    peppers.initialise()
    with open_store(env["ERASURE_STORE_URL"]) as store:
        register(
            books_for(store, keystore, peppers),
            ErasureRequest.parse(
                {
                    "request_ref": REF,
                    "identifier_type": "email",
                    "identifier": CANARY,
                    "received_on": date.today().isoformat(),
                    "legal_ground": "art17_1_b",
                }
            ),
            catalog=load_catalog(CATALOG),
            run_id=f"erasure-{REF}",
        )
    return REF


@pytest.fixture(scope="module")
def desk_ready(
    client: Any, env: dict[str, str], openbao: EmbeddedOpenBao, tmp_path_factory: Any
) -> None:
    """The stand-in gdpr_erasure DAG in Airflow's DB and the transit key the desk seals with."""
    sync_dags(tmp_path_factory.mktemp("dags"), {"gdpr_erasure.py": GDPR_ERASURE_STANDIN})
    mount = env["ERASURE_VAULT_TRANSIT_MOUNT"]
    ensure_transit(openbao.client(), mount)
    ensure_submissions_key(openbao.client(), mount)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def runs_of(ref: str) -> list[str]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return [r.run_id for r in session.query(DagRun).all() if ref in r.run_id]


def sealed_count(env: dict[str, str], ref: str) -> int:
    import sqlalchemy as sa

    with open_store(env["ERASURE_STORE_URL"]) as store, store.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT COUNT(*) FROM submissions WHERE request_ref = :r"), {"r": ref}
            ).scalar_one()
        )


ACTS = [  # every state-changing route of the plugin, with a body it would act on
    ("/erasure/api/v1/requests", "submit"),
    (f"/erasure/api/v1/requests/{REF}/extend", {"months": 1, "reason": "Backups to search."}),
    (f"/erasure/api/v1/requests/{REF}/resume", {}),
    ("/erasure/api/v1/lineage", {}),
]


def _body(body: Any, ref: str) -> Any:
    return submission(ref, CANARY) if body == "submit" else body


# ---------------------------------------------------------------------------------------------
# 1. Cross-site request forgery: never a bare cookie POST


def test_every_state_changing_route_is_covered_here(client: Any) -> None:
    from erasure_airflow import api as erasure_api

    routes: Any = erasure_api.app.routes
    acting = {f"/erasure{r.path}" for r in routes for m in r.methods if m not in csrf.SAFE_METHODS}
    assert acting == {path.replace(REF, "{ref}") for path, _ in ACTS}


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({}, "says neither"),  # no Origin, no Sec-Fetch-Site: an old client, or a forger
        (ELSEWHERE, "sent from another site"),
        ({"Origin": "null"}, "sent from another site"),  # a sandboxed frame, a file
        ({"Origin": "http://testserver.evil.example"}, "sent from another site"),
        ({"Origin": "http://testserver:8443"}, "sent from another site"),  # another port
        ({"Sec-Fetch-Site": "cross-site"}, "sent from another site"),
        ({"Sec-Fetch-Site": "same-site"}, "sent from another site"),  # a sibling subdomain
        # An empty Bearer is no credential: the cookie would answer for it.
        ({**ELSEWHERE, "Authorization": "Bearer "}, "sent from another site"),
    ],
    ids=[
        "no-origin",
        "other-site",
        "null",
        "lookalike",
        "other-port",
        "cross-site",
        "same-site",
        "empty-bearer",
    ],
)
def test_a_cookie_request_not_from_this_origin_is_refused_and_nothing_happens(
    client: Any,
    tokens: dict[str, str],
    env: dict[str, str],
    registered: str,
    desk_ready: None,
    headers: dict[str, str],
    said: str,
) -> None:
    ref = f"HARD-{RUN}-CSRF"
    client.cookies.set("_token", tokens["dpo"])  # the DPO is logged in to the UI
    try:
        answers = [
            client.post(path.replace(REF, registered), json=_body(body, ref), headers=headers)
            for path, body in ACTS
        ]
    finally:
        client.cookies.clear()
    for (path, _), answer in zip(ACTS, answers, strict=True):
        assert answer.status_code == 403, (path, answer.text)
        assert said in answer.json()["detail"] and "Authorization: Bearer" in answer.text
        assert "evil" not in answer.text and CANARY not in answer.text
    assert runs_of(ref) == [] and sealed_count(env, ref) == 0
    assert [r for r in runs_of(registered) if r.startswith("extend-")] == []


def test_a_form_or_text_body_is_415_whatever_the_credential(
    client: Any, tokens: dict[str, str], registered: str
) -> None:
    client.cookies.set("_token", tokens["dpo"])
    try:  # what a cross-site <form> can send: urlencoded, multipart or text/plain
        form = client.post(
            "/erasure/api/v1/requests", data={"identifier": CANARY}, headers=SAME_ORIGIN
        )
        text = client.post(
            f"/erasure/api/v1/requests/{registered}/resume",
            content="{}",
            headers={**SAME_ORIGIN, "Content-Type": "text/plain"},
        )
    finally:
        client.cookies.clear()
    keyed = client.post(
        "/erasure/api/v1/lineage",
        content=b'{"eventType": "START"}',
        headers={**bearer(LINEAGE_KEY), "Content-Type": "application/x-www-form-urlencoded"},
    )
    for answer in (form, text, keyed):
        assert answer.status_code == 415, answer.text
        assert "Content-Type: application/json" in answer.json()["detail"]
        assert CANARY not in answer.text


def test_the_desk_pages_post_json_from_their_own_origin_and_that_works(
    client: Any, tokens: dict[str, str], env: dict[str, str], desk_ready: None
) -> None:
    client.cookies.set("_token", tokens["dpo"])
    try:
        form_page = client.get("/erasure/requests/new").text
        desk_page = client.get("/erasure/desk").text
        ref = f"HARD-{RUN}-UI"
        # What the form's fetch() sends: JSON, the cookie, and the browser's own Origin.
        made = client.post(
            "/erasure/api/v1/requests", json=submission(ref, CANARY), headers=SAME_ORIGIN
        )
        # A browser without Origin on this request still says Sec-Fetch-Site: same-origin.
        again = client.post(
            "/erasure/api/v1/requests",
            json=submission(ref, CANARY),
            headers={"Sec-Fetch-Site": "same-origin"},
        )
    finally:
        client.cookies.clear()
    for page in (form_page, desk_page):
        assert 'headers: {"Content-Type": "application/json"}' in page
        assert 'credentials: "same-origin"' in page
    assert made.status_code == 201, made.text
    assert runs_of(ref) == [f"erasure-{ref}"] and sealed_count(env, ref) == 1
    assert again.status_code == 409 and "not registered it yet" in again.json()["detail"]
    assert ref not in again.text  # the reference typed is not repeated


def test_a_proxy_that_rewrites_the_host_passes_it_on(client: Any, tokens: dict[str, str]) -> None:
    """Behind a proxy the Host may be the service's name: X-Forwarded-Host says what was
    opened, and an Origin naming it is this server."""
    client.cookies.set("_token", tokens["dpo"])
    try:
        forwarded = client.post(
            "/erasure/api/v1/requests/HARD-NONE/resume",
            json={},
            headers={
                "Origin": "https://airflow.example.org",
                "X-Forwarded-Host": "airflow.example.org",
            },
        )
        other = client.post(
            "/erasure/api/v1/requests/HARD-NONE/resume",
            json={},
            headers={"Origin": "https://airflow.example.org", "X-Forwarded-Host": "other.example"},
        )
    finally:
        client.cookies.clear()
    assert forwarded.status_code == 404  # through to the route: no such request
    assert other.status_code == 403


def test_a_bearer_credential_needs_no_origin(client: Any, tokens: dict[str, str]) -> None:
    answer = client.post(
        "/erasure/api/v1/requests/HARD-NONE/resume",
        json={},
        headers={**bearer(tokens["dpo"]), **ELSEWHERE},
    )
    assert answer.status_code == 404  # a script's explicit token: no browser sends one itself


@pytest.mark.parametrize(
    ("origin", "headers", "same"),
    [
        ("http://127.0.0.1:8080", {"host": "127.0.0.1:8080"}, True),
        ("https://airflow.example", {"host": "airflow.example"}, True),
        ("https://airflow.example", {"host": "airflow.example:443"}, True),
        ("https://AIRFLOW.example", {"host": "airflow.example"}, True),
        ("http://[::1]:8080", {"host": "[::1]:8080"}, True),
        ("http://127.0.0.1:8081", {"host": "127.0.0.1:8080"}, False),
        ("https://airflow.example", {"host": "airflow.example:8443"}, False),
        ("https://airflow.example.evil", {"host": "airflow.example"}, False),
        ("ftp://airflow.example", {"host": "airflow.example"}, False),
        ("http://airflow.example:notaport", {"host": "airflow.example"}, False),
        ("null", {"host": "airflow.example"}, False),
        ("https://airflow.example", {}, False),
    ],
)
def test_same_host_compares_name_and_port(origin: str, headers: dict[str, str], same: bool) -> None:
    assert csrf.same_host(origin, headers) is same


def test_airflows_base_url_is_this_server_too() -> None:
    headers = {"host": "airflow-api-server:8080"}  # a proxy that sets its upstream's name
    assert csrf.same_host("https://airflow.example", headers, "https://airflow.example/")
    assert not csrf.same_host("http://airflow.example", headers, "https://airflow.example/")


# ---------------------------------------------------------------------------------------------
# 2. The lineage endpoint: its key only, and a wrong one said as such


def test_the_lineage_key_alone_opens_the_lineage_endpoint(
    client: Any, tokens: dict[str, str]
) -> None:
    wrong = "ol-" + "w" * 29
    refused = client.post("/erasure/api/v1/lineage", json=[], headers=bearer(wrong))
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["detail"] == (
        "the lineage API key is not valid: check the OpenLineage transport's api_key against "
        "ERASURE_LINEAGE_API_KEY on the Airflow API server"
    )
    assert wrong not in refused.text and "JWT" not in refused.text
    basic = client.post(
        "/erasure/api/v1/lineage", json=[], headers={"Authorization": f"Basic {LINEAGE_KEY}"}
    )
    assert basic.status_code == 401 and "Authorization: Bearer" in basic.text
    login = client.post("/erasure/api/v1/lineage", json=[], headers=bearer(tokens["dpo"]))
    assert login.status_code == 403 and "not a user's login" in login.text
    ok = client.post("/erasure/api/v1/lineage", json=[], headers=bearer(LINEAGE_KEY))
    assert ok.status_code == 200 and ok.json()["received"] == 0


def test_without_a_configured_key_lineage_ingest_is_closed_saying_so(
    client: Any, tokens: dict[str, str], env: dict[str, str]
) -> None:
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    closed = ErasureBackend(Settings.model_construct(store_url=env["ERASURE_STORE_URL"]))
    with TestClient(erasure_api.create_app(closed)) as app:
        answer = app.post("/api/v1/lineage", json=[], headers=bearer(LINEAGE_KEY))
        login = app.post("/api/v1/lineage", json=[], headers=bearer(tokens["dpo"]))
    assert answer.status_code == 503 and "ERASURE_LINEAGE_API_KEY" in answer.json()["detail"]
    assert "closed" in answer.json()["detail"] and LINEAGE_KEY not in answer.text
    assert login.status_code == 403


# ---------------------------------------------------------------------------------------------
# 3. Nothing typed is echoed


def test_references_that_are_not_found_are_not_repeated(
    client: Any, tokens: dict[str, str], registered: str
) -> None:
    for typed in (CANARY, f"REQ-{RUN}-NOPE"):
        answers = [
            client.get(f"/erasure/api/v1/requests/{typed}", headers=bearer(tokens["auditor"])),
            client.get(f"/erasure/api/v1/records/{typed}", headers=bearer(tokens["auditor"])),
            client.get(
                f"/erasure/api/v1/records/{typed}/export", headers=bearer(tokens["auditor"])
            ),
            client.post(
                f"/erasure/api/v1/requests/{typed}/resume", json={}, headers=bearer(tokens["dpo"])
            ),
            client.post(
                f"/erasure/api/v1/requests/{typed}/extend",
                json={"months": 1, "reason": "Backups to search."},
                headers=bearer(tokens["dpo"]),
            ),
        ]
        for answer in answers:
            assert answer.status_code == 404, answer.text
            assert "with that reference" in answer.json()["detail"]
            assert typed.casefold() not in answer.text.casefold() and RUN not in answer.text


def test_a_resume_body_is_checked_and_never_repeated(
    client: Any, tokens: dict[str, str], registered: str
) -> None:
    path = f"/erasure/api/v1/requests/{registered}/resume"
    dpo = bearer(tokens["dpo"])
    unknown = client.post(path, json={CANARY: CANARY}, headers=dpo)
    listed = client.post(path, json=[CANARY], headers=dpo)
    broken = client.post(
        path, content=f'{{"{CANARY}"', headers={**dpo, "Content-Type": "application/json"}
    )
    empty = client.post(path, content=b"", headers={**dpo, "Content-Type": "application/json"})
    for answer in (unknown, listed, broken, empty):
        assert answer.status_code == 422, answer.text
        assert "canary" not in answer.text.casefold()
        assert all(e["loc"][0] == "body" for e in answer.json()["detail"])
    assert unknown.json()["detail"][0]["loc"] == ["body", "<unknown field>"]
    # A registered request that has not failed: its status, not its reference.
    fine = client.post(path, json={}, headers=dpo)
    assert fine.status_code == 409 and "not failed" in fine.json()["detail"]
    assert registered not in fine.text


def test_an_unknown_field_of_an_extension_is_not_named_back(
    client: Any, tokens: dict[str, str], registered: str
) -> None:
    answer = client.post(
        f"/erasure/api/v1/requests/{registered}/extend",
        json={"months": 1, "reason": "Backups to search.", CANARY: 1},
        headers=bearer(tokens["dpo"]),
    )
    assert answer.status_code == 422 and "canary" not in answer.text.casefold()
    assert answer.json()["detail"] == [
        {
            "type": "extra_forbidden",
            "loc": ["body", "<unknown field>"],
            "msg": "Extra inputs are not permitted",
        }
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/erasure/api/v1/records?since={v}",
        "/erasure/api/v1/records?status={v}",
        "/erasure/api/v1/requests?status={v}",
        "/erasure/api/v1/desk?status={v}",
        "/erasure/desk?status={v}",
        f"/erasure/api/v1/records/{REF}/export?format={{v}}",
    ],
)
def test_a_bad_parameter_is_422_naming_where_never_the_value(
    client: Any, tokens: dict[str, str], path: str
) -> None:
    answer = client.get(path.format(v=CANARY), headers=bearer(tokens["dpo"]))
    assert answer.status_code == 422, answer.text
    assert CANARY.casefold() not in answer.text.casefold()
    detail = answer.json()["detail"]
    assert detail[0]["loc"][0] == "query" and detail[0]["msg"]
    assert set(detail[0]) == {"type", "loc", "msg"}  # no input, no ctx


def test_a_message_quoting_the_value_is_replaced() -> None:
    from erasure_airflow.api.app import without_input

    quoted = {
        "type": "value_error",
        "loc": ("query", "ref"),
        "msg": f"bad {CANARY}",
        "input": CANARY,
    }
    assert without_input(quoted) == {
        "type": "value_error",
        "loc": ["query", "ref"],
        "msg": "the value is not valid here",
    }


def test_an_unsupported_content_encoding_is_not_repeated(client: Any) -> None:
    answer = client.post(
        "/erasure/api/v1/lineage",
        content=b"{}",
        headers={
            **bearer(LINEAGE_KEY),
            "Content-Type": "application/json",
            "Content-Encoding": CANARY,
        },
    )
    assert answer.status_code == 415 and CANARY not in answer.text


# ---------------------------------------------------------------------------------------------
# 4. The access log: the route, never the values in the URL


@pytest.mark.parametrize(
    ("asked", "returns_to"),
    [
        (f"/erasure/api/v1/records/{CANARY}/export?format=html", "/"),
        (f"/erasure/records?ref={CANARY}&status=failed", "/erasure/records?status=failed"),
        (f"/erasure/desk?{CANARY}=1", "/erasure/desk"),
        ("/erasure/records?ref=REQ-2026-01*&since=2026-12-01", None),  # kept as it is
        ("/erasure/api/v1/requests/07700900123", "/"),  # a phone typed as a reference
        ("/erasure/records?ref=4915112345678", "/erasure/records"),
    ],
    ids=[
        "identifier-in-path",
        "identifier-in-query",
        "identifier-as-key",
        "filter",
        "phone-in-path",
        "phone-in-query",
    ],
)
def test_the_login_redirect_does_not_carry_an_identifier_into_the_login_url(
    client: Any, asked: str, returns_to: str | None
) -> None:
    """The login page's URL (and its `next`) is logged by Airflow as any other request."""
    from urllib.parse import parse_qs, urlsplit

    response = client.get(asked, headers={"Accept": "text/html"}, follow_redirects=False)
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    (next_url,) = parse_qs(urlsplit(location).query)["next"]
    assert next_url == (asked if returns_to is None else returns_to)
    assert "canary" not in location


def _redactor() -> access_log.UrlRedactor:
    from erasure_airflow import api as erasure_api

    return access_log.redactor_for(erasure_api.app.routes, "/airflow")


@pytest.mark.parametrize(
    ("path", "query", "logged"),
    [
        (f"/erasure/api/v1/requests/{CANARY}", "", ("/erasure/api/v1/requests/{ref}", "")),
        (
            f"/erasure/api/v1/records/{CANARY}/export",
            "format=html",
            ("/erasure/api/v1/records/{ref}/export", "<redacted>"),
        ),
        ("/erasure/api/v1/records", f"since={CANARY}", ("/erasure/api/v1/records", "<redacted>")),
        ("/erasure/api/v1/records/verify", "", ("/erasure/api/v1/records/verify", "")),
        (
            f"/erasure/api/v1/requests/{CANARY}/resume",
            "",
            ("/erasure/api/v1/requests/{ref}/resume", ""),
        ),
        (f"/erasure/no/such/{CANARY}", "", ("/erasure/<not a route>", "")),
        (
            f"/airflow/erasure/api/v1/requests/{CANARY}",
            "",
            ("/airflow/erasure/api/v1/requests/{ref}", ""),
        ),
        # Not the plugin's: left as it is, but for what reads as an identifier.
        ("/api/v2/dags", "limit=5", ("/api/v2/dags", "limit=5")),
        ("/erasurex/thing", "a=1", ("/erasurex/thing", "a=1")),
        (
            f"/api/v2/dags/gdpr_erasure/dagRuns/{CANARY}",
            "",
            ("/api/v2/dags/gdpr_erasure/dagRuns/<redacted>", ""),
        ),
        (
            "/api/v2/dags/~/dagRuns",
            f"run_id_pattern={CANARY.replace('@', '%40')}&limit=5",
            ("/api/v2/dags/~/dagRuns", "run_id_pattern=<redacted>&limit=5"),
        ),
        ("/api/v2/x/+44 (20) 7946-0958", "", ("/api/v2/x/<redacted>", "")),
        (
            "/api/v2/x/C0012345",
            "q=\u0664\u0664\u0662\u0660\u0667\u0669\u0664",
            ("/api/v2/x/<redacted>", "q=<redacted>"),
        ),
        (
            "/api/v2/dags/~/dagRuns",
            "logical_date_gte=2026-12-03T00:00:00.000Z&run_after_lte=2026-12-03",
            (
                "/api/v2/dags/~/dagRuns",
                "logical_date_gte=2026-12-03T00:00:00.000Z&run_after_lte=2026-12-03",
            ),
        ),
        (
            "/api/v2/dags/gdpr_erasure/dagRuns/erasure-DSR-2026-0042",
            "",
            ("/api/v2/dags/gdpr_erasure/dagRuns/erasure-DSR-2026-0042", ""),
        ),
        (
            "/api/v2/dags/x/dagRuns/extend-DSR-1-20261203T140501123456",
            "",
            ("/api/v2/dags/x/dagRuns/extend-DSR-1-20261203T140501123456", ""),
        ),
        (
            "/execution/task-instances/01937a10-0000-7000-8000-000000000001/run",
            "",
            ("/execution/task-instances/01937a10-0000-7000-8000-000000000001/run", ""),
        ),
        ("/api/v2/x/jane%40example.org", "", ("/api/v2/x/<redacted>", "")),
    ],
)
def test_the_redactor_keeps_the_route_template_only(
    path: str, query: str, logged: tuple[str, str]
) -> None:
    assert _redactor().redact(path, query) == logged


def test_a_uvicorn_access_record_is_redacted() -> None:
    """A record as uvicorn's httptools and h11 protocols log it."""
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        (
            "127.0.0.1:50000",
            "GET",
            f"/erasure/api/v1/records/{CANARY.replace('@', '%40')}?format=json",
            "1.1",
            404,
        ),
        None,
    )
    assert access_log.AccessRecordRedaction(_redactor()).filter(record) is True
    assert record.getMessage() == (
        '127.0.0.1:50000 - "GET /erasure/api/v1/records/{ref}?<redacted> HTTP/1.1" 404'
    )


def test_airflows_access_event_is_redacted_by_the_installed_processor(
    client: Any, tokens: dict[str, str]
) -> None:
    """Airflow's HttpAccessLogMiddleware around the plugin, through structlog's processors as
    configured: the event it emits reaches the renderer redacted."""
    from airflow.api_fastapi.common.http_access_log import HttpAccessLogMiddleware
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    saved = structlog.get_config()
    out = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    try:
        access_log.install(_redactor())
        access_log.install(_redactor())  # a second load replaces, never stacks
        kinds = [type(p).__name__ for p in structlog.get_config()["processors"]]
        assert kinds == ["AccessEventRedaction", "JSONRenderer"]
        from starlette.applications import Starlette
        from starlette.routing import Mount

        root = Starlette(routes=[Mount("/erasure", app=erasure_api.app)])
        with TestClient(HttpAccessLogMiddleware(root)) as http:
            http.get(f"/erasure/api/v1/requests/{CANARY}", headers=bearer(tokens["auditor"]))
            http.get("/erasure/api/v1/records", params={"since": CANARY})
    finally:
        structlog.configure(**saved)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    access = [e for e in events if e.get("logger_name") == "http.access"]
    assert [(e["path"], e["query"], e["status_code"]) for e in access] == [
        ("/erasure/api/v1/requests/{ref}", "", 404),
        ("/erasure/api/v1/records", "<redacted>", 401),
    ]
    assert "canary" not in out.getvalue()


def test_the_redaction_comes_back_when_the_logging_is_configured_again(
    client: Any, tokens: dict[str, str]
) -> None:
    """Airflow's API server configures structlog again after plugins load (under FAB): the
    plugin's root middleware installs the redaction again before the next request."""
    saved = structlog.get_config()
    out = io.StringIO()
    try:
        structlog.configure(
            processors=[structlog.processors.JSONRenderer()],
            logger_factory=structlog.PrintLoggerFactory(out),
            cache_logger_on_first_use=False,
        )
        assert not access_log.installed()
        client.get(f"/api/v2/dags/gdpr_erasure/dagRuns/{CANARY}", headers=bearer(tokens["dpo"]))
        assert access_log.installed()
    finally:
        structlog.configure(**saved)
    access = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["path"] for e in access if e.get("logger_name") == "http.access"] == [
        "/api/v2/dags/gdpr_erasure/dagRuns/<redacted>"
    ]
    assert "canary" not in out.getvalue()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(
    command: list[str], env: dict[str, str], log: Path, port: int
) -> subprocess.Popen[bytes]:
    """Start a server in its own process group; wait until it answers on `port`."""
    handle = log.open("wb")
    server = subprocess.Popen(
        command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server exited:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/erasure/api/v1/records", timeout=2)
            return server
        except httpx.TransportError:
            time.sleep(0.5)
    _stop(server)
    raise AssertionError(f"the server did not answer in 90 s:\n{log.read_text()[-3000:]}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # its own group: the workers it started too
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _log_settles(log: Path, needle: str) -> str:
    deadline = time.monotonic() + 10
    while needle not in (text := log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return text


def test_a_real_airflow_api_server_logs_the_route_not_the_identifier(
    env: dict[str, str], tmp_path: Path, client: Any
) -> None:
    """`airflow api-server` as deployed (uvicorn, Airflow's HttpAccessLogMiddleware), the
    plugin loaded by its entry point: an identifier typed into a URL stays out of its log."""
    port = _free_port()
    log = tmp_path / "api-server.log"
    server_env = {**os.environ, "AIRFLOW__API__WORKERS": "1", "NO_COLOR": "1"}
    server = _serve(
        [
            sys.executable,
            "-m",
            "airflow",
            "api-server",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
            "-w",
            "1",
        ],
        server_env,
        log,
        port,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        httpx.get(f"{base}/erasure/api/v1/requests/{CANARY}", timeout=10)
        httpx.get(f"{base}/erasure/api/v1/records", params={"since": CANARY}, timeout=10)
        httpx.get(f"{base}/api/v2/version", params={"marker": MARKER}, timeout=10)
        text = _log_settles(log, MARKER)
    finally:
        _stop(server)
    assert "/erasure/api/v1/requests/{ref}" in text, text[-3000:]
    assert "<redacted>" in text
    assert MARKER in text  # another route's query is logged as it was: the log works
    for form in (CANARY, CANARY.replace("@", "%40"), "mallory.canary"):
        assert form not in text, text[-3000:]


UVICORN_SERVER = """
import sys

import uvicorn
from airflow.api_fastapi.app import init_auth_manager
from starlette.applications import Starlette
from starlette.routing import Mount

from erasure_airflow.api import access_log
from erasure_airflow.api.app import create_app

init_auth_manager()  # the plugin's routes ask Airflow's auth manager who is calling
erasure = create_app()
root = Starlette(routes=[Mount("/erasure", app=erasure)])  # mounted as Airflow mounts it
config = uvicorn.Config(root, host="127.0.0.1", port=int(sys.argv[1]), access_log=True)
access_log.install(access_log.redactor_for(erasure.routes))  # after uvicorn's logging setup
uvicorn.Server(config).run()
"""


def test_a_real_uvicorn_access_log_is_redacted(env: dict[str, str], tmp_path: Path) -> None:
    """uvicorn's own access log (`uvicorn.access`, as a server run without Airflow's
    middleware writes it), on a real server on 127.0.0.1."""
    port = _free_port()
    log = tmp_path / "uvicorn.log"
    (tmp_path / "serve.py").write_text(UVICORN_SERVER)
    server = _serve(
        [sys.executable, str(tmp_path / "serve.py"), str(port)], dict(os.environ), log, port
    )
    try:
        base = f"http://127.0.0.1:{port}"
        httpx.get(f"{base}/erasure/api/v1/requests/{CANARY}", timeout=10)
        httpx.get(f"{base}/erasure/api/v1/records", params={"since": CANARY}, timeout=10)
        text = _log_settles(log, "/erasure/api/v1/records?")
    finally:
        _stop(server)
    assert '"GET /erasure/api/v1/requests/{ref} HTTP/1.1" 401' in text, text[-3000:]
    assert '"GET /erasure/api/v1/records?<redacted> HTTP/1.1" 401' in text, text[-3000:]
    assert "canary" not in text


@pytest.mark.parametrize("dag_id", ["gdpr_erasure", "gdpr_erasure_extend", "gdpr%5Ferasure"])
def test_a_desk_only_dag_is_triggered_by_nobody_whatever_the_auth_manager(
    client: Any, tokens: dict[str, str], dag_id: str
) -> None:
    """The simple auth manager lets `user` and `op` trigger any DAG: the plugin refuses a run
    of a desk-only DAG before Airflow reads its conf, so nothing of it is logged or kept."""
    from airflow.models.dagrun import DagRun
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    conf = {"request_ref": f"HAND-{RUN}", "submission": "sub-" + "0" * 32, "email": CANARY}
    for user in USERS:
        response = client.post(
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"logical_date": None, "conf": conf},
            headers={"Authorization": f"Bearer {tokens[user]}"},
        )
        assert response.status_code == 403, (user, response.text[:300])
        assert "erasure desk" in response.text and CANARY not in response.text
    with create_session() as session:
        logged = [str(row.extra) for row in session.query(Log).all()]
        confs = [str(run.conf) for run in session.query(DagRun).all()]
    assert not [text for text in logged + confs if CANARY in text]
