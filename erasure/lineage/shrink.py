"""Outputs whose observed inputs shrank: the lineage stopped saying what the rows hold.

A later run that lists fewer inputs, or a FAIL that withdraws what a run published, changes
today's lineage, not the output: the rows the missing inputs fed are still there until the
output's retention passes. Each such output is a `lineage_shrank` gap, so the DPO learns of
it instead of the plan dropping the output silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from erasure.lineage.graph import LineageGraph, RetainedView, is_valid
from erasure.model import DatasetRef, EdgeOrigin, Gap, GapKind


@dataclass(frozen=True)
class _LastSeen:
    until: datetime  # when the input was last part of the producer's lineage
    run_id: str | None
    run_state: str | None


def shrink_gaps(
    graph: LineageGraph, datasets: Iterable[DatasetRef], view: RetainedView
) -> list[Gap]:
    """One gap per (producer, output) among `datasets` whose observed inputs in the erasure
    view include some its current lineage (`view.current`) no longer has."""
    candidates = getattr(graph, "ended_into", None)
    changed = None if candidates is None else candidates(view)
    gaps: list[Gap] = []
    for ds in dict.fromkeys(datasets):
        if changed is not None and ds not in changed:
            continue
        seen: dict[str, dict[DatasetRef, _LastSeen]] = {}
        current: dict[str, set[DatasetRef]] = {}
        for edge in graph.edges_into(ds, as_of=view):
            if edge.origin is not EdgeOrigin.OBSERVED or edge.source.dataset == ds:
                continue
            source = edge.source.dataset
            if is_valid(edge, view.current):
                current.setdefault(edge.producer, set()).add(source)
                continue
            until = edge.valid_to or edge.valid_from
            if until is None:
                continue
            last = seen.setdefault(edge.producer, {}).get(source)
            if last is None or last.until < until:
                seen[edge.producer][source] = _LastSeen(until, edge.run_id, edge.run_state)
        for producer in sorted(seen):
            gone = {s: t for s, t in seen[producer].items() if s not in current.get(producer, ())}
            if gone:
                gaps.append(_gap(ds, producer, gone, view))
    return gaps


def _gap(
    ds: DatasetRef, producer: str, gone: dict[DatasetRef, _LastSeen], view: RetainedView
) -> Gap:
    inputs = "; ".join(
        f"{ref.name} (last in its lineage {_iso(last.until)}, run {last.run_id or '?'} "
        f"{last.run_state or '?'})"
        for ref, last in sorted(gone.items(), key=lambda kv: (kv[0].name, kv[0].namespace))
    )
    days = view.retention_days.get(ds)
    latest = max(last.until for last in gone.values())
    until = (
        f"until {(latest + timedelta(days=days)).date().isoformat()} (retention {days} days)"
        if days is not None
        else "indefinitely (the catalog gives it no retention_days)"
    )
    return Gap(
        kind=GapKind.LINEAGE_SHRANK,
        dataset=ds,
        detail=(
            f"the current lineage of job {producer} into {ds.name} lacks input(s) its runs "
            f"reported before: {inputs}. A later run listed fewer inputs, or a run failed, was "
            "aborted or never ended after it may have written; the rows those inputs fed may "
            f"remain in {ds.name} {until}. Erase or "
            "rebuild it directly, or the DPO rules: confirm the rows are gone (the job rewrote "
            "the whole output) or retain them under an exemption"
        ),
    )


def _iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")
