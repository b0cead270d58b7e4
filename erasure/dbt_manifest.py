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
    except (ValueError, AttributeError, TypeError, RecursionError) as exc:
        raise LineageError(
            f"{path}: not a dbt manifest.json ({type(exc).__name__}); run `dbt compile` and "
            "point lineage.dbt at target/manifest.json"
        ) from None
    return _well_formed(nodes), _well_formed(sources), adapter


def _well_formed(nodes: dict[Any, Any]) -> dict[str, Any]:
    """The nodes shaped as dbt writes them (a mapping with a string resource_type, a mapping
    config); one that is not is left out: it describes nothing and has no lineage."""
    return {
        str(uid): node
        for uid, node in nodes.items()
        if isinstance(node, dict)
        and isinstance(node.get("resource_type"), str)
        and isinstance(node.get("config") or {}, dict)
        and isinstance(node.get("depends_on") or {}, dict)
    }


def materialization(node: dict[str, Any]) -> str:
    """How a model is materialised (`view`, `table`, `incremental`, `ephemeral`, ...); a
    snapshot or seed is its own (`snapshot`, `seed`); "" for a model that does not say."""
    kind = str(node.get("resource_type") or "")
    if kind != "model":
        return kind
    return str((node.get("config") or {}).get("materialized") or "").lower()


def depends_on(node: Any) -> list[str]:
    """The unique ids of the nodes and sources a node reads, in the manifest's order."""
    if not isinstance(node, dict):
        return []
    nodes = (node.get("depends_on") or {}).get("nodes") or []
    return [str(n) for n in nodes] if isinstance(nodes, list) else []


def checksum(node: dict[str, Any]) -> str | None:
    """The checksum dbt keeps of a node's code."""
    found = node.get("checksum")
    value = found.get("checksum") if isinstance(found, dict) else None
    return value if isinstance(value, str) else None


def relation(node: dict[str, Any]) -> str | None:
    """`schema.alias` (`schema.identifier` for a source), lower-cased, as the catalog names it."""
    schema = node.get("schema")
    name = node.get("identifier") or node.get("alias") or node.get("name")
    if not isinstance(schema, str) or not isinstance(name, str) or not schema or not name:
        return None
    return f"{schema}.{name}".lower()


def catalog_columns(blob: bytes) -> dict[str, list[str]]:
    """The columns of each relation dbt's `catalog.json` (`dbt docs generate`) read from the
    warehouse, in their order, by `schema.name` and `database.schema.name`; empty when the
    file is not one."""
    try:
        document = json.loads(blob)
        entries = [
            *(document.get("sources") or {}).values(),
            *(document.get("nodes") or {}).values(),
        ]
    except (ValueError, AttributeError, TypeError, RecursionError):
        return {}
    found: dict[str, list[str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        meta, columns = entry.get("metadata") or {}, entry.get("columns") or {}
        if not isinstance(meta, dict) or not isinstance(columns, dict) or not columns:
            continue
        name = relation({"schema": meta.get("schema"), "name": meta.get("name")})
        if name is None:
            continue
        ordered = sorted(
            (c for c in columns.values() if isinstance(c, dict) and c.get("name")),
            key=_index,
        )
        names = [str(c["name"]).lower() for c in ordered]
        database = str(meta.get("database") or "").lower()
        for key in (name, f"{database}.{name}" if database else None):
            if key is not None:
                found.setdefault(key, names)
    return found


def _index(column: dict[str, Any]) -> int:
    index = column.get("index")
    return index if isinstance(index, int) else 0
