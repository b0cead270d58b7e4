"""Every route of the plugin, fuzzed from its own OpenAPI schema (schemathesis), under every
kind of caller: nobody, a viewer, the DPO, the lineage key, and the DPO's cookie sent from
another site.

The app is the one Airflow mounts at /erasure, over a real SQLite store and the session's
OpenBao, with Airflow's auth manager and metadata DB behind its logins. For each generated
request: no 5xx; the body answered never holds a string the request sent (8 characters or
more: a subject's identifier typed into any box); and who may do what holds (nobody and a
forged cross-site request never get a 2xx where it acts, a login never ingests lineage,
the lineage key opens nothing else). Bounded: a few examples per route and caller, positive
and negative (schema-breaking) data, derandomised so a run is repeatable.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from erasure.intake import ensure_submissions_key
from erasure.keys.vault import EmbeddedOpenBao, ensure_kv_v2, ensure_transit
from erasure_airflow.api.csrf import SAFE_METHODS
from tests.integration.airflow_app import (
    GDPR_ERASURE_STANDIN,
    issue_tokens,
    plugin_client,
    simple_auth_environment,
    sync_dags,
)

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault]

USERS = {"auditor": "viewer", "dpo": "op"}
RUN = uuid.uuid4().hex[:8]
LINEAGE_KEY = "ol-" + "z" * 29
MAX_EXAMPLES = 6  # per route, caller and mode: the file runs in about a minute here
SHORTEST_CHECKED = 8  # shorter strings turn up in any answer by chance ("true", "2026")
CALLERS = ["nobody", "viewer", "dpo", "lineage_key", "cross_site_cookie"]


@pytest.fixture(scope="module")
def env(
    airflow_db: Path, openbao: EmbeddedOpenBao, tmp_path_factory: Any
) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("erasure-fuzz")
    auth, passwords = simple_auth_environment(home, USERS, RUN)
    values = {
        **auth,
        "ERASURE_STORE_URL": f"sqlite:///{home}/erasure.db",
        "ERASURE_VAULT_ADDR": openbao.address,
        "ERASURE_VAULT_TOKEN": openbao.token,
        "ERASURE_VAULT_KV_MOUNT": f"kv-fuzz-{RUN}",
        "ERASURE_VAULT_TRANSIT_MOUNT": f"transit-fuzz-{RUN}",
        "ERASURE_LINEAGE_API_KEY": LINEAGE_KEY,
        "ERASURE_CATALOG_PATH": str(REPO / "erasure" / "sample" / "estate" / "catalog.yaml"),
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, value)
        yield {**values, **{f"password:{u}": p for u, p in passwords.items()}}


@pytest.fixture(scope="module")
def airflow(env: dict[str, str], openbao: EmbeddedOpenBao, tmp_path_factory: Any) -> Iterator[Any]:
    """Airflow's API server app (its auth manager, the plugin mounted), the stand-in erasure
    DAG and the desk's transit key: what the erasure app needs behind its routes."""
    mount = env["ERASURE_VAULT_TRANSIT_MOUNT"]
    ensure_transit(openbao.client(), mount)
    ensure_submissions_key(openbao.client(), mount)
    ensure_kv_v2(openbao.client(), env["ERASURE_VAULT_KV_MOUNT"])  # the published heads
    with plugin_client() as client:
        sync_dags(tmp_path_factory.mktemp("dags"), {"gdpr_erasure.py": GDPR_ERASURE_STANDIN})
        yield client


@pytest.fixture(scope="module")
def tokens(airflow: Any, env: dict[str, str]) -> dict[str, str]:
    return issue_tokens(airflow, {u: env[f"password:{u}"] for u in USERS})


@pytest.fixture(scope="module")
def api_schema(airflow: Any) -> Any:
    """The erasure app's OpenAPI schema (not served: the app has no open docs routes)."""
    from erasure_airflow import api as erasure_api

    schema = schemathesis.openapi.from_dict(erasure_api.app.openapi())
    schema.app = erasure_api.app
    return schema


def credentials(caller: str, tokens: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(headers, cookies) a caller of this kind sends."""
    if caller == "viewer":
        return {"Authorization": f"Bearer {tokens['auditor']}"}, {}
    if caller == "dpo":
        return {"Authorization": f"Bearer {tokens['dpo']}"}, {}
    if caller == "lineage_key":
        return {"Authorization": f"Bearer {LINEAGE_KEY}"}, {}
    if caller == "cross_site_cookie":  # the DPO's UI cookie, on a request another site made
        return {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, {
            "_token": tokens["dpo"]
        }
    return {}, {}


def schema_words(schema: Any) -> set[str]:
    """The property names and enum values the schema itself declares: an answer may name a
    field or a status without repeating anything typed."""
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                words.update(properties)
            enum = node.get("enum")
            if isinstance(enum, list):
                words.update(str(v) for v in enum)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return words


def sent_strings(case: Any, declared: set[str]) -> set[str]:
    """Every string the request carries (path, query, headers it was given, body values and
    keys) long enough that finding it in an answer means it was repeated; not the words the
    schema declares."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if len(value.strip()) >= SHORTEST_CHECKED:
                found.add(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    for part in (case.path_parameters, case.query, case.headers, case.body):
        walk(part)
    return found - declared


# What a route shows back by design, when it succeeds: a submission's own reference (201);
# the new-request form prefilled with a well-formed reference; the records page's filter
# form showing the filter in force. Never in a refusal.
DESIGNED_ECHO = {
    ("POST", "/api/v1/requests"): lambda case: {str((case.body or {}).get("request_ref"))},
    ("GET", "/requests/new"): lambda case: {str((case.query or {}).get("ref"))},
    ("GET", "/records"): lambda case: {str(v) for v in (case.query or {}).values()},
}


def problems_with(case: Any, caller: str, response: Any, declared: set[str]) -> list[str]:
    """What is wrong with this answer to this caller; empty when nothing is."""
    method, path, code = case.method.upper(), case.path, response.status_code
    acting = method not in SAFE_METHODS
    wrong = []
    if code >= 500:
        wrong.append(f"{code}: {response.text[:300]}")
    shown = set()
    if 200 <= code < 300:
        shown = DESIGNED_ECHO.get((method, path), lambda case: set())(case)
    text = response.text
    for value in sent_strings(case, declared) - shown:
        if value in text or json.dumps(value)[1:-1] in text:
            wrong.append(f"{code} repeats a value sent: {value!r}")
    succeeded = 200 <= code < 300
    if caller == "nobody" and succeeded:
        wrong.append(f"{code} without a credential")
    if caller == "cross_site_cookie" and acting and code not in (403, 415):
        wrong.append(f"{code}: a cross-site cookie request was not refused")
    if caller == "viewer" and succeeded and (acting or path in VIEWER_REFUSED):
        wrong.append(f"{code}: a viewer got through")
    if caller == "lineage_key" and succeeded and path != "/api/v1/lineage":
        wrong.append(f"{code}: the lineage key opened another route")
    if caller in ("viewer", "dpo") and path == "/api/v1/lineage" and succeeded:
        wrong.append(f"{code}: a login ingested lineage")
    return wrong


VIEWER_REFUSED = {"/api/v1/desk", "/desk", "/requests/new", "/api/v1/respondents"}


def fuzz(
    operation: Any, mode: Any, caller: str, tokens: dict[str, str], declared: set[str]
) -> list[str]:
    """Run one route under one caller with generated data: the problems found."""
    from hypothesis import HealthCheck, given, settings

    headers, cookies = credentials(caller, tokens)
    failures: list[str] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        # The credentials are the caller's: none the schema's security schemes made up.
        for name in [h for h in case.headers or {} if h.lower() in ("authorization", "cookie")]:
            del case.headers[name]
        response = case.call(headers=headers, cookies=cookies)
        for problem in problems_with(case, caller, response, declared):
            failures.append(f"{caller} {operation.label} [{mode.value}]: {problem}")

    run()
    return failures


@pytest.mark.parametrize("caller", CALLERS)
def test_every_route_under_every_caller_holds(
    api_schema: Any, tokens: dict[str, str], caller: str
) -> None:
    from erasure_airflow import api as erasure_api

    operations = [result.ok() for result in api_schema.get_all_operations()]
    declared = schema_words(erasure_api.app.openapi())
    routes: Any = erasure_api.app.routes
    mounted = {f"{m} {r.path}" for r in routes for m in r.methods if m != "HEAD"}
    assert {op.label for op in operations} == mounted  # every route of the app, no other
    failures = [
        problem
        for operation in operations
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
        for problem in fuzz(operation, mode, caller, tokens, declared)
    ]
    assert not failures, "\n".join(sorted(set(failures))[:40])
