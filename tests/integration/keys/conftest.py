"""Key-store fixtures over the session OpenBao; every test gets its own mounts."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import hvac
import pytest

from erasure.keys.keystore import (
    KvKeyStore,
    KvKeyStoreConfig,
    SubjectKeyStore,
    TransitKeyStore,
    TransitKeyStoreConfig,
)
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, ensure_kv_v2
from erasure.pseudonym import Pepper, normalise, subject_hash


@pytest.fixture(scope="session")
def vault(openbao: EmbeddedOpenBao) -> hvac.Client:
    """A root client on the session server."""
    return openbao.client()


def unique_mount(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kv_store(vault: hvac.Client) -> KvKeyStore:
    store = KvKeyStore(KvKeyStoreConfig(mount=unique_mount("kv")), vault)
    store.ensure_mount()
    return store


@pytest.fixture
def transit_store(vault: hvac.Client) -> TransitKeyStore:
    store = TransitKeyStore(TransitKeyStoreConfig(mount=unique_mount("transit")), vault)
    store.ensure_mount()
    return store


@pytest.fixture(params=["kv", "transit"])
def keystore(request: pytest.FixtureRequest, vault: hvac.Client) -> SubjectKeyStore:
    """Each test using it runs against both backends."""
    fixture = "kv_store" if request.param == "kv" else "transit_store"
    store: SubjectKeyStore = request.getfixturevalue(fixture)
    return store


@pytest.fixture
def pepper(vault: hvac.Client) -> Pepper:
    """The current pepper of a fresh pepper store."""
    mount = unique_mount("pepper")
    ensure_kv_v2(vault, mount)
    return PepperStore(vault, mount=mount).initialise()


@pytest.fixture
def new_subject(pepper: Pepper) -> Callable[[], str]:
    """Hashes of fresh email subjects under the test's pepper."""

    def make() -> str:
        email = normalise("email", f"Subject.{uuid.uuid4().hex}@Example.org")
        return subject_hash(pepper, "email", email)

    return make
