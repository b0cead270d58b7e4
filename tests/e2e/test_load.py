"""Twenty requests at once on the e2e session's stack (the LocalExecutor), every prompt
answered the moment it shows, held to the bar in tests/e2e/load_checks.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local.bench.load import Load, LoadResult, summary, twenty
from local.demo.runner import load_decisions
from local.up.stack import Stack
from tests.e2e import load_checks

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault, pytest.mark.e2e]


@pytest.fixture(scope="module")
def load(airflow_standalone: Stack) -> Iterator[Load]:
    with Load(airflow_standalone, load_decisions()) as driver:
        yield driver


@pytest.fixture(scope="module")
def runs_before(load: Load) -> set[str]:
    """The rematerialisation runs the session's other tests triggered before the load."""
    return load_checks.runs_so_far(load)


@pytest.fixture(scope="module")
def result(load: Load, airflow_standalone: Stack, runs_before: set[str]) -> LoadResult:
    ran = load.run(twenty(airflow_standalone))
    print("\n" + summary("20 requests at once", ran))
    return ran


def test_all_twenty_complete_with_no_intervention(result: LoadResult) -> None:
    assert len(result.runs) == 20
    load_checks.all_complete_with_no_intervention(result)


def test_each_request_has_one_record_of_each_kind_and_the_chain_verifies(
    result: LoadResult, load: Load
) -> None:
    load_checks.one_record_of_each_kind_and_the_chain_verifies(result, load)


def test_each_effect_happened_once(result: LoadResult, load: Load) -> None:
    load_checks.each_effect_happened_once(result, load)


def test_no_prompt_resumes_later_than_30_s_after_its_answer(result: LoadResult) -> None:
    load_checks.no_prompt_resumes_later_than_30_s_after_its_answer(result)


def test_rebuilds_share_rematerialisation_runs_and_each_cites_the_one_that_served_it(
    result: LoadResult, load: Load, runs_before: set[str]
) -> None:
    load_checks.rebuilds_share_runs_and_each_cites_the_one_that_served_it(result, load, runs_before)
