"""Plans (`erasure.registry.plans`): saved once per version, never rewritten, one subject each."""

from __future__ import annotations

import pytest

from erasure.catalog import Catalog
from erasure.errors import RequestError
from tests.unit.registry.support import plan_for, request
from tests.unit.registry_support import Books, register


def test_plans_are_immutable_and_versioned(registry: Books, catalog: Catalog) -> None:
    hashed = register(registry, request(), catalog=catalog, run_id="r").subject_hash
    first = registry.plans.save("REQ-1", plan_for(hashed, "snap-1"), 1)
    retried = registry.plans.save("REQ-1", plan_for(hashed, "snap-other"), 1)

    assert retried == first and registry.plans.get("REQ-1").lineage_snapshot == "snap-1"
    with pytest.raises(RequestError, match="no plan version 2"):
        registry.plans.save("REQ-1", plan_for(hashed), 3)
    registry.plans.save("REQ-1", plan_for(hashed, "snap-2"), 2)
    assert registry.plans.get("REQ-1", 2).lineage_snapshot == "snap-2"
    assert registry.plans.versions("REQ-1") == [1, 2]
    with pytest.raises(RequestError, match="no plan version 5"):
        registry.plans.get("REQ-1", 5)
    with pytest.raises(RequestError, match="another subject"):
        registry.plans.save("REQ-1", plan_for("b" * 64), 3)
    with pytest.raises(RequestError, match="no erasure request 'NOPE'"):
        registry.plans.get("NOPE")
