"""The erasure view of lineage (`RetainedView`) and the gaps of outputs whose inputs shrank."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from erasure.lineage.graph import InMemoryLineageGraph, RetainedView, coverage, is_valid
from erasure.lineage.shrink import shrink_gaps
from erasure.lineage.store.index import ColumnarEdges, StoredLineageGraph
from erasure.model import (
    DatasetRef,
    EdgeOrigin,
    EdgeSubtype,
    EdgeType,
    FieldRef,
    GapKind,
    LineageEdge,
)

NS = "warehouse"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 2, 1, tzinfo=UTC)  # a later run supersedes the first set
DAY = timedelta(days=1)

Make = Callable[[Iterable[LineageEdge]], InMemoryLineageGraph]


def _stored(edges: Iterable[LineageEdge]) -> InMemoryLineageGraph:
    graph = StoredLineageGraph(ColumnarEdges.from_rows([], {}))
    graph.add_edges(edges)
    return graph


@pytest.fixture(
    params=[
        lambda e: InMemoryLineageGraph(e, small_closure=1_000_000),
        lambda e: InMemoryLineageGraph(e, small_closure=0),
        _stored,
    ],
    ids=["python-walk", "array-walk", "stored"],
)
def make(request: pytest.FixtureRequest) -> Make:
    maker: Make = request.param
    return maker


def ds(name: str) -> DatasetRef:
    return DatasetRef(NS, name)


def edge(
    source: str,
    target: str,
    *,
    producer: str = "airflow/job",
    valid_from: datetime | None = T0,
    valid_to: datetime | None = None,
    state: str = "COMPLETE",
    origin: EdgeOrigin = EdgeOrigin.OBSERVED,
    column: str | None = "c",
) -> LineageEdge:
    return LineageEdge(
        source=FieldRef(ds(source), column),
        target=FieldRef(ds(target), column),
        type=EdgeType.DIRECT,
        subtype=EdgeSubtype.IDENTITY,
        origin=origin,
        producer=producer,
        run_id=f"run-{state}-{valid_from}",
        run_state=state,
        valid_from=valid_from,
        valid_to=valid_to,
        observed_at=valid_from,
    )


def closure_of(graph: InMemoryLineageGraph, view: RetainedView | None) -> set[str]:
    return {d.name for d in graph.forward_closure([ds("root")], as_of=view).datasets}


# The job read `root` into `archive` until T1, when a run listing no inputs superseded it.
SUPERSEDED = [edge("root", "archive", valid_to=T1), edge("other", "archive", valid_from=T1)]


def test_a_superseded_edge_counts_until_its_outputs_retention_has_passed(make: Make) -> None:
    graph = make(SUPERSEDED)
    assert closure_of(graph, None) == {"root"}  # today's lineage has lost the archive
    for days, at, kept in [
        (30, T1 + 29 * DAY, True),
        (30, T1 + 30 * DAY, False),  # exactly the retention after it was last valid: gone
        (30, T1 + 31 * DAY, False),
        (0, T1 - DAY, True),  # still valid then
    ]:
        view = RetainedView(at=at, retention_days={ds("archive"): days})
        assert closure_of(graph, view) == ({"root", "archive"} if kept else {"root"}), (days, at)
        assert any(is_valid(e, view) for e in SUPERSEDED[:1]) is kept


def test_an_output_without_retention_keeps_every_edge_ever_observed(make: Make) -> None:
    graph = make(SUPERSEDED)
    view = RetainedView(at=T1 + 100 * 365 * DAY)
    assert closure_of(graph, view) == {"root", "archive"}


def test_an_edge_that_began_after_the_views_instant_does_not_count(make: Make) -> None:
    graph = make([edge("root", "archive", valid_from=T1)])
    assert closure_of(graph, RetainedView(at=T0)) == {"root"}
    assert closure_of(graph, RetainedView(at=T1)) == {"root", "archive"}


def test_a_failed_runs_edge_counts_only_in_the_erasure_view(make: Make) -> None:
    attempt = edge("root", "partial", valid_from=T1, valid_to=T1, state="FAIL", column=None)
    graph = make([attempt])
    assert closure_of(graph, None) == {"root"}
    assert closure_of(graph, T1) == {"root"}  # [t, t): valid at no instant
    assert closure_of(graph, RetainedView(at=T1 + DAY)) == {"root", "partial"}


def test_coverage_reads_the_retained_edges_so_shrinking_never_raises_it(make: Make) -> None:
    columns = {ds("archive"): ["c", "d"]}.get
    before = make([edge("root", "archive"), edge("root", "archive", column="d")])
    # A later run keeps `d` table-level only: today's view would know one column fewer.
    after = make(
        [
            edge("root", "archive", valid_to=T1),
            edge("root", "archive", column="d", valid_to=T1),
            edge("root", "archive", valid_from=T1, column=None),
        ]
    )
    view = RetainedView(at=T1 + DAY)
    share_before, _ = coverage(
        before.forward_closure([ds("root")], as_of=view), before, columns_of=columns
    )
    share_after, _ = coverage(
        after.forward_closure([ds("root")], as_of=view), after, columns_of=columns
    )
    assert share_after == share_before == 1.0


def test_a_producer_that_stopped_reporting_an_input_is_a_shrink_gap(make: Make) -> None:
    graph = make(
        [
            edge("root", "archive", valid_to=T1),
            edge("kept", "archive", valid_to=T1),
            edge("kept", "archive", valid_from=T1),
            # Another job still reads `root` into the archive: the first job's rows remain.
            edge("root", "archive", producer="airflow/other", valid_from=T0),
        ]
    )
    view = RetainedView(at=T1 + DAY, retention_days={ds("archive"): 90})
    [gap] = shrink_gaps(graph, [ds("archive")], view)
    assert (gap.kind, gap.dataset) == (GapKind.LINEAGE_SHRANK, ds("archive"))
    assert (
        "airflow/job" in gap.detail
        and "root (last in its lineage 2026-02-01T00:00:00Z" in gap.detail
    )
    assert "kept" not in gap.detail.split("reported before:")[1].split(".")[0]
    assert "until 2026-05-02 (retention 90 days)" in gap.detail
    # Past the retention, the rows are gone and so is the gap.
    assert shrink_gaps(graph, [ds("archive")], replace(view, at=T1 + 91 * DAY)) == []


def test_declared_lineage_that_changes_is_no_shrink_gap(make: Make) -> None:
    declared = edge("root", "mart", valid_to=T1, origin=EdgeOrigin.DECLARED)
    graph = make([declared, edge("other", "mart", valid_from=T1, origin=EdgeOrigin.DECLARED)])
    assert shrink_gaps(graph, [ds("mart")], RetainedView(at=T1 + DAY)) == []


def test_the_shrink_gap_compares_with_the_pinned_instant(make: Make) -> None:
    graph = make(SUPERSEDED)
    # Pinned before the supersession, the lineage has not shrunk yet.
    assert shrink_gaps(graph, [ds("archive")], RetainedView(at=T0 + DAY, current=T0 + DAY)) == []
    [gap] = shrink_gaps(graph, [ds("archive")], RetainedView(at=T1 + DAY, current=T1 + DAY))
    assert "root" in gap.detail
