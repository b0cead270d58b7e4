"""Rule 6: an aggregate kept as k-anonymous is measured again once the roots are erased."""

from __future__ import annotations

from typing import Any

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import ErasureError
from erasure.kanon import KAnonymity, measure_k
from erasure.model import Evidence
from erasure.warehouse import Warehouse


class AggregateNoLongerAnonymous(ErasureError):
    """The aggregate fails k after the erasure: the DPO must decide on it."""


class AggregateEvidence(Evidence):
    """The k numbers measured at plan time and again after the erasure."""

    at_plan: dict[str, Any]
    at_act: KAnonymity


def confirm_k(
    catalog: Catalog, warehouse: Warehouse, ds: DatasetSpec, at_plan: dict[str, Any]
) -> AggregateEvidence:
    """Measure k again; AggregateNoLongerAnonymous if it no longer passes."""
    warehouse.forget_tables()
    measured = measure_k(warehouse, ds, catalog.k_for(ds))
    if not measured.passes:
        raise AggregateNoLongerAnonymous(
            f"aggregate {ds.name!r} no longer passes k={measured.k} (smallest group "
            f"{measured.min_group_size}): re-plan the request so the DPO decides on it"
        )
    return AggregateEvidence(at_plan=at_plan, at_act=measured)
