"""`erasure store grants`: each component's Postgres role gets only what it does.

Run by the store's owner (the migration role) after every `erasure store migrate`: it revokes
whatever the three roles held on the store's schema, then grants

- the worker role: SELECT, INSERT, UPDATE, DELETE on every table (the erasure steps, the
  reconciler, file lineage ingest and purge), except the append-only `completion_records`
  and `suppression_list`: SELECT and INSERT only (their triggers refuse a change anyway,
  whoever asks; the grant refuses it before the trigger is reached);
- the API server role: SELECT on every table; INSERT on `submissions` (the desk seals a
  request) and `sealed_notes` (a prompt's justification is sealed before Airflow stores the
  answer), and DELETE there (a submission whose run could not be created, or a note whose
  answer Airflow refused, is destroyed, never kept); INSERT on `interventions` (its
  listener notes a run or task set by hand); the lineage tables its OpenLineage endpoint
  writes (`lineage_events` INSERT only: raw events are immutable; the projection's tables
  INSERT, UPDATE, DELETE, since an event supersedes edges in the same transaction). No
  UPDATE or DELETE on anything else;
- the CRM ingest role: SELECT on `suppression_list` alone.

No role may TRUNCATE, create or alter anything. Postgres only: SQLite has no roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from erasure.errors import StoreError
from erasure.store.database import Store, store_errors

ALEMBIC_TABLE = "alembic_version"
RAW_LINEAGE_EVENTS = "lineage_events"
LINEAGE_PREFIX = "lineage_"
SUBMISSIONS = "submissions"
SEALED_NOTES = "sealed_notes"
INTERVENTIONS = "interventions"
SUPPRESSION = "suppression_list"
# What the worker only appends to: the records and tombstones (guarded by triggers too), the
# DPO's rulings and the interventions (hands-on run states): evidence nobody edits.
APPEND_ONLY = frozenset({"completion_records", SUPPRESSION, "rulings", INTERVENTIONS})
DML = ("SELECT", "INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True, slots=True)
class StoreRoles:
    """The Postgres role of each component (names of existing roles)."""

    worker: str
    api: str
    ingest: str

    def by_component(self) -> dict[str, str]:
        return {"worker": self.worker, "api": self.api, "ingest": self.ingest}


class Granted(BaseModel):
    """What one role may now do: table -> privileges (tables it may not touch are absent)."""

    model_config = ConfigDict(frozen=True)

    component: str
    role: str
    tables: dict[str, list[str]]


def privileges(component: str, table: str) -> tuple[str, ...]:
    """The privileges `component` ("worker", "api", "ingest") gets on `table`."""
    if table == ALEMBIC_TABLE:  # every process checks the schema revision at start
        return ("SELECT",)
    if component == "worker":
        return ("SELECT", "INSERT") if table in APPEND_ONLY else DML
    if component == "api":
        if table in (SUBMISSIONS, SEALED_NOTES):
            return ("SELECT", "INSERT", "DELETE")
        if table in (RAW_LINEAGE_EVENTS, INTERVENTIONS):
            return ("SELECT", "INSERT")
        if table.startswith(LINEAGE_PREFIX):
            return DML
        return ("SELECT",)
    if component == "ingest":
        return ("SELECT",) if table == SUPPRESSION else ()
    raise ValueError(f"unknown component {component!r}: worker, api or ingest")


def apply_grants(store: Store, roles: StoreRoles) -> list[Granted]:
    """Revoke what the roles held on the store's schema, then grant each its own share."""
    if store.dialect != "postgresql":
        raise StoreError(
            f"the erasure store at {store.url} is {store.dialect}, which has no roles: "
            "`erasure store grants` is for a Postgres store (run it as the store's owner)"
        )
    names = roles.by_component()
    if len(set(names.values())) != len(names):
        raise StoreError(
            "give the worker, the API server and CRM ingest three different roles: a shared "
            "role would hold the union of their rights"
        )
    with store_errors(store, "grant the components' privileges"), store.engine.begin() as conn:
        missing = _missing_roles(conn, names.values())
        if missing:
            raise StoreError(
                f"no such Postgres role: {', '.join(sorted(missing))}; create it first "
                "(CREATE ROLE ... LOGIN) or fix the --*-role option"
            )
        schema = str(conn.execute(sa.text("SELECT current_schema()")).scalar_one())
        tables = sorted(sa.inspect(conn).get_table_names(schema=schema))
        if ALEMBIC_TABLE not in tables:
            raise StoreError(
                f"the erasure store at {store.url} is not migrated: run `erasure store migrate` "
                "first, then `erasure store grants`"
            )
        quote = conn.dialect.identifier_preparer.quote
        q_schema = quote(schema)
        granted = []
        for component, role in names.items():
            q_role = quote(role)
            conn.execute(sa.text(f"REVOKE ALL ON ALL TABLES IN SCHEMA {q_schema} FROM {q_role}"))
            conn.execute(sa.text(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {q_schema} FROM {q_role}"))
            conn.execute(sa.text(f"GRANT USAGE ON SCHEMA {q_schema} TO {q_role}"))
            shares: dict[str, list[str]] = {}
            for table in tables:
                privs = privileges(component, table)
                if privs:
                    conn.execute(
                        sa.text(
                            f"GRANT {', '.join(privs)} ON {q_schema}.{quote(table)} TO {q_role}"
                        )
                    )
                    shares[table] = list(privs)
            if component != "ingest":  # inserts draw from the tables' sequences
                conn.execute(
                    sa.text(
                        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {q_schema} TO {q_role}"
                    )
                )
            granted.append(Granted(component=component, role=role, tables=shares))
    return granted


def _missing_roles(conn: sa.Connection, names: Iterable[str]) -> set[str]:
    wanted = set(names)
    found = conn.execute(
        sa.text("SELECT rolname FROM pg_roles WHERE rolname = ANY(:names)"),
        {"names": sorted(wanted)},
    ).scalars()
    return wanted - set(found)


def summary(granted: Iterable[Granted]) -> Mapping[str, dict[str, list[str]]]:
    """role -> privilege -> the tables it holds it on (for the command's output)."""
    out: dict[str, dict[str, list[str]]] = {}
    for share in granted:
        by_priv: dict[str, list[str]] = {}
        for table, privs in share.tables.items():
            for priv in privs:
                by_priv.setdefault(priv, []).append(table)
        out[f"{share.component} ({share.role})"] = by_priv
    return out
