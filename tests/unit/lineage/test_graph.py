"""The in-memory lineage graph: closure, order, cycles, bounds, validity, snapshot, coverage."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from erasure.lineage.graph import InMemoryLineageGraph, LineageGraph, coverage
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


def test_closure_follows_direct_and_indirect_edges_and_leaves_unrelated_out() -> None:
    graph: LineageGraph = InMemoryLineageGraph(
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


def test_dataset_reached_only_by_indirect_edges_is_in_the_closure() -> None:
    # A report filtered by customer country holds no customer column, yet depends on the rows.
    graph = InMemoryLineageGraph(
        [
            indirect("crm.customers.country", "rpt.orders_in_eu.order_id"),
            edge("shop.orders.order_id", "rpt.orders_in_eu.order_id"),
        ]
    )

    closure = graph.forward_closure([ds("crm.customers")])

    assert names(closure.datasets) == ["crm.customers", "rpt.orders_in_eu"]
    assert closure.upstreams[ds("rpt.orders_in_eu")] == {ds("crm.customers")}


def test_diamond_is_ordered_upstreams_first_even_over_a_shortcut() -> None:
    graph = InMemoryLineageGraph(
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


def test_several_roots_come_first_by_name() -> None:
    graph = InMemoryLineageGraph([edge("crm.z.id", "mart.m.id"), edge("crm.a.id", "mart.m.id")])

    closure = graph.forward_closure([ds("crm.z"), ds("crm.a"), ds("crm.z")])

    assert names(closure.roots) == ["crm.a", "crm.z"]
    assert names(closure.datasets) == ["crm.a", "crm.z", "mart.m"]


def test_feedback_cycle_crosses_a_materialised_table_and_error_cycle_does_not() -> None:
    graph = InMemoryLineageGraph(
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
        Cycle(kind=CycleKind.FEEDBACK, datasets=["mart.sessions", "view.sessions_prev"]),
        Cycle(kind=CycleKind.ERROR, datasets=["view.a", "view.b"]),
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


def test_cycles_default_to_feedback_when_materialisation_is_unknown() -> None:
    graph = InMemoryLineageGraph([edge("v.a.id", "v.b.id"), edge("v.b.id", "v.a.id")])

    closure = graph.forward_closure([ds("v.a")])

    assert closure.cycles == [Cycle(kind=CycleKind.FEEDBACK, datasets=["v.a", "v.b"])]


def test_self_loop_is_a_cycle_and_its_own_upstream() -> None:
    graph = InMemoryLineageGraph(
        [
            edge("raw.orders.id", "mart.orders_inc.id"),
            edge("mart.orders_inc.id", "mart.orders_inc.id"),  # incremental merge into itself
            edge("mart.orders_inc.id", "agg.orders.n"),
        ]
    )

    closure = graph.forward_closure([ds("raw.orders")])

    assert closure.cycles == [Cycle(kind=CycleKind.FEEDBACK, datasets=["mart.orders_inc"])]
    assert closure.upstreams[ds("mart.orders_inc")] == {ds("raw.orders"), ds("mart.orders_inc")}
    assert names(closure.datasets) == ["raw.orders", "mart.orders_inc", "agg.orders"]


def fan_out() -> InMemoryLineageGraph:
    """root -> a, b, c; a -> d -> e."""
    return InMemoryLineageGraph(
        [
            edge("root.id", "a.id"),
            edge("root.id", "b.id"),
            edge("root.id", "c.id"),
            edge("a.id", "d.id"),
            edge("d.id", "e.id"),
        ]
    )


def test_max_nodes_truncates_and_names_the_unwalked_frontier() -> None:
    closure = fan_out().forward_closure([ds("root")], max_nodes=3)

    assert closure.truncated
    assert names(closure.datasets) == ["root", "a", "b"]  # a partial level is admitted by name
    # root still points at c, and a at d: both are where the walk stopped.
    assert names(closure.truncated_at) == ["a", "root"]


def test_max_depth_truncates_at_the_last_level_walked() -> None:
    closure = fan_out().forward_closure([ds("root")], max_depth=2)

    assert closure.truncated
    assert names(closure.datasets) == ["root", "a", "b", "c", "d"]
    assert names(closure.truncated_at) == ["d"]


def test_bounds_that_cut_nothing_do_not_truncate() -> None:
    closure = fan_out().forward_closure([ds("root")], max_nodes=6, max_depth=3)

    assert not closure.truncated
    assert closure.truncated_at == []
    assert len(closure.datasets) == 6


def test_max_depth_zero_keeps_only_the_roots() -> None:
    closure = fan_out().forward_closure([ds("root")], max_depth=0)

    assert names(closure.datasets) == ["root"]
    assert names(closure.truncated_at) == ["root"]


def test_invalid_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_nodes"):
        fan_out().forward_closure([ds("root")], max_nodes=0)


def replaced_producer() -> InMemoryLineageGraph:
    """stg.users fed mart.old until T1; since T1 it feeds mart.new."""
    return InMemoryLineageGraph(
        [
            edge("raw.users.id", "stg.users.id"),
            edge("stg.users.id", "mart.old.id", valid_from=T0, valid_to=T1),
            edge("stg.users.id", "mart.new.id", valid_from=T1),
        ]
    )


def test_superseded_edge_is_ignored_by_default_but_kept() -> None:
    graph = replaced_producer()

    closure = graph.forward_closure([ds("raw.users")])

    assert names(closure.datasets) == ["raw.users", "stg.users", "mart.new"]
    assert graph.downstream(ds("stg.users")) == {ds("mart.new")}
    assert len(list(graph.edges())) == 3
    assert ds("mart.old") in graph.datasets()


def test_as_of_walks_the_lineage_valid_at_that_instant() -> None:
    graph = replaced_producer()
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


def test_root_without_lineage_is_its_own_closure() -> None:
    closure = fan_out().forward_closure([ds("crm.notes")])

    assert names(closure.datasets) == ["crm.notes"]
    assert closure.depth == {ds("crm.notes"): 0}
    assert closure.upstreams == {ds("crm.notes"): set()}


def test_upstream_downstream_and_edges_into() -> None:
    graph = InMemoryLineageGraph(
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
    assert names(graph.forward_closure([ds("a")]).datasets) == ["a", "b", "c"]


def test_coverage_counts_known_columns_and_reports_table_only_lineage() -> None:
    graph = InMemoryLineageGraph(
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
            dataset="mart.blob",
            detail="only table-level lineage (from spark_job): origin of 2 column(s) unknown",
        ),
        Gap(
            kind=GapKind.TABLE_ONLY_LINEAGE,
            dataset="ml.churn",
            detail="only table-level lineage (from train.py): origin of 1 column(s) unknown",
        ),
    ]


def test_coverage_of_roots_only_is_complete() -> None:
    graph = InMemoryLineageGraph([edge("a.id", "b.id")])
    closure = graph.forward_closure([ds("b")])

    assert coverage(closure, graph, columns_of=lambda ref: None) == (1.0, [])


def test_coverage_uses_the_closure_instant() -> None:
    graph = replaced_producer()
    closure = graph.forward_closure([ds("raw.users")], as_of=datetime(2024, 3, 1, tzinfo=UTC))

    share, gaps = coverage(closure, graph, columns_of=lambda ref: ["id"])

    assert (share, gaps) == (1.0, [])
