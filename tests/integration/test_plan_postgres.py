"""The engine plans the demo estate on a real Postgres warehouse with schemas exactly as on
SQLite: same roots, same decisions, same k numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from erasure.model import Action, Plan, SubjectRef
from erasure.planner import make_plan
from erasure.sample.seed import DEMO_SUBJECT, build_demo

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SUBJECT = SubjectRef(type=DEMO_SUBJECT[0], value=SecretStr(DEMO_SUBJECT[1]))


def summary(plan: Plan) -> dict[str, object]:
    return {
        "roots": {(r.dataset.name, r.rows, r.shared_referrers) for r in plan.roots},
        "items": [(i.dataset.name, i.action, i.rule) for i in plan.items],
        "k": {
            i.dataset.name: (i.evidence["min_group_size"], i.evidence["groups_below_k"])
            for i in plan.items
            if "min_group_size" in i.evidence
        },
        "cycles": [(c.kind, c.datasets) for c in plan.cycles],
    }


def test_demo_plan_is_identical_on_postgres_and_sqlite(tmp_path: Path, postgres_url: str) -> None:
    on_postgres = make_plan(build_demo(tmp_path / "pg", url=postgres_url), SUBJECT)
    on_sqlite = make_plan(build_demo(tmp_path / "lite"), SUBJECT)
    assert summary(on_postgres) == summary(on_sqlite)
    items = {i.dataset.name: i for i in on_postgres.items}
    assert items["crm.customers"].action is Action.ERASE_ROWS
    assert items["crm.customers"].evidence["rows_before"] == 1
    assert items["crm.orders"].evidence["rows_before"] == 3
    # Postgres placeholders in the recorded statement: the value is bound, never inlined.
    assert "%(" in items["crm.orders"].evidence["statement"]
    assert items["agg.customers_by_region_month"].action is Action.AGGREGATE_OK
    assert "alice" not in on_postgres.model_dump_json().lower()
