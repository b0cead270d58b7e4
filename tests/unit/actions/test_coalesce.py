"""Which rematerialisation run a rebuild waits for: a serving one joined, else the next claimed.

Airflow's side is the in-memory `Airflow` below (the real one is driven by
tests/e2e/test_load.py); the store is a real SQLite one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from erasure.actions.coalesce import CLAIMS, CLOCK_SKEW, run_for, serves
from erasure.errors import RebuildFailed
from erasure.model import DagRun
from erasure.registry.rematerialisations import RunBook
from erasure.store import open_store

READY = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DAG = "build_marts"


def dag_run(state: str, started_at: datetime | None) -> DagRun:
    return DagRun(run_id="erasure-rebuild-build_marts-1", state=state, started_at=started_at)


class Airflow:
    """DAG runs by id, as Airflow would report them; `started` lists the runs triggered."""

    def __init__(self) -> None:
        self.runs: dict[str, DagRun] = {}
        self.started: list[str] = []

    def start(self, dag_id: str, run_id: str) -> bool:
        if run_id in self.runs:
            return False
        self.runs[run_id] = dag_run("queued", None)
        self.started.append(run_id)
        return True

    def status(self, dag_id: str, run_id: str) -> DagRun | None:
        return self.runs.get(run_id)


@pytest.fixture
def book(tmp_path: Path) -> Iterator[RunBook]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        yield RunBook(store)


def test_the_first_rebuild_claims_and_triggers_the_dags_first_run(book: RunBook) -> None:
    airflow = Airflow()
    run = run_for(book, airflow, DAG, "REQ-1", READY)
    assert (run.run_id, run.generation, run.triggered_for) == (
        "erasure-rebuild-build_marts-1",
        1,
        "REQ-1",
    )
    assert airflow.started == [run.run_id]


def test_a_queued_run_serves_every_request_that_was_ready_when_it_looked(book: RunBook) -> None:
    airflow = Airflow()
    first = run_for(book, airflow, DAG, "REQ-1", READY)
    later = READY + timedelta(minutes=5)  # whenever it was ready: the run has read nothing yet
    joined = [run_for(book, airflow, DAG, f"REQ-{n}", later) for n in range(2, 6)]
    assert {run.run_id for run in joined} == {first.run_id}
    assert {run.triggered_for for run in joined} == {"REQ-1"}
    assert airflow.started == [first.run_id]  # one run for five requests


@pytest.mark.parametrize("state", ["running", "success"])
def test_a_run_that_started_before_the_request_was_ready_cannot_serve_it(
    book: RunBook, state: str
) -> None:
    airflow = Airflow()
    first = run_for(book, airflow, DAG, "REQ-1", READY)
    airflow.runs[first.run_id] = dag_run(state, READY + timedelta(seconds=10))
    second = run_for(book, airflow, DAG, "REQ-2", READY + timedelta(seconds=11))
    assert (second.generation, second.triggered_for) == (2, "REQ-2")
    assert airflow.started == [first.run_id, second.run_id]


def test_a_run_that_started_after_the_request_was_ready_serves_it_running_or_done(
    book: RunBook,
) -> None:
    airflow = Airflow()
    first = run_for(book, airflow, DAG, "REQ-1", READY)
    for state in ("running", "success"):
        airflow.runs[first.run_id] = dag_run(state, READY + CLOCK_SKEW)
        assert run_for(book, airflow, DAG, "REQ-2", READY).run_id == first.run_id
    assert airflow.started == [first.run_id]


def test_a_start_within_the_clock_skew_of_ready_does_not_count_as_after() -> None:
    near = dag_run("running", READY + CLOCK_SKEW - timedelta(milliseconds=1))
    assert not serves(near, READY)
    assert serves(dag_run("queued", None), READY)
    assert not serves(dag_run("failed", READY + timedelta(hours=1)), READY)
    assert not serves(None, READY)


def test_a_failed_run_is_never_joined(book: RunBook) -> None:
    airflow = Airflow()
    first = run_for(book, airflow, DAG, "REQ-1", READY)
    airflow.runs[first.run_id] = dag_run("failed", READY + timedelta(minutes=1))
    assert run_for(book, airflow, DAG, "REQ-1", READY).generation == 2


def test_each_dag_numbers_its_own_runs(book: RunBook) -> None:
    airflow = Airflow()
    marts = run_for(book, airflow, DAG, "REQ-1", READY)
    reports = run_for(book, airflow, "build_reports", "REQ-1", READY)
    assert (marts.run_id, reports.run_id) == (
        "erasure-rebuild-build_marts-1",
        "erasure-rebuild-build_reports-1",
    )


def test_a_claim_airflow_already_holds_is_joined_if_it_serves_else_the_next_is_claimed(
    book: RunBook,
) -> None:
    """Airflow may hold a claimed id: a rebuild that claimed it at the same moment triggered it
    (queued: joined), or an older deployment's run of that id (long done: skipped)."""
    airflow = Airflow()
    airflow.runs["erasure-rebuild-build_marts-1"] = dag_run("queued", None)
    assert run_for(book, airflow, DAG, "REQ-1", READY).generation == 1
    assert airflow.started == []

    old = dag_run("success", READY - timedelta(days=30))
    airflow.runs["erasure-rebuild-build_marts-1"] = old
    airflow.runs["erasure-rebuild-build_marts-2"] = old
    run = run_for(book, airflow, DAG, "REQ-2", READY)
    assert run.generation == 3 and airflow.started == [run.run_id]


def test_it_stops_naming_the_cause_when_every_new_id_is_an_old_run(book: RunBook) -> None:
    airflow = Airflow()
    for generation in range(1, CLAIMS + 1):
        airflow.runs[f"erasure-rebuild-build_marts-{generation}"] = dag_run(
            "success", READY - timedelta(days=1)
        )
    with pytest.raises(RebuildFailed, match="same deployment"):
        run_for(book, airflow, DAG, "REQ-1", READY)
    assert airflow.started == []
