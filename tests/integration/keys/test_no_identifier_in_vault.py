"""Security invariant: no raw subject identifier in Vault key names or paths (DESIGN §6)."""

from __future__ import annotations

import uuid

import hvac
import hvac.exceptions
import pytest

from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import KvKeyStore, KvKeyStoreConfig, TransitKeyStore
from erasure.keys.keystore import TransitKeyStoreConfig as TransitConfig
from erasure.keys.pepper import PepperStore
from erasure.pseudonym import normalise, subject_hash

pytestmark = [pytest.mark.integration, pytest.mark.vault]

CANARY = "  Jane.Canary+Erasure-Test@Example.COM "


def _list_tree(client: hvac.Client, path: str) -> list[str]:
    """Every path below `path` (a LIST-able prefix ending in '/'), depth first."""
    try:
        keys = client.list(path)
    except hvac.exceptions.InvalidPath:
        return []
    found: list[str] = []
    for key in (keys or {}).get("data", {}).get("keys", []):
        found.append(path + key)
        if key.endswith("/"):
            found.extend(_list_tree(client, path + key))
    return found


def test_canary_identifier_never_appears_in_vault_names_or_paths(vault: hvac.Client) -> None:
    suffix = uuid.uuid4().hex[:8]
    kv = KvKeyStore(KvKeyStoreConfig(mount=f"canary-kv-{suffix}"), vault)
    transit = TransitKeyStore(TransitConfig(mount=f"canary-transit-{suffix}"), vault)
    kv.ensure_mount()
    transit.ensure_mount()
    pepper = PepperStore(vault, mount=kv.mount).initialise()
    normalised = normalise("email", CANARY)
    hashed = subject_hash(pepper, "email", normalised)
    other = subject_hash(pepper, "email", normalise("email", "someone.else@example.org"))

    for store in (kv, transit):
        cipher = EnvelopeCipher(store)
        for subject in (hashed, other):
            store.create(subject, dataset="lake.events")
            cipher.encrypt(subject, "lake.events", b"payload")
        cipher.shred(hashed)  # one shredded, one kept: both states are checked

    paths = _list_tree(vault, f"{kv.mount}/metadata/") + _list_tree(vault, f"{transit.mount}/keys/")
    mounts = list(vault.sys.list_mounted_secrets_engines()["data"])
    names = kv.list_key_names() + transit.list_key_names()

    assert any(other in p for p in paths)  # the listing does see subject keys
    assert f"{kv.mount}/metadata/pepper" in paths
    forbidden = {
        CANARY,
        CANARY.strip(),
        normalised,
        normalised.split("@")[0],
        f"email:{normalised}",
    }
    for text in paths + mounts + names:
        lowered = text.lower()
        for value in forbidden:
            assert value.lower() not in lowered, f"identifier found in Vault path {text!r}"
    # And the shredded subject's hash is gone as well.
    assert not any(hashed in p for p in paths + names)
