"""The warehouse's engines: SQLite behaves like the production warehouse, and no error a
query raises carries the values it was run with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.errors import WarehouseError
from erasure.locate import locate
from erasure.model import SubjectRef
from tests.unit.estate import make_estate

CANARY = "canary.7c41e0b9d2@example.org"
CATALOG = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.people, connection: warehouse, kind: table,
     holds_subject: {email: [email]}}
"""


def test_a_failing_statement_shows_placeholders_never_the_bound_values(tmp_path: Path) -> None:
    _catalog, warehouse = make_estate(tmp_path, CATALOG, ["CREATE TABLE crm.people (email TEXT)"])
    with pytest.raises(sa.exc.DBAPIError) as failed, warehouse.engine("warehouse").connect() as c:
        c.execute(sa.text("SELECT * FROM crm.people WHERE nope = :v"), {"v": CANARY})
    assert CANARY not in str(failed.value)
    assert "parameters hidden" in str(failed.value)


def test_a_query_failing_inside_locate_names_the_dataset_not_the_value(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(
        tmp_path, CATALOG, ["CREATE TABLE crm.people (email TEXT)", "CREATE TABLE crm.x (a)"]
    )
    # The catalog names a column the table lacks: the error says so, without the value.
    broken = catalog.model_copy(
        update={
            "datasets": [
                catalog.datasets[0].model_copy(update={"holds_subject": {"email": ["mail"]}})
            ]
        }
    )
    with pytest.raises(WarehouseError) as failed:
        locate(broken, warehouse, SubjectRef(type="email", value=SecretStr(CANARY)))
    assert "crm.people" in str(failed.value)
    assert CANARY not in str(failed.value)


def test_the_cli_reports_a_failing_plan_without_the_identifier(tmp_path: Path) -> None:
    make_estate(tmp_path, CATALOG, ["CREATE TABLE crm.people (mail TEXT)"])
    done = subprocess.run(
        [sys.executable, "-m", "erasure.cli", "plan", "--catalog", str(tmp_path / "catalog.yaml"),
         "--subject", "email=-"],
        input=CANARY + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "crm.people" in done.stderr
    assert CANARY not in done.stdout + done.stderr
