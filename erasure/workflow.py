"""The steps of an erasure (DESIGN section 1) as functions over models.

The CLI, the DAG and the plugin all go through here, so that none of them holds decisions.
"""

from __future__ import annotations

from datetime import datetime

from erasure.catalog import Catalog
from erasure.lineage.sources import build_lineage
from erasure.locate import locate, normalise_subject
from erasure.model import Plan, SubjectRef, SubjectSummary
from erasure.planner import DEFAULT_MAX_NODES, plan_erasure
from erasure.pseudonym import Pepper, subject_hash
from erasure.warehouse import Warehouse


def summarise_subject(
    catalog: Catalog, subject: SubjectRef, pepper: Pepper | None
) -> SubjectSummary:
    """The subject as documents may show it: type, and the keyed hash when a pepper is at hand."""
    identity = normalise_subject(catalog, subject)
    if pepper is None:
        return SubjectSummary(type=subject.type)
    return SubjectSummary(
        type=subject.type,
        hash=subject_hash(pepper, identity.type, identity.value),
        pepper_version=pepper.version,
    )


def make_plan(
    catalog: Catalog,
    subject: SubjectRef,
    *,
    pepper: Pepper | None = None,
    warehouse: Warehouse | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    now: datetime | None = None,
) -> Plan:
    """Locate the subject, build the lineage the catalog names, and decide every artefact."""
    summary = summarise_subject(catalog, subject, pepper)
    own = warehouse is None
    warehouse = warehouse or Warehouse(catalog)
    try:
        location = locate(catalog, warehouse, subject)
        lineage = build_lineage(catalog, warehouse)
        return plan_erasure(
            catalog, warehouse, location, lineage, summary, max_nodes=max_nodes, now=now
        )
    finally:
        if own:
            warehouse.dispose()
