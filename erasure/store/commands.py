"""`erasure store migrate|check|grants`: the erasure store's schema and roles, for deployments.

`migrate` is what the Helm chart's hook Job runs before the new version's pods start, with a
role that may run DDL; day-to-day roles then never need to. `grants` then gives the worker,
API server and CRM ingest roles each only their share (erasure.store.grants). `check` exits 1
while the store is behind the code (an init container can wait on it). The store is
ERASURE_STORE_URL.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from erasure.config import Settings
from erasure.store.database import head_revision, open_store, upgrade
from erasure.store.grants import StoreRoles, apply_grants, summary

EXIT_BEHIND = 1

Handler = Callable[[argparse.Namespace], int]


def add_store_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `store migrate` and `store check` to the `erasure` command's subparsers."""
    store = subparsers.add_parser("store", help="the erasure store's schema (Alembic)")
    sub = store.add_subparsers(metavar="WHAT")
    migrate = sub.add_parser("migrate", help="migrate the store to the newest schema")
    migrate.add_argument("--json", action="store_true")
    migrate.set_defaults(handler=_migrate)
    check = sub.add_parser("check", help="exit 0 if the store is at the newest schema, else 1")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=_check)
    grants = sub.add_parser(
        "grants",
        help="as the store's owner, after migrate: give each component's Postgres role only "
        "its own privileges",
    )
    grants.add_argument("--worker-role", required=True, help="role of the Airflow workers")
    grants.add_argument("--api-role", required=True, help="role of the Airflow API server")
    grants.add_argument("--ingest-role", required=True, help="role of the crm_ingest tasks")
    grants.add_argument("--json", action="store_true")
    grants.set_defaults(handler=_grants)


def _migrate(args: argparse.Namespace) -> int:
    with open_store(Settings().store_url, migrate=False) as store:
        before = store.revision()
        if before != head_revision():
            upgrade(store)
        after = store.revision()
        shown = store.url
    if args.json:
        print(json.dumps({"store": shown, "from": before, "to": after}))
    elif before == after:
        print(f"erasure store {shown} is at {after}: nothing to migrate")
    else:
        print(f"erasure store {shown} migrated from {before or 'empty'} to {after}")
    return 0


def _check(args: argparse.Namespace) -> int:
    with open_store(Settings().store_url, migrate=False) as store:
        current, shown = store.revision(), store.url
    head = head_revision()
    if args.json:
        print(json.dumps({"store": shown, "revision": current, "head": head}))
    else:
        state = "up to date" if current == head else "behind: run `erasure store migrate`"
        print(f"erasure store {shown} is at {current or 'empty'}, code at {head}: {state}")
    return 0 if current == head else EXIT_BEHIND


def _grants(args: argparse.Namespace) -> int:
    roles = StoreRoles(worker=args.worker_role, api=args.api_role, ingest=args.ingest_role)
    with open_store(Settings().store_url, migrate=False) as store:
        granted = apply_grants(store, roles)
        shown = store.url
    table = summary(granted)
    if args.json:
        print(json.dumps({"store": shown, "grants": table}, indent=2))
        return 0
    print(f"erasure store {shown}: privileges granted (everything else revoked)")
    for role, by_priv in table.items():
        print(f"  {role}:")
        for priv, tables in sorted(by_priv.items()):
            print(f"    {priv}: {', '.join(tables)}")
    return 0
