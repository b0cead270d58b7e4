"""Observed lineage from OpenLineage run events, as Airflow's OpenLineage provider emits them."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from erasure.errors import LineageError
from erasure.lineage.openlineage import (
    RunEvent,
    edges_from_events,
    event_id,
    event_text,
    parse_event,
    read_event_file,
    runs_from_events,
    timeline_edges,
)
from erasure.model import (
    DatasetRef,
    EdgeOrigin,
    EdgeSubtype,
    EdgeType,
    FieldRef,
    Gap,
    GapKind,
    LineageEdge,
)

DATA = Path(__file__).parent / "data" / "openlineage"
PG = "postgres://127.0.0.1:5432"
ORDERS = "warehouse.staging.orders"
CUSTOMERS = "warehouse.staging.customers"
LTV = "warehouse.marts.customer_ltv"
STATS = "warehouse.marts.customer_order_stats"
D, I = EdgeType.DIRECT, EdgeType.INDIRECT  # noqa: E741 - reads like the spec
S = EdgeSubtype


def col(dataset: str, column: str | None, namespace: str = PG) -> FieldRef:
    return FieldRef(DatasetRef(namespace, dataset), column)


def observed(
    source: FieldRef,
    target: FieldRef,
    type_: EdgeType,
    subtype: EdgeSubtype,
    *,
    job: str,
    run_id: str,
    at: str,
) -> LineageEdge:
    return LineageEdge(
        source=source,
        target=target,
        type=type_,
        subtype=subtype,
        origin=EdgeOrigin.OBSERVED,
        producer=f"default/{job}",
        run_id=run_id,
        run_state="COMPLETE",
        observed_at=datetime.fromisoformat(at),
    )


def minimal(event_type: str = "COMPLETE", **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "eventType": event_type,
        "eventTime": "2025-06-02T02:00:00.000Z",
        "run": {"runId": "01975a3c-0000-7000-8000-000000000001"},
        "job": {"namespace": "default", "name": "marts_daily.build_customer_ltv"},
        "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.3.0",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "inputs": [{"namespace": PG, "name": ORDERS}],
        "outputs": [{"namespace": PG, "name": LTV}],
    }
    event.update(overrides)
    return event


# --- column lineage, `fields` shape ---------------------------------------------------------


def test_fields_shape_gives_one_edge_per_transformation() -> None:
    events = read_event_file(DATA / "customer_ltv_fields.json")
    lineage = edges_from_events(events)

    def edge(source: FieldRef, target: str, t: EdgeType, s: EdgeSubtype) -> LineageEdge:
        return observed(
            source,
            col(LTV, target),
            t,
            s,
            job="marts_daily.build_customer_ltv",
            run_id="01975a3c-8a1e-7b52-9d0e-5c1f2a7b4e10",
            at="2025-06-02T02:00:41.870000+00:00",  # the COMPLETE event, not the START
        )

    assert lineage.edges == [
        edge(col(CUSTOMERS, "customer_id"), "customer_id", D, S.IDENTITY),
        edge(col(CUSTOMERS, "email"), "email_sha256", D, S.TRANSFORMATION),
        edge(col(ORDERS, "amount"), "lifetime_value", D, S.AGGREGATION),
        edge(col(ORDERS, "status"), "lifetime_value", I, S.CONDITIONAL),
        # no `transformations` and empty legacy fields (what Airflow's SQL parser sends):
        # counted as a disclosure, and the subtype is not guessed
        edge(col(ORDERS, "ordered_at"), "first_order_at", D, S.UNKNOWN),
    ]
    assert lineage.gaps == []


def test_input_field_with_several_transformations_gives_several_edges() -> None:
    facet = {
        "fields": {
            "lifetime_value": {
                "inputFields": [
                    {
                        "namespace": PG,
                        "name": ORDERS,
                        "field": "amount",
                        "transformations": [
                            {"type": "DIRECT", "subtype": "AGGREGATION"},
                            {"type": "INDIRECT", "subtype": "WINDOW"},
                        ],
                    }
                ]
            }
        }
    }
    event = minimal(outputs=[{"namespace": PG, "name": LTV, "facets": {"columnLineage": facet}}])
    edges = edges_from_events([parse_event(event)]).edges
    assert [(e.source, e.target, e.type, e.subtype) for e in edges] == [
        (col(ORDERS, "amount"), col(LTV, "lifetime_value"), D, S.AGGREGATION),
        (col(ORDERS, "amount"), col(LTV, "lifetime_value"), I, S.WINDOW),
    ]


def test_a_declared_input_the_column_facet_leaves_out_still_reaches_the_output() -> None:
    """The spec's `inputs` list every dataset a run read; its column facet may leave one out
    (read only to filter, or spelt another way: `db.public.t` beside `public.t`). A facet
    never hides an input: each it does not name reaches the output table-level, DIRECT."""
    facet = {
        "fields": {
            "lifetime_value": {
                "inputFields": [{"namespace": PG, "name": ORDERS, "field": "amount"}]
            }
        }
    }
    spelt_apart = "analytics.warehouse.staging.customers"
    event = minimal(
        inputs=[
            {"namespace": PG, "name": ORDERS},
            {"namespace": PG, "name": spelt_apart},
            {"namespace": "kafka://broker:9092", "name": "suppressions"},
        ],
        outputs=[{"namespace": PG, "name": LTV, "facets": {"columnLineage": facet}}],
    )
    lineage = edges_from_events([parse_event(event)])
    assert [(e.source, e.target, e.type, e.subtype) for e in lineage.edges] == [
        (col(ORDERS, "amount"), col(LTV, "lifetime_value"), D, S.UNKNOWN),
        (col(spelt_apart, None), col(LTV, None), D, S.UNKNOWN),
        (col("suppressions", None, "kafka://broker:9092"), col(LTV, None), D, S.UNKNOWN),
    ]
    assert lineage.gaps == []  # the columns the facet names are known


def test_a_job_reading_its_own_output_feeds_it_back() -> None:
    """A MERGE or an incremental load lists its output among its inputs: the output's earlier
    rows flow into its new ones, so even when the facet does not say so, the output depends
    on itself (a one-member feedback cycle: a rebuild must start it empty)."""
    facet = {"fields": {"ltv": {"inputFields": [{"namespace": PG, "name": ORDERS, "field": "a"}]}}}
    event = minimal(
        inputs=[{"namespace": PG, "name": ORDERS}, {"namespace": PG, "name": LTV}],
        outputs=[{"namespace": PG, "name": LTV, "facets": {"columnLineage": facet}}],
    )
    edges = edges_from_events([parse_event(event)]).edges
    assert (col(LTV, None), col(LTV, None)) in {(e.source, e.target) for e in edges}


@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        ({"transformationType": "IDENTITY"}, S.IDENTITY),
        ({"transformationType": "MASKED", "transformationDescription": "sha256"}, S.TRANSFORMATION),
        ({"transformationDescription": "amount * 100"}, S.TRANSFORMATION),
        ({}, S.UNKNOWN),
    ],
)
def test_legacy_transformation_fields_are_direct(
    legacy: dict[str, str], expected: EdgeSubtype
) -> None:
    field = {"inputFields": [{"namespace": PG, "name": ORDERS, "field": "amount"}], **legacy}
    facet = {"fields": {"amount_cents": field}}
    event = minimal(outputs=[{"namespace": PG, "name": LTV, "facets": {"columnLineage": facet}}])
    (edge,) = edges_from_events([parse_event(event)]).edges
    assert (edge.type, edge.subtype) == (D, expected)


# --- column lineage, dataset-wide shape (facet 1-2-0) -----------------------------------------


def test_dataset_shape_reaches_every_output_column_from_fields_and_schema() -> None:
    lineage = edges_from_events(read_event_file(DATA / "customer_order_stats_dataset.jsonl"))

    def edge(source: str, target: str, t: EdgeType, s: EdgeSubtype) -> LineageEdge:
        return observed(
            col(ORDERS, source),
            col(STATS, target),
            t,
            s,
            job="marts_daily.build_customer_order_stats",
            run_id="01975a3d-1b2c-7d3e-8f40-516273849aab",
            at="2025-06-02T02:01:10+00:00",
        )

    assert lineage.edges == [
        edge("customer_id", "customer_id", D, S.IDENTITY),
        edge("order_id", "order_count", D, S.AGGREGATION),
        # `refreshed_at` is only in the schema facet (now()): still filtered and grouped
        edge("status", "customer_id", I, S.FILTER),
        edge("status", "order_count", I, S.FILTER),
        edge("status", "refreshed_at", I, S.FILTER),
        edge("customer_id", "customer_id", I, S.GROUP_BY),
        edge("customer_id", "order_count", I, S.GROUP_BY),
        edge("customer_id", "refreshed_at", I, S.GROUP_BY),
    ]
    assert lineage.gaps == []


def test_dataset_shape_without_known_output_columns_is_table_level() -> None:
    facet = {
        "fields": {},
        "dataset": [
            {
                "namespace": PG,
                "name": ORDERS,
                "field": "status",
                "transformations": [{"type": "INDIRECT", "subtype": "FILTER"}],
            }
        ],
    }
    event = minimal(outputs=[{"namespace": PG, "name": LTV, "facets": {"columnLineage": facet}}])
    (edge,) = edges_from_events([parse_event(event)]).edges
    assert (edge.source, edge.target, edge.type, edge.subtype) == (
        col(ORDERS, "status"),
        col(LTV, None),
        I,
        S.FILTER,
    )


# --- no column lineage --------------------------------------------------------------------------


def test_output_without_column_facet_gives_table_edge_and_gap() -> None:
    lineage = edges_from_events(read_event_file(DATA / "crm_contacts_table_only.jsonl"))

    assert lineage.edges == [
        observed(
            col("contacts/2025-06-01.csv", None, namespace="s3://acme-crm-exports"),
            col("warehouse.raw.crm_contacts", None),  # dataset names are lower-cased
            D,
            S.UNKNOWN,
            job="crm_ingest.load_contacts",
            run_id="01975a3b-0001-7aaa-8bbb-cccdddeeefff",
            at="2025-06-02T01:55:00+00:00",
        )
    ]
    assert lineage.gaps == [
        Gap(
            kind=GapKind.TABLE_ONLY_LINEAGE,
            detail=f"job default/crm_ingest.load_contacts wrote {PG}/warehouse.raw.crm_contacts "
            "but carries no columnLineage facet; only table-level lineage is known",
            dataset=DatasetRef(PG, "warehouse.raw.crm_contacts"),
        )
    ]


def test_unreadable_column_facet_falls_back_to_table_level_with_gap() -> None:
    facet = {"fields": {"customer_id": {"inputFields": [{"namespace": PG, "name": ORDERS}]}}}
    event = minimal(outputs=[{"namespace": PG, "name": LTV, "facets": {"columnLineage": facet}}])
    lineage = edges_from_events([parse_event(event)])

    assert [(e.source, e.target, e.subtype) for e in lineage.edges] == [
        (col(ORDERS, None), col(LTV, None), S.UNKNOWN)
    ]
    (gap,) = lineage.gaps
    assert gap.kind is GapKind.TABLE_ONLY_LINEAGE
    assert "fields.customer_id.inputFields[0].field" in gap.detail


# --- run states -------------------------------------------------------------------------------


def test_failed_and_aborted_runs_are_evidence_without_edges() -> None:
    lineage = edges_from_events(read_event_file(DATA / "failed_and_aborted.jsonl"))

    assert lineage.edges == []
    assert lineage.gaps == []
    assert [(r.job, r.state, r.event_time, r.outputs) for r in lineage.runs] == [
        (
            "default/marts_daily.build_customer_ltv",
            "FAIL",
            datetime(2025, 6, 3, 2, 0, 9, tzinfo=UTC),
            (DatasetRef(PG, LTV),),
        ),
        (
            "default/marts_daily.build_customer_order_stats",
            "ABORT",
            datetime(2025, 6, 3, 2, 1, 30, tzinfo=UTC),
            (DatasetRef(PG, STATS),),
        ),
    ]
    assert all(len(r.event_ids) == 2 for r in lineage.runs)


def test_start_alone_publishes_nothing() -> None:
    lineage = edges_from_events([parse_event(minimal("START"))])
    assert lineage.edges == []
    assert [(r.state, r.inputs) for r in lineage.runs] == [("START", (DatasetRef(PG, ORDERS),))]


def test_start_and_complete_facets_are_merged_per_run() -> None:
    # START carries inputs and column lineage; COMPLETE only the output's statistics.
    lineage = edges_from_events(read_event_file(DATA / "start_complete_split.jsonl"))

    (run,) = lineage.runs
    assert run.state == "COMPLETE"
    assert run.inputs == (DatasetRef(PG, CUSTOMERS), DatasetRef(PG, ORDERS))
    assert len(run.event_ids) == 2  # the third line repeats COMPLETE with its keys reordered
    assert {(str(e.source), str(e.target), e.type, e.subtype) for e in lineage.edges} == {
        (f"{CUSTOMERS}.customer_id", f"{LTV}.customer_id", D, S.IDENTITY),
        (f"{CUSTOMERS}.email", f"{LTV}.email_sha256", D, S.TRANSFORMATION),
        (f"{ORDERS}.amount", f"{LTV}.lifetime_value", D, S.AGGREGATION),
        (f"{ORDERS}.status", f"{LTV}.lifetime_value", I, S.CONDITIONAL),
        (f"{ORDERS}.ordered_at", f"{LTV}.first_order_at", D, S.UNKNOWN),
    }
    assert len(lineage.edges) == 5
    assert {e.observed_at for e in lineage.edges} == {datetime(2025, 6, 4, 2, 0, 40, tzinfo=UTC)}
    assert {e.run_id for e in lineage.edges} == {"01975c00-0000-7000-8000-0000005b1170"}


def test_events_out_of_order_still_use_the_terminal_event() -> None:
    start = minimal("START", eventTime="2025-06-02T02:00:00Z")
    complete = minimal("COMPLETE", eventTime="2025-06-02T02:05:00Z")
    lineage = edges_from_events([parse_event(complete), parse_event(start)])
    (run,) = lineage.runs
    assert run.state == "COMPLETE"
    assert run.event_time == datetime(2025, 6, 2, 2, 5, tzinfo=UTC)


def test_duplicate_events_are_idempotent() -> None:
    events = read_event_file(DATA / "customer_ltv_fields.json")
    once = edges_from_events(events)
    twice = edges_from_events(events + events + list(reversed(events)))
    assert twice == once
    assert len(once.runs) == 1


# --- parsing --------------------------------------------------------------------------------


def test_event_type_is_accepted_in_any_case_and_extra_fields_are_kept() -> None:
    raw = minimal("complete", customField={"kept": True})
    event = parse_event(json.dumps(raw))
    assert event.event_type == "COMPLETE"
    assert event.event_time == datetime(2025, 6, 2, 2, 0, tzinfo=UTC)
    assert event.raw == raw  # the evidence is the event as sent
    assert event.model_dump(by_alias=True)["customField"] == {"kept": True}


def test_optional_parts_may_be_missing() -> None:
    raw = minimal()
    for key in ("inputs", "outputs", "producer", "schemaURL", "eventType"):
        del raw[key]
    event = parse_event(raw)
    assert (event.inputs, event.outputs, event.event_type) == ([], [], None)
    assert edges_from_events([event]).runs[0].state == "OTHER"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda e: e["run"].pop("runId"), "run.runId"),
        (lambda e: e["run"].update(runId="  "), "run.runId"),
        (lambda e: e["job"].pop("name"), "job.name"),
        (lambda e: e.pop("job"), "job"),
        (lambda e: e.pop("eventTime"), "eventTime"),
        (lambda e: e.update(eventTime="2025-06-02T02:00:00"), "eventTime"),  # no UTC offset
        (lambda e: e.update(eventType="FINISHED"), "eventType"),
        (lambda e: e["outputs"][0].pop("name"), "outputs[0].name"),
    ],
)
def test_malformed_event_names_the_field(mutate: Any, field: str) -> None:
    raw = minimal()
    mutate(raw)
    with pytest.raises(LineageError, match=re.escape(f"{field}: ")):
        parse_event(raw)


@pytest.mark.parametrize("raw", ['{"eventType": "START",', b"[1, 2]", "null"])
def test_non_object_or_broken_json_is_rejected(raw: str | bytes) -> None:
    with pytest.raises(LineageError, match="OpenLineage event"):
        parse_event(raw)


# --- files ----------------------------------------------------------------------------------


def test_json_lines_file_with_bad_json_names_file_and_line() -> None:
    path = DATA / "bad_json_line.jsonl"  # lines 1 and 3 are fine, 2 is blank, 4 is cut short
    with pytest.raises(LineageError, match=r"bad_json_line\.jsonl:4: not valid JSON"):
        read_event_file(path)


def test_json_lines_file_with_invalid_event_names_file_line_and_field() -> None:
    with pytest.raises(
        LineageError, match=r"missing_run_id\.jsonl:2: .*run\.runId: Field required"
    ):
        read_event_file(DATA / "missing_run_id.jsonl")


def test_json_array_file_errors_name_the_element_line(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    good = json.dumps(minimal(), indent=2)
    bad = json.dumps(minimal(job={"namespace": "default"}), indent=2)
    path.write_text(f"[\n{good},\n{bad}\n]\n")
    expected_line = 2 + good.count("\n") + 1
    with pytest.raises(LineageError, match=rf"events\.json:{expected_line}: .*job\.name"):
        read_event_file(path)


def test_array_single_object_and_empty_files(tmp_path: Path) -> None:
    array = read_event_file(DATA / "customer_ltv_fields.json")
    assert [e.event_type for e in array] == ["START", "COMPLETE"]
    single = tmp_path / "one.json"
    single.write_text(json.dumps(minimal(), indent=2))
    assert len(read_event_file(single)) == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert read_event_file(empty) == []


def test_missing_file_is_a_lineage_error(tmp_path: Path) -> None:
    with pytest.raises(LineageError, match=r"nope\.jsonl"):
        read_event_file(tmp_path / "nope.jsonl")


# --- event id -------------------------------------------------------------------------------


def test_event_id_is_a_stable_content_hash() -> None:
    raw = minimal()
    reordered = dict(reversed(list(raw.items())))
    first = event_id(parse_event(raw))
    assert first == event_id(parse_event(json.dumps(reordered, indent=4)))
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 64
    assert first != event_id(parse_event(minimal(eventTime="2025-06-02T02:00:01.000Z")))


def test_event_id_hashes_canonical_json() -> None:
    # Pinned: a change to the hashing would orphan every stored raw event.
    raw = {
        "run": {"runId": "r"},
        "job": {"namespace": "n", "name": "j"},
        "eventTime": "2025-01-01T00:00:00Z",
    }
    canonical = (
        b'{"eventTime":"2025-01-01T00:00:00Z",'
        b'"job":{"name":"j","namespace":"n"},"run":{"runId":"r"}}'
    )
    assert event_id(parse_event(raw)) == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_run_event_built_directly_has_an_id() -> None:
    event = RunEvent.model_validate(minimal())
    assert event_id(event) == event_id(parse_event(minimal()))


def test_a_plainly_well_formed_event_reads_as_the_models_read_it() -> None:
    """Ingest builds common events without the validators: the same event, field by field."""
    from erasure.lineage.openlineage import RunEvent
    from erasure.lineage.openlineage.spec import _well_formed

    samples = [json.loads(line) for line in _demo_lines()] + [
        minimal("complete", customField={"kept": True}),
        minimal(inputs=None, outputs=None),
        {**minimal(), "run": {"runId": "r", "facets": {"parent": {}}, "extraRun": 1}},
    ]
    for raw in samples:
        fast = _well_formed(json.loads(json.dumps(raw)))
        assert fast is not None
        slow = RunEvent.model_validate(raw)
        assert fast.model_dump(by_alias=True) == slow.model_dump(by_alias=True)
        assert event_id(fast) == event_id(slow)
        datasets = zip(fast.inputs + fast.outputs, slow.inputs + slow.outputs, strict=True)
        for ours, theirs in [(fast.run, slow.run), (fast.job, slow.job), *datasets]:
            assert ours == theirs and ours.model_extra == theirs.model_extra
            rebuilt = type(ours).model_construct(**ours.__dict__, **(ours.model_extra or {}))
            for state in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__"):
                assert getattr(ours, state) == getattr(rebuilt, state)  # as model_construct
            assert ours.__pydantic_private__ == rebuilt.__pydantic_private__
        values = {name: getattr(fast, name) for name in RunEvent.model_fields}
        rebuilt = RunEvent.model_construct(**values, **(fast.model_extra or {}))
        assert fast.__dict__ == rebuilt.__dict__ and fast.model_extra == rebuilt.model_extra
        assert fast.model_fields_set == rebuilt.model_fields_set
        assert set(fast.__pydantic_private__ or {}) == set(rebuilt.__pydantic_private__ or {})
    for broken in (
        {**minimal(), "eventTime": "2025-06-02T02:00:00"},  # no zone
        {**minimal(), "eventType": "FINISHED"},
        {**minimal(), "job": {"namespace": " ", "name": "x"}},
        {**minimal(), "outputs": [{"namespace": PG}]},
        {**minimal(), "run": {"runId": "r", "facets": None}},
    ):
        assert _well_formed(broken) is None  # left to the models, which say what is wrong


def _demo_lines() -> list[str]:
    path = Path(__file__).resolve().parents[3] / "erasure/sample/estate/lineage/events.jsonl"
    return path.read_text().splitlines()


# --- JobEvents (static lineage) and DatasetEvents -------------------------------------------


def job_event(**overrides: Any) -> dict[str, Any]:
    """A JobEvent as the spec defines it: a job's declared inputs and outputs, no run."""
    event: dict[str, Any] = {
        "eventTime": "2025-06-01T00:00:00Z",
        "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/dbt",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/JobEvent",
        "job": {"namespace": "default", "name": "marts_daily.build_customer_ltv"},
        "inputs": [{"namespace": PG, "name": ORDERS}],
        "outputs": [{"namespace": PG, "name": LTV}],
    }
    event.update(overrides)
    return event


def test_a_job_event_is_static_lineage_read_as_a_completed_run_of_its_job() -> None:
    event = parse_event(job_event())
    lineage = edges_from_events([event])
    [edge] = lineage.edges
    assert (edge.source, edge.target, edge.producer) == (
        col(ORDERS, None),
        col(LTV, None),
        "default/marts_daily.build_customer_ltv",
    )
    assert edge.run_id == event.run.run_id and edge.run_id.startswith("job-event:")
    assert edge.observed_at == datetime(2025, 6, 1, tzinfo=UTC)
    # kept as sent (no run, no eventType added), and read back as the same event and run
    assert "run" not in json.loads(event_text(event)) and "eventType" not in event.content()
    again = parse_event(event_text(event))
    assert (event_id(again), again.run.run_id) == (event_id(event), event.run.run_id)
    other = parse_event(job_event(eventTime="2025-06-02T00:00:00Z"))
    assert other.run.run_id != event.run.run_id


def test_a_later_run_of_the_job_supersedes_its_static_lineage() -> None:
    later = minimal(eventTime="2025-06-03T00:00:00Z")
    later["inputs"] = [{"namespace": PG, "name": CUSTOMERS}]
    runs = runs_from_events([parse_event(job_event()), parse_event(later)])
    edges = timeline_edges(runs).edges
    current = {(str(e.source), str(e.target)) for e in edges if e.valid_to is None}
    assert current == {(f"{CUSTOMERS}.*", f"{LTV}.*")}
    ended = [e for e in edges if e.valid_to is not None]
    assert [(str(e.source), e.valid_to) for e in ended] == [
        (f"{ORDERS}.*", datetime(2025, 6, 3, tzinfo=UTC))
    ]


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            {"eventTime": "2025-06-01T00:00:00Z", "dataset": {"namespace": PG, "name": LTV}},
            "an OpenLineage DatasetEvent carries no lineage",
        ),
        (job_event(job={"namespace": "default"}), "malformed OpenLineage JobEvent: job.name"),
        (job_event(eventTime="yesterday"), "malformed OpenLineage JobEvent: eventTime"),
        # a RunEvent without its run is a malformed RunEvent, not a JobEvent
        (minimal(run=None) | {"run": None}, "malformed OpenLineage RunEvent: run"),
        # nor may a run pass for one (a FAIL would turn a JobEvent's lineage into a failure)
        (
            minimal("FAIL", run={"runId": "job-event:7bf303db8b7fc54dc37d9ff33e0abf28"}),
            "malformed OpenLineage RunEvent: run.runId: the prefix 'job-event:'",
        ),
    ],
)
def test_other_event_kinds_are_named_in_the_error(event: dict[str, Any], message: str) -> None:
    with pytest.raises(LineageError, match=re.escape(message)):
        parse_event(event)
