"""`erasure keys init|rotate-pepper`: the operator's Vault actions (see erasure.keys.bootstrap).

Run with the operator's Vault identity (ERASURE_VAULT_ADDR and ERASURE_VAULT_TOKEN, or
AppRole/Kubernetes auth through the other ERASURE_VAULT_* variables).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from erasure.config import Settings
from erasure.keys.bootstrap import initialise, rotate_pepper
from erasure.keys.vault import connect

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
