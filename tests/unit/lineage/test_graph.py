"""The in-memory lineage graph: closure, order, cycles, bounds, validity, snapshot, coverage."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import networkx as nx
import pytest

from erasure.lineage.graph import (
    Closure,
    InMemoryLineageGraph,
    LineageGraph,
    coverage,
    edge_digest,
    snapshot_digest,
)
from erasure.model import (
    Cycle,
    CycleKind,
    DatasetRef,
    EdgeOrigin,
    EdgeSubtype,
    EdgeType,
    FieldRef,
    Gap,
    GapKind,
    LineageEdge,
)

NS = "warehouse"
T0 = datetime(2024, 1, 1, tzinfo=UTC)
T1 = datetime(2024, 6, 1, tzinfo=UTC)
T2 = datetime(2025, 1, 1, tzinfo=UTC)


Make = Callable[[Iterable[LineageEdge]], InMemoryLineageGraph]
PYTHON_WALK, ARRAY_WALK = 1_000_000, 0  # small_closure values that force each engine


@pytest.fixture(params=[PYTHON_WALK, ARRAY_WALK], ids=["python-walk", "array-walk"])
def make(request: pytest.FixtureRequest) -> Make:
    """Every behaviour holds for both closure engines (small closures walk in plain Python)."""
    small: int = request.param
    return lambda edges: InMemoryLineageGraph(edges, small_closure=small)


def ds(name: str) -> DatasetRef:
    return DatasetRef(NS, name)


def edge(
    source: str,
    target: str,
    *,
    type: EdgeType = EdgeType.DIRECT,
    subtype: EdgeSubtype = EdgeSubtype.IDENTITY,
    producer: str = "build.sql",
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
) -> LineageEdge:
    """An edge from 'table.col' to 'table.col'; 'table.*' is the table as a whole."""

    def field(ref: str) -> FieldRef:
        table, _, column = ref.rpartition(".")
        return FieldRef(ds(table), None if column == "*" else column)

    return LineageEdge(
        source=field(source),
        target=field(target),
        type=type,
        subtype=subtype,
        origin=EdgeOrigin.DECLARED,
        producer=producer,
        valid_from=valid_from,
        valid_to=valid_to,
    )


def names(refs: list[DatasetRef]) -> list[str]:
    return [r.name for r in refs]


def indirect(source: str, target: str) -> LineageEdge:
    return edge(source, target, type=EdgeType.INDIRECT, subtype=EdgeSubtype.FILTER)


def test_closure_follows_direct_and_indirect_edges_and_leaves_unrelated_out(make: Make) -> None:
    graph: LineageGraph = make(
        [
            edge("raw.customers.email", "stg.customers.email"),
            indirect("stg.customers.country", "mart.revenue.total"),
            edge("mart.revenue.total", "agg.revenue_by_month.total"),
            edge("raw.products.sku", "stg.products.sku"),  # unrelated to the subject
        ]
    )

    closure = graph.forward_closure([ds("raw.customers")])

    assert names(closure.datasets) == [
        "raw.customers",
        "stg.customers",
        "mart.revenue",
        "agg.revenue_by_month",
    ]
    assert {r.name: d for r, d in closure.depth.items()} == {
        "raw.customers": 0,
        "stg.customers": 1,
        "mart.revenue": 2,
        "agg.revenue_by_month": 3,
    }
    assert closure.upstreams[ds("mart.revenue")] == {ds("stg.customers")}
    assert closure.upstreams[ds("raw.customers")] == set()
    assert not closure.truncated
    assert closure.cycles == []


def test_dataset_reached_only_by_indirect_edges_is_in_the_closure(make: Make) -> None:
    # A report filtered by customer country holds no customer column, yet depends on the rows.
    graph = make(
        [
            indirect("crm.customers.country", "rpt.orders_in_eu.order_id"),
            edge("shop.orders.order_id", "rpt.orders_in_eu.order_id"),
        ]
    )

    closure = graph.forward_closure([ds("crm.customers")])

    assert names(closure.datasets) == ["crm.customers", "rpt.orders_in_eu"]
    assert closure.upstreams[ds("rpt.orders_in_eu")] == {ds("crm.customers")}


def test_diamond_is_ordered_upstreams_first_even_over_a_shortcut(make: Make) -> None:
    graph = make(
        [
            edge("a.x", "c.x"),
            edge("a.x", "b.x"),
            edge("b.x", "d.x"),
            edge("c.x", "d.x"),
            edge("d.x", "e.x"),
            edge("a.x", "e.x"),  # shortcut: e is one hop from a but must come after d
        ]
    )

    closure = graph.forward_closure([ds("a")])

    assert names(closure.datasets) == ["a", "b", "c", "d", "e"]
    assert closure.depth[ds("e")] == 1
    assert closure.upstreams[ds("d")] == {ds("b"), ds("c")}
    assert closure.upstreams[ds("e")] == {ds("a"), ds("d")}


def test_several_roots_come_first_by_name(make: Make) -> None:
    graph = make([edge("crm.z.id", "mart.m.id"), edge("crm.a.id", "mart.m.id")])

    closure = graph.forward_closure([ds("crm.z"), ds("crm.a"), ds("crm.z")])

    assert names(closure.roots) == ["crm.a", "crm.z"]
    assert names(closure.datasets) == ["crm.a", "crm.z", "mart.m"]


def test_feedback_cycle_crosses_a_materialised_table_and_error_cycle_does_not(make: Make) -> None:
    graph = make(
        [
            edge("raw.events.id", "mart.sessions.id"),
            # incremental table reads its own previous state through a view
            edge("mart.sessions.id", "view.sessions_prev.id"),
            edge("view.sessions_prev.id", "mart.sessions.id"),
            # two views defined on each other
            edge("mart.sessions.id", "view.a.id"),
            edge("view.a.id", "view.b.id"),
            edge("view.b.id", "view.a.id"),
            edge("view.b.id", "rpt.daily.id"),
        ]
    )

    closure = graph.forward_closure(
        [ds("raw.events")], is_materialised=lambda ref: not ref.name.startswith("view.")
    )

    assert closure.cycles == [
        Cycle(kind=CycleKind.FEEDBACK, datasets=[ds("mart.sessions"), ds("view.sessions_prev")]),
        Cycle(kind=CycleKind.ERROR, datasets=[ds("view.a"), ds("view.b")]),
    ]
    # Each cycle stays together, after its upstreams and before its downstreams.
    assert names(closure.datasets) == [
        "raw.events",
        "mart.sessions",
        "view.sessions_prev",
        "view.a",
        "view.b",
        "rpt.daily",
    ]


def test_cycles_default_to_feedback_when_materialisation_is_unknown(make: Make) -> None:
    graph = make([edge("v.a.id", "v.b.id"), edge("v.b.id", "v.a.id")])

    closure = graph.forward_closure([ds("v.a")])

    assert closure.cycles == [Cycle(kind=CycleKind.FEEDBACK, datasets=[ds("v.a"), ds("v.b")])]


def test_self_loop_is_a_cycle_and_its_own_upstream(make: Make) -> None:
    graph = make(
        [
            edge("raw.orders.id", "mart.orders_inc.id"),
            edge("mart.orders_inc.id", "mart.orders_inc.id"),  # incremental merge into itself
            edge("mart.orders_inc.id", "agg.orders.n"),
        ]
    )

    closure = graph.forward_closure([ds("raw.orders")])

    assert closure.cycles == [Cycle(kind=CycleKind.FEEDBACK, datasets=[ds("mart.orders_inc")])]
    assert closure.upstreams[ds("mart.orders_inc")] == {ds("raw.orders"), ds("mart.orders_inc")}
    assert names(closure.datasets) == ["raw.orders", "mart.orders_inc", "agg.orders"]


def fan_out(make: Make) -> InMemoryLineageGraph:
    """root -> a, b, c; a -> d -> e."""
    return make(
        [
            edge("root.id", "a.id"),
            edge("root.id", "b.id"),
            edge("root.id", "c.id"),
            edge("a.id", "d.id"),
            edge("d.id", "e.id"),
        ]
    )


def test_max_nodes_truncates_and_names_the_unwalked_frontier(make: Make) -> None:
    closure = fan_out(make).forward_closure([ds("root")], max_nodes=3)

    assert closure.truncated
    assert names(closure.datasets) == ["root", "a", "b"]  # a partial level is admitted by name
    # root still points at c, and a at d: both are where the walk stopped.
    assert names(closure.truncated_at) == ["a", "root"]


def test_max_depth_truncates_at_the_last_level_walked(make: Make) -> None:
    closure = fan_out(make).forward_closure([ds("root")], max_depth=2)

    assert closure.truncated
    assert names(closure.datasets) == ["root", "a", "b", "c", "d"]
    assert names(closure.truncated_at) == ["d"]


def test_bounds_that_cut_nothing_do_not_truncate(make: Make) -> None:
    closure = fan_out(make).forward_closure([ds("root")], max_nodes=6, max_depth=3)

    assert not closure.truncated
    assert closure.truncated_at == []
    assert len(closure.datasets) == 6


def test_max_depth_zero_keeps_only_the_roots(make: Make) -> None:
    closure = fan_out(make).forward_closure([ds("root")], max_depth=0)

    assert names(closure.datasets) == ["root"]
    assert names(closure.truncated_at) == ["root"]


def test_invalid_bounds_are_refused(make: Make) -> None:
    with pytest.raises(ValueError, match="max_nodes"):
        fan_out(make).forward_closure([ds("root")], max_nodes=0)


def replaced_producer(make: Make) -> InMemoryLineageGraph:
    """stg.users fed mart.old until T1; since T1 it feeds mart.new."""
    return make(
        [
            edge("raw.users.id", "stg.users.id"),
            edge("stg.users.id", "mart.old.id", valid_from=T0, valid_to=T1),
            edge("stg.users.id", "mart.new.id", valid_from=T1),
        ]
    )


def test_superseded_edge_is_ignored_by_default_but_kept(make: Make) -> None:
    graph = replaced_producer(make)

    closure = graph.forward_closure([ds("raw.users")])

    assert names(closure.datasets) == ["raw.users", "stg.users", "mart.new"]
    assert graph.downstream(ds("stg.users")) == {ds("mart.new")}
    assert len(list(graph.edges())) == 3
    assert ds("mart.old") in graph.datasets()


def test_as_of_walks_the_lineage_valid_at_that_instant(make: Make) -> None:
    graph = replaced_producer(make)
    before = datetime(2024, 3, 1, tzinfo=UTC)

    assert names(graph.forward_closure([ds("raw.users")], as_of=before).datasets) == [
        "raw.users",
        "stg.users",
        "mart.old",
    ]
    # valid_to is exclusive: at T1 the new producer is in force, not the old one
    assert names(graph.forward_closure([ds("raw.users")], as_of=T1).datasets) == [
        "raw.users",
        "stg.users",
        "mart.new",
    ]
    # before anything was valid only the open-ended edge counts
    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    assert names(graph.forward_closure([ds("raw.users")], as_of=long_ago).datasets) == [
        "raw.users",
        "stg.users",
    ]
    assert graph.edges_into(ds("mart.old"), as_of=before) == [
        edge("stg.users.id", "mart.old.id", valid_from=T0, valid_to=T1)
    ]
    assert graph.edges_into(ds("mart.old")) == []


def test_root_without_lineage_is_its_own_closure(make: Make) -> None:
    closure = fan_out(make).forward_closure([ds("crm.notes")])

    assert names(closure.datasets) == ["crm.notes"]
    assert closure.depth == {ds("crm.notes"): 0}
    assert closure.upstreams == {ds("crm.notes"): set()}


def test_upstream_downstream_and_edges_into(make: Make) -> None:
    graph = make(
        [
            edge("a.id", "c.id"),
            indirect("b.flag", "c.id"),
            edge("b.flag", "c.flag"),
        ]
    )

    assert graph.upstream(ds("c")) == {ds("a"), ds("b")}
    assert graph.downstream(ds("b")) == {ds("c")}
    assert graph.upstream(ds("nowhere")) == set()
    assert graph.edges_into(ds("c")) == [
        edge("a.id", "c.id"),
        indirect("b.flag", "c.id"),
        edge("b.flag", "c.flag"),
    ]


def test_adding_the_same_edge_twice_keeps_one() -> None:
    graph = InMemoryLineageGraph([edge("a.id", "b.id")])
    before = graph.snapshot_id()

    graph.add_edges([edge("a.id", "b.id")])

    assert len(list(graph.edges())) == 1
    assert graph.snapshot_id() == before


def test_snapshot_id_ignores_order_and_changes_with_any_attribute() -> None:
    edges = [edge("a.id", "b.id"), indirect("b.id", "c.id"), edge("c.id", "d.id", valid_to=T2)]

    forward = InMemoryLineageGraph(edges).snapshot_id()
    backward = InMemoryLineageGraph(reversed(edges)).snapshot_id()
    changed = InMemoryLineageGraph([*edges[:2], edge("c.id", "d.id", valid_to=T1)]).snapshot_id()
    grown = InMemoryLineageGraph([*edges, edge("d.id", "e.id")])

    assert forward == backward
    assert len(forward) == 64
    assert changed != forward
    assert grown.snapshot_id() != forward


def test_snapshot_id_follows_later_additions() -> None:
    graph = InMemoryLineageGraph([edge("a.id", "b.id")])
    first = graph.snapshot_id()

    graph.add_edges([edge("b.id", "c.id")])

    assert graph.snapshot_id() != first
    assert graph.snapshot_id() == InMemoryLineageGraph(graph.edges()).snapshot_id()
    assert graph.snapshot_id() == snapshot_digest(graph.edges())


def test_edge_digest_is_sha256_of_the_documented_json_form() -> None:
    # Another store must reproduce snapshot ids, so the canonical form is pinned here.
    odd = LineageEdge(
        source=FieldRef(DatasetRef("wh", 'crm."Kunden" ü'), "e\u2028mail\\x\x1f"),
        target=FieldRef(DatasetRef("wh", "mart.m"), None),
        type=EdgeType.INDIRECT,
        subtype=EdgeSubtype.FILTER,
        origin=EdgeOrigin.OBSERVED,
        producer="job/ü",
        run_id="r-1",
        run_state="COMPLETE",
        valid_from=datetime(2024, 5, 1, 12, 0),  # naive
        valid_to=datetime(2024, 6, 1, 14, 0, tzinfo=UTC).astimezone(),
        observed_at=datetime(2024, 5, 1, 12, 0, 0, 5, tzinfo=UTC),
    )
    fields = [
        "wh", 'crm."Kunden" ü', "e\u2028mail\\x\x1f", "wh", "mart.m", None,
        "INDIRECT", "FILTER", "observed", "job/ü", "r-1", "COMPLETE",
        "2024-05-01T12:00:00", "2024-06-01T14:00:00+00:00", "2024-05-01T12:00:00.000005+00:00",
    ]  # fmt: skip
    text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))

    assert edge_digest(odd) == hashlib.sha256(text.encode()).digest()


def test_coverage_counts_known_columns_and_reports_table_only_lineage(make: Make) -> None:
    graph = make(
        [
            edge("raw.customers.id", "stg.customers.id"),
            edge("raw.customers.email", "stg.customers.email"),
            indirect("raw.customers.country", "stg.customers.id"),
            edge("stg.customers.id", "mart.ltv.customer_id"),  # not in the catalog's list
            edge("stg.customers.*", "mart.blob.*", producer="spark_job"),  # table-level only
            edge("mart.blob.*", "ml.churn.*", producer="train.py"),  # table-level only
        ]
    )
    catalog = {
        "stg.customers": ["id", "email", "country", "created_at"],  # 2 of 4 known
        "mart.ltv": ["ltv"],  # customer_id known from lineage, ltv not: 1 of 2
        "mart.blob": ["a", "b"],  # 0 of 2
        # ml.churn: the catalog lists no columns -> one unknown column
    }
    closure = graph.forward_closure([ds("raw.customers")])

    share, gaps = coverage(closure, graph, columns_of=lambda ref: catalog.get(ref.name))

    assert share == pytest.approx(3 / 9)
    assert gaps == [
        Gap(
            kind=GapKind.TABLE_ONLY_LINEAGE,
            dataset=ds("mart.blob"),
            detail="only table-level lineage (from spark_job): origin of 2 column(s) unknown",
        ),
        Gap(
            kind=GapKind.TABLE_ONLY_LINEAGE,
            dataset=ds("ml.churn"),
            detail="only table-level lineage (from train.py): origin of 1 column(s) unknown",
        ),
    ]


def test_coverage_of_roots_only_is_complete(make: Make) -> None:
    graph = make([edge("a.id", "b.id")])
    closure = graph.forward_closure([ds("b")])

    assert coverage(closure, graph, columns_of=lambda ref: None) == (1.0, [])


def test_coverage_uses_the_closure_instant(make: Make) -> None:
    graph = replaced_producer(make)
    closure = graph.forward_closure([ds("raw.users")], as_of=datetime(2024, 3, 1, tzinfo=UTC))

    share, gaps = coverage(closure, graph, columns_of=lambda ref: ["id"])

    assert (share, gaps) == (1.0, [])


def test_closure_follows_edges_added_after_a_walk(make: Make) -> None:
    graph = make([edge("a.id", "b.id")])
    assert names(graph.forward_closure([ds("a")]).datasets) == ["a", "b"]

    graph.add_edges([edge("b.id", "c.id")])

    assert names(graph.forward_closure([ds("a")]).datasets) == ["a", "b", "c"]


def summary(closure: Closure) -> tuple[object, ...]:
    return (
        closure.roots,
        closure.datasets,
        dict(closure.depth),
        dict(closure.upstreams),
        closure.truncated,
        closure.truncated_at,
        closure.cycles,
    )


@pytest.mark.parametrize("seed", range(60))
def test_both_engines_match_a_plain_search_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 60)
    edges = []
    for _ in range(rng.randint(1, 3 * n)):
        s, t = rng.randrange(n), rng.randrange(n)
        if rng.random() < 0.85:  # mostly layered, with some loops back
            s, t = min(s, t), max(s, t)
        superseded = rng.random() < 0.1
        edges.append(edge(f"t{s}.c", f"t{t}.c", valid_from=T0 if superseded else None,
                          valid_to=T1 if superseded else None))  # fmt: skip
    named = sorted({e.source.dataset for e in edges} | {e.target.dataset for e in edges})
    roots = rng.sample(named, rng.randint(1, min(4, len(named))))
    max_nodes = rng.choice([None, None, rng.randint(1, n)])
    max_depth = rng.choice([None, None, rng.randint(0, 4)])

    def materialised(ref: DatasetRef) -> bool:
        return int(ref.name[1:]) % 3 != 0

    closures = [
        InMemoryLineageGraph(edges, small_closure=engine).forward_closure(
            roots, max_nodes=max_nodes, max_depth=max_depth, is_materialised=materialised
        )
        for engine in (PYTHON_WALK, ARRAY_WALK, 8)  # 8: starts in Python, hands over to arrays
    ]
    assert summary(closures[0]) == summary(closures[1]) == summary(closures[2])
    closure = closures[0]

    current = nx.DiGraph()
    current.add_nodes_from(named)
    current.add_edges_from(
        (e.source.dataset, e.target.dataset) for e in edges if e.valid_to is None
    )
    distance: dict[DatasetRef, int] = {}
    for root in roots:
        for ref, d in nx.single_source_shortest_path_length(current, root).items():
            distance[ref] = min(d, distance.get(ref, d))
    members = set(closure.datasets)
    if max_nodes is None:
        assert members == {r for r, d in distance.items() if max_depth is None or d <= max_depth}
    else:
        assert len(members) <= max(max_nodes, len(roots))
    assert dict(closure.depth) == {r: distance[r] for r in members}
    assert closure.truncated_at == sorted(
        (r for r in members if any(t not in members for t in current.successors(r))),
        key=lambda r: r.name,
    )
    assert closure.truncated == bool(closure.truncated_at)
    if not closure.truncated:  # a bound that cut nothing leaves the full closure
        assert members == set(distance)

    sub = current.subgraph(members)
    assert dict(closure.upstreams) == {r: set(sub.predecessors(r)) for r in members}
    components = [c for c in nx.strongly_connected_components(sub)
                  if len(c) > 1 or any(sub.has_edge(r, r) for r in c)]  # fmt: skip
    assert sorted([r.name for r in c.datasets] for c in closure.cycles) == sorted(
        sorted(r.name for r in c) for c in components
    )
    for cycle in closure.cycles:
        kind = (
            CycleKind.FEEDBACK if any(materialised(m) for m in cycle.datasets) else CycleKind.ERROR
        )
        assert cycle.kind is kind
    # Topological: every dataset after its in-closure upstreams, unless they share a cycle.
    place = {r: k for k, r in enumerate(closure.datasets)}
    component_of = {r: i for i, c in enumerate(nx.strongly_connected_components(sub)) for r in c}
    for ref in members:
        for up in closure.upstreams[ref]:
            assert place[up] < place[ref] or component_of[up] == component_of[ref]
    # Roots without an upstream in the closure lead.
    leading = [r for r in closure.roots if r in members and not closure.upstreams[r]]
    assert closure.datasets[: len(leading)] == leading
