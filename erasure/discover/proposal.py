"""The catalog YAML a discovery proposes, for a person to review and paste: new entries,
holds_subject for catalogued tables, and what is shown but not proposed as comments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from erasure.catalog import Catalog, DatasetSpec
from erasure.discover.findings import Finding, Status
from erasure.model import DatasetRef

_NOT_ADDED_WHY = {
    Status.NAME_ONLY: "check what it holds",
    Status.VALUES_ONLY: "add it by hand if it is the row's subject's",
    Status.OTHER_PARTY: "leave it out, or declare it under `references` if it points at "
    "another dataset's row",
}


def _catalog_yaml(
    catalog: Catalog,
    connection: str,
    findings: Sequence[Finding],
    kinds: Mapping[DatasetRef, str],
) -> str:
    """Proposed catalog entries as YAML a person reviews and pastes: a new entry per table the
    catalog has none of its own for, and for a catalogued table its holds_subject to replace
    the entry's. What is shown but not proposed is a comment."""
    wanted: dict[DatasetRef, list[Finding]] = {}
    for f in findings:
        if f.status in (Status.PROPOSED, *_NOT_ADDED_WHY):
            wanted.setdefault(f.dataset, []).append(f)
    out = [
        f"# holds_subject proposed by `erasure catalog discover --connection {connection}`.",
        "# Review every column first: each one is searched and erased for every request.",
    ]
    new: list[str] = []
    unlisted: list[str] = []  # tables with nothing proposed: comments only
    merges: list[str] = []
    for ref, found in sorted(wanted.items()):
        add: dict[str, list[str]] = {}
        held_back = []
        for f in found:
            if f.status is Status.PROPOSED:
                add.setdefault(f.identifier_type, []).append(f.column)
            else:
                held_back.append(
                    f"# not added: {f.identifier_type}: [{f.column}]  "
                    f"({f.evidence}: {_NOT_ADDED_WHY[f.status]})"
                )
        entry = catalog.entry(ref)
        if entry is not None:
            merged = {t: list(cols) for t, cols in entry.holds_subject.items()}
            for id_type, columns in add.items():
                merged.setdefault(id_type, [])
                merged[id_type] += [c for c in columns if c not in merged[id_type]]
            merges.append(f"# {ref.name}:")
            if add:
                flow = yaml.safe_dump(
                    {"holds_subject": merged},
                    default_flow_style=True,
                    allow_unicode=True,
                    width=_ONE_LINE,
                )
                merges.append(f"#   {flow.strip()[1:-1]}")
            merges += [f"#   {line}" for line in held_back]
            continue
        if add:
            described = catalog.dataset(ref)
            source = catalog.description(ref)
            body, why = _new_entry(
                ref,
                connection,
                described,
                source.source if source is not None else None,
                kinds.get(ref, "table"),
                add,
            )
            dumped = yaml.safe_dump(
                [body], sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
            )
            new += [f"  {line}" for line in dumped.splitlines()]
            new += [f"    {line}" for line in why + held_back]
        else:
            unlisted += [f"# {ref.name}:"] + [f"#   {line}" for line in held_back]
    if new:
        out += ["datasets:", *new]
    if unlisted:
        out += ["", "# Not in the catalog, nothing proposed:", *unlisted]
    if merges:
        out += ["", "# Already in the catalog: give their entries this holds_subject.", *merges]
    if not new and not merges and not unlisted:
        out.append("# Nothing to add.")
    return "\n".join(out) + "\n"


def _new_entry(
    ref: DatasetRef,
    connection: str,
    described: DatasetSpec | None,
    source: str | None,
    kind: str,
    holds: dict[str, list[str]],
) -> tuple[dict[str, Any], list[str]]:
    """A new entry of its own, and comments on it. For a table a default or a dbt manifest
    describes, only what says how its rows are kept comes along (kind, storage, encryption,
    retention, owner): never its rebuild, whose paths are one machine's and whose node is
    the manifest's to say, since an entry of its own replaces that description."""
    body: dict[str, Any] = {
        "namespace": ref.namespace,
        "name": ref.name,
        "connection": connection,
        "kind": kind,
    }
    why: list[str] = []
    if described is not None:
        kept = described.model_dump(
            mode="json",
            include={"kind", "storage", "encryption", "retention_days", "owner"},
            exclude_defaults=True,
            exclude_none=True,
        )
        body.update(kept)
        body["kind"] = described.kind.value
        body["connection"] = described.connection or connection
        if described.rebuild is not None or described.aggregate is not None:
            how = described.rebuild.kind if described.rebuild is not None else "aggregate"
            why.append(
                f"# {source or 'a description'} rebuilds it ({how}); this entry replaces that "
                "description and has no rebuild: its rows would be erased directly. Add the "
                "rebuild by hand, or leave the table to its rebuild and do not paste this."
            )
    body["holds_subject"] = {t: sorted(cols) for t, cols in sorted(holds.items())}
    return body, why


_ONE_LINE = 1_000_000  # a YAML line width no holds_subject reaches: one comment line
