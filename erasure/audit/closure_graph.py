"""The request's closure graph as inline SVG: artefacts coloured by action, laid out by depth.

Columns are lineage layers (an artefact sits one column right of its deepest upstream in the
closure); edges run from each artefact's `upstreams`, through the gaps between nodes. No
script, no external asset: the drawing is plain SVG inside the evidence page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from erasure.audit.evidence import ArtefactOutcome
from erasure.model import Action

ACTION_COLOURS: dict[str, tuple[str, str]] = {  # action -> (fill, text)
    Action.ERASE_ROWS.value: ("#c0392b", "#ffffff"),
    Action.REBUILD.value: ("#2471a3", "#ffffff"),
    Action.AGGREGATE_OK.value: ("#1e8449", "#ffffff"),
    Action.CRYPTO_SHRED.value: ("#6c3483", "#ffffff"),
    Action.ESCALATE.value: ("#f39c12", "#1b1b1b"),
    Action.INSERT_TOMBSTONE.value: ("#566573", "#ffffff"),
}
UNKNOWN_COLOUR = ("#bdc3c7", "#1b1b1b")

NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN, LEGEND_H = 250, 46, 70, 22, 16, 34
LABEL_CHARS = 28  # what fits in NODE_W at 13px monospace; the tooltip has the full name


def lineage_depths(artefacts: Sequence[ArtefactOutcome]) -> dict[str, int]:
    """Each artefact's depth: 0 for one with no upstream in the closure, else 1 + deepest."""
    upstreams = {a.dataset: [u for u in a.upstreams if u != a.dataset] for a in artefacts}
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(name: str) -> int:
        if name in depth:
            return depth[name]
        if name in visiting:  # a feedback cycle: the back edge does not add a layer
            return -1
        visiting.add(name)
        parents = [visit(u) for u in upstreams.get(name, []) if u in upstreams]
        visiting.discard(name)
        depth[name] = 1 + max(parents, default=-1)
        return depth[name]

    for a in artefacts:
        visit(a.dataset)
    return depth


def closure_svg(artefacts: Sequence[ArtefactOutcome]) -> str:
    """Artefacts as nodes coloured by action, in columns by lineage depth, edges from upstreams."""
    depths = lineage_depths(artefacts)
    layers: dict[int, list[ArtefactOutcome]] = {}
    for a in sorted(artefacts, key=lambda a: a.dataset):
        layers.setdefault(depths[a.dataset], []).append(a)
    where: dict[str, tuple[float, float]] = {}
    for d, members in layers.items():
        for i, a in enumerate(members):
            where[a.dataset] = (MARGIN + d * (NODE_W + GAP_X), MARGIN + i * (NODE_H + GAP_Y))
    columns = max(layers, default=0) + 1
    rows = max((len(m) for m in layers.values()), default=1)
    width = max(2 * MARGIN + columns * NODE_W + (columns - 1) * GAP_X, 6 * 120 + 2 * MARGIN)
    height = 2 * MARGIN + rows * NODE_H + (rows - 1) * GAP_Y + LEGEND_H

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="closure graph" class="closure">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
    ]
    for a in artefacts:
        for u in a.upstreams:
            if u not in where or u == a.dataset:
                continue
            path = _edge_path(where[u], where[a.dataset], depths[a.dataset] - depths[u])
            out.append(
                f'<path class="edge" d="{path}" fill="none" stroke="#555" stroke-width="1.4" '
                f'marker-end="url(#arrow)"><title>{_e(u)} &#8594; {_e(a.dataset)}</title></path>'
            )
    for a in artefacts:
        x, y = where[a.dataset]
        fill, text = ACTION_COLOURS.get(a.action.value, UNKNOWN_COLOUR)
        label = (
            a.dataset if len(a.dataset) <= LABEL_CHARS else a.dataset[: LABEL_CHARS - 1] + "\u2026"
        )
        out.append(
            f'<g class="node" data-action="{_e(a.action.value)}"><title>{_e(a.dataset)}: '
            f"{_e(a.action.value)}</title>"
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="7" '
            f'fill="{fill}"/>'
            f'<text x="{x + 10:.0f}" y="{y + 19:.0f}" fill="{text}" font-size="13" '
            f'font-family="monospace">{_e(label)}</text>'
            f'<text x="{x + 10:.0f}" y="{y + 36:.0f}" fill="{text}" font-size="11" '
            f'font-family="sans-serif">{_e(a.action.value)}</text></g>'
        )
    legend_y = height - LEGEND_H + 12
    for i, action in enumerate(
        [
            Action.ERASE_ROWS,
            Action.REBUILD,
            Action.AGGREGATE_OK,
            Action.CRYPTO_SHRED,
            Action.ESCALATE,
        ]
    ):
        fill, _ = ACTION_COLOURS[action.value]
        lx = MARGIN + i * 120
        out.append(
            f'<rect x="{lx}" y="{legend_y}" width="14" height="14" rx="3" fill="{fill}"/>'
            f'<text x="{lx + 20}" y="{legend_y + 12}" font-size="12" '
            f'font-family="sans-serif">{_e(action.value)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _edge_path(source: tuple[float, float], target: tuple[float, float], span: int) -> str:
    """An edge from a node's right side to another's left side, never through a node.

    Neighbouring layers get one curve. A longer edge (or a feedback edge going back) runs in
    the gaps: down the column gap after its source, along the row gap above its target, and
    down the column gap before it, with rounded corners.
    """
    sx, sy = source[0] + NODE_W, source[1] + NODE_H / 2
    tx, ty = target[0], target[1] + NODE_H / 2
    if span == 1:
        bend = GAP_X / 2
        return (
            f"M{sx:.0f},{sy:.0f} "
            f"C{sx + bend:.0f},{sy:.0f} {tx - bend:.0f},{ty:.0f} {tx:.0f},{ty:.0f}"
        )
    channel = target[1] - GAP_Y / 2
    after, before = sx + GAP_X / 2, tx - GAP_X / 2
    points = [(sx, sy), (after, sy), (after, channel), (before, channel), (before, ty), (tx, ty)]
    return _rounded(points)


def _rounded(points: Sequence[tuple[float, float]], radius: float = 8.0) -> str:
    """A polyline through `points` with its corners rounded."""
    kept = [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]
    parts = [f"M{kept[0][0]:.0f},{kept[0][1]:.0f}"]
    for prev, corner, nxt in zip(kept, kept[1:], kept[2:], strict=False):
        r = min(radius, _length(prev, corner) / 2, _length(corner, nxt) / 2)
        a = _towards(corner, prev, r)
        b = _towards(corner, nxt, r)
        parts.append(
            f"L{a[0]:.0f},{a[1]:.0f} Q{corner[0]:.0f},{corner[1]:.0f} {b[0]:.0f},{b[1]:.0f}"
        )
    parts.append(f"L{kept[-1][0]:.0f},{kept[-1][1]:.0f}")
    return " ".join(parts)


def _length(p: tuple[float, float], q: tuple[float, float]) -> float:
    return float(((q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2) ** 0.5)


def _towards(p: tuple[float, float], q: tuple[float, float], d: float) -> tuple[float, float]:
    length = _length(p, q)
    if length == 0:
        return p
    return (p[0] + (q[0] - p[0]) * d / length, p[1] + (q[1] - p[1]) * d / length)


def _e(text: str) -> str:
    return html.escape(text, quote=True)
