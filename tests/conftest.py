"""Fixtures shared by the whole suite: a throwaway Postgres database and an isolated Airflow.

Airflow reads its configuration once, on first import, so `pytest_configure` points it at a
fresh AIRFLOW_HOME before any test module is collected: no test ever touches ~/airflow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# Where the suite's own databases are created; override to use another server.
POSTGRES_ADMIN_URLS = (
    [os.environ["ERASURE_TEST_POSTGRES_URL"]]
    if os.environ.get("ERASURE_TEST_POSTGRES_URL")
    else [
        "postgresql://postgres@127.0.0.1:5432/postgres",
        "postgresql://root@127.0.0.1:5432/postgres",
    ]
)

_airflow_home: Path | None = None
_timings: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    global _airflow_home
    _airflow_home = Path(tempfile.mkdtemp(prefix="erasure-airflow-home-"))
    os.environ["AIRFLOW_HOME"] = str(_airflow_home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    # The plugin comes from the erasure_airflow package, by entry point: no plugins folder.
    (_airflow_home / "plugins").mkdir()
    os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(_airflow_home / "plugins")
    _checkout_on_path(_airflow_home / "checkout-metadata")
    os.environ["AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES"] = (
        "identifier,notes,justification,reason,note"
    )
    os.environ.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)  # the home's own SQLite file


# Workers (`make test` runs all but tests/e2e on two, with pytest-xdist). Each worker has its
# own AIRFLOW_HOME, OpenBao and Postgres database; tests that share something else stay in one
# worker, in collection order: the fault matrix and the hostile estates each publish a section
# of docs/reliability.md (and the end-to-end tests, run on workers, share one stack). Every
# other test is its own unit of work. The groups go to xdist's scheduler through its
# `pytest_xdist_make_scheduler` hook because `xdist_group` marks are silently ignored with
# pytest >= 9.2 and xdist <= 3.8 (pytest-dev/pytest-xdist#1386: the group is written into
# `item._nodeid`, which pytest no longer reads); tests/unit/test_workers.py fails once marks
# work again.
WORKER_GROUPS = {
    "tests/e2e/": "e2e-stack",
    "tests/integration/test_faults.py": "reliability-doc",
    "tests/integration/test_hostile_estates.py": "reliability-doc",
    "tests/integration/test_bad_inputs.py": "reliability-doc",
    "tests/integration/audit/test_tamper_matrix.py": "reliability-doc",
    "tests/integration/test_vault_policies.py": "reliability-doc",
    "tests/integration/test_dbt_project.py": "dbt-project",  # one project built, in order
}


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in WORKER_GROUPS.items():
                if nodeid.startswith(prefix):
                    return group
            return nodeid

    return ByWorkerGroup(config, log)


def _checkout_on_path(metadata_dir: Path) -> None:
    """This checkout's erasure_airflow, and its entry points when the installed metadata lacks
    them (a venv installed from elsewhere), first on this process's path and its children's."""
    from local.up.entry_points import metadata_for_checkout

    entries = [str(REPO)]
    found = metadata_for_checkout(metadata_dir)
    if found is not None:
        entries.append(str(found))
        sys.path.append(str(found))
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*entries, *inherited])


def pytest_unconfigure(config: pytest.Config) -> None:
    if _airflow_home is not None:
        shutil.rmtree(_airflow_home, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, seconds in _timings.items():
        terminalreporter.write_line(f"{name}: {seconds:.1f} s")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, uniquely named database on the local PostgreSQL, dropped at the end."""
    psycopg = pytest.importorskip("psycopg")
    admin_url, reasons = None, []
    for url in POSTGRES_ADMIN_URLS:
        try:
            with psycopg.connect(url, connect_timeout=5):
                admin_url = url
                break
        except psycopg.OperationalError as exc:
            reasons.append(str(exc).strip().splitlines()[0])
    if admin_url is None:
        pytest.skip(
            "PostgreSQL at 127.0.0.1:5432 is unreachable ("
            + "; ".join(reasons)
            + "); start it (CI does, in .ci/run) or set ERASURE_TEST_POSTGRES_URL"
        )
    name = f"erasure_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_url.rpartition("/")
    try:
        yield f"{base}/{name}"  # SQLAlchemy 2.1 and Airflow's hook both read this with psycopg 3
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_schema_url(postgres_url: str) -> str:
    """`postgres_url` with a fresh, empty schema first on the search path: an isolated store."""
    psycopg = pytest.importorskip("psycopg")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{postgres_url}?options=-csearch_path%3D{schema}"


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata DB (SQLite in the isolated AIRFLOW_HOME), migrated once per session."""
    pytest.importorskip("airflow")
    assert _airflow_home is not None
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    _timings["airflow db migrate (once per session)"] = time.perf_counter() - started
    if result.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return _airflow_home


@pytest.fixture(autouse=True)
def _openbao_alive(request: pytest.FixtureRequest) -> None:
    """The session's OpenBao, started again (empty, same address, a new token) if it died:
    seen once late in a long run (its log went with it), when every later test that needed
    Vault then failed on "connection refused" instead of only the one it happened under."""
    if "openbao" not in request.fixturenames:
        return
    server = request.getfixturevalue("openbao")  # the unit or the integration one
    if not server.running:
        print(f"OpenBao at {server.address} had stopped: starting it again", flush=True)
        server.start()
