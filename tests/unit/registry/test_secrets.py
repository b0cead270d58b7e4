"""The parked secret (`erasure.registry.secrets`): the identifier and notes sealed under a
request-scoped key, read back, updated with expanded identities, and destroyed for good."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.errors import DecryptionError, RequestError
from erasure.model import Action, DatasetRef, Identity
from erasure.registry.secrets import ParkedSecret
from erasure.store import Store
from erasure.store.schema import request_secrets
from tests.unit.registry.support import (
    CANARY,
    CANARY_NORMALISED,
    MemoryKeyStore,
    Peppers,
    dump_store,
    plan_for,
    request,
)
from tests.unit.registry_support import Books, books_for, register


def test_unpark_returns_identifier_notes_and_the_normalised_identity(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(notes="her husband asked too"), catalog=catalog, run_id="r")
    parked = registry.secrets.unpark("REQ-1")
    assert parked.identifier.get_secret_value() == CANARY
    assert parked.notes is not None and parked.notes.get_secret_value() == "her husband asked too"
    assert parked.identities == [Identity("email", CANARY_NORMALISED)]
    assert CANARY_NORMALISED not in repr(parked) and "husband" not in str(parked)


def test_update_parked_keeps_the_expanded_identities_and_reference_keys(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    parked = registry.secrets.unpark("REQ-1")
    expanded = parked.model_copy(
        update={
            "identities": [*parked.identities, Identity("customer_id", "C7")],
            "reference_keys": {"crm.addresses": ["12", "3"]},
        }
    )
    registry.secrets.update("REQ-1", expanded)

    again = registry.secrets.unpark("REQ-1")
    assert set(again.identities) == {
        Identity("email", CANARY_NORMALISED),
        Identity("customer_id", "C7"),
    }
    assert again.reference_keys == {"crm.addresses": ["12", "3"]}
    assert again.identifier.get_secret_value() == CANARY


def test_destroy_secrets_shreds_the_key_and_drops_the_blob_once(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore, store: Store
) -> None:
    register(registry, request(notes=f"also known as {CANARY}"), catalog=catalog, run_id="r")
    first = registry.secrets.destroy("REQ-1")

    assert not first.already_absent and keys.keys == {}
    record = registry.requests.get("REQ-1")
    assert record is not None and record.secrets_destroyed_at == first.shredded_at
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(request_secrets)).scalar() == 0
    with pytest.raises(RequestError, match="no longer holds the identifier"):
        registry.secrets.unpark("REQ-1")
    with pytest.raises(RequestError, match="destroyed"):
        registry.secrets.update("REQ-1", ParkedSecret(identifier=SecretStr("x")))

    second = registry.secrets.destroy("REQ-1")  # idempotent
    assert second.already_absent
    again = registry.requests.get("REQ-1")
    assert again is not None and again.secrets_destroyed_at == first.shredded_at


def test_a_key_lost_behind_the_registry_makes_unpark_fail_to_decrypt(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    keys.keys.clear()  # e.g. a shred that crashed before the store recorded it
    with pytest.raises(DecryptionError, match="cannot be decrypted"):
        registry.secrets.unpark("REQ-1")


def test_the_request_key_survives_a_pepper_rotation(
    registry: Books, catalog: Catalog, peppers: Peppers, keys: MemoryKeyStore
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    peppers.rotate()
    fresh = books_for(registry.store, keys, peppers)

    assert fresh.secrets.unpark("REQ-1").identifier.get_secret_value() == CANARY
    assert not register(fresh, request(), catalog=catalog, run_id="r2").created
    assert not fresh.secrets.destroy("REQ-1").already_absent
    assert keys.keys == {}


def test_canary_is_nowhere_in_the_store_after_register_and_destroy(
    registry: Books, catalog: Catalog, store: Store
) -> None:
    register(registry, request(notes=f"mail {CANARY} back"), catalog=catalog, run_id="r")
    parked = registry.secrets.unpark("REQ-1")
    registry.secrets.update(
        "REQ-1", parked.model_copy(update={"identities": [Identity("customer_id", "C-CANARY")]})
    )
    registry.plans.save("REQ-1", plan_for(registry.requests.get("REQ-1").subject_hash), 1)  # type: ignore[union-attr]
    registry.action_log.record("REQ-1", DatasetRef("w", "crm.customers"), Action.ERASE_ROWS, "done")
    sealed = dump_store(store)
    registry.secrets.destroy("REQ-1")
    dumped = dump_store(store)

    for text in (sealed, dumped):
        for needle in (CANARY, CANARY.strip(), CANARY_NORMALISED, "C-CANARY", "mail "):
            assert needle not in text
            assert needle.lower() not in text.lower()


def test_parked_identities_accept_plain_pairs() -> None:
    parked = ParkedSecret(identifier=SecretStr("x"), identities=[("email", "a@b.c")])
    assert parked.identities == [Identity("email", "a@b.c")]
