"""`erasure catalog discover` on a real PostgreSQL: the estate of tests/unit/test_discover.py
read through information_schema (every schema, named in the catalog or not; a table of the
default schema the catalog names bare), its columns judged the same as on SQLite; a table of
100,000 rows read through one bounded query that samples its blocks; materialized views
searched, a partitioned table once (not partition by partition), a mixed-case table noted as
one the catalog cannot name; a uuid key looked in with uuids only; a table the connection's
user may not read noted by the failure's class and code; a read-only session; an unreachable
server skipped by the plan-time check; and no sampled value in the output or an error.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from erasure.catalog import load_catalog
from erasure.cli import main
from erasure.discover import (
    Discovery,
    Status,
    check_undeclared_holders,
    discover,
    render_discovery,
)
from erasure.discover.reading import _open_read_only
from erasure.model import DatasetRef
from erasure.warehouse import Warehouse
from tests.unit.test_discover import (
    CATALOG,
    assert_no_canary,
    check_estate_findings,
    fill_estate,
    find,
    one,
    seen_statements,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def postgres_url(postgres_url: str) -> Iterator[str]:
    """A database of this module's own: discovery reads every schema of its connection, and
    the session's database holds other tests' schemas (and their `crm`)."""
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    name = f"erasure_discover_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

# The default schema's table, named bare as a catalog may name it.
BARE_ENTRY = "  - {namespace: warehouse, name: signups, connection: warehouse, kind: table}\n"


@pytest.fixture(scope="module")
def estate(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        for schema in ("crm", "sales", "legacy", "web"):
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        fill_estate(conn, public="public")
        conn.execute(sa.text("CREATE TABLE legacy.devices (device UUID, holder TEXT)"))
        conn.execute(
            sa.text("INSERT INTO legacy.devices VALUES (:d, :o)"),
            [{"d": uuid.UUID(int=n), "o": f"Owner{n}@Example.org"} for n in range(1, 21)],
        )
        conn.execute(sa.text("CREATE TABLE web.clicks (id INTEGER, user_email TEXT)"))
        conn.execute(
            sa.text(
                "INSERT INTO web.clicks SELECT i, 'user' || i || '@example.com' "
                "FROM generate_series(1, 100000) AS i"
            )
        )
        conn.execute(sa.text("ANALYZE web.clicks"))  # reltuples: the size sampling reads
    engine.dispose()
    path = tmp_path_factory.mktemp("discover-pg") / "catalog.yaml"
    text = CATALOG.replace("URL", postgres_url)
    path.write_text(text.replace("defaults:\n", BARE_ENTRY + "defaults:\n"))
    return path


@pytest.fixture(scope="module")
def report(estate: Path) -> Iterator[Discovery]:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    try:
        yield discover(catalog, warehouse, "warehouse", exclude_schemas=["web"])
    finally:
        warehouse.dispose()


def test_discovery_on_postgres_finds_what_it_finds_on_sqlite(report: Discovery) -> None:
    check_estate_findings(report)
    assert set(report.schemas) == {"crm", "legacy", "public", "sales"}
    signups = one(report, "signups", "EmailAddress")  # the catalog's bare name for it
    assert signups.catalogued and signups.status is Status.PROPOSED
    holder = one(report, "legacy.devices", "holder")  # beside a uuid column, sampled alike
    assert (holder.identifier_type, holder.values_read) == ("email", 20)
    assert [f for f in report.findings if f.column == "device"] == []


def test_the_cli_on_postgres_never_repeats_a_sampled_value(
    estate: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["catalog", "discover", "--catalog", str(estate), "--connection", "warehouse"]
    assert main([*args, "--exclude-schema", "web"]) == 0
    text, err = capsys.readouterr()
    assert main([*args, "--exclude-schema", "web", "--json"]) == 0
    as_json, err_json = capsys.readouterr()
    assert_no_canary(text, err, as_json, err_json)
    assert "  legacy.people  (no entry of its own; catalog default #1" in text
    assert json.loads(as_json)["dialect"] == "postgresql"


def test_a_table_of_100k_rows_is_read_through_one_bounded_query_of_sampled_blocks(
    estate: Path,
) -> None:
    catalog = load_catalog(estate)
    with seen_statements() as statements:
        found = discover(catalog, Warehouse(catalog), "warehouse", schemas=["web"], sample_rows=700)
    reads = [(s, p) for s, p in statements if "FROM web.clicks" in s]
    assert len(reads) == 1
    sql, parameters = reads[0]
    # Blocks from all over the table (5x the rows wanted, repeatable), then the LIMIT; each
    # text value cut in SQL.
    assert (
        "TABLESAMPLE system(" in sql
        and "REPEATABLE" in sql
        and sql.endswith("LIMIT %(param_2)s::INTEGER")
    )
    assert parameters["system_1"] == pytest.approx(100 * 5 * 700 / 100_000, rel=0.2)
    assert parameters["param_2"] == 700
    assert "substr(CAST(clicks_1.user_email AS TEXT)" in sql
    clicks = one(found, "web.clicks", "user_email")
    assert (clicks.rows_sampled, clicks.values_read) == (700, 700)


def test_a_table_the_user_may_not_read_is_noted_and_judged_by_name(
    postgres_url: str, estate: Path, tmp_path: Path
) -> None:
    role = f"discover_reader_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT USAGE ON SCHEMA crm, sales TO {role}"))
        conn.execute(sa.text(f"GRANT SELECT ON ALL TABLES IN SCHEMA crm TO {role}"))
        conn.execute(sa.text(f"GRANT SELECT ON sales.name_probe TO {role}"))  # not contacts
    reader_url = sa.make_url(postgres_url).set(username=role, password=None)
    path = tmp_path / "catalog.yaml"
    path.write_text(
        estate.read_text().replace(postgres_url, reader_url.render_as_string(hide_password=False))
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    try:
        found = discover(catalog, warehouse, "warehouse", schemas=["sales"])
    finally:
        warehouse.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        admin.dispose()
    assert found.notes == [
        "sales.contacts: not sampled (InsufficientPrivilege 42501); its columns are judged "
        "by name alone"
    ]
    mobile = one(found, "sales.contacts", "mobile")
    assert (mobile.status, mobile.rows_sampled) == (Status.PROPOSED, None)
    assert_no_canary(render_discovery(found), found.model_dump_json())


def test_an_unreachable_server_says_what_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG.replace("URL", "postgresql://nobody@127.0.0.1:1/nowhere"))
    code = main(["catalog", "discover", "--catalog", str(path), "--connection", "warehouse"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("erasure: connection 'warehouse': cannot connect (")
    assert err.endswith("check the server is up and the connection's URL in the catalog\n")


def test_materialized_views_and_partitioned_tables_are_searched_mixed_case_ones_noted(
    postgres_url: str, estate: Path
) -> None:
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA shapes"))
        conn.execute(
            sa.text(
                "CREATE MATERIALIZED VIEW shapes.contact_mv AS "
                "SELECT contact AS address FROM sales.contacts"
            )
        )
        conn.execute(
            sa.text("CREATE TABLE shapes.events (at DATE, user_email TEXT) PARTITION BY RANGE (at)")
        )
        for year in (2024, 2025):
            conn.execute(
                sa.text(
                    f"CREATE TABLE shapes.events_{year} PARTITION OF shapes.events "
                    f"FOR VALUES FROM ('{year}-01-01') TO ('{year + 1}-01-01')"
                )
            )
        conn.execute(
            sa.text(
                "INSERT INTO shapes.events SELECT DATE '2024-01-01' + i, "
                "'u' || i || '@example.com' FROM generate_series(0, 700) AS i"
            )
        )
        conn.execute(sa.text('CREATE TABLE shapes."Customers" ("Email" TEXT)'))
        conn.execute(sa.text("INSERT INTO shapes.\"Customers\" VALUES ('a@example.com')"))
    engine.dispose()
    catalog = load_catalog(estate)
    report = discover(catalog, Warehouse(catalog), "warehouse", schemas=["shapes"])
    tables = {f.dataset.name for f in report.findings}
    assert tables == {"shapes.contact_mv", "shapes.events"}  # the parent, once
    address = one(report, "shapes.contact_mv", "address")
    assert (address.status, address.values_read) == (Status.PROPOSED, 40)
    events = one(report, "shapes.events", "user_email")
    assert events.values_read == 701  # both partitions, through their parent
    proposed = {e["name"]: e for e in yaml.safe_load(report.catalog_yaml)["datasets"]}
    assert proposed["shapes.contact_mv"]["kind"] == "materialized_view"
    assert "shapes.customers" not in report.catalog_yaml  # never proposed lower-cased
    assert report.notes == [
        "2 partition(s) not listed: each is read through its partitioned table",
        "1 table(s) not searched, since the catalog cannot name them as they are (it "
        "lower-cases dataset names, and `.` separates the schema): 'shapes.Customers'; give "
        "each a lower-case name (or a view named so) to catalogue it",
    ]


def test_a_uuid_key_is_looked_in_with_uuids_only(postgres_url: str, tmp_path: Path) -> None:
    engine = sa.create_engine(postgres_url)
    ids = [uuid.UUID(int=n + 1) for n in range(10)]
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA ukeys"))
        conn.execute(sa.text("CREATE TABLE ukeys.accounts (id UUID PRIMARY KEY)"))
        conn.execute(sa.text("INSERT INTO ukeys.accounts VALUES (:i)"), [{"i": i} for i in ids])
        conn.execute(sa.text("CREATE TABLE ukeys.tickets (requester TEXT)"))
        # One value is no uuid: a uuid comparison of it would fail the lookup (22P02).
        values = [str(i).upper() for i in ids[:6]] + ["not-a-uuid"]
        conn.execute(sa.text("INSERT INTO ukeys.tickets VALUES (:v)"), [{"v": v} for v in values])
    engine.dispose()
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "version: 1\nidentifiers: {account_id: {normalise: strip}}\n"
        f'connections: {{wh: {{url: "{postgres_url}"}}}}\ndatasets:\n'
        "  - {namespace: wh, name: ukeys.accounts, connection: wh, kind: table,"
        " holds_subject: {account_id: id}}\n"
    )
    catalog = load_catalog(path)
    report = discover(catalog, Warehouse(catalog), "wh", schemas=["ukeys"])
    found = one(report, "ukeys.tickets", "requester")
    assert (found.status, found.found_in, found.ids_found, found.ids_looked_up) == (
        Status.VALUES_ONLY,
        "ukeys.accounts.id",
        6,
        7,
    )
    assert report.notes == []


def test_discovery_reads_in_a_read_only_session_of_its_own(estate: Path) -> None:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    opened = _open_read_only(warehouse, "warehouse")
    try:
        assert opened.conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        with pytest.raises(sa.exc.InternalError):  # ReadOnlySqlTransaction 25006
            opened.conn.exec_driver_sql("CREATE TABLE crm.written (x INT)")
    finally:
        opened.conn.close()
        opened.engine.dispose()
    assert warehouse._engines == {}  # the warehouse's pool was never used


def test_the_plan_time_check_skips_an_unreachable_server_and_reads_the_others(
    postgres_url: str, estate: Path, tmp_path: Path
) -> None:
    text = estate.read_text().replace(
        "connections:\n",
        'connections:\n  down: {url: "postgresql://nobody@127.0.0.1:1/nowhere"}\n'
        "  af: {airflow_conn_id: dwh}\n",
    )
    text = text.replace(
        "defaults:\n",
        "  - {namespace: warehouse, name: far.people, connection: down, kind: table}\n"
        "  - {namespace: warehouse, name: far.more, connection: af, kind: table}\n"
        "defaults:\n",
    )
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    catalog = load_catalog(path)
    refs = [DatasetRef("warehouse", n) for n in ("sales.contacts", "far.people", "far.more")]
    for rows in (0, 50):
        warehouse = Warehouse(catalog)
        try:
            checked = check_undeclared_holders(catalog, warehouse, refs, sample_rows=rows)
        finally:
            warehouse.dispose()
        assert {f.column for f in checked.findings} >= {"mobile", "email"}
        assert {s.dataset.name for s in checked.skipped} == {"far.people", "far.more"}
        assert find(checked.findings, "far.people", "email") == []
