"""OpenLineage run events of the demo estate's archive job, in the families the spec allows.

The demo's `events.jsonl` holds one START and one COMPLETE of `archive_customer_events.write`
(run ...0001, 2026-11-28T01:04:12Z), whose column lineage carries the customer's email and
orders into the per-subject-encrypted `archive.customer_events`. Each family below is a later
word about that job: none of them may take the archive out of a plan.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import erasure.sample
from erasure.lineage.openlineage import RunEvent, parse_event

FIRST_RUN = "01937a10-0000-7000-8000-000000000001"
COMPLETED_AT = datetime(2026, 11, 28, 1, 4, 12, tzinfo=UTC)
# The plans' instant: a day after the demo's runs, well inside the archive's 2555 days.
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _complete() -> dict[str, Any]:
    with (Path(erasure.sample.__file__).parent / "estate/lineage/events.jsonl").open() as lines:
        for line in lines:
            event = json.loads(line)
            if event["eventType"] == "COMPLETE" and event["run"]["runId"] == FIRST_RUN:
                return dict(event)
    raise AssertionError("the demo estate lost its archive run")


def archive_event(
    event_type: str,
    at: str,
    *,
    run_id: str = FIRST_RUN,
    inputs: bool = True,
    outputs: bool = True,
    column_lineage: bool = True,
    output: str | None = None,
) -> dict[str, Any]:
    """One event of the archive job, shaped like its demo COMPLETE."""
    event = copy.deepcopy(_complete())
    event.update(eventType=event_type, eventTime=at, run={"runId": run_id})
    if not inputs:
        event["inputs"] = []
    if not outputs:
        event["outputs"] = []
    for entry in event["outputs"]:
        if not column_lineage:
            entry["facets"].pop("columnLineage")
        if output is not None:
            entry["name"] = output
    return event


def parsed(*events: dict[str, Any]) -> list[RunEvent]:
    return [parse_event(e) for e in events]


FAMILIES: dict[str, list[dict[str, Any]]] = {
    # The two reproductions of issue 18.
    "fail_for_the_completed_run": [
        archive_event("FAIL", "2026-11-28T01:05:00Z", inputs=False, outputs=False)
    ],
    "later_complete_with_no_inputs": [
        archive_event(
            "COMPLETE", "2026-11-29T01:04:12Z", run_id="r-2", inputs=False, column_lineage=False
        )
    ],
    # ABORT is terminal too: after the COMPLETE it withdraws the run's edges the same way.
    "abort_for_the_completed_run": [archive_event("ABORT", "2026-11-28T01:06:00Z")],
    # A later run that starts with its inputs and fails with none listed.
    "start_with_inputs_then_fail_with_none": [
        archive_event("START", "2026-11-29T01:00:00Z", run_id="r-3", column_lineage=False),
        archive_event("FAIL", "2026-11-29T01:02:00Z", run_id="r-3", inputs=False, outputs=False),
    ],
    # A run that ends again: FAIL after its COMPLETE, then a COMPLETE with no inputs.
    "a_run_that_re_ends": [
        archive_event("FAIL", "2026-11-28T01:05:00Z", inputs=False, outputs=False),
        archive_event("COMPLETE", "2026-11-28T01:07:00Z", inputs=False, column_lineage=False),
    ],
    # Times out of order: the empty COMPLETE is sent before the FAIL that precedes it.
    "out_of_order_times": [
        archive_event(
            "COMPLETE", "2026-11-29T02:00:00Z", run_id="r-4", inputs=False, column_lineage=False
        ),
        archive_event("FAIL", "2026-11-29T01:00:00Z", run_id="r-4", column_lineage=False),
    ],
    # A later run that writes the same output with a RUNNING event only (streaming, partial).
    "running_with_fewer_inputs": [
        archive_event("RUNNING", "2026-11-29T01:00:00Z", run_id="r-5", inputs=False),
    ],
}

# The families after which the job's current lineage lacks inputs it reported before.
SHRINKING = {
    "fail_for_the_completed_run",
    "later_complete_with_no_inputs",
    "abort_for_the_completed_run",
}
