"""Human-readable renderings of plans for the terminal."""

from __future__ import annotations

from typing import Any

from erasure.model import Action, Plan, PlanItem


def render_plan(plan: Plan) -> str:
    """The plan as a DPO reads it: where the subject was, what happens to each artefact, why."""
    s = plan.subject
    who = f"{s.type} subject" + (f" {s.hash[:16]}… (pepper v{s.pepper_version})" if s.hash else "")
    counts: dict[str, int] = {}
    for item in plan.items:
        counts[item.action.value] = counts.get(item.action.value, 0) + 1
    out = [
        f"Erasure plan for {who}",
        f"  lineage snapshot {plan.lineage_snapshot[:23]}  coverage {plan.coverage:.1%}"
        f"  gaps {len(plan.gaps)}  cycles {len(plan.cycles)}"
        + ("  CLOSURE TRUNCATED" if plan.truncated else ""),
        "  " + ", ".join(f"{n} {a}" for a, n in counts.items()),
        "",
        "Where the subject was found",
    ]
    width = max((len(r.dataset.name) for r in plan.roots), default=10)
    for root in plan.roots:
        shared = (
            f", shared with {root.shared_referrers} other row(s)" if root.shared_referrers else ""
        )
        out.append(
            f"  {root.dataset.name:<{width}}  {root.rows:>4} row(s)  by {root.identifier_type}"
            f" ({root.via}){shared}"
        )
    if not plan.roots:
        out.append("  nowhere: no catalogued dataset holds this identifier")
    out += ["", "Plan (in execution order)"]
    width = max((len(i.dataset.name) for i in plan.items), default=10)
    for n, item in enumerate(plan.items, start=1):
        out.append(
            f"  {n:>2}. {item.action.value:<16} {item.dataset.name:<{width}}  "
            f"[rule {item.rule}] {item.reason}"
        )
        for detail in _evidence_lines(item):
            out.append(f"      {'':<16} {'':<{width}}  {detail}")
    if plan.cycles:
        out += ["", "Cycles"]
        out += [f"  {c.kind.value}: {c.names()}" for c in plan.cycles]
    if plan.gaps:
        out += ["", "Gaps (what the lineage does not know)"]
        out += [
            f"  {g.kind.value:<19} {g.dataset.name if g.dataset else '-'}: {g.detail}"
            for g in plan.gaps
        ]
    return "\n".join(out)


def _evidence_lines(item: PlanItem) -> list[str]:
    e: dict[str, Any] = item.evidence
    lines: list[str] = []
    if item.action is Action.AGGREGATE_OK or "min_group_size" in e:
        lines.append(
            f"k={e['k']} min_group_size={e['min_group_size']} groups={e['groups']} "
            f"groups_below_k={e['groups_below_k']} QI={','.join(e['quasi_identifiers'])} "
            f"version={e['table_version']}"
        )
    elif item.action is Action.REBUILD:
        how = {
            "dag": f"DAG {e.get('dag_id')}",
            "producer": f"its producer, DAG {e.get('dag_id')}",
            "dbt": f"dbt run --select {e.get('select')}",
            "sql": "its catalog SQL",
        }
        by = how.get(str(e.get("method")))
        parts = [f"by {by}"] if by else []
        if item.upstreams:
            parts.append("after: " + ", ".join(u.name for u in item.upstreams))
        lines.append(" ".join(parts))
    elif item.action is Action.ERASE_ROWS:
        lines.append(str(e.get("statement", "")))
    if e.get("described_by"):
        lines.append(f"described by {e['described_by']}")
    return [line for line in lines if line]
