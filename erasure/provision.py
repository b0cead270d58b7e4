"""`erasure keys init|rotate-pepper`: the operator's Vault actions. They set the erasure mounts
and long-lived keys up (the signing key of erasure.audit.signing, the submissions key of
erasure.intake, pepper v1 of erasure.keys.pepper) and rotate the pepper.

Under the least-privilege policies (helm/vault/policies) only the `erasure-operator` identity
may do these; workers and the API server only use what they create. Idempotent: a second
`initialise` changes nothing and says so. Run with the operator's Vault identity
(ERASURE_VAULT_ADDR and ERASURE_VAULT_TOKEN, or AppRole/Kubernetes auth through the other
ERASURE_VAULT_* variables).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import hvac
import hvac.exceptions
from pydantic import BaseModel, ConfigDict

from erasure.audit.anchor import VaultAnchorBoard
from erasure.audit.signing import DEFAULT_KEY_NAME, TransitSigner
from erasure.config import Settings
from erasure.errors import ConfigError
from erasure.intake import SUBMISSIONS_KEY, SUBMISSIONS_KEY_TYPE, ensure_submissions_key
from erasure.keys.keystore import keystore_from_settings
from erasure.keys.pepper import PepperStore, would_orphan
from erasure.keys.vault import (
    address_of,
    connect,
    ensure_kv_v2,
    ensure_transit,
)


class Bootstrap(BaseModel):
    """What `initialise` found or created; `created` lists what this call added."""

    model_config = ConfigDict(frozen=True)

    address: str
    kv_mount: str
    transit_mount: str
    signing_key: str
    submissions_key: str
    pepper_version: int
    anchor: str  # where the ledger publishes the chain heads
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
    board = VaultAnchorBoard(client, kv, settings.vault_anchor_path)
    return Bootstrap(
        address=address_of(client),
        kv_mount=kv,
        transit_mount=transit,
        signing_key=signer.key_id,
        submissions_key=f"transit:{transit}/keys/{SUBMISSIONS_KEY}",
        pepper_version=pepper.version,
        anchor=board.location,
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


Handler = Callable[[argparse.Namespace], int]


def add_keys_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `keys init` and `keys rotate-pepper` to the `erasure` command's subparsers."""
    keys = subparsers.add_parser("keys", help="operator: Vault mounts, long-lived keys, pepper")
    sub = keys.add_subparsers(metavar="WHAT")
    init = sub.add_parser(
        "init", help="enable the mounts, create the signing and submissions keys and pepper v1"
    )
    init.add_argument("--json", action="store_true")
    init.set_defaults(handler=_init)
    rotate = sub.add_parser("rotate-pepper", help="add a pepper version (old ones stay)")
    rotate.add_argument("--json", action="store_true")
    rotate.set_defaults(handler=_rotate)


def _init(args: argparse.Namespace) -> int:
    settings = Settings()
    result = initialise(connect(settings), settings)
    if args.json:
        print(result.model_dump_json(indent=2))
        return 0
    print(f"Vault at {result.address}:")
    for item in result.created:
        print(f"  created {item}")
    if not result.created:
        print("  nothing to create: mounts, keys and pepper were already there")
    print(f"  signing key {result.signing_key}")
    print(f"  submissions key {result.submissions_key}")
    print(f"  pepper {result.kv_mount}/pepper at version {result.pepper_version}")
    print(f"  chain heads are published at {result.anchor}")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    settings = Settings()
    version = rotate_pepper(connect(settings), settings)
    if args.json:
        print(json.dumps({"pepper_version": version}))
    else:
        print(
            f"pepper {settings.vault_kv_mount}/pepper is now at version {version}; new requests "
            "hash under it, tombstones of earlier versions still match"
        )
    return 0
