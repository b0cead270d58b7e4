"""The pepper store: created once, rotated, every version kept for the suppression filter."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import hvac
import pytest

from erasure.errors import VaultError
from erasure.keys.pepper import PepperMissing, PepperStore
from erasure.pseudonym import subject_hash

pytestmark = [pytest.mark.integration, pytest.mark.vault]


@pytest.fixture
def store(vault: hvac.Client) -> PepperStore:
    pepper_store = PepperStore(vault, mount=f"pepper-{uuid.uuid4().hex[:8]}")
    pepper_store.ensure_mount()
    return pepper_store


def test_a_missing_pepper_fails_closed_until_initialised(store: PepperStore) -> None:
    for read in (store.current, store.all_versions, store.rotate):
        with pytest.raises(PepperMissing, match=r"no pepper at .*`erasure keys init`"):
            read()
    assert not store.exists()


def test_initialising_creates_version_one(store: PepperStore) -> None:
    first = store.initialise()
    assert first.version == 1 and len(first.secret) == 32
    assert store.initialise() == first
    assert store.current() == first
    assert store.all_versions() == [first]
    assert "secret=<redacted>" in repr(first)


def test_concurrent_first_use_agrees_on_one_pepper(store: PepperStore) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        peppers = set(pool.map(lambda _: store.initialise(), range(16)))
    assert len(peppers) == 1


def test_rotation_keeps_every_version(store: PepperStore) -> None:
    first = store.initialise()
    second = store.rotate()
    assert second.version == 2 and second.secret != first.secret
    assert store.current() == second
    assert store.all_versions() == [first, second]
    # A tombstone hashed under version 1 still matches after the rotation.
    tombstone = subject_hash(first, "email", "jane@example.org")
    assert tombstone in {subject_hash(p, "email", "jane@example.org") for p in store.all_versions()}


def test_more_rotations_than_kv_keeps_by_default(store: PepperStore) -> None:
    """KV v2 keeps 10 versions unless told otherwise; no pepper may be pruned."""
    first = store.initialise()
    for _ in range(12):
        store.rotate()
    versions = store.all_versions()
    assert [p.version for p in versions] == list(range(1, 14))
    assert versions[0] == first


def test_a_pruned_version_is_reported_not_silently_skipped(
    vault: hvac.Client, store: PepperStore
) -> None:
    store.initialise()
    store.rotate()
    vault.secrets.kv.v2.update_metadata(
        path="pepper", max_versions=1, mount_point=store.location.split("/")[0]
    )
    store.rotate()  # KV now prunes versions 1 and 2
    with pytest.raises(VaultError, match=r"pepper versions \[1, 2\].*pruned"):
        store.all_versions()
