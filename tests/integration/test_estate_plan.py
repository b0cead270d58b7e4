"""The default plan on an estate of the size this system exists for is exact, not truncated.

The generated estate (local.bench.estate): 30,000 datasets, ~30,000 run events with ~940,000
column edges, three Postgres root tables. Timings are checked by `make bench`, not here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from erasure.catalog import load_catalog
from erasure.lineage import LineageStore
from erasure.model import SubjectRef
from erasure.store import open_store
from erasure.workflow import make_plan
from local.bench.estate import ROOTS, SUBJECT, generate

pytestmark = [pytest.mark.postgres, pytest.mark.estate, pytest.mark.integration]


def test_the_default_plan_walks_the_whole_estate_and_decides_every_artefact(
    postgres_url: str, tmp_path: Path
) -> None:
    facts = generate(tmp_path / "estate", postgres_url)
    with open_store(postgres_url) as store:
        lineage = LineageStore(store)
        report = lineage.ingest_file(facts.events)
        assert (report.stored, report.quarantined) == (facts.run_events, 0)
        plan = make_plan(
            load_catalog(facts.catalog),
            SubjectRef(type=SUBJECT[0], value=SecretStr(SUBJECT[1])),
            lineage_store=lineage,
        )
    assert not plan.truncated
    assert not [g for g in plan.gaps if g.kind == "truncated"]
    actions = {item.dataset.name: item.action.value for item in plan.items}
    assert {n: actions.get(n) for n in facts.reachable} == facts.action
    assert all(actions[root] == "erase_rows" for root in ROOTS)
    assert len(plan.items) == len(facts.reachable) + len(ROOTS) + 1  # + the tombstone
