"""The erasure plugin inside Airflow's own API server app, with real logins and real rows.

Airflow's `create_app()` loads the plugin from `plugins/` and mounts it at /erasure, as the
API server does; users log in with `POST /auth/token` (simple auth manager, users and
passwords configured here) and send the JWT they get back, or the UI's `_token` cookie.
The erasure store is SQLite; Vault is the session's OpenBao (request keys, peppers, the
records' signing key, the submissions key); the DPO submits on the desk, which creates the
erasure run in Airflow's metadata DB, so what Airflow keeps is checked row by row.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
import sqlite3
import sys
import unicodedata
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.audit.anchor import VaultAnchorBoard
from erasure.audit.records import RecordLedger
from erasure.audit.signing import DEFAULT_KEY_NAME, TransitSigner
from erasure.catalog import load_catalog
from erasure.config import Settings
from erasure.intake import SubmissionBox, Ticket, TransitSubmissionKey, ensure_submissions_key
from erasure.keys.keystore import KvKeyStore, KvKeyStoreConfig
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, ensure_kv_v2, ensure_transit
from erasure.model import Action, DatasetRef, Gap, GapKind, Plan, PlanItem, RootHit, SubjectSummary
from erasure.services import anchor_board
from erasure.store import Store, open_store
from erasure.submission import ErasureRequest
from erasure_airflow.api.backend import ErasureBackend
from local.bench.load import submission as desk_submission
from tests.integration.airflow_app import (
    GDPR_ERASURE_STANDIN,
    issue_tokens,
    plugin_client,
    simple_auth_environment,
    sync_dags,
)
from tests.unit.audit.support import (
    DELETED,
    DRY,
    OPEN,
    RESUMED,
    STOPPED,
    STUCK,
    TAPE_RETENTION,
    record_lifecycles,
    record_request,
)
from tests.unit.lineage.stored_events import stored_events
from tests.unit.registry_support import Books, books_for, register

REPO = Path(__file__).resolve().parents[2]
# Empty (tests/conftest.py): Airflow loads the plugin by the erasure_airflow entry point.

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault]

USERS = {"auditor": "viewer", "clerk": "user", "dpo": "op", "boss": "admin"}
READERS = list(USERS)
ACTORS = ["dpo", "boss"]
LINEAGE_KEY = "ol-" + "k" * 29
RUN = uuid.uuid4().hex[:8]
CANARY = f"jane.canary.{RUN}@example.org"  # the raw identifier typed into the trigger form
# Long and unique: a short number would match timestamps, counts and hashes by chance.
NUMERIC_CANARY = 98306159427315770
NOTE_CANARY = f"called from +44 20 7946 {RUN[:4]}"  # free text in the notes
OTHER_CANARY = f"john.canary.{RUN}@example.org"
REF = f"REQ-{RUN}-1"
OTHER_REF = f"REQ-{RUN}-2"
DONE_REF = f"REQ-{RUN}-0"
DEMO_EVENTS = REPO / "erasure" / "sample" / "estate" / "lineage" / "events.jsonl"

READ_ROUTES = [
    "/erasure/api/v1/requests",
    f"/erasure/api/v1/requests/{REF}",
    "/erasure/api/v1/records",
    "/erasure/api/v1/records/verify",
    f"/erasure/api/v1/records/{DONE_REF}",
    f"/erasure/api/v1/records/{DONE_REF}/export?format=json",
    f"/erasure/api/v1/records/{DONE_REF}/export?format=html",
    "/erasure/records",
]
ACT_ROUTES = [
    "/erasure/api/v1/lineage",
    "/erasure/api/v1/requests",
    f"/erasure/api/v1/requests/{REF}/resume",
    f"/erasure/api/v1/requests/{REF}/extend",
]
DPO_PAGES = ["/erasure/requests/new", "/erasure/desk", "/erasure/api/v1/desk"]
TASK_ROUTES = ["/erasure/api/v1/respondents"]  # the tasks' account: who may answer prompts

# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def env(
    airflow_db: Path, openbao: EmbeddedOpenBao, tmp_path_factory: Any
) -> Iterator[dict[str, str]]:
    """The environment of the API server: Airflow users, the store, Vault, machine keys."""
    home = tmp_path_factory.mktemp("erasure-plugin")
    auth, passwords = simple_auth_environment(home, USERS, RUN)
    values = {
        **auth,
        "ERASURE_STORE_URL": f"sqlite:///{home}/erasure.db",
        "ERASURE_VAULT_ADDR": openbao.address,
        "ERASURE_VAULT_TOKEN": openbao.token,
        "ERASURE_VAULT_KV_MOUNT": f"kv-{RUN}",
        "ERASURE_KEYSTORE_KIND": "kv",  # the registry fixture parks under KvKeyStore
        "ERASURE_VAULT_TRANSIT_MOUNT": f"transit-{RUN}",
        "ERASURE_LINEAGE_API_KEY": LINEAGE_KEY,
        "ERASURE_CATALOG_PATH": str(REPO / "erasure" / "sample" / "estate" / "catalog.yaml"),
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, value)
        yield {**values, **{f"password:{u}": p for u, p in passwords.items()}}


@pytest.fixture(scope="module")
def store(env: dict[str, str]) -> Iterator[Store]:
    with open_store(env["ERASURE_STORE_URL"]) as store:
        yield store


@pytest.fixture(scope="module")
def client(env: dict[str, str]) -> Iterator[Any]:
    """Airflow's API server app, built as `airflow api-server` builds it, plugin included."""
    with plugin_client() as client:
        yield client


@pytest.fixture(scope="module")
def tokens(client: Any, env: dict[str, str]) -> dict[str, str]:
    """A JWT per user, from Airflow's login endpoint."""
    return issue_tokens(client, {u: env[f"password:{u}"] for u in USERS})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def registry(env: dict[str, str], store: Store, openbao: EmbeddedOpenBao) -> Books:
    vault = openbao.client()
    keystore = KvKeyStore(KvKeyStoreConfig(mount=env["ERASURE_VAULT_KV_MOUNT"]), vault)
    keystore.ensure_mount()
    peppers = PepperStore(vault, env["ERASURE_VAULT_KV_MOUNT"])
    peppers.initialise()  # a new deployment's first pepper
    return books_for(store, keystore, peppers)


@pytest.fixture(scope="module")
def requests_registered(registry: Books) -> dict[str, str]:
    """Two requests as the DAG's register step leaves them; REF also planned and acting."""
    catalog = load_catalog(REPO / "erasure" / "sample" / "estate" / "catalog.yaml")
    hashes = {}
    for ref, identifier in ((REF, CANARY), (OTHER_REF, OTHER_CANARY)):
        done = register(
            registry,
            ErasureRequest.parse(
                {
                    "request_ref": ref,
                    "identifier_type": "email",
                    "identifier": identifier,
                    "received_on": date.today().isoformat(),
                    "legal_ground": "art17_1_b",
                    "notes": NOTE_CANARY,
                }
            ),
            catalog=catalog,
            run_id=f"erasure-{ref}",
        )
        hashes[ref] = done.subject_hash
    registry.plans.save(REF, _plan(hashes[REF]), 1)
    registry.requests.set_status(REF, "planned")
    registry.requests.set_status(REF, "acting")
    customers = DatasetRef("warehouse", "crm.customers")
    registry.action_log.record(REF, customers, Action.ERASE_ROWS, "done", {"rows": 1})
    return hashes


def _plan(subject_hash: str) -> Plan:
    def dataset(name: str) -> dict[str, str]:
        return {"namespace": "warehouse", "name": name}

    return Plan(
        subject=SubjectSummary(type="email", hash=subject_hash, pepper_version=1),
        roots=[
            RootHit(
                dataset=dataset("crm.customers"),
                identifier_type="email",
                columns=["email"],
                rows=1,
                via="request",
            )
        ],
        items=[
            PlanItem(
                dataset=dataset("crm.customers"),
                kind="table",
                action=Action.ERASE_ROWS,
                rule="2",
                reason="root: holds the subject and is mutable",
            ),
            PlanItem(
                dataset=dataset("marts.orders_daily"),
                kind="table",
                action=Action.REBUILD,
                rule="5",
                reason="rebuildable from source",
            ),
            PlanItem(
                dataset=dataset("ml.churn_features"),
                kind="feature_store",
                action=Action.ESCALATE,
                rule="7",
                reason="feature-store statistics",
            ),
        ],
        coverage=0.9,
        gaps=[
            Gap(
                kind=GapKind.OPAQUE_PRODUCER,
                detail="python job",
                dataset=DatasetRef("warehouse", "ml.churn_features"),
            )
        ],
        cycles=[],
        lineage_snapshot="sha256:" + "ab" * 32,
        created_at=datetime.now(UTC),
    )


@pytest.fixture(scope="module")
def ledger(env: dict[str, str], store: Store, openbao: EmbeddedOpenBao) -> RecordLedger:
    """One completed request and one in progress, signed by the key the plugin reads."""
    signer = TransitSigner(openbao.client(), env["ERASURE_VAULT_TRANSIT_MOUNT"], DEFAULT_KEY_NAME)
    ensure_kv_v2(openbao.client(), env["ERASURE_VAULT_KV_MOUNT"])
    board = VaultAnchorBoard(openbao.client(), env["ERASURE_VAULT_KV_MOUNT"])
    ledger = RecordLedger(store, signer, board)
    record_request(ledger, DONE_REF)
    return ledger


@pytest.fixture(scope="module")
def erasure_dag(client: Any, tmp_path_factory: Any) -> str:
    """A `gdpr_erasure` DAG in Airflow's metadata DB, so runs can be triggered over REST."""
    sync_dags(tmp_path_factory.mktemp("dags"), {"gdpr_erasure.py": GDPR_ERASURE_STANDIN})
    return "gdpr_erasure"


def submission(ref: str, identifier: str, **fields: Any) -> dict[str, Any]:
    """What the DPO types on the desk, her notes naming the note canary."""
    return desk_submission(ref, identifier, **{"notes": NOTE_CANARY, **fields})


@pytest.fixture(scope="module")
def submissions_key(env: dict[str, str], openbao: EmbeddedOpenBao) -> str:
    """The operator's `erasure keys init` created the transit key the desk seals with."""
    mount = env["ERASURE_VAULT_TRANSIT_MOUNT"]
    ensure_transit(openbao.client(), mount)
    ensure_submissions_key(openbao.client(), mount)
    return mount


def forms_of(needle: str) -> set[str]:
    """How a value may sit in a database: as typed, case-folded, JSON-escaped, NFC and NFD."""
    forms = {needle, needle.casefold()}
    for form in ("NFC", "NFD"):
        forms.add(unicodedata.normalize(form, needle).casefold())
    forms |= {json.dumps(f)[1:-1] for f in list(forms)}
    return forms


def metadata_db_holding(*needles: str) -> list[str]:
    """Every table and column of Airflow's metadata DB holding a needle in any of its forms."""
    from airflow.settings import engine

    forms = {f.casefold() for n in needles for f in forms_of(n)}
    hits = []
    with engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            for row in conn.execute(sa.text(f'SELECT * FROM "{table}"')).mappings():
                for column, value in row.items():
                    if value is None:
                        continue
                    text = (
                        value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                    ).casefold()
                    if any(f in text for f in forms):
                        hits.append(f"{table}.{column}")
    return sorted(set(hits))


def airflow_rows_containing(*needles: str) -> list[str]:
    """Every dag_run or log row that holds one of `needles` anywhere, in any case."""
    from airflow.utils.session import create_session

    hits = []
    with create_session() as session:
        for table in ("dag_run", "log"):
            for row in session.execute(sa.text(f"SELECT * FROM {table}")).all():
                text = str(tuple(row)).casefold()
                hits += [f"{table}: {row}" for n in needles if n.casefold() in text]
    return hits


# ---------------------------------------------------------------------------------------------
# Authentication and roles


def test_the_plugin_is_mounted_by_airflow_and_its_package_is_not_loaded_as_loose_plugins(
    client: Any, tokens: dict[str, str]
) -> None:
    from airflow import plugins_manager

    plugins = client.get("/api/v2/plugins", headers=bearer(tokens["auditor"])).json()["plugins"]
    erasure = next(p for p in plugins if p["name"] == "erasure")
    assert erasure["fastapi_apps"][0]["url_prefix"] == "/erasure"
    views = [
        (v["name"], v["href"], v["destination"], v["category"]) for v in erasure["external_views"]
    ]
    assert views == [
        ("Erasure desk", "/erasure/desk", "nav", "browse"),
        ("New erasure request", "/erasure/requests/new", "nav", "browse"),
        ("Erasure records", "/erasure/records", "nav", "browse"),
    ]
    assert not [path for path in plugins_manager.get_import_errors() if "erasure" in path]
    assert "desk" not in sys.modules and "routes" not in sys.modules  # no loose modules


def test_anonymous_callers_get_401_on_every_route(client: Any) -> None:
    from erasure_airflow import api as erasure_api

    mounted = {route.path for route in erasure_api.app.routes}  # type: ignore[attr-defined]
    tried = {
        path.split("?")[0].replace(REF, "{ref}").replace(DONE_REF, "{ref}")
        for path in [*READ_ROUTES, *ACT_ROUTES, *DPO_PAGES, *TASK_ROUTES]
    }
    assert {f"/erasure{path}" for path in mounted} == tried, "a route is missing from this test"
    for path in [*READ_ROUTES, *DPO_PAGES, *TASK_ROUTES]:
        assert client.get(path).status_code == 401, path
    for path in ACT_ROUTES:
        assert client.post(path, json={}).status_code == 401, path


def test_a_forged_or_foreign_token_is_refused(client: Any) -> None:
    assert client.get("/erasure/api/v1/records", headers=bearer("not-a-jwt")).status_code == 403
    wrong_key = "ol-wrong-key-xxxxxxxx"
    ingest = client.post("/erasure/api/v1/lineage", json={}, headers=bearer(wrong_key))
    # Said as what it is (not Airflow's "Invalid JWT token"), and the key sent is not repeated.
    assert ingest.status_code == 401, ingest.text
    assert ingest.json()["detail"].startswith("the lineage API key is not valid: check the ")
    assert "ERASURE_LINEAGE_API_KEY" in ingest.json()["detail"] and wrong_key not in ingest.text
    none = client.post("/erasure/api/v1/lineage", json={})
    assert none.status_code == 401 and "takes the lineage API key only" in none.text


@pytest.mark.parametrize("user", READERS)
def test_every_role_reads(
    client: Any, tokens: dict[str, str], user: str, ledger: RecordLedger, requests_registered: Any
) -> None:
    for path in READ_ROUTES:
        response = client.get(path, headers=bearer(tokens[user]))
        assert response.status_code == 200, (path, response.text)


@pytest.mark.parametrize("user", ["auditor", "clerk"])
def test_viewers_and_users_may_not_act(client: Any, tokens: dict[str, str], user: str) -> None:
    for path in ACT_ROUTES:
        response = client.post(path, json={}, headers=bearer(tokens[user]))
        assert response.status_code == 403, path
        said = "key only, not a user's login" if path.endswith("/lineage") else "op or admin"
        assert said in response.json()["detail"], path
    for path in DPO_PAGES:
        assert client.get(path, headers=bearer(tokens[user])).status_code == 403, path


@pytest.mark.parametrize(("user", "allowed"), [("auditor", False), ("clerk", True), ("dpo", True)])
def test_who_may_answer_is_read_by_users_not_viewers(
    client: Any, tokens: dict[str, str], user: str, allowed: bool
) -> None:
    response = client.get(TASK_ROUTES[0], headers=bearer(tokens[user]))
    if not allowed:
        assert response.status_code == 403
        return
    assert response.status_code == 200, response.text
    # The simple auth manager's roles are not the DPO role: nobody holds it here.
    assert response.json() == {"dpo_roles": ["DPO"], "respondents": []}


# ---------------------------------------------------------------------------------------------
# Lineage ingest


def _demo_event(index: int = 0) -> dict[str, Any]:
    lines = DEMO_EVENTS.read_text().splitlines()
    event: dict[str, Any] = json.loads(lines[index])
    return event


@pytest.mark.parametrize("user", ACTORS)
def test_no_login_ingests_lineage_not_even_the_dpos(
    client: Any, tokens: dict[str, str], store: Store, user: str
) -> None:
    event = _demo_event(0)
    event["run"] = {"runId": str(uuid.uuid4())}
    token = client.post("/erasure/api/v1/lineage", json=event, headers=bearer(tokens[user]))
    assert token.status_code == 403 and "key only, not a user's login" in token.text
    client.cookies.set("_token", tokens[user])  # the UI's cookie, from the UI's own origin
    try:
        cookie = client.post(
            "/erasure/api/v1/lineage", json=event, headers={"Origin": "http://testserver"}
        )
    finally:
        client.cookies.clear()
    assert cookie.status_code == 401 and "takes the lineage API key only" in cookie.text
    assert event["run"]["runId"] not in {e.run.run_id for e in stored_events(store)}


def test_an_event_is_ingested_once(client: Any, store: Store) -> None:
    event = _demo_event(0)
    event["run"] = {"runId": str(uuid.uuid4())}
    first = client.post("/erasure/api/v1/lineage", json=event, headers=bearer(LINEAGE_KEY))
    again = client.post("/erasure/api/v1/lineage", json=event, headers=bearer(LINEAGE_KEY))
    assert first.status_code == 201 and first.json()["stored"] is True
    assert again.status_code == 200 and again.json()["stored"] is False
    assert first.json()["event_id"] == again.json()["event_id"]
    stored = [e.run.run_id for e in stored_events(store)]
    assert stored.count(event["run"]["runId"]) == 1


def test_a_malformed_event_is_400_with_what_is_wrong(client: Any) -> None:
    event = _demo_event(0)
    del event["eventTime"]
    response = client.post("/erasure/api/v1/lineage", json=event, headers=bearer(LINEAGE_KEY))
    assert response.status_code == 400
    assert "eventTime" in response.json()["detail"]
    not_json = client.post(
        "/erasure/api/v1/lineage",
        content=b"{not json",
        headers={**bearer(LINEAGE_KEY), "Content-Type": "application/json"},
    )
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["detail"]


def test_the_openlineage_http_transport_posts_with_its_api_key(client: Any, store: Store) -> None:
    """As `{"type": "http", "auth": {"type": "api_key", ...}, "compression": "gzip"}` sends it."""
    event = _demo_event(1)
    event["run"] = {"runId": str(uuid.uuid4())}
    headers = {
        "Authorization": f"Bearer {LINEAGE_KEY}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
    }
    body = gzip.compress(json.dumps(event).encode())
    response = client.post("/erasure/api/v1/lineage", content=body, headers=headers)
    assert response.status_code == 201, response.text
    assert event["run"]["runId"] in {e.run.run_id for e in stored_events(store)}
    # The key opens the lineage endpoint only.
    submit = client.post("/erasure/api/v1/requests", json={}, headers=headers)
    assert submit.status_code == 403


# ---------------------------------------------------------------------------------------------
# Requests


def test_requests_show_status_deadlines_and_plan_never_the_identifier(
    client: Any, tokens: dict[str, str], requests_registered: dict[str, str]
) -> None:
    listing = client.get("/erasure/api/v1/requests", headers=bearer(tokens["auditor"]))
    refs = {r["request_ref"]: r for r in listing.json()}
    assert {REF, OTHER_REF} <= set(refs)
    assert refs[REF]["status"] == "acting" and refs[OTHER_REF]["status"] == "registered"
    assert refs[REF]["due_on"] and refs[REF]["overdue"] is False
    only = client.get(
        "/erasure/api/v1/requests?status=registered", headers=bearer(tokens["auditor"])
    )
    assert OTHER_REF in {r["request_ref"] for r in only.json()} and REF not in {
        r["request_ref"] for r in only.json()
    }

    detail = client.get(f"/erasure/api/v1/requests/{REF}", headers=bearer(tokens["auditor"]))
    body = detail.json()
    assert body["subject_hash"] == requests_registered[REF]
    assert body["plan_versions"] == [1]
    plan = body["plan"]
    assert plan["actions"] == {"erase_rows": 1, "rebuild": 1, "escalate": 1}
    assert next(i["reason"] for i in plan["items"]) == "root: holds the subject and is mutable"
    assert plan["items"][0]["dataset"] == "warehouse/crm.customers"
    assert body["actions"][0]["status"] == "done"
    for text in (listing.text, only.text, detail.text):
        assert CANARY not in text and NOTE_CANARY not in text

    missing = client.get("/erasure/api/v1/requests/REQ-none", headers=bearer(tokens["auditor"]))
    assert missing.status_code == 404 and "REQ-none" not in missing.text
    pasted = client.get(f"/erasure/api/v1/requests/{CANARY}", headers=bearer(tokens["auditor"]))
    assert pasted.status_code == 404 and CANARY not in pasted.text


# ---------------------------------------------------------------------------------------------
# The desk: submissions sealed before anything reaches Airflow


def test_the_dpo_submits_and_airflow_keeps_only_the_reference_and_a_handle(
    client: Any,
    tokens: dict[str, str],
    erasure_dag: str,
    submissions_key: str,
    store: Store,
    openbao: EmbeddedOpenBao,
) -> None:
    ref = f"DESK-{RUN}-1"
    response = client.post(
        "/erasure/api/v1/requests",
        json=submission(ref, CANARY),
        headers=bearer(tokens["dpo"]),
    )

    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["run_id"] == f"erasure-{ref}" and answer["request_ref"] == ref
    assert CANARY not in response.text and NOTE_CANARY not in response.text
    run = client.get(
        f"/api/v2/dags/{erasure_dag}/dagRuns/{answer['run_id']}", headers=bearer(tokens["dpo"])
    ).json()
    assert run["conf"] == {"request_ref": ref, "submission": answer["submission"]}
    assert run["triggering_user_name"] == "dpo"
    assert airflow_rows_containing(CANARY, NOTE_CANARY) == []
    assert metadata_db_holding(CANARY, NOTE_CANARY) == []
    # Sealed in the erasure store: Vault's ciphertext, which a worker's key opens.
    with store.engine.connect() as conn:
        (sealed,) = conn.execute(
            sa.text("SELECT sealed FROM submissions WHERE handle = :h"),
            {"h": answer["submission"]},
        ).one()
    assert sealed.startswith("vault:v1:") and "canary" not in sealed
    box = SubmissionBox(store, TransitSubmissionKey(openbao.client(), submissions_key))
    opened = box.open(Ticket(request_ref=ref, submission=answer["submission"]))
    assert opened.identifier.get_secret_value() == CANARY


def test_a_second_submission_of_a_reference_is_409(
    client: Any,
    tokens: dict[str, str],
    erasure_dag: str,
    submissions_key: str,
    requests_registered: dict[str, str],
) -> None:
    ref = f"DESK-{RUN}-2"
    first = client.post(
        "/erasure/api/v1/requests",
        json=submission(ref, OTHER_CANARY),
        headers=bearer(tokens["dpo"]),
    )
    assert first.status_code == 201, first.text
    again = client.post(
        "/erasure/api/v1/requests",
        json=submission(ref, OTHER_CANARY),
        headers=bearer(tokens["boss"]),
    )
    assert again.status_code == 409 and "not registered it yet" in again.json()["detail"]
    registered = client.post(
        "/erasure/api/v1/requests", json=submission(REF, CANARY), headers=bearer(tokens["dpo"])
    )
    assert registered.status_code == 409 and "already registered" in registered.json()["detail"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"received_on": CANARY}, "received_on"),
        ({"legal_ground": CANARY}, "legal_ground"),
        ({"request_ref": CANARY}, "request_ref"),
        ({"identifier": ""}, "identifier"),
        ({CANARY: "x"}, "unknown field"),
        ({"dry_run": CANARY}, "dry_run"),
    ],
)
def test_a_bad_submission_names_the_field_never_its_value(
    client: Any,
    tokens: dict[str, str],
    erasure_dag: str,
    submissions_key: str,
    fields: dict[str, Any],
    field: str,
) -> None:
    response = client.post(
        "/erasure/api/v1/requests",
        json={**submission(f"DESK-{RUN}-BAD", CANARY), **fields},
        headers=bearer(tokens["dpo"]),
    )
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]
    assert "canary" not in response.text.lower()
    assert airflow_rows_containing(CANARY) == []


PHONE_TYPED = f"+44 20 7946 {uuid.uuid4().int % 10_000:04d}"


@pytest.mark.parametrize(
    ("id_type", "identifier", "said"),
    [
        (
            "customer_id",
            CANARY,
            "this looks like an email address, not a customer_id: choose identifier type email",
        ),
        (
            "phone",
            CANARY,
            "this looks like an email address, not a phone: choose identifier type email",
        ),
        (
            "email",
            PHONE_TYPED,
            "this looks like a phone number, not an email: choose identifier type phone",
        ),
        ("phone", f"{PHONE_TYPED} (home)", "this cannot be a phone: a phone number is digits"),
        ("customer_id", f"C {RUN}", "this cannot be a customer_id: a customer_id holds no spaces"),
        ("passport", CANARY, "identifier_type: not an identifier type of the catalog; allowed: "),
    ],
    # Named without the random values: every pytest-xdist worker must collect the same ids.
    ids=[
        "email-as-customer_id",
        "email-as-phone",
        "phone-as-email",
        "phone-with-a-comment",
        "customer_id-with-a-space",
        "unknown-type",
    ],
)
def test_a_value_that_cannot_be_of_its_type_is_refused_before_anything_is_sealed(
    client: Any,
    tokens: dict[str, str],
    erasure_dag: str,
    submissions_key: str,
    store: Store,
    id_type: str,
    identifier: str,
    said: str,
) -> None:
    ref = f"DESK-{RUN}-TYPE"
    response = client.post(
        "/erasure/api/v1/requests",
        json=submission(ref, identifier, identifier_type=id_type),
        headers=bearer(tokens["dpo"]),
    )
    assert response.status_code == 422, response.text
    assert said in response.json()["detail"]
    for typed in (identifier, identifier.replace(" ", ""), RUN):
        assert typed.lower() not in response.text.lower()
    assert airflow_rows_containing(ref) == []  # no run was started
    with store.engine.connect() as conn:
        sealed = conn.execute(
            sa.text("SELECT COUNT(*) FROM submissions WHERE request_ref = :r"), {"r": ref}
        ).scalar_one()
    assert sealed == 0


REF_CUSTOMER = f"C{RUN.upper()}"


@pytest.mark.parametrize(
    ("ref", "id_type", "identifier", "said"),
    [
        (REF_CUSTOMER, "customer_id", REF_CUSTOMER, "request_ref contains the subject's"),
        (f"DSR-{REF_CUSTOMER}", "customer_id", REF_CUSTOMER, "request_ref contains the subject's"),
        ("DSR-442079460958", "email", CANARY, "reads as a phone number"),
        ("DSR-07911123456", "email", CANARY, "reads as a phone number"),
    ],
    ids=["the-customer-number", "a-ref-holding-it", "a-uk-phone", "a-national-uk-mobile"],
)
def test_a_reference_that_names_anyone_is_refused_before_airflow_sees_it(
    client: Any,
    tokens: dict[str, str],
    erasure_dag: str,
    submissions_key: str,
    ref: str,
    id_type: str,
    identifier: str,
    said: str,
) -> None:
    """A reference becomes the run id, the log paths and a desk row: it names nobody."""
    response = client.post(
        "/erasure/api/v1/requests",
        json=submission(ref, identifier, identifier_type=id_type),
        headers=bearer(tokens["dpo"]),
    )
    assert response.status_code == 422, response.text
    assert said in response.json()["detail"]
    assert ref.lower() not in response.text.lower()
    assert airflow_rows_containing(ref) == []


def test_only_a_json_object_is_a_submission(client: Any, tokens: dict[str, str]) -> None:
    form = client.post(
        "/erasure/api/v1/requests",
        data={"identifier": CANARY},  # what a cross-site HTML form could send
        headers=bearer(tokens["dpo"]),
    )
    assert form.status_code == 415 and CANARY not in form.text
    broken = client.post(
        "/erasure/api/v1/requests",
        content=f'{{"identifier": "{CANARY}"',
        headers={**bearer(tokens["dpo"]), "Content-Type": "application/json"},
    )
    assert broken.status_code == 400 and CANARY not in broken.text
    listed = client.post("/erasure/api/v1/requests", json=[CANARY], headers=bearer(tokens["dpo"]))
    assert listed.status_code == 400 and CANARY not in listed.text
    deep = client.post(
        "/erasure/api/v1/requests",
        content="[" * 20_000 + "]" * 20_000,  # deeper than the JSON decoder recurses
        headers={**bearer(tokens["dpo"]), "Content-Type": "application/json"},
    )
    assert deep.status_code == 400 and "not valid JSON" in deep.text


def test_a_submission_without_its_dag_keeps_nothing_sealed(
    client: Any,
    tokens: dict[str, str],
    submissions_key: str,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from erasure_airflow.api import desk

    monkeypatch.setattr(desk, "ERASURE_DAG_ID", "gdpr_erasure_not_deployed")
    ref = f"DESK-{RUN}-3"
    response = client.post(
        "/erasure/api/v1/requests", json=submission(ref, CANARY), headers=bearer(tokens["dpo"])
    )
    assert response.status_code == 503 and "not loaded" in response.json()["detail"]
    with store.engine.connect() as conn:
        held = conn.execute(
            sa.text("SELECT COUNT(*) FROM submissions WHERE request_ref = :r"), {"r": ref}
        ).scalar_one()
    assert held == 0


def test_the_desk_page_is_the_dpos(client: Any, tokens: dict[str, str]) -> None:
    client.cookies.set("_token", tokens["dpo"])
    try:
        page = client.get("/erasure/requests/new")
    finally:
        client.cookies.clear()
    assert page.status_code == 200
    assert "New erasure request" in page.text and 'value="email"' in page.text
    # No type is chosen for the DPO: an address filed under the first type finds nobody.
    assert '<select id="identifier_type" name="identifier_type" required>' in page.text
    assert '<option value="">choose…</option><option value="customer_id">' in page.text
    assert "selected" not in page.text.split('id="identifier_type"')[1].split("</select>")[0]
    assert "../api/v1/requests" in page.text  # the form posts JSON to the desk's route


# ---------------------------------------------------------------------------------------------
# Completion records


def test_records_list_filters_and_shows(
    client: Any, tokens: dict[str, str], ledger: RecordLedger
) -> None:
    headers = bearer(tokens["auditor"])
    listing = client.get("/erasure/api/v1/records", headers=headers).json()
    mine = [r for r in listing if r["request_ref"] == DONE_REF]
    assert [r["kind"] for r in mine] == ["received", "escalated", "decided", "completed"]
    assert "body" not in mine[0] and "signature" not in mine[0]
    completed = client.get("/erasure/api/v1/records?status=complete", headers=headers).json()
    assert DONE_REF in {r["request_ref"] for r in completed}
    assert all(r["status"] == "complete" for r in completed)
    future = client.get("/erasure/api/v1/records?since=2999-01-01", headers=headers).json()
    assert future == []

    shown = client.get(f"/erasure/api/v1/records/{DONE_REF}", headers=headers).json()
    assert shown[-1]["body"]["effective_erasure_date"]
    assert client.get("/erasure/api/v1/records/REQ-none", headers=headers).status_code == 404


def test_the_chain_verifies_with_the_vault_key(
    client: Any, tokens: dict[str, str], ledger: RecordLedger
) -> None:
    report = client.get("/erasure/api/v1/records/verify", headers=bearer(tokens["auditor"])).json()
    assert report["ok"] is True and report["first_problem"] is None
    assert report["records"] >= 4 and report["key_versions"] == [1]


def test_the_evidence_pack_exports_as_json_and_html(
    client: Any, tokens: dict[str, str], ledger: RecordLedger
) -> None:
    headers = bearer(tokens["auditor"])
    pack = client.get(f"/erasure/api/v1/records/{DONE_REF}/export?format=json", headers=headers)
    assert pack.status_code == 200 and pack.headers["content-type"].startswith("application/json")
    assert pack.json()["verify"]["ok"] is True
    assert [r["kind"] for r in pack.json()["records"]][-1] == "completed"
    page = client.get(f"/erasure/api/v1/records/{DONE_REF}/export?format=html", headers=headers)
    assert page.headers["content-type"].startswith("text/html")
    assert DONE_REF in page.text and "<script" not in page.text
    bad = client.get(f"/erasure/api/v1/records/{DONE_REF}/export?format=pdf", headers=headers)
    assert bad.status_code == 422


def test_the_records_page_renders_with_the_ui_cookie(
    client: Any, tokens: dict[str, str], ledger: RecordLedger, requests_registered: Any
) -> None:
    client.cookies.set("_token", tokens["auditor"])
    try:
        page = client.get("/erasure/records")
    finally:
        client.cookies.clear()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "Chain verified" in html
    assert html.index("Chain verified") < html.index(DONE_REF)  # verification first
    assert f"api/v1/records/{DONE_REF}/export?format=html" in html
    assert "complete" in html and "<script" not in html
    for secret in (CANARY, OTHER_CANARY, NOTE_CANARY):
        assert secret.casefold() not in html.casefold()
    assert client.get("/erasure/records").status_code == 401


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def lifecycles(
    request: pytest.FixtureRequest,
    env: dict[str, str],
    openbao: EmbeddedOpenBao,
    ledger: RecordLedger,
    tmp_path: Path,
) -> Iterator[Any]:
    """The erasure app over a store of its own holding four requests' lives (completed after
    a failure, failed, a dry run, in progress), signed by the key the app verifies with."""
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    url = (
        f"sqlite:///{tmp_path}/lifecycles.db"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_schema_url"))
    )
    settings = _store_settings(url, openbao, env)
    with open_store(url) as store:
        signer = TransitSigner(openbao.client(), settings.vault_transit_mount, DEFAULT_KEY_NAME)
        board = anchor_board(openbao.client(), settings)
        record_lifecycles(store, RecordLedger(store, signer, board))
    with TestClient(erasure_api.create_app(ErasureBackend(settings))) as app:
        yield app


def request_rows(page: str) -> dict[str, tuple[str, str]]:
    """The records page's request rows: ref -> (status, the row's text as a browser shows it)."""
    rows = re.findall(r'<tr data-ref="([^"]+)" data-status="([^"]+)">(.*?)</tr>', page)
    return {
        ref: (status, " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()))
        for ref, status, row in rows
    }


def test_the_records_page_shows_each_requests_last_outcome_as_the_api_does(
    lifecycles: Any, tokens: dict[str, str]
) -> None:
    headers = bearer(tokens["auditor"])
    page = lifecycles.get("/records", headers=headers)
    assert page.status_code == 200 and "Chain verified" in page.text
    rows = request_rows(page.text)
    statuses = {ref: status for ref, (status, _text) in rows.items()}
    assert statuses == {
        RESUMED: "complete_with_exemptions",
        STUCK: "failed",
        DRY: "dry_run",
        OPEN: "in_progress",
    }
    resumed = rows[RESUMED][1]
    assert "complete with exemptions · 1 earlier failure: " in resumed
    assert STOPPED in resumed and TAPE_RETENTION.isoformat() in resumed
    assert "failed · " in rows[STUCK][1] and DELETED in rows[STUCK][1]
    assert "dry run (nothing erased)" in rows[DRY][1]
    assert "in progress (last record: escalated)" in rows[OPEN][1]
    assert "Records in chain order (8)" in page.text

    # The JSON API gives every request the same status, from the same derivation.
    listed = lifecycles.get("/api/v1/requests", headers=headers).json()
    on_record = {r["request_ref"]: r["on_record"] for r in listed}
    assert {ref: o["status"] for ref, o in on_record.items()} == statuses
    assert on_record[RESUMED]["effective_erasure_date"] == TAPE_RETENTION.isoformat()
    assert [f["reason"] for f in on_record[RESUMED]["failures"]] == [STOPPED]
    detail = lifecycles.get(f"/api/v1/requests/{DRY}", headers=headers).json()
    assert detail["dry_run"] is True and detail["on_record"]["status"] == "dry_run"


def test_the_records_page_filters_requests_by_status_day_and_reference(
    lifecycles: Any, tokens: dict[str, str]
) -> None:
    def shown(**params: str) -> tuple[list[str], str]:
        page = lifecycles.get("/records", params=params, headers=bearer(tokens["auditor"]))
        assert page.status_code == 200
        return list(request_rows(page.text)), page.text

    everyone = [RESUMED, STUCK, DRY, OPEN]
    failed, page = shown(status="failed")
    assert failed == [STUCK]
    assert '<option value="failed" selected>' in page  # the form shows the filter in force
    assert "Records in chain order (2)" in page  # the shown request's records only
    assert shown(status="complete_with_exemptions")[0] == [RESUMED]
    assert shown(status="complete")[0] == []
    assert shown(status="dry_run")[0] == [DRY]
    assert shown(ref="REQ-2026-010*")[0] == everyone
    assert shown(ref=RESUMED, status="")[0] == [RESUMED]  # an empty field does not filter
    nothing, page = shown(ref="REQ-2026-01")  # exact unless it ends in *
    assert nothing == [] and "No request matches this filter." in page
    today = datetime.now(UTC).date()
    assert shown(since=today.isoformat(), until=today.isoformat())[0] == everyone
    assert shown(until=date.fromordinal(today.toordinal() - 1).isoformat())[0] == []


def test_a_bad_filter_is_refused_naming_the_parameter_never_the_value(
    client: Any, tokens: dict[str, str]
) -> None:
    headers = bearer(tokens["auditor"])
    for name, accepted in (
        ("status", "complete, complete_with_exemptions, failed, in_progress, dry_run"),
        ("since", "YYYY-MM-DD"),
        ("until", "YYYY-MM-DD"),
        ("ref", "followed by *"),
    ):
        page = client.get("/erasure/records", params={name: CANARY}, headers=headers)
        assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
        assert "Filter not applied" in page.text and f"{name}: " in page.text
        assert accepted in page.text and 'name="ref" size="24" value=""' in page.text
        assert CANARY.casefold() not in page.text.casefold(), name
    # The JSON API's own parameter checks do not echo the value either (FastAPI's would).
    listing = client.get("/erasure/api/v1/records", params={"since": CANARY}, headers=headers)
    assert listing.status_code == 422 and listing.json()["detail"][0]["loc"] == ["query", "since"]
    assert CANARY.casefold() not in listing.text.casefold()


# ---------------------------------------------------------------------------------------------
# What is down is named, and nothing is cached broken


def test_an_unreachable_store_or_vault_is_503_naming_what_to_check(
    client: Any, tokens: dict[str, str], env: dict[str, str], ledger: RecordLedger
) -> None:
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    no_store = Settings.model_construct(store_url="postgresql://erasure@127.0.0.1:1/erasure")
    no_vault = Settings.model_construct(
        store_url=env["ERASURE_STORE_URL"], vault_addr="http://127.0.0.1:1", vault_token=None
    )
    headers = bearer(tokens["auditor"])
    with TestClient(erasure_api.create_app(ErasureBackend(no_store))) as down:
        response = down.get("/records", headers=headers)
        assert response.status_code == 503
        assert "ERASURE_STORE_URL" in response.json()["detail"]
    with TestClient(erasure_api.create_app(ErasureBackend(no_vault))) as down:
        assert down.get("/api/v1/records", headers=headers).status_code == 200
        response = down.get("/api/v1/records/verify", headers=headers)
        assert response.status_code == 503
        assert "ERASURE_VAULT" in response.json()["detail"]
        page = down.get("/records", headers=headers)  # the page lists, and says why unverified
        assert page.status_code == 200 and "Chain not verified" in page.text


def test_a_tampered_chain_is_the_first_thing_the_page_says(
    client: Any,
    tokens: dict[str, str],
    env: dict[str, str],
    openbao: EmbeddedOpenBao,
    tmp_path: Path,
) -> None:
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    url = f"sqlite:///{tmp_path}/tampered.db"
    settings = _store_settings(url, openbao, env)
    with open_store(url) as store:
        signer = TransitSigner(openbao.client(), settings.vault_transit_mount, DEFAULT_KEY_NAME)
        record_request(
            RecordLedger(store, signer, anchor_board(openbao.client(), settings)), DONE_REF
        )
    raw = sqlite3.connect(tmp_path / "tampered.db", isolation_level=None)
    try:  # whoever holds the file can drop the trigger and edit a record
        raw.execute("DROP TRIGGER completion_records_no_update")
        raw.execute("UPDATE completion_records SET body = '{\"edited\": true}' WHERE seq = 2")
    finally:
        raw.close()

    with TestClient(erasure_api.create_app(ErasureBackend(settings))) as app:
        page = app.get("/records", headers=bearer(tokens["auditor"]))
        report = app.get("/api/v1/records/verify", headers=bearer(tokens["auditor"])).json()

    assert page.status_code == 200
    assert "Chain BROKEN" in page.text and "Chain verified" not in page.text
    assert page.text.index("Chain BROKEN") < page.text.index("<h2>")
    assert "seq 2" in page.text
    assert report["ok"] is False and report["first_problem"]["seq"] == 2


@pytest.mark.postgres
def test_ingest_is_idempotent_on_a_postgres_store(
    client: Any, tokens: dict[str, str], postgres_schema_url: str
) -> None:
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    backend = ErasureBackend(
        Settings.model_construct(
            store_url=postgres_schema_url, lineage_api_key=SecretStr(LINEAGE_KEY)
        )
    )
    event = _demo_event(2)
    with TestClient(erasure_api.create_app(backend)) as app:
        first = app.post("/api/v1/lineage", json=event, headers=bearer(LINEAGE_KEY))
        again = app.post("/api/v1/lineage", json=event, headers=bearer(LINEAGE_KEY))
        assert (first.status_code, again.status_code) == (201, 200)
        assert backend.lineage().counts()["events"] == 1


def _store_settings(url: str, openbao: EmbeddedOpenBao, env: dict[str, str]) -> Settings:
    """The API server's settings for a store at `url` whose records the test's Vault signs."""
    return Settings.model_construct(
        store_url=url,
        vault_addr=openbao.address,
        vault_token=SecretStr(openbao.token),
        vault_transit_mount=env["ERASURE_VAULT_TRANSIT_MOUNT"],
        vault_kv_mount=env["ERASURE_VAULT_KV_MOUNT"],
        # One store, one published chain head (erasure.audit.anchor).
        vault_anchor_path=f"anchors/{hashlib.sha256(url.encode()).hexdigest()[:16]}",
    )
