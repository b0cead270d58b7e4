"""Registering a request (`erasure.registry.registration`) on SQLite, with an in-memory key store
standing in for Vault (tests/integration/test_requests_vault.py runs the same paths against a
real OpenBao): the hash recorded, the secret parked, the clock started, once per ref."""

from __future__ import annotations

from datetime import date

import pytest
import sqlalchemy as sa

from erasure.catalog import Catalog
from erasure.errors import RequestError, SubjectError
from erasure.pseudonym import Pepper, subject_hash
from erasure.registry.requests import RequestStatus
from erasure.registry.secrets import request_key_hash
from erasure.store import Store
from erasure.store.schema import requests
from erasure.submission import LegalGround
from tests.unit.registry.support import (
    CANARY_NORMALISED,
    CATALOG,
    MemoryKeyStore,
    dump_store,
    request,
)
from tests.unit.registry_support import Books, register


def test_register_records_the_hash_parks_the_secret_and_starts_the_clock(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore, store: Store
) -> None:
    done = register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")

    pepper = Pepper(version=1, secret=b"\x11" * 32)
    assert done.created and done.status is RequestStatus.REGISTERED
    assert done.owner_run_id == "erasure-REQ-1"
    assert done.subject_hash == subject_hash(pepper, "email", CANARY_NORMALISED)
    record = registry.requests.get("REQ-1")
    assert record is not None
    assert (record.received_on, record.due_on) == (date(2026, 1, 10), date(2026, 2, 9))
    assert record.effective_due_on == date(2026, 2, 9)
    assert record.legal_ground is LegalGround.ART17_1_B and record.pepper_version == 1
    # The request key is named by an HMAC of the ref: neither ref nor identifier in its name.
    assert list(keys.keys) == [request_key_hash(pepper, "REQ-1")]
    assert "REQ-1" not in keys.list_key_names()[0]
    assert CANARY_NORMALISED not in dump_store(store)


def test_register_is_idempotent_on_request_ref(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore, store: Store
) -> None:
    first = register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")
    registry.requests.set_status("REQ-1", RequestStatus.PLANNED)
    again = register(registry, request(), catalog=catalog, run_id="manual__2026-01-11")

    assert not again.created
    assert again.owner_run_id == "erasure-REQ-1"  # "already handled by run erasure-REQ-1"
    assert again.status is RequestStatus.PLANNED
    assert again.subject_hash == first.subject_hash
    assert len(keys.keys) == 1
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(requests)).scalar() == 1


def test_a_ref_reused_for_another_subject_is_refused(registry: Books, catalog: Catalog) -> None:
    register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")
    with pytest.raises(RequestError, match="already registered for another subject") as err:
        register(
            registry, request(identifier="other.person@example.org"), catalog=catalog, run_id="r2"
        )
    assert "other.person" not in str(err.value)
    with pytest.raises(RequestError, match="another subject"):
        register(
            registry,
            request(identifier_type="customer_id", identifier="C1"),
            catalog=catalog,
            run_id="r3",
        )


def test_a_concurrent_registration_that_won_is_reported_not_duplicated(
    registry: Books, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")
    # The other run inserted between our look-up and our insert: the insert must not win.
    monkeypatch.setattr(registry.requests, "get", lambda ref: None)
    again = register(registry, request(), catalog=catalog, run_id="erasure-REQ-1-retry")
    assert (again.created, again.owner_run_id) == (False, "erasure-REQ-1")


def test_unknown_type_and_malformed_identifier_are_refused_without_echo(
    registry: Books, catalog: Catalog
) -> None:
    # Refused where the identifier is normalised, before anything is registered.
    with pytest.raises(SubjectError, match="allowed: customer_id, email") as err:
        register(registry, request(identifier_type="passport"), catalog=catalog, run_id="r")
    assert "anary" not in str(err.value)
    with pytest.raises(SubjectError) as malformed:
        register(registry, request(identifier="no-at-sign-SECRET"), catalog=catalog, run_id="r")
    assert "SECRET" not in str(malformed.value)
    assert registry.requests.list() == []


def test_a_catalog_identifier_type_named_request_is_refused(registry: Books) -> None:
    clash = Catalog.model_validate(
        {**CATALOG, "identifiers": {**CATALOG["identifiers"], "request": {"normalise": "strip"}}}
    )
    with pytest.raises(RequestError, match="reserved for request-scoped keys"):
        register(registry, request(), catalog=clash, run_id="r")
