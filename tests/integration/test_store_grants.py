"""`erasure store grants` on a real PostgreSQL: three roles created in a fresh database, each
connecting as itself afterwards. The API server may insert where it writes and nowhere
update or delete what a request or a record holds; the worker may do its DML but still not
remove a tombstone or a record; CRM ingest reads the suppression list and nothing else."""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from erasure import cli
from erasure.errors import StoreError
from erasure.pseudonym import Pepper
from erasure.registry.interventions import Intervention, InterventionBook
from erasure.store import Store, open_store
from erasure.store.grants import StoreRoles, apply_grants
from erasure.suppression import SuppressionList, Tombstone

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

PEPPER = Pepper(version=1, secret=b"\x11" * 32)
COMPONENTS = ("worker", "api", "ingest")


@pytest.fixture
def roles(postgres_url: str) -> Iterator[dict[str, str]]:
    """Three LOGIN roles (cluster-wide, so uniquely named), dropped with what they own."""
    suffix = uuid.uuid4().hex[:8]
    names = {c: f"erasure_{c}_{suffix}" for c in COMPONENTS}
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in names.values():
            conn.execute(sa.text(f'CREATE ROLE "{name}" LOGIN'))
    try:
        yield names
    finally:
        with admin.connect() as conn:
            for name in names.values():
                conn.execute(sa.text(f'DROP OWNED BY "{name}"'))
                conn.execute(sa.text(f'DROP ROLE IF EXISTS "{name}"'))
        admin.dispose()


def as_role(url: str, role: str) -> sa.Engine:
    return sa.create_engine(sa.make_url(url).set(username=role, password=None))


def grants_cli(url: str, roles: dict[str, str]) -> tuple[int, str]:
    saved = dict(os.environ)
    os.environ["ERASURE_STORE_URL"] = url
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = cli.main(
                [
                    "store", "grants", "--json",
                    "--worker-role", roles["worker"],
                    "--api-role", roles["api"],
                    "--ingest-role", roles["ingest"],
                ]
            )  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue()


def refused(engine: sa.Engine, sql: str, **params: object) -> str:
    """The database's refusal of `sql` (it must refuse)."""
    with pytest.raises(sa.exc.DBAPIError) as raised, engine.begin() as conn:
        conn.execute(sa.text(sql), params)
    return str(raised.value.orig)


def test_each_role_holds_only_its_share(postgres_url: str, roles: dict[str, str]) -> None:
    with open_store(postgres_url) as store:  # migrated by the owner, as the hook Job does
        SuppressionList(store).add(
            Tombstone.for_subject(PEPPER, "email", "gone@example.com", request_ref="REQ-1")
        )
    code, out = grants_cli(postgres_url, roles)
    assert code == 0
    granted = json.loads(out)["grants"]
    api = granted[f"api ({roles['api']})"]
    # UPDATE only where an OpenLineage event supersedes edges; raw events are never changed.
    assert api["UPDATE"] and all(t.startswith("lineage_") for t in api["UPDATE"])
    assert "lineage_events" not in api["UPDATE"]
    assert set(api["DELETE"]) == {"submissions", "sealed_notes", *api["UPDATE"]}
    assert granted[f"ingest ({roles['ingest']})"] == {
        "SELECT": ["alembic_version", "suppression_list"]
    }

    api_engine = as_role(postgres_url, roles["api"])
    worker_engine = as_role(postgres_url, roles["worker"])
    ingest_engine = as_role(postgres_url, roles["ingest"])
    try:
        # The API server reads everything, seals submissions, stores lineage events...
        with api_engine.begin() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM requests")).scalar_one() == 0
            conn.execute(
                sa.text(
                    "INSERT INTO submissions (handle, request_ref, sealed, sealed_at) "
                    "VALUES ('sub-1', 'REQ-9', 'vault:v1:x', :now)"
                ),
                {"now": datetime.now(UTC)},
            )
        # ...and notes a run or task set by hand, as its listener does.
        InterventionBook(Store(api_engine)).note(
            Intervention(
                request_ref="REQ-9",
                run_id="erasure-REQ-9",
                target="run",
                state="failed",
                by="ops",
                at=datetime.now(UTC),
            )
        )
        # ...but changes nothing a request, a plan, a tombstone or a record holds.
        for sql in (
            "UPDATE requests SET status = 'failed'",
            "DELETE FROM plans",
            "DELETE FROM action_log",
            "UPDATE interventions SET state = 'success'",
            "INSERT INTO suppression_list (subject_hash, pepper_version, identifier_type, "
            "created_at) VALUES (repeat('a', 64), 1, 'email', now())",
            "DELETE FROM suppression_list",
            "UPDATE completion_records SET body = '{}'",
            "TRUNCATE requests",
        ):
            assert "permission denied" in refused(api_engine, sql), sql

        # The worker does its DML, yet may only append tombstones and records (and their
        # triggers would refuse a change from anyone who could).
        with worker_engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM submissions WHERE handle = 'sub-1'"))
            conn.execute(sa.text("UPDATE requests SET status = status"))
        assert granted[f"worker ({roles['worker']})"]["DELETE"]
        for sql in (
            "DELETE FROM suppression_list",
            "UPDATE suppression_list SET pepper_version = 2",
            "DELETE FROM completion_records",
        ):
            assert "permission denied" in refused(worker_engine, sql), sql
        with worker_engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO suppression_list (subject_hash, pepper_version, "
                    "identifier_type, created_at) VALUES (repeat('b', 64), 1, 'email', now())"
                )
            )
        for sql in ("TRUNCATE suppression_list", "DROP TABLE plans", "CREATE TABLE x (a int)"):
            message = refused(worker_engine, sql)
            assert "permission denied" in message or "must be owner" in message, sql

        # CRM ingest reads the tombstones and nothing else.
        with ingest_engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM suppression_list")).scalar_one() == 2
        for sql in ("SELECT * FROM requests", "SELECT * FROM completion_records"):
            assert "permission denied" in refused(ingest_engine, sql), sql
        assert "permission denied" in refused(ingest_engine, "DELETE FROM suppression_list")
    finally:
        for engine in (api_engine, worker_engine, ingest_engine):
            engine.dispose()


def test_grants_run_again_revoke_what_was_added_by_hand(
    postgres_url: str, roles: dict[str, str]
) -> None:
    with open_store(postgres_url) as store:
        apply_grants(store, StoreRoles(**roles))
        with store.engine.begin() as conn:
            conn.execute(sa.text(f'GRANT UPDATE ON requests TO "{roles["api"]}"'))
        apply_grants(store, StoreRoles(**roles))  # idempotent: back to exactly its share
    api_engine = as_role(postgres_url, roles["api"])
    try:
        assert "permission denied" in refused(api_engine, "UPDATE requests SET status = 'x'")
    finally:
        api_engine.dispose()


def test_grants_refuse_what_would_not_separate(postgres_url: str, roles: dict[str, str]) -> None:
    with open_store(postgres_url) as store:
        shared = StoreRoles(worker=roles["worker"], api=roles["worker"], ingest=roles["ingest"])
        with pytest.raises(StoreError, match="three different roles"):
            apply_grants(store, shared)
        missing = StoreRoles(worker=roles["worker"], api="nobody_here", ingest=roles["ingest"])
        with pytest.raises(StoreError, match="no such Postgres role: nobody_here"):
            apply_grants(store, missing)


def test_grants_on_sqlite_say_there_are_no_roles(tmp_path: object) -> None:
    with (
        open_store(f"sqlite:///{tmp_path}/erasure.db") as store,
        pytest.raises(StoreError, match="has no roles"),
    ):
        apply_grants(store, StoreRoles(worker="w", api="a", ingest="i"))
