"""Reading a dbt project's `manifest.json` (what `dbt compile` writes): its nodes, how each is
materialised and the relation it names. The catalog describes datasets from it and the
lineage reads edges from it (erasure.lineage.dbt); neither needs more of dbt than this.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from erasure.errors import LineageError

# Nodes that are (or, ephemeral, stand for) a relation in the warehouse.
MATERIALISED = frozenset({"model", "snapshot", "seed"})


def parse_manifest(path: Path, blob: bytes) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A manifest's nodes, sources and adapter type; LineageError if it is none."""
    try:
        manifest = json.loads(blob)
        nodes: dict[str, Any] = manifest.get("nodes") or {}
        sources: dict[str, Any] = manifest.get("sources") or {}
        adapter = str((manifest.get("metadata") or {}).get("adapter_type") or "")
        if not isinstance(nodes, dict) or not isinstance(sources, dict):
            raise TypeError("nodes")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError, TypeError) as exc:
        raise LineageError(
            f"{path}: not a dbt manifest.json ({type(exc).__name__}); run `dbt compile` and "
            "point lineage.dbt at target/manifest.json"
        ) from None
    nodes = {uid: node for uid, node in nodes.items() if isinstance(node, dict)}
    sources = {uid: node for uid, node in sources.items() if isinstance(node, dict)}
    return nodes, sources, adapter


def materialization(node: dict[str, Any]) -> str:
    """How a model is materialised (`view`, `table`, `incremental`, `ephemeral`, ...); a
    snapshot or seed is its own (`snapshot`, `seed`); "" for a model that does not say."""
    kind = str(node.get("resource_type") or "")
    if kind != "model":
        return kind
    return str((node.get("config") or {}).get("materialized") or "").lower()


def relation(node: dict[str, Any]) -> str | None:
    """`schema.alias` (`schema.identifier` for a source), lower-cased, as the catalog names it."""
    schema = node.get("schema")
    name = node.get("identifier") or node.get("alias") or node.get("name")
    if not schema or not name:
        return None
    return f"{schema}.{name}".lower()
