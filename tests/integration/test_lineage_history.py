"""Issue 18 through the lineage store, on SQLite and Postgres: whatever order the archive
job's later events arrive in, the plan keeps shredding the archive, says where the job's
lineage shrank, and reports no higher coverage than before."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.lineage import LineageStore
from erasure.model import Action, GapKind, Plan, SubjectRef
from erasure.planner import make_plan
from erasure.sample.seed import DEMO_SUBJECT, build_demo
from erasure.store import Store
from tests.unit.lineage.archive_runs import FAMILIES, NOW, SHRINKING, parsed

pytestmark = [pytest.mark.integration]

SUBJECT = SubjectRef(type=DEMO_SUBJECT[0], value=SecretStr(DEMO_SUBJECT[1]))
ARCHIVE = "archive.customer_events"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return build_demo(tmp_path_factory.mktemp("demo") / "estate")


@pytest.fixture(scope="module")
def baseline(demo: Catalog) -> Plan:
    return make_plan(demo, SUBJECT, now=NOW)  # in memory, before any later event


def archive_view(plan: Plan) -> tuple[Action, set[str], bool]:
    [item] = [i for i in plan.items if i.dataset.name == ARCHIVE]
    shrank = any(g.kind is GapKind.LINEAGE_SHRANK and g.dataset == item.dataset for g in plan.gaps)
    return item.action, {u.name for u in item.upstreams}, shrank


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("order", ["file_first", "family_first"])
def test_the_store_keeps_the_archive_in_every_plan(
    demo: Catalog, baseline: Plan, store: Store, family: str, order: str
) -> None:
    catalog = demo
    lineage = LineageStore(store)
    events = parsed(*FAMILIES[family])
    if order == "file_first":  # the plan syncs the estate's event file
        assert archive_view(make_plan(catalog, SUBJECT, lineage_store=lineage, now=NOW)) == (
            Action.CRYPTO_SHRED,
            {"crm.customers", "crm.orders"},
            False,
        )
    lineage.ingest(events)
    expected = (Action.CRYPTO_SHRED, {"crm.customers", "crm.orders"}, family in SHRINKING)
    for as_of in (None, NOW):  # the CLI's current lineage, and the workflow's pinned instant
        stored = make_plan(catalog, SUBJECT, lineage_store=lineage, now=NOW, as_of=as_of)
        assert archive_view(stored) == expected
        assert stored.coverage <= baseline.coverage
        assert {i.dataset for i in baseline.items} <= {i.dataset for i in stored.items}
    # The store and the in-memory reading of the same events agree.
    in_memory = make_plan(catalog, SUBJECT, events=events, now=NOW)
    assert archive_view(in_memory) == expected
    assert in_memory.coverage == stored.coverage
    assert sorted((g.kind, g.dataset, g.detail) for g in in_memory.gaps) == sorted(
        (g.kind, g.dataset, g.detail) for g in stored.gaps
    )


def test_two_artefacts_written_alike_stop_the_plan_naming_neither(demo: Catalog) -> None:
    """A producer writing `s3://lake` + `exports/x.csv` and `s3://lake/exports` + `x.csv`:
    the action log and the record name both `s3://lake/exports/x.csv`, so one's erasure or
    ruling would count for the other. The plan stops and says so, never plans them as one."""
    from erasure.errors import LineageError
    from erasure.lineage import parse_event

    source = demo.by_name("crm.customers")

    def run(run_id: str, namespace: str, name: str) -> dict[str, object]:
        return {
            "eventType": "COMPLETE",
            "eventTime": "2026-11-28T02:00:00Z",
            "run": {"runId": run_id},
            "job": {"namespace": "exports", "name": f"export_{run_id}"},
            "inputs": [{"namespace": source.namespace, "name": source.name}],
            "outputs": [{"namespace": namespace, "name": name}],
        }

    events = [
        parse_event(run("r1", "s3://lake", "exports/x.csv")),
        parse_event(run("r2", "s3://lake/exports", "x.csv")),
    ]
    with pytest.raises(LineageError, match="written 'namespace/name' alike") as err:
        make_plan(demo, SUBJECT, events=events, now=NOW)
    assert "x.csv" not in str(err.value)
