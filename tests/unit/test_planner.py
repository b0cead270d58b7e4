from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.lineage import parse_event
from erasure.model import Action, CycleKind, GapKind, Identity, Plan, SubjectRef
from erasure.planner import make_plan
from erasure.prompts import escalation_prompt
from erasure.pseudonym import Pepper
from erasure.redacted_names import redact_subject_names
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate

CATALOG = """
version: 1
k_threshold: 3
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: w, name: src.people, connection: warehouse, kind: table,
     holds_subject: {email: email, customer_id: id},
     references: [{column: home_id, dataset: src.homes, key: id}]}
  - {namespace: w, name: src.homes, connection: warehouse, kind: table}
  - {namespace: w, name: src.visits, connection: warehouse, kind: table,
     holds_subject: {customer_id: person_id}}
  - {namespace: w, name: src.catalogue, connection: warehouse, kind: table}
  - {namespace: w, name: src.unrelated, connection: warehouse, kind: table}
  - {namespace: w, name: d.rebuilt, connection: warehouse, kind: table,
     rebuild: {sql: "CREATE TABLE d.rebuilt AS SELECT p.id AS id, p.email AS email
                     FROM src.people AS p"}}
  - {namespace: w, name: d.indirect, connection: warehouse, kind: table,
     rebuild: {sql: "CREATE TABLE d.indirect AS SELECT c.sku AS sku FROM src.catalogue AS c
                     WHERE c.sku IN (SELECT v.sku FROM src.visits AS v)"}}
  - {namespace: w, name: d.agg_ok, connection: warehouse, kind: table,
     aggregate: {quasi_identifiers: [region], count_column: n}}
  - {namespace: w, name: d.agg_bad, connection: warehouse, kind: table,
     aggregate: {quasi_identifiers: [region], count_column: n, k_threshold: 5}}
  - {namespace: w, name: d.agg_nocount, connection: warehouse, kind: table,
     aggregate: {quasi_identifiers: [region]}}
  - {namespace: w, name: d.archive, connection: warehouse, kind: file, storage: immutable,
     encryption: per_subject, retention_days: 365}
  - {namespace: w, name: d.backup, connection: warehouse, kind: backup, storage: immutable,
     retention_days: 30}
  - {namespace: w, name: d.model, connection: warehouse, kind: model}
  - {namespace: w, name: d.view, connection: warehouse, kind: view}
  - {namespace: w, name: d.opaque, connection: warehouse, kind: feature_store,
     producer: {name: features.py, opaque: true}}
  - {namespace: w, name: d.loop_a, connection: warehouse, kind: view}
  - {namespace: w, name: d.loop_b, connection: warehouse, kind: view}
  - {namespace: w, name: d.dark, connection: warehouse, kind: file,
     producer: {name: partner_export.py}}
lineage:
  sql: [{path: "sql/*.sql"}]
"""

LINEAGE_SQL = {
    "d.agg_ok": "SELECT p.region AS region, COUNT(*) AS n FROM src.people AS p GROUP BY p.region",
    "d.agg_bad": "SELECT p.region AS region, COUNT(*) AS n FROM src.people AS p GROUP BY p.region",
    "d.agg_nocount": "SELECT p.region AS region FROM src.people AS p GROUP BY p.region",
    "d.archive": "SELECT p.id AS id, p.email AS blob FROM src.people AS p",
    "d.backup": "SELECT p.id AS id, p.email AS email FROM src.people AS p",
    "d.model": "SELECT r.id AS id FROM d.rebuilt AS r",
    "d.view": "SELECT r.email AS email FROM d.rebuilt AS r",
    "d.opaque": "SELECT r.id AS id FROM d.rebuilt AS r",
    "x.unknown": "SELECT r.id AS id FROM d.model AS r",
    "d.loop_a": "SELECT p.id AS id FROM src.people AS p UNION SELECT b.id AS id FROM d.loop_b AS b",
    "d.loop_b": "SELECT a.id AS id FROM d.loop_a AS a",
}

ROWS = [
    "CREATE TABLE src.homes (id INTEGER PRIMARY KEY)",
    "INSERT INTO src.homes VALUES (1), (2)",
    "CREATE TABLE src.people (id TEXT PRIMARY KEY, email TEXT, region TEXT, home_id INTEGER)",
    "INSERT INTO src.people VALUES ('P1', 'Ann@Example.com', 'n', 1), ('P2', 'b@x.io', 'n', 1),"
    " ('P3', 'c@x.io', 'n', 2), ('P4', 'd@x.io', 's', 2), ('P5', 'e@x.io', 's', 2),"
    " ('P6', 'f@x.io', 's', 2)",
    "CREATE TABLE src.visits (id INTEGER PRIMARY KEY, person_id TEXT, sku TEXT)",
    "INSERT INTO src.visits VALUES (1, 'P1', 'A'), (2, 'P2', 'B')",
    "CREATE TABLE src.catalogue (sku TEXT PRIMARY KEY)",
    "INSERT INTO src.catalogue VALUES ('A'), ('B'), ('C')",
    "CREATE TABLE src.unrelated (x INTEGER)",
    "CREATE TABLE d.rebuilt AS SELECT p.id AS id, p.email AS email FROM src.people AS p",
    "CREATE TABLE d.indirect AS SELECT sku FROM src.catalogue",
    "CREATE TABLE d.agg_ok AS SELECT region, COUNT(*) AS n FROM src.people GROUP BY region",
    "CREATE TABLE d.agg_bad AS SELECT region, COUNT(*) AS n FROM src.people GROUP BY region",
    "INSERT INTO d.agg_bad VALUES ('w', 1)",
    "CREATE TABLE d.agg_nocount AS SELECT DISTINCT region FROM src.people",
]

SUBJECT = SubjectRef(type="email", value=SecretStr("ann@example.com"))
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def estate(tmp_path: Path) -> tuple[Catalog, Warehouse]:
    (tmp_path / "sql").mkdir()
    for target, select in LINEAGE_SQL.items():
        (tmp_path / "sql" / f"{target}.sql").write_text(select)
    return make_estate(tmp_path, CATALOG, ROWS)


@pytest.fixture
def plan(estate: tuple[Catalog, Warehouse]) -> Plan:
    catalog, warehouse = estate
    return make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)


def decisions(plan: Plan) -> dict[str, tuple[Action, str]]:
    return {i.dataset.name: (i.action, i.rule) for i in plan.items}


def test_every_row_of_the_decision_table(plan: Plan) -> None:
    assert decisions(plan) == {
        "src.people": (Action.ERASE_ROWS, "2"),
        "src.visits": (Action.ERASE_ROWS, "2"),
        "src.homes": (Action.ESCALATE, "2a"),
        "d.archive": (Action.CRYPTO_SHRED, "3"),
        "d.backup": (Action.ESCALATE, "4"),
        "d.rebuilt": (Action.REBUILD, "5"),
        "d.indirect": (Action.REBUILD, "5"),
        "d.view": (Action.REBUILD, "5"),
        "d.agg_ok": (Action.AGGREGATE_OK, "6"),
        "d.agg_bad": (Action.ESCALATE, "6"),
        "d.agg_nocount": (Action.ESCALATE, "6"),
        "d.model": (Action.ESCALATE, "7"),
        "d.opaque": (Action.ESCALATE, "1"),
        "x.unknown": (Action.ESCALATE, "1"),
        "d.loop_a": (Action.ESCALATE, "1"),
        "d.loop_b": (Action.ESCALATE, "1"),
        "d.dark": (Action.ESCALATE, "1"),
        "suppression_list": (Action.INSERT_TOMBSTONE, "tombstone"),
    }


def test_unrelated_data_stays_out(plan: Plan) -> None:
    names = {i.dataset.name for i in plan.items}
    assert "src.unrelated" not in names
    assert "src.catalogue" not in names


def test_aggregates_carry_their_measured_numbers(plan: Plan) -> None:
    items = {i.dataset.name: i for i in plan.items}
    ok = items["d.agg_ok"].evidence
    assert (ok["k"], ok["min_group_size"], ok["groups"], ok["groups_below_k"]) == (3, 3, 2, 0)
    assert ok["quasi_identifiers"] == ["region"]
    assert ok["table_version"].startswith("sha256:")
    assert "d.agg_ok" in ok["query"]
    bad = items["d.agg_bad"].evidence
    assert (bad["k"], bad["min_group_size"], bad["groups"], bad["groups_below_k"]) == (5, 1, 3, 3)
    assert "fails k=5" in items["d.agg_bad"].reason


def test_evidence_of_roots_shared_rows_and_immutable_copies(plan: Plan) -> None:
    items = {i.dataset.name: i for i in plan.items}
    assert items["src.people"].evidence["rows_before"] == 1
    assert items["src.people"].evidence["statement"].startswith("DELETE FROM src.people WHERE")
    assert items["src.homes"].evidence["other_referrers"] == 1
    assert items["d.backup"].evidence["retention_expiry_date"] == "2026-12-29"
    assert "beyond use until 2026-12-29" in items["d.backup"].reason
    assert items["d.archive"].evidence["last_copy_expires"] == "2027-11-29"
    assert items["d.view"].evidence["method"] == "view"


def test_execution_order(plan: Plan) -> None:
    phases = [
        Action.ERASE_ROWS,
        Action.CRYPTO_SHRED,
        Action.REBUILD,
        Action.AGGREGATE_OK,
        Action.ESCALATE,
        Action.INSERT_TOMBSTONE,
    ]
    ranks = [phases.index(i.action) for i in plan.items]
    assert ranks == sorted(ranks)
    order = [i.dataset.name for i in plan.items]
    assert order.index("d.rebuilt") < order.index("d.view")


def test_cycles_gaps_and_coverage(plan: Plan) -> None:
    assert [(c.kind, [r.name for r in c.datasets]) for c in plan.cycles] == [
        (CycleKind.ERROR, ["d.loop_a", "d.loop_b"])
    ]
    kinds = {(g.kind, g.dataset.name if g.dataset else None) for g in plan.gaps}
    assert (GapKind.OPAQUE_PRODUCER, "d.opaque") in kinds
    assert (GapKind.ERROR_CYCLE, "d.loop_a") in kinds
    assert 0.0 < plan.coverage <= 1.0


def test_truncated_closure_escalates_its_frontier(estate: tuple[Catalog, Warehouse]) -> None:
    catalog, warehouse = estate
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW, max_nodes=4)
    assert plan.truncated
    truncated = {g.dataset.name for g in plan.gaps if g.kind is GapKind.TRUNCATED and g.dataset}
    assert truncated
    for item in plan.items:
        if item.dataset.name in truncated and item.rule != "2":
            assert (item.action, item.rule) == (Action.ESCALATE, "1")


def test_plan_document_holds_no_identifier(plan: Plan) -> None:
    text = plan.model_dump_json()
    assert "ann@example.com" not in text.lower()
    assert "P1" not in text


def test_a_producer_that_never_reported_escalates_until_it_does(
    estate: tuple[Catalog, Warehouse],
) -> None:
    """No lineage reaches d.dark: nothing shows it is free of the subject, so it escalates."""
    catalog, warehouse = estate
    silent = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)
    dark = next(i for i in silent.items if i.dataset.name == "d.dark")
    assert "partner_export.py, which never reported a run" in dark.reason
    assert (GapKind.NO_EVENTS, "d.dark") in {
        (g.kind, g.dataset.name if g.dataset else None) for g in silent.gaps
    }

    reported = parse_event(
        {
            "eventType": "COMPLETE",
            "eventTime": "2026-11-28T01:04:12Z",
            "producer": "https://example.com/partner-export",
            "run": {"runId": "01937a10-0000-7000-8000-0000000000dd"},
            "job": {"namespace": "batch", "name": "partner_export.py"},
            "inputs": [{"namespace": "w", "name": "src.catalogue"}],
            "outputs": [{"namespace": "w", "name": "d.dark"}],
        }
    )
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW, events=[reported])
    assert "d.dark" not in {i.dataset.name for i in plan.items}  # it reads no subject data
    assert all(g.kind is not GapKind.NO_EVENTS for g in plan.gaps)


def _export_events() -> list[Any]:
    """A per-request export job named after Ann, writing a file named after her, and a job
    reading that file into another dataset."""
    run = {"eventType": "COMPLETE", "eventTime": "2026-11-28T01:04:12Z", "producer": "test"}
    export = {"namespace": "s3://dsar-exports", "name": "2026/Ann@Example.com/profile.json"}
    return [
        parse_event(
            {
                **run,
                "run": {"runId": "01937a10-0000-7000-8000-0000000000e1"},
                "job": {"namespace": "airflow", "name": "dsar_export.ann@example.com"},
                "inputs": [{"namespace": "w", "name": "src.people"}],
                "outputs": [export],
            }
        ),
        parse_event(
            {
                **run,
                "run": {"runId": "01937a10-0000-7000-8000-0000000000e2"},
                "job": {"namespace": "airflow", "name": "dsar_digest.weekly"},
                "inputs": [export],
                "outputs": [{"namespace": "w", "name": "x.export_digest"}],
            }
        ),
    ]


def test_a_dataset_named_after_the_subject_is_planned_under_a_keyed_hash_and_escalates(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    pepper = Pepper(1, b"k" * 32)
    plan = make_plan(
        catalog, SUBJECT, warehouse=warehouse, now=NOW, events=_export_events(), pepper=pepper
    )
    text = plan.model_dump_json().lower()
    assert "ann@example.com" not in text and "dsar_export.ann" not in text

    [named] = [i for i in plan.items if i.dataset.namespace == "s3://dsar-exports"]
    assert re.fullmatch(r"redacted:[0-9a-f]{16}", named.dataset.name)
    assert (named.action, named.rule) == (Action.ESCALATE, "1a")
    assert named.evidence["identifier_types"] == ["email"]
    assert named.evidence["withheld_rule"] == "1"  # uncatalogued, as before
    gaps = [g for g in plan.gaps if g.kind is GapKind.NAMES_SUBJECT]
    assert named.dataset in {g.dataset for g in gaps}
    assert any(g.dataset is None and "job or dataset name" in g.detail for g in gaps)  # the job
    # What derives from it names it by the same hash, and is decided as before.
    [digest] = [i for i in plan.items if i.dataset.name == "x.export_digest"]
    assert digest.upstreams == [named.dataset] and (digest.action, digest.rule) == (
        Action.ESCALATE,
        "1",
    )
    # Everything else is decided as without the export.
    plain = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW, pepper=pepper)
    assert {k: v for k, v in decisions(plan).items() if k in decisions(plain)} == decisions(plain)

    prompt = escalation_prompt(named)
    assert prompt.options == [
        "Its owner erases the person there",
        "Confirm the subject is not held",
        "Retain under an Art. 17(3) exemption",
    ]
    assert "ann@example.com" not in (prompt.subject + prompt.body).lower()
    assert named.dataset.name in prompt.subject
    # A re-plan names it the same; another pepper names it otherwise.
    again = make_plan(
        catalog, SUBJECT, warehouse=warehouse, now=NOW, events=_export_events(), pepper=pepper
    )
    assert named.dataset in {i.dataset for i in again.items}
    other = make_plan(
        catalog,
        SUBJECT,
        warehouse=warehouse,
        now=NOW,
        events=_export_events(),
        pepper=Pepper(2, b"o" * 32),
    )
    assert named.dataset not in {i.dataset for i in other.items}


def test_names_of_other_people_and_numbers_in_reasons_are_left_as_they_are(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    [export, _] = _export_events()
    bob = export.model_copy(
        update={
            "outputs": [export.outputs[0].model_copy(update={"name": "2026/b@x.io/profile.json"})],
            "job": export.job.model_copy(update={"name": "dsar_export.b@x.io"}),
        }
    )
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW, events=[bob])
    assert "2026/b@x.io/profile.json" in {i.dataset.name for i in plan.items}
    assert all(g.kind is not GapKind.NAMES_SUBJECT for g in plan.gaps)
    # customer id P1 is one of Ann's identities: counts in reasons are not names.
    assert "holds 1 row(s) of the subject" in " ".join(i.reason for i in plan.items)


def test_catalogued_names_are_the_operators_and_keep_their_actions(
    estate: tuple[Catalog, Warehouse],
) -> None:
    """A short id that happens to be a word of a catalogued name or namespace (`src.people`,
    namespace `w`) is not the person: the roots keep their names and their actions."""
    catalog, warehouse = estate
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)
    coincidences = [Identity("customer_id", "people"), Identity("customer_id", "w")]
    assert redact_subject_names(plan, catalog, coincidences, b"k" * 32) == plan


def test_a_port_or_a_host_digit_is_not_a_person_but_an_encoded_address_is(
    estate: tuple[Catalog, Warehouse],
) -> None:
    catalog, warehouse = estate
    events = _export_events()
    encoded = json.loads(
        json.dumps([e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in events])
        .replace("2026/Ann@Example.com", "2026/Ann%40Example.com")
        .replace('"s3://dsar-exports"', '"postgres://lake-1.internal:5432"')
    )
    plan = make_plan(
        catalog,
        SUBJECT,
        warehouse=warehouse,
        now=NOW,
        events=[parse_event(e) for e in encoded],
        pepper=Pepper(1, b"k" * 32),
    )
    shown = {i.dataset.namespace: i.dataset.name for i in plan.items}
    # The namespace is kept (its port and host digit name nobody), the encoded name is not.
    assert re.fullmatch(r"redacted:[0-9a-f]{16}", shown["postgres://lake-1.internal:5432"])
    assert "ann%40example.com" not in plan.model_dump_json().lower()
    ids = [Identity("customer_id", "5432"), Identity("customer_id", "1")]
    assert redact_subject_names(plan, catalog, ids, b"k" * 32) == plan


def test_a_kept_table_with_an_undeclared_identifier_column_is_a_warning(tmp_path: Path) -> None:
    """A request by email finds nobody in a table whose email column the catalog does not
    declare: the plan says so (a non-blocking gap) for what it keeps, not for what it
    rebuilds (a rebuild leaves nothing of the subject, whatever its columns)."""
    (tmp_path / "sql").mkdir()
    for name in ("d.contacts", "d.rebuilt"):
        (tmp_path / "sql" / f"{name}.sql").write_text(
            "SELECT p.email AS contact_email, p.region AS region FROM src.people AS p"
        )
    catalog, warehouse = make_estate(
        tmp_path,
        """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: src.people, connection: warehouse, kind: table,
     holds_subject: {email: email}}
  - {namespace: w, name: d.contacts, connection: warehouse, kind: table}
  - {namespace: w, name: d.rebuilt, connection: warehouse, kind: table,
     rebuild: {dag_id: build_d}}
lineage:
  sql: [{path: "sql/*.sql"}]
""",
        [
            "CREATE TABLE src.people (email TEXT, region TEXT)",
            "INSERT INTO src.people VALUES ('ann@example.com', 'n')",
            "CREATE TABLE d.contacts AS SELECT email AS contact_email, region FROM src.people",
            "CREATE TABLE d.rebuilt AS SELECT email AS contact_email, region FROM src.people",
        ],
    )
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)
    warned = [g for g in plan.gaps if g.kind is GapKind.UNDECLARED_IDENTIFIER]
    assert [(str(g.dataset), g.detail.split(" looks like ")[0]) for g in warned] == [
        ("d.contacts", "column 'contact_email'")
    ]
    assert "ann@example.com" not in plan.model_dump_json()
    # a warning, not a gap that blocks: the table's action is as without it
    assert decisions(plan)["d.contacts"] == (Action.ESCALATE, "7")


def test_an_aggregate_that_keeps_an_identifier_column_is_not_shown_anonymous(
    tmp_path: Path,
) -> None:
    """Its groups are large enough, but a column named like an email keeps someone's address:
    group sizes do not make it anonymous."""
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "d.agg.sql").write_text(
        "SELECT p.region AS region, COUNT(*) AS n, MAX(p.email) AS last_email "
        "FROM src.people AS p GROUP BY p.region"
    )
    catalog, warehouse = make_estate(
        tmp_path,
        """
version: 1
k_threshold: 2
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: src.people, connection: warehouse, kind: table,
     holds_subject: {email: email}}
  - {namespace: w, name: d.agg, connection: warehouse, kind: table,
     aggregate: {quasi_identifiers: [region], count_column: n}}
lineage:
  sql: [{path: "sql/*.sql"}]
""",
        [
            "CREATE TABLE src.people (email TEXT, region TEXT)",
            "INSERT INTO src.people VALUES ('ann@example.com', 'n'), ('bo@example.com', 'n')",
            "CREATE TABLE d.agg AS SELECT region, COUNT(*) AS n, MAX(email) AS last_email "
            "FROM src.people GROUP BY region",
        ],
    )
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)
    [agg] = [i for i in plan.items if i.dataset.name == "d.agg"]
    assert (agg.action, agg.rule) == (Action.ESCALATE, "6")
    assert "keeps columns named like identifiers ('last_email' (email))" in agg.reason
    assert agg.evidence["min_group_size"] == 2  # its numbers, as measured
