"""Claiming rematerialisation runs on a real store, SQLite and Postgres: rebuilds of many
requests deciding at the same moment never fail and never name two runs for one number."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from erasure.registry.rematerialisations import RunBook
from erasure.store import Store

pytestmark = pytest.mark.integration


def test_claims_number_each_dags_runs_in_order(store: Store) -> None:
    book = RunBook(store)
    claims = [book.claim("build_marts", f"REQ-{n}") for n in range(3)]
    assert [c.run_id for c in claims] == [f"erasure-rebuild-build_marts-{n}" for n in (1, 2, 3)]
    assert book.claim("build_reports", "REQ-0").generation == 1
    assert [r.generation for r in book.recent("build_marts", 2)] == [3, 2]
    assert book.get("erasure-rebuild-build_marts-2") == claims[1]
    assert book.get("erasure-rebuild-build_marts-9") is None


def test_twenty_rebuilds_claiming_at_once_get_consecutive_runs_and_none_fails(
    store: Store,
) -> None:
    """Every claim returns a run the store holds; numbers have no gaps and no duplicates."""
    book = RunBook(store)
    with ThreadPoolExecutor(max_workers=8) as pool:
        claims = list(pool.map(lambda n: book.claim("build_marts", f"REQ-{n}"), range(20)))
    stored = {r.generation: r for r in book.recent("build_marts", 100)}
    assert sorted(stored) == list(range(1, len(stored) + 1))
    assert {c.run_id for c in claims} <= {r.run_id for r in stored.values()}
    for claim in claims:
        assert stored[claim.generation] == claim
