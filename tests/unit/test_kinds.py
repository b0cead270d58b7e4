"""Pluggable kinds: a new connection or rebuild target registers from outside erasure/, the
forms catalogs were written in before kinds existed still load, and every error names the
field and the known kinds without echoing a value."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.actions.rebuild import RebuildContext, RebuildEvidence, rebuild
from erasure.catalog import (
    CONNECTIONS,
    REBUILD_TARGETS,
    AirflowConnection,
    ConnectionConfig,
    ConnectionContext,
    DagRebuild,
    RebuildTarget,
    SqlRebuild,
    UrlConnection,
    ViewRebuild,
    load_catalog,
)
from erasure.errors import CatalogError, ConfigError
from erasure.kinds import KindConfig, KindError, KindRegistry
from erasure.locate import Location, locate
from erasure.model import Action, SubjectRef
from erasure.planner import make_plan
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate

SECRET = "s3cr3t-7f1c9a"  # a password that must never appear in a message

# ---------------------------------------------------------------------------------------------
# The registry itself, on a family of its own


class Greeting(KindConfig):
    """The family's base config."""


class Hello(Greeting):
    kind: Literal["hello"] = "hello"
    name: str
    implied_by: ClassVar[str | None] = "name"


class Login(Greeting):
    kind: Literal["login"] = "login"
    user: str
    password: int  # typed: a string here fails validation, and must not be echoed
    implied_by: ClassVar[str | None] = "user"


def greetings() -> KindRegistry[Greeting, str, str]:
    registry: KindRegistry[Greeting, str, str] = KindRegistry(
        Greeting, family="greeting", group=f"erasure.test_{uuid.uuid4().hex[:8]}"
    )

    @registry.kind(Hello)
    def hello(config: Hello, punctuation: str) -> str:
        return f"hello {config.name}{punctuation}"

    registry.register(Login, lambda config, punctuation: f"login {config.user}{punctuation}")
    return registry


def test_a_kind_is_picked_by_name_or_by_the_field_that_implies_it() -> None:
    registry = greetings()
    assert registry.names() == ["hello", "login"]
    assert registry.build(registry.parse({"kind": "hello", "name": "ada"}), "!") == "hello ada!"
    assert registry.build(registry.parse({"name": "ada"}), "?") == "hello ada?"
    assert registry.parse({"user": "u", "password": 1}) == Login(user="u", password=1)


def test_an_unknown_kind_names_the_known_ones_and_where_plugins_come_from() -> None:
    registry = greetings()
    with pytest.raises(KindError) as caught:
        registry.parse({"kind": "goodbye"})
    message = str(caught.value)
    assert "unknown greeting kind 'goodbye': kind is one of hello, login" in message
    assert registry.group in message
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)


def test_a_kind_that_is_not_a_name_is_not_echoed() -> None:
    with pytest.raises(KindError) as caught:
        greetings().parse({"kind": f"postgresql://u:{SECRET}@db/x"})
    assert SECRET not in str(caught.value)
    assert "kind is one of hello, login" in str(caught.value)


def test_a_config_error_names_the_field_never_the_value() -> None:
    with pytest.raises(KindError) as caught:
        greetings().parse({"kind": "login", "user": "u", "password": SECRET, "colour": SECRET})
    message = str(caught.value)
    assert message.startswith("invalid login greeting config: ")
    assert "password: Input should be a valid integer" in message
    assert "colour: Extra inputs are not permitted" in message
    assert SECRET not in message


def test_ambiguous_or_missing_forms_say_what_to_give() -> None:
    registry = greetings()
    with pytest.raises(KindError, match="give exactly one of 'name' or 'user'"):
        registry.parse({"name": "a", "user": "b"})
    with pytest.raises(KindError, match=r"name the kind \(kind is one of hello, login\)"):
        registry.parse({})
    with pytest.raises(KindError, match="is a mapping"):
        registry.parse("hello")  # type: ignore[arg-type]


def test_registration_is_checked() -> None:
    registry = greetings()
    registry.register(Hello, registry._kinds["hello"][1])  # the same pair again: no change
    with pytest.raises(KindError, match="'hello' is registered twice"):
        registry.register(Hello, lambda config, context: "other")

    class NoName(Greeting):
        pass

    class Elsewhere(KindConfig):
        kind: Literal["elsewhere"] = "elsewhere"

    with pytest.raises(TypeError, match="must declare its kind"):
        registry.register(NoName, lambda config, context: "")
    with pytest.raises(TypeError, match="must extend Greeting"):
        registry.register(Elsewhere, lambda config, context: "")  # type: ignore[arg-type]
    registry.unregister("hello")
    assert registry.names() == ["login"]


def shout(config: Hello, punctuation: str) -> str:
    """A factory other tests name by its dotted path."""
    return f"HELLO {config.name.upper()}{punctuation}"


def test_a_factory_named_by_its_dotted_path_is_imported_when_first_built() -> None:
    registry: KindRegistry[Greeting, str, str] = KindRegistry(
        Greeting, family="greeting", group="g"
    )
    registry.register(Hello, f"{__name__}:shout")
    registry.register(Hello, f"{__name__}:shout")  # the same pair again: no change
    assert registry.build(registry.parse({"name": "ada"}), "!") == "HELLO ADA!"
    with pytest.raises(TypeError, match="not a dotted path"):
        registry.register(Login, "shout")
    registry.register(Login, f"{__name__}:no_such_factory")
    with pytest.raises(KindError, match=r"factory .*no_such_factory' cannot be imported"):
        registry.build(registry.parse({"user": "u", "password": 1}), "!")


def test_reading_a_catalog_imports_nothing_that_acts_on_it() -> None:
    """The built-in kinds' factories are dotted paths: the catalog does not pull in the
    rebuild actions, the warehouse, lineage, the key stores or their libraries."""
    script = (
        "import sys; from erasure.catalog import load_catalog; from erasure.config import "
        "Settings; Settings(); load_catalog(sys.argv[1]); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('erasure.', 'sqlglot', "
        "'numpy', 'hvac', 'sqlalchemy', 'pyiceberg', 'pyarrow', 'deltalake')))))"
    )
    catalog = Path(__file__).parents[2] / "erasure" / "sample" / "estate" / "catalog.yaml"
    done = subprocess.run(
        [sys.executable, "-c", script, str(catalog)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "erasure.catalog",
        "erasure.config",
        "erasure.dbt_manifest",
        "erasure.errors",
        "erasure.kinds",
        # The lakehouses' configs, their errors and evidence: no engine (pyiceberg, deltalake,
        # pyarrow) and no SQLAlchemy is imported until a table is opened.
        "erasure.lakehouse",
        "erasure.lakehouse.config",
        "erasure.lakehouse.errors",
        "erasure.lakehouse.evidence",
        "erasure.lakehouse.table",
        "erasure.model",
    ]


def write_plugin(root: Path, group: str, entry_points: dict[str, str], module: str) -> None:
    """An installed distribution on `root` (as pip would lay it out): module + entry points."""
    (root / "kinds_probe.py").write_text(textwrap.dedent(module))
    info = root / "kinds_probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kinds-probe\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")


def test_an_installed_package_adds_a_kind_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = greetings()
    write_plugin(
        tmp_path,
        registry.group,
        {
            "wave": "kinds_probe:wave",
            "broken": "kinds_probe_missing:nothing",
            "clash": "kinds_probe:clash",
        },
        f"""
        from typing import Literal
        from {__name__} import Greeting

        class Wave(Greeting):
            kind: Literal["wave"] = "wave"
            hand: str = "right"

        def wave(config, punctuation):
            return "wave " + config.hand + punctuation

        wave.config_class = Wave

        class Clash(Greeting):
            kind: Literal["hello"] = "hello"  # taken: the built-in kind must win

        def clash(config, punctuation):
            return "clash"

        clash.config_class = Clash
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kinds_probe", raising=False)

    assert registry.names() == ["hello", "login", "wave"]
    assert registry.build(registry.parse({"kind": "wave"}), ".") == "wave right."
    with pytest.raises(KindError, match=r"'broken' comes from a plug-in that failed to load"):
        registry.parse({"kind": "broken"})
    with pytest.raises(KindError, match=r"'clash' comes from .* 'hello' is registered twice"):
        registry.parse({"kind": "clash"})
    assert registry.build(registry.parse({"name": "ada"}), "") == "hello ada"


# ---------------------------------------------------------------------------------------------
# Connections

CATALOG = """
version: 1
identifiers: {{email: {{normalise: email}}}}
connections:
  warehouse: {connection}
datasets:
  - {{namespace: w, name: crm.people, connection: warehouse, kind: table,
     holds_subject: {{email: [email]}}}}
  - {{namespace: w, name: marts.people, connection: warehouse, kind: table,
     rebuild: {rebuild}}}
  - {{namespace: w, name: marts.recent, connection: warehouse, kind: view}}
"""
ROWS = [
    "CREATE TABLE crm.people (email TEXT, region TEXT)",
    "INSERT INTO crm.people VALUES ('jane@example.org', 'north'), ('joe@example.org', 'south')",
    "CREATE TABLE marts.people AS SELECT email FROM crm.people",
    "CREATE VIEW marts.recent AS SELECT email FROM people",  # SQLite: same database only
]
LEGACY_SQL = '{sql: "CREATE TABLE marts.people AS SELECT email FROM crm.people"}'
JANE = SubjectRef(type="email", value=SecretStr("jane@example.org"))


def rows_found(location: Location) -> int:
    return sum(found.rows for found in location.located.values())


def catalog_yaml(connection: str = '{url: "sqlite:///wh.db"}', rebuild: str = LEGACY_SQL) -> str:
    return CATALOG.format(connection=connection, rebuild=rebuild)


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "catalog.yaml").write_text(text)
    return tmp_path / "catalog.yaml"


@pytest.mark.parametrize(
    "connection", ['{url: "sqlite:///wh.db"}', '{kind: url, url: "sqlite:///wh.db"}']
)
def test_a_url_connection_in_either_form_opens_the_warehouse(
    tmp_path: Path, connection: str
) -> None:
    catalog, warehouse = make_estate(tmp_path, catalog_yaml(connection), ROWS)
    assert catalog.connections["warehouse"] == UrlConnection(url="sqlite:///wh.db")
    assert warehouse.url("warehouse") == f"sqlite:///{tmp_path.resolve()}/wh.db"
    assert rows_found(locate(catalog, warehouse, JANE)) == 1


@pytest.mark.postgres
def test_a_url_connection_opens_postgres(tmp_path: Path, postgres_url: str) -> None:
    for connection in (f'{{url: "{postgres_url}"}}', f'{{kind: url, url: "{postgres_url}"}}'):
        catalog = load_catalog(write(tmp_path, catalog_yaml(connection)))
        warehouse = Warehouse(catalog)
        try:
            assert warehouse.dialect("warehouse") == "postgres"
            with warehouse.engine("warehouse").connect() as conn:
                assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        finally:
            warehouse.dispose()


@pytest.mark.parametrize(
    "connection", ["{airflow_conn_id: wh_conn}", "{kind: airflow, airflow_conn_id: wh_conn}"]
)
def test_an_airflow_connection_needs_the_adapters_resolver(tmp_path: Path, connection: str) -> None:
    catalog, _ = make_estate(tmp_path, catalog_yaml(), ROWS)  # fills wh.db
    catalog = load_catalog(write(tmp_path, catalog_yaml(connection)))
    assert catalog.connections["warehouse"] == AirflowConnection(airflow_conn_id="wh_conn")
    with pytest.raises(CatalogError, match="uses airflow_conn_id 'wh_conn': resolve it through"):
        Warehouse(catalog).url("warehouse")

    asked: list[tuple[str, str]] = []

    def resolve(name: str, conn_id: str) -> str:  # what dags/erasure_connections.py hands in
        asked.append((name, conn_id))
        return f"sqlite:///{tmp_path}/wh.db"

    warehouse = Warehouse(catalog, resolve)
    assert rows_found(locate(catalog, warehouse, JANE)) == 1
    assert set(asked) == {("warehouse", "wh_conn")}


class SqliteFile(ConnectionConfig):
    """A test's own connection kind: a SQLite file named by path, never in erasure/."""

    kind: Literal["sqlite_file"] = "sqlite_file"
    path: str


@pytest.fixture
def sqlite_file_kind() -> Iterator[None]:
    def url(config: SqliteFile, context: ConnectionContext) -> str:
        return f"sqlite:///{(context.base_dir / config.path).resolve()}"

    CONNECTIONS.register(SqliteFile, url)
    yield
    CONNECTIONS.unregister("sqlite_file")


@pytest.mark.usefixtures("sqlite_file_kind")
def test_a_connection_kind_registered_outside_erasure_is_used_by_the_catalog(
    tmp_path: Path,
) -> None:
    catalog, warehouse = make_estate(
        tmp_path, catalog_yaml("{kind: sqlite_file, path: wh.db}"), ROWS
    )
    assert catalog.connections["warehouse"] == SqliteFile(path="wh.db")
    assert rows_found(locate(catalog, warehouse, JANE)) == 1
    assert "sqlite_file" in CONNECTIONS.names()


@pytest.mark.parametrize(
    ("connection", "expected"),
    [
        (
            "{kind: snowflak, url: x}",
            "unknown connection kind 'snowflak': kind is one of airflow, url",
        ),
        (
            f'{{url: "postgresql://u:{SECRET}@db/wh", airflow_conn_id: wh}}',
            "give exactly one of 'airflow_conn_id' or 'url'",
        ),
        (f'{{kind: url, url: "postgresql://u:{SECRET}@db/wh", port: 5}}', "port: Extra inputs"),
        (f'{{kind: airflow, url: "postgresql://u:{SECRET}@db/wh"}}', "airflow_conn_id: Field"),
        ("{}", "name the kind (kind is one of airflow, url)"),
    ],
)
def test_a_bad_connection_names_file_connection_and_field_not_the_url(
    tmp_path: Path, connection: str, expected: str
) -> None:
    path = write(tmp_path, catalog_yaml(connection))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert str(path) in message and "field 'connections.warehouse'" in message
    assert expected in message
    assert SECRET not in message


# ---------------------------------------------------------------------------------------------
# Rebuild targets


@pytest.mark.parametrize(
    ("rebuild_yaml", "expected"),
    [
        (LEGACY_SQL, SqlRebuild(sql=["CREATE TABLE marts.people AS SELECT email FROM crm.people"])),
        ('{kind: sql, sql: ["SELECT 1", "SELECT 2"]}', SqlRebuild(sql=["SELECT 1", "SELECT 2"])),
        ("{dag_id: build_people}", DagRebuild(dag_id="build_people")),
        ("{kind: dag, dag_id: build_people}", DagRebuild(dag_id="build_people")),
    ],
)
def test_every_built_in_rebuild_form_still_loads(
    tmp_path: Path, rebuild_yaml: str, expected: RebuildTarget
) -> None:
    catalog = load_catalog(write(tmp_path, catalog_yaml(rebuild=rebuild_yaml)))
    assert catalog.by_name("marts.people").rebuild == expected
    # What the catalog dumps loads again (the kind is written out).
    again = type(catalog).model_validate({**catalog.model_dump(), "base_dir": catalog.base_dir})
    assert again.by_name("marts.people").rebuild == expected
    assert again.connections == catalog.connections


def test_the_built_in_rebuild_targets_each_build(tmp_path: Path) -> None:
    assert {"dag", "sql", "view"} <= set(REBUILD_TARGETS.names())
    catalog, warehouse = make_estate(tmp_path, catalog_yaml(), ROWS)
    sql = rebuild(catalog, warehouse, catalog.by_name("marts.people").ref, trigger_dag=None)
    assert (sql.method, sql.rows_after) == ("sql", 2)
    view = rebuild(catalog, warehouse, catalog.by_name("marts.recent").ref, trigger_dag=None)
    assert view.method == "view"
    assert ViewRebuild().rebuilds(catalog.by_name("marts.recent").kind)


def test_a_view_target_is_refused_for_a_table(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="a view rebuild target cannot rebuild a table"):
        load_catalog(write(tmp_path, catalog_yaml(rebuild="{kind: view}")))


def test_an_unknown_rebuild_kind_names_the_dataset_and_the_known_kinds(tmp_path: Path) -> None:
    path = write(tmp_path, catalog_yaml(rebuild="{kind: dbt_model, model: people}"))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert "dataset 'marts.people' field 'rebuild'" in message
    assert (
        "unknown rebuild target kind 'dbt_model': kind is one of dag, dbt, producer, sql, view"
        in message
    )
    assert "erasure.rebuild_targets" in message


class CopyOf(RebuildTarget):
    """A test's own rebuild kind: re-materialise as a copy of one upstream's columns."""

    kind: Literal["copy_of"] = "copy_of"
    source: str
    columns: list[str]

    def declared_sql(self) -> list[str]:  # its lineage: the closure reaches it through this
        return [f"SELECT {', '.join(self.columns)} FROM {self.source}"]

    def plan_detail(self) -> dict[str, object]:
        return {"source": self.source}


def rebuild_by_copy(target: CopyOf, context: RebuildContext) -> RebuildEvidence:
    ds = context.dataset
    columns = ", ".join(target.columns)  # catalog-declared names, as rebuild.sql is
    with context.warehouse.connect(ds) as conn, conn.begin():
        conn.execute(sa.text(f"DELETE FROM {ds.name}"))
        conn.execute(sa.text(f"INSERT INTO {ds.name} SELECT {columns} FROM {target.source}"))
        rows = conn.execute(sa.text(f"SELECT COUNT(*) FROM {ds.name}")).scalar_one()
    return RebuildEvidence(
        dataset=ds.name,
        method=target.kind,
        rows_after=rows,
        detail=f"copied from {target.source}",
        rebuilt_at=datetime.now(UTC),
    )


@pytest.fixture
def copy_of_kind() -> Iterator[None]:
    REBUILD_TARGETS.register(CopyOf, rebuild_by_copy)
    yield
    REBUILD_TARGETS.unregister("copy_of")


@pytest.mark.usefixtures("copy_of_kind")
def test_a_rebuild_kind_registered_outside_erasure_is_planned_and_run(tmp_path: Path) -> None:
    target = "{kind: copy_of, source: crm.people, columns: [email]}"
    catalog, warehouse = make_estate(tmp_path, catalog_yaml(rebuild=target), ROWS)
    location = locate(catalog, warehouse, JANE)
    plan = make_plan(catalog, JANE, warehouse=warehouse, location=location)
    item = next(i for i in plan.items if i.dataset.name == "marts.people")
    assert item.action is Action.REBUILD
    assert item.evidence["method"] == "copy_of" and item.evidence["source"] == "crm.people"

    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("DELETE FROM crm.people WHERE email = 'jane@example.org'"))
    done = rebuild(catalog, warehouse, item.dataset, trigger_dag=None)

    assert (done.method, done.rows_after) == ("copy_of", 1)
    with warehouse.engine("warehouse").connect() as conn:
        assert conn.execute(sa.text("SELECT email FROM marts.people")).all() == [
            ("joe@example.org",)
        ]


def test_a_package_adds_a_rebuild_kind_to_the_catalog_by_entry_point(tmp_path: Path) -> None:
    """The whole point: an installed package, no edit of erasure/, a fresh process."""
    plugin = tmp_path / "site"
    plugin.mkdir()
    write_plugin(
        plugin,
        "erasure.rebuild_targets",
        {"notebook": "kinds_probe:run_notebook"},
        """
        from typing import Literal
        from erasure.catalog import RebuildTarget

        class Notebook(RebuildTarget):
            kind: Literal["notebook"] = "notebook"
            path: str

            def producer(self):
                return "notebook " + self.path

        def run_notebook(target, context):
            raise NotImplementedError

        run_notebook.config_class = Notebook
        """,
    )
    path = write(tmp_path, catalog_yaml(rebuild="{kind: notebook, path: people.ipynb}"))
    script = (
        "import sys; from erasure.catalog import load_catalog; "
        "t = load_catalog(sys.argv[1]).by_name('marts.people').rebuild; "
        "print(t.kind, t.producer())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        env={**os.environ, "PYTHONPATH": str(plugin)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "notebook notebook people.ipynb"


def test_import_factories_loads_every_dotted_factory_at_once() -> None:
    registry: KindRegistry[Greeting, str, str] = KindRegistry(
        Greeting, family="greeting", group="g"
    )
    registry.register(Hello, f"{__name__}:shout")
    registry.import_factories()
    assert registry._imported == {f"{__name__}:shout": shout}
