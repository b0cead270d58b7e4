"""Issue 18: a plan erases against every lineage that may have written the data.

No later event - a FAIL or ABORT for a run that had completed, a COMPLETE with fewer inputs,
a run that ends again, events out of order - takes the per-subject-encrypted archive out of
a plan, and none raises coverage. Where the job's current lineage lost inputs, the plan says
so as a blocking `lineage_shrank` gap.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.model import Action, GapKind, Plan, SubjectRef
from erasure.planner import make_plan
from erasure.sample.seed import DEMO_SUBJECT, build_demo
from tests.unit.lineage.archive_runs import (
    COMPLETED_AT,
    FAMILIES,
    NOW,
    SHRINKING,
    archive_event,
    parsed,
)

SUBJECT = SubjectRef(type=DEMO_SUBJECT[0], value=SecretStr(DEMO_SUBJECT[1]))
ARCHIVE = "archive.customer_events"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return build_demo(tmp_path_factory.mktemp("demo") / "estate")


@pytest.fixture(scope="module")
def baseline(demo: Catalog) -> Plan:
    return make_plan(demo, SUBJECT, now=NOW)


def plan(catalog: Catalog, events: list[dict[str, Any]], *, now: datetime = NOW) -> Plan:
    return make_plan(catalog, SUBJECT, events=parsed(*events), now=now)


def item(plan: Plan, name: str) -> Any:
    [found] = [i for i in plan.items if i.dataset.name == name]
    return found


def shrank(plan: Plan, name: str) -> list[str]:
    return [
        g.detail
        for g in plan.gaps
        if g.kind is GapKind.LINEAGE_SHRANK and g.dataset is not None and g.dataset.name == name
    ]


def test_the_demo_archive_is_shredded_without_later_events(baseline: Plan) -> None:
    assert item(baseline, ARCHIVE).action is Action.CRYPTO_SHRED
    assert not shrank(baseline, ARCHIVE)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_later_event_takes_the_archive_out_of_the_plan_or_raises_coverage(
    demo: Catalog, baseline: Plan, family: str
) -> None:
    after = plan(demo, FAMILIES[family])
    archive = item(after, ARCHIVE)
    assert archive.action is Action.CRYPTO_SHRED
    # The lineage that wrote it is still cited: both roots it read, from the retained view.
    assert {u.name for u in archive.upstreams} == {"crm.customers", "crm.orders"}
    assert after.coverage <= baseline.coverage
    # Nothing the baseline planned is dropped, whatever the event said.
    assert {i.dataset for i in baseline.items} <= {i.dataset for i in after.items}
    assert bool(shrank(after, ARCHIVE)) == (family in SHRINKING)


def test_the_shrink_gap_says_which_inputs_went_when_and_what_to_do(demo: Catalog) -> None:
    after = plan(demo, FAMILIES["fail_for_the_completed_run"])
    [detail] = shrank(after, ARCHIVE)
    assert "airflow/archive_customer_events.write" in detail
    assert "crm.customers" in detail and "crm.orders" in detail
    assert "2026-11-28T01:05:00Z" in detail and "FAIL" in detail
    assert "until 2033-" in detail  # the archive's 2555 days of retention
    assert "the DPO rules" in detail
    # The shred is not blocked (destroying the key clears every copy), but it keeps the gap.
    archive = item(after, ARCHIVE)
    assert GapKind.LINEAGE_SHRANK.value in [g["kind"] for g in archive.evidence["gaps"]]


def test_a_shrunk_mutable_output_escalates_until_the_dpo_rules(demo: Catalog) -> None:
    # A later run of the archive job writes a mart too, then one that lists no inputs.
    first = archive_event("COMPLETE", "2026-11-28T04:00:00Z", run_id="m-1", output="marts.x")
    later = archive_event(
        "COMPLETE",
        "2026-11-29T04:00:00Z",
        run_id="m-2",
        output="marts.x",
        inputs=False,
        column_lineage=False,
    )
    after = plan(demo, [first, later])
    mart = item(after, "marts.x")
    # Uncatalogued: escalates either way; the shrink gap is on the plan for the DPO.
    assert mart.action is Action.ESCALATE
    assert shrank(after, "marts.x")


def test_an_edge_older_than_the_outputs_retention_leaves_the_closure(demo: Catalog) -> None:
    events = FAMILIES["fail_for_the_completed_run"]
    within = plan(demo, events, now=COMPLETED_AT + timedelta(days=2554))
    past = plan(demo, events, now=COMPLETED_AT + timedelta(days=2556))
    assert {u.name for u in item(within, ARCHIVE).upstreams} == {"crm.customers", "crm.orders"}
    assert shrank(within, ARCHIVE)
    # Past its retention the failed run's rows are gone: no edge, no gap...
    assert item(past, ARCHIVE).upstreams == []
    assert not shrank(past, ARCHIVE)
    # ...but a per-subject-key archive is in every plan, shredded, reached or not.
    assert item(past, ARCHIVE).action is Action.CRYPTO_SHRED


def test_immutable_datasets_are_planned_even_when_no_lineage_reaches_them(
    tmp_path: Path,
) -> None:
    catalog = build_demo(tmp_path / "estate")
    (Path(catalog.base_dir) / "lineage" / "events.jsonl").write_text("")
    for sql in (Path(catalog.base_dir) / "sql").glob("backup.*.sql"):
        sql.unlink()
    bare = make_plan(catalog, SUBJECT, now=NOW)
    assert item(bare, ARCHIVE).action is Action.CRYPTO_SHRED
    assert item(bare, "backup.crm_nightly").action is Action.ESCALATE
