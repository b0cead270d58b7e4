"""A dbt project on Postgres, built and rebuilt by the real dbt CLI, planned and erased with only
its sources catalogued (tests/fixtures/dbt_shop: views, tables, an ephemeral model, an
incremental model, a snapshot and a seed over two source tables that hold people).

Every model gets the action a person reading its SQL would give: a view is recomputed, a
table is rebuilt by `dbt run` after the sources are clean, the ephemeral model is no artefact,
and what keeps history (the incremental model, the snapshot) escalates saying why, unless the
dbt source says incremental models may be rebuilt from scratch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
import yaml

from erasure.actions.dbt_run import rebuild_by_dbt
from erasure.actions.erase_rows import erase_rows
from erasure.actions.rebuild import RebuildContext, fresh_write_proof, rebuild
from erasure.catalog import DbtRebuild, load_catalog
from erasure.errors import RebuildFailed
from erasure.lineage import build_lineage
from erasure.locate import locate
from erasure.model import Action, DatasetRef, Plan, SubjectRef
from erasure.planner import make_plan, rebuild_order
from erasure.verify import recount
from erasure.warehouse import Warehouse

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

PROJECT = Path(__file__).parents[1] / "fixtures" / "dbt_shop"
ROOT = Path(__file__).parents[2]
SUBJECT = SubjectRef(type="email", value="Ada.Lovelace@Example.com")
PEOPLE = [
    ("C1", "ada.lovelace@example.com", "N"),
    ("C2", "grace@example.com", "N"),
    ("C3", "edsger@example.com", "S"),
    ("C4", "barbara@example.com", "S"),
]
ORDERS = [(1, "C1", 10), (2, "C2", 20), (3, "C3", 5), (4, "C1", 7), (5, "C4", 3)]
CUSTOMERS = "CREATE TABLE raw.customers (id text PRIMARY KEY, email text, region text)"
ORDERS_TABLE = (
    "CREATE TABLE raw.orders "
    "(id int PRIMARY KEY, customer_id text, amount int, ordered_at timestamp)"
)


def dbt_executable() -> str:
    found = os.environ.get("ERASURE_TEST_DBT") or str(ROOT / ".venv-dbt" / "bin" / "dbt")
    if not Path(found).is_file():
        pytest.fail(
            f"no dbt CLI at {found}: `make .venv-dbt/.installed` installs the tested one "
            "(`make test` does), or set ERASURE_TEST_DBT"
        )
    return found


@pytest.fixture(scope="module")
def shop(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The project copied beside a catalog, its sources loaded into a database of its own and
    every model, seed and snapshot built (`dbt build`); the folder holding the catalog."""
    admin = sa.make_url(postgres_url).set(database="postgres")
    url = admin.set(database=f"erasure_dbt_{uuid.uuid4().hex[:10]}")
    plain = admin.render_as_string(hide_password=False).replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{url.database}"')
    base = tmp_path_factory.mktemp("dbt-shop")
    try:
        shutil.copytree(PROJECT, base / "shop")
        (base / "profiles").mkdir()
        output = {
            "type": "postgres",
            "host": url.host,
            "port": url.port or 5432,
            "user": url.username,
            "password": url.password or "",
            "dbname": url.database,
            "schema": "analytics",
            "threads": 2,
        }
        # `dev` writes elsewhere: a worker whose profile or target differs from the manifest's
        dev = {**output, "schema": "dev_analytics"}
        profile = {"shop": {"target": "test", "outputs": {"test": output, "dev": dev}}}
        (base / "profiles" / "profiles.yml").write_text(yaml.safe_dump(profile))
        engine = sa.create_engine(url.set(drivername="postgresql+psycopg"))
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE SCHEMA raw"))
            conn.execute(sa.text(CUSTOMERS))
            conn.execute(sa.text(ORDERS_TABLE))
            conn.execute(
                sa.text("INSERT INTO raw.customers VALUES (:id, :email, :region)"),
                [{"id": i, "email": e, "region": r} for i, e, r in PEOPLE],
            )
            conn.execute(
                sa.text("INSERT INTO raw.orders VALUES (:id, :c, :a, :at)"),
                [{"id": n, "c": c, "a": a, "at": datetime(2026, 11, n)} for n, c, a in ORDERS],
            )
        engine.dispose()
        dbt_ol_build(base)
        write_catalog(base, url.set(drivername="postgresql+psycopg"))
        yield base
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')


def dbt_ol_build(base: Path) -> None:
    """`dbt build` through dbt-ol, OpenLineage's dbt wrapper: the real run events of every
    model, snapshot and seed, written to lineage/dbt-ol.jsonl by its file transport."""
    (base / "lineage").mkdir()
    events = base / "lineage" / "dbt-ol.jsonl"
    config = {"transport": {"type": "file", "log_file_path": str(events), "append": True}}
    (base / "openlineage.yml").write_text(yaml.safe_dump(config))
    bin_dir = str(Path(dbt_executable()).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "OPENLINEAGE_CONFIG": str(base / "openlineage.yml"),
        "OPENLINEAGE_NAMESPACE": "dbt",
    }
    done = subprocess.run(
        [str(Path(bin_dir) / "dbt-ol"), "build", "--profiles-dir", str(base / "profiles")],
        cwd=base / "shop",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def dbt(base: Path, *args: str) -> None:
    """A dbt command on the built project, its manifest (the catalog's) left as built."""
    scratch = base / "scratch-target"
    done = subprocess.run(
        [
            dbt_executable(),
            *args,
            "--profiles-dir",
            str(base / "profiles"),
            "--target-path",
            str(scratch),
        ],
        cwd=base / "shop",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]


def write_catalog(base: Path, url: sa.URL, *, openlineage: bool = False, **dbt_source: Any) -> Path:
    """The catalog a data team writes for the project: its two sources, and the manifest;
    with `openlineage`, also dbt-ol's run events, the warehouse known by their names."""
    catalog = {
        "version": 1,
        "identifiers": {
            "email": {"normalise": "email"},
            "customer_id": {"normalise": "strip", "one_per_person": True},
        },
        "connections": {"warehouse": {"url": url.render_as_string(hide_password=False)}},
        "datasets": [
            {
                "namespace": "warehouse",
                "name": "raw.customers",
                "connection": "warehouse",
                "kind": "table",
                "holds_subject": {"email": "email", "customer_id": "id"},
            },
            {
                "namespace": "warehouse",
                "name": "raw.orders",
                "connection": "warehouse",
                "kind": "table",
                "holds_subject": {"customer_id": "customer_id"},
            },
        ],
        "lineage": {
            "dbt": [
                {
                    "manifest": "shop/target/manifest.json",
                    "connection": "warehouse",
                    "profiles_dir": "profiles",
                    "executable": dbt_executable(),
                    **dbt_source,
                }
            ]
        },
    }
    if openlineage:
        namespace = f"postgres://{url.host}:{url.port or 5432}"  # the OpenLineage naming spec
        for entry in catalog["datasets"]:
            entry["aliases"] = [{"namespace": namespace, "name": f"{url.database}.{entry['name']}"}]
        catalog["lineage"]["dbt"][0]["openlineage_namespace"] = namespace
        catalog["lineage"]["openlineage"] = ["lineage/*.jsonl"]
        dbt_source = {**dbt_source, "openlineage": True}
    path = base / f"catalog{'-' + '-'.join(dbt_source) if dbt_source else ''}.yaml"
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    return path


def by_name(plan: Plan) -> dict[str, Any]:
    return {item.dataset.name: item for item in plan.items}


def count(warehouse: Warehouse, sql: str) -> int:
    with warehouse.engine("warehouse").connect() as conn:
        return int(conn.execute(sa.text(sql)).scalar_one())


def rows_of(warehouse: Warehouse, table: str, customer: str) -> int:
    """The rows of `table` (a name this test wrote) whose customer_id is `customer`."""
    with warehouse.engine("warehouse").connect() as conn:
        found = conn.execute(
            sa.text(f"SELECT count(*) FROM {table} WHERE customer_id = :c"), {"c": customer}
        )
        return int(found.scalar_one())


def test_every_model_gets_the_action_its_sql_calls_for(shop: Path) -> None:
    catalog = load_catalog(shop / "catalog.yaml")
    plan = make_plan(catalog, SUBJECT)
    items = by_name(plan)
    actions = {name: (item.action, item.evidence.get("method")) for name, item in items.items()}
    assert actions == {
        "raw.customers": (Action.ERASE_ROWS, None),
        "raw.orders": (Action.ERASE_ROWS, None),
        "analytics.stg_customers": (Action.REBUILD, "view"),
        "analytics.stg_orders": (Action.REBUILD, "view"),
        "analytics.customer_value": (Action.REBUILD, "dbt"),
        "analytics.region_revenue": (Action.REBUILD, "dbt"),
        "analytics.order_events": (Action.ESCALATE, None),
        "snapshots.customers_snapshot": (Action.ESCALATE, None),
        "suppression_list": (Action.INSERT_TOMBSTONE, None),
    }
    # the ephemeral model is inlined into customer_value: no relation, no artefact
    assert "analytics.int_order_totals" not in items
    assert items["analytics.customer_value"].evidence["select"] == (
        "path:models/marts/customer_value.sql"
    )
    assert items["analytics.customer_value"].evidence["described_by"] == (
        "dbt manifest shop/target/manifest.json: model.shop.customer_value (materialized table)"
    )
    assert items["analytics.order_events"].reason.startswith(
        "a dbt incremental model keeps the rows of its earlier runs"
    )
    assert items["snapshots.customers_snapshot"].reason.startswith(
        "a dbt snapshot keeps every earlier version of a row"
    )
    assert "described_by" not in items["raw.customers"].evidence
    # the seed is described too (a table with no rebuild), though no erasure reaches it
    seed = catalog.dataset(DatasetRef("warehouse", "analytics.regions"))
    assert seed is not None and seed.rebuild is None


def test_dbt_ols_own_run_events_land_on_the_catalogs_datasets(shop: Path) -> None:
    """dbt-ol's events name the warehouse `postgres://host:port` and each relation
    `database.schema.table`; with the sources aliased and the manifest's namespace given,
    every pair an event reports lands in the closure under the catalog's identities, and the
    plan is the manifest's alone: no relation planned twice, nothing uncatalogued."""
    url = sa.make_url(load_catalog(shop / "catalog.yaml").connections["warehouse"].url)  # type: ignore[attr-defined]
    catalog = load_catalog(write_catalog(shop, url, openlineage=True))
    events = [
        json.loads(line) for line in (shop / "lineage" / "dbt-ol.jsonl").read_text().splitlines()
    ]
    pairs = {
        (catalog.canonical(DatasetRef(i["namespace"], i["name"])),
         catalog.canonical(DatasetRef(o["namespace"], o["name"])))
        for e in events if e["eventType"] == "COMPLETE"
        for i in e.get("inputs", []) for o in e.get("outputs", [])
    }  # fmt: skip
    assert len(pairs) >= 7  # every model and the snapshot, with their inputs
    lineage = build_lineage(catalog)
    for source, target in pairs:
        assert target in lineage.graph.forward_closure([source]).datasets, (source, target)
    outputs = {target for _, target in pairs}
    assert all(t.namespace == "warehouse" for t in outputs), outputs  # known by the catalog
    plan = make_plan(catalog, SUBJECT)
    manifest_only = make_plan(load_catalog(shop / "catalog.yaml"), SUBJECT)
    assert {i.dataset for i in plan.items} == {i.dataset for i in manifest_only.items}
    assert not [i for i in plan.items if i.evidence.get("gap") == "uncatalogued"]


def test_erased_sources_then_dbt_rebuilds_leave_the_subject_nowhere_and_everyone_else(
    shop: Path,
) -> None:
    catalog = load_catalog(shop / "catalog.yaml")
    warehouse = Warehouse(catalog)
    try:
        others_before = count(warehouse, "SELECT count(*) FROM analytics.customer_value")
        assert rows_of(warehouse, "analytics.customer_value", "C1") == 1
        location = locate(catalog, warehouse, SUBJECT)
        plan = make_plan(catalog, SUBJECT, warehouse=warehouse, location=location)
        for item in plan.items:
            if item.action is Action.ERASE_ROWS:
                erase_rows(catalog, warehouse, location, item.dataset)
        ready_at = datetime.now(UTC)
        evidence = {}
        for ref in rebuild_order(plan):
            evidence[ref] = rebuild(catalog, warehouse, ref, trigger_dag=None, ready_at=ready_at)
        dbt_built = {r.name: e for r, e in evidence.items() if e.method == "dbt"}
        assert sorted(dbt_built) == ["analytics.customer_value", "analytics.region_revenue"]
        assert dbt_built["analytics.customer_value"].dbt_node == "model.shop.customer_value"
        assert dbt_built["analytics.customer_value"].rows_after == len(PEOPLE) - 1
        # What is left, read independently of the erasure: the subject is gone from every
        # rebuilt model, everyone else is still there.
        assert rows_of(warehouse, "analytics.customer_value", "C1") == 0
        assert (
            count(warehouse, "SELECT count(*) FROM analytics.customer_value") == others_before - 1
        )
        assert count(warehouse, "SELECT sum(revenue) FROM analytics.region_revenue") == 28
        # verify: the rebuilt tables' own proof is dbt's report of this request's run
        items = {i.dataset: i for i in plan.items}

        def proof(item: Any) -> str | None:
            done = evidence[item.dataset].model_dump(mode="json")
            return fresh_write_proof(item, done, lambda *_: [], datetime.now(UTC))

        counted = recount(catalog, warehouse, location.identities, {}, plan, fresh_write=proof)
        assert all(r.ok for r in counted), [r for r in counted if not r.ok]
        method = {ref.name: item.evidence.get("method") for ref, item in items.items()}
        rebuilt = [r for r in counted if method[r.dataset] == "dbt"]
        assert [r.proof for r in rebuilt if r.proof] and all(
            "rebuilt by dbt" in r.proof for r in rebuilt if r.proof
        )
        # what keeps history was left for the DPO, and still holds the subject
        assert rows_of(warehouse, "analytics.order_events", "C1") == 2
    finally:
        warehouse.dispose()


def test_incremental_models_rebuilt_from_scratch_when_the_dbt_source_allows_it(
    shop: Path,
) -> None:
    url = sa.make_url(load_catalog(shop / "catalog.yaml").connections["warehouse"].url)  # type: ignore[attr-defined]
    catalog = load_catalog(write_catalog(shop, url, incremental="full_refresh"))
    ref = DatasetRef("warehouse", "analytics.order_events")
    entry = catalog.dataset(ref)
    assert entry is not None and entry.rebuild is not None
    detail = entry.rebuild.plan_detail()
    assert detail == {"select": "path:models/marts/order_events.sql", "full_refresh": True}
    warehouse = Warehouse(catalog)
    try:
        with warehouse.engine("warehouse").begin() as conn:
            conn.execute(sa.text("DELETE FROM raw.orders WHERE customer_id = 'C4'"))
        done = rebuild(catalog, warehouse, ref, trigger_dag=None)
        assert done.method == "dbt"
        assert done.rows_after == count(warehouse, "SELECT count(*) FROM raw.orders")
        assert rows_of(warehouse, "analytics.order_events", "C4") == 0
    finally:
        with warehouse.engine("warehouse").begin() as conn:  # as the other tests found it
            conn.execute(
                sa.text("INSERT INTO raw.orders VALUES (:id, :c, :a, :at)"),
                [{"id": n, "c": c, "a": a, "at": datetime(2026, 11, n)}
                 for n, c, a in ORDERS if c == "C4"],
            )  # fmt: skip
        warehouse.dispose()


def edited(path: Path, old: str, new: str) -> Any:
    """A context in which the project file `path` says `new` where it said `old`."""

    @contextlib.contextmanager
    def editing() -> Iterator[None]:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
        try:
            yield
        finally:
            path.write_text(text)

    return editing()


MODEL, MODEL_FILE = "analytics.customer_value", "models/marts/customer_value.sql"


@pytest.mark.parametrize(
    ("change", "source", "why"),
    [
        # the worker's profile target differs from the one the manifest was compiled for
        (None, {"target": "dev"}, f"it wrote 'dev_analytics.customer_value', not '{MODEL}'"),
        # the model's alias changed since the manifest the plan read
        ((MODEL_FILE, "select\n", "{{ config(alias='customer_value_v2') }}\nselect\n"),
         {}, f"it wrote 'analytics.customer_value_v2', not '{MODEL}'"),
        # materialised otherwise now: a view where the plan rebuilt a table
        ((MODEL_FILE, "select\n", "{{ config(materialized='view') }}\nselect\n"),
         {}, "materialized 'view' now, not table as planned"),
    ],
)  # fmt: skip
def test_a_dbt_run_that_wrote_something_else_than_planned_is_no_rebuild(
    shop: Path, change: tuple[str, str, str] | None, source: dict[str, str], why: str
) -> None:
    """dbt reports success either way; the planned relation would keep the subject's rows."""
    if source.get("target") == "dev":  # what the model reads exists there too
        dbt(shop, "seed", "--target", "dev")
        dbt(shop, "run", "--target", "dev", "--select", "stg_customers", "stg_orders")
    url = sa.make_url(load_catalog(shop / "catalog.yaml").connections["warehouse"].url)  # type: ignore[attr-defined]
    catalog = load_catalog(write_catalog(shop, url, **source))
    ref = DatasetRef("warehouse", "analytics.customer_value")
    warehouse = Warehouse(catalog)
    try:
        before = count(warehouse, "SELECT count(*) FROM analytics.customer_value")
        with (
            edited(shop / "shop" / change[0], change[1], change[2])
            if change
            else contextlib.nullcontext(),
            pytest.raises(RebuildFailed, match=why),
        ):
            rebuild(catalog, warehouse, ref, trigger_dag=None)
        assert count(warehouse, "SELECT count(*) FROM analytics.customer_value") == before
    finally:
        warehouse.dispose()


def test_an_incremental_model_dbt_will_not_refresh_whole_is_no_rebuild(shop: Path) -> None:
    url = sa.make_url(load_catalog(shop / "catalog.yaml").connections["warehouse"].url)  # type: ignore[attr-defined]
    catalog = load_catalog(write_catalog(shop, url, incremental="full_refresh"))
    warehouse = Warehouse(catalog)
    model = shop / "shop" / "models" / "marts" / "order_events.sql"
    try:
        ref = DatasetRef("warehouse", "analytics.order_events")
        with (
            edited(model, "unique_key='order_id'", "unique_key='order_id', full_refresh=false"),
            pytest.raises(RebuildFailed, match="full_refresh: false"),
        ):
            rebuild(catalog, warehouse, ref, trigger_dag=None)
    finally:
        warehouse.dispose()


def test_a_dbt_run_that_fails_stops_the_rebuild_without_repeating_dbts_output(
    shop: Path,
) -> None:
    catalog = load_catalog(shop / "catalog.yaml")
    warehouse = Warehouse(catalog)
    ref = DatasetRef("warehouse", "analytics.region_revenue")
    try:
        with warehouse.engine("warehouse").begin() as conn:
            conn.execute(sa.text("DROP VIEW analytics.stg_orders CASCADE"))
        try:
            with pytest.raises(RebuildFailed) as failed:
                rebuild(catalog, warehouse, ref, trigger_dag=None)
        finally:
            dbt(shop, "run", "--select", "stg_orders")
        message = str(failed.value)
        assert "'model.shop.region_revenue' ended 'error'" in message
        assert "does not exist" not in message  # dbt's log (the database's error) is not repeated
        # the table dbt was to replace is still there, with what it held
        assert count(warehouse, "SELECT count(*) FROM analytics.region_revenue") >= 1
    finally:
        warehouse.dispose()


def test_a_selection_dbt_runs_nothing_for_is_a_failed_rebuild(shop: Path) -> None:
    """dbt exits 0 with "Nothing to do" when the selection matches no node (a model renamed
    since the manifest was read): that is no rebuild."""
    catalog = load_catalog(shop / "catalog.yaml")
    warehouse = Warehouse(catalog)
    ds = catalog.dataset(DatasetRef("warehouse", "analytics.region_revenue"))
    assert ds is not None
    gone = DbtRebuild(
        select="path:models/marts/renamed_since.sql",
        project_dir="shop",
        profiles_dir="profiles",
        executable=dbt_executable(),
    )
    try:
        with pytest.raises(RebuildFailed, match=r"\(no node ran\)"):
            rebuild_by_dbt(gone, RebuildContext(warehouse, ds, None, datetime.now(UTC)))
    finally:
        warehouse.dispose()
