"""The operator's Vault actions: set the erasure mounts and long-lived keys up, rotate the pepper.

Under the least-privilege policies (helm/vault/policies) only the `erasure-operator` identity
may do these; workers and the API server only use what they create. Idempotent: a second
`initialise` changes nothing and says so.
"""

from __future__ import annotations

import hvac
from pydantic import BaseModel, ConfigDict

from erasure.audit.signing import DEFAULT_KEY_NAME, TransitSigner
from erasure.config import Settings
from erasure.errors import ConfigError, VaultError
from erasure.keys.keystore import keystore_from_settings
from erasure.keys.pepper import PepperStore, would_orphan
from erasure.keys.vault import address_of, ensure_kv_v2, ensure_transit, is_not_found, vault_errors

# The transit key the API server seals submissions with (encrypt only) and workers open.
SUBMISSIONS_KEY = "submissions"
SUBMISSIONS_KEY_TYPE = "aes256-gcm96"


class Bootstrap(BaseModel):
    """What `initialise` found or created; `created` lists what this call added."""

    model_config = ConfigDict(frozen=True)

    address: str
    kv_mount: str
    transit_mount: str
    signing_key: str
    submissions_key: str
    pepper_version: int
    created: list[str]


def initialise(client: hvac.Client, settings: Settings) -> Bootstrap:
    """Enable both mounts, create the signing and submissions keys and pepper v1 if absent."""
    kv, transit = settings.vault_kv_mount, settings.vault_transit_mount
    created: list[str] = []
    if ensure_kv_v2(client, kv):
        created.append(f"mount {kv} (kv v2)")
    if ensure_transit(client, transit):
        created.append(f"mount {transit} (transit)")
    signer = TransitSigner(client, transit, DEFAULT_KEY_NAME)
    had_signing_key = bool(signer.public_keys())
    signer.ensure_key()
    if not had_signing_key:
        created.append(f"key {signer.key_id} (ed25519, non-exportable)")
    if ensure_submissions_key(client, transit):
        created.append(f"key transit:{transit}/keys/{SUBMISSIONS_KEY} ({SUBMISSIONS_KEY_TYPE})")
    peppers = PepperStore(client, kv)
    had_pepper = peppers.exists()
    if not had_pepper and (keys := keystore_from_settings(settings, client).list_key_names()):
        raise would_orphan(peppers.location, [f"{len(keys)} per-subject key(s)"])
    pepper = peppers.initialise()
    if not had_pepper:
        created.append(f"pepper {peppers.location} version {pepper.version}")
    return Bootstrap(
        address=address_of(client),
        kv_mount=kv,
        transit_mount=transit,
        signing_key=signer.key_id,
        submissions_key=f"transit:{transit}/keys/{SUBMISSIONS_KEY}",
        pepper_version=pepper.version,
        created=created,
    )


def rotate_pepper(client: hvac.Client, settings: Settings) -> int:
    """Add a pepper version (new requests hash under it; old versions stay); its number."""
    peppers = PepperStore(client, settings.vault_kv_mount)
    if not peppers.exists():
        raise ConfigError(
            f"there is no pepper at {peppers.location} yet: run `erasure keys init` first"
        )
    return peppers.rotate().version


def ensure_submissions_key(client: hvac.Client, mount: str) -> bool:
    """Create the submissions key unless present; True if created. Refuses a leaky one."""
    address = address_of(client)
    key_id = f"transit:{mount}/keys/{SUBMISSIONS_KEY}"
    with vault_errors(address, f"read {key_id}"):
        try:
            info = client.secrets.transit.read_key(name=SUBMISSIONS_KEY, mount_point=mount)["data"]
        except hvac.exceptions.VaultError as exc:
            if not is_not_found(exc, "not found", "no existing key"):
                raise
            info = None
    if info is None:
        with vault_errors(address, f"create {key_id}"):
            client.secrets.transit.create_key(
                name=SUBMISSIONS_KEY,
                key_type=SUBMISSIONS_KEY_TYPE,
                exportable=False,
                allow_plaintext_backup=False,
                mount_point=mount,
            )
        return True
    if info.get("exportable") or info.get("allow_plaintext_backup"):
        raise VaultError(
            f"{key_id} at {address} is exportable or allows plaintext backup: a copy of it "
            "could open every sealed submission; create a new non-exportable key"
        )
    return False
