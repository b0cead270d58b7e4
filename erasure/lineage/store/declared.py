"""Declared lineage sources (SQL, rebuild SQL, dbt): each stored per catalog scope with its
digest, so it is parsed again only when the digest changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.model import Gap, LineageEdge
from erasure.store.schema import lineage_sources


@dataclass(frozen=True)
class DeclaredSource:
    """One declared lineage source: its key, what it is, a digest, and how to parse it."""

    key: str  # e.g. "sql:/abs/path/marts.x.sql", "rebuild:warehouse/marts.x"
    kind: str  # "sql" | "rebuild_sql" | "dbt_manifest"
    digest: str  # of everything the parse depends on
    parse: Callable[[], tuple[list[LineageEdge], list[Gap]]]


def stored_declared(conn: Connection, scope: str) -> dict[str, Any]:
    """The stored declared sources of `scope`, by key."""
    query = sa.select(lineage_sources).where(lineage_sources.c.scope == scope)
    return {str(r.source_key): r for r in conn.execute(query)}


def declared_unchanged(known: Mapping[str, Any], sources: Sequence[DeclaredSource]) -> bool:
    """Whether `known` holds exactly `sources`, each with the same digest."""
    keys = {s.key for s in sources}
    return len(known) == len(keys) and all(
        s.key in known and known[s.key].digest == s.digest for s in sources
    )


def stored_gaps(text: str) -> list[Gap]:
    return [Gap.model_validate(g) for g in json.loads(text)]
