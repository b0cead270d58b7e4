"""The Airflow adapter is one installed package: Airflow finds its plugin by entry point, and
`dags/` holds DAG files only, each taking its operators and helpers from `erasure_airflow`."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = "erasure_airflow.plugin:ErasurePlugin"


def test_pyproject_registers_the_plugin_by_entry_point_and_ships_the_package() -> None:
    pytest.importorskip("airflow")
    from airflow.plugins_manager import AirflowPlugin

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["airflow.plugins"] == {"erasure": ENTRY_POINT}
    found = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {"erasure_airflow", "erasure_airflow.*"} <= set(found)
    shipped = project["tool"]["setuptools"]["package-data"]["erasure_airflow.api"]
    assert shipped == ["templates/*.html"]
    templates = {p.name for p in (REPO / "erasure_airflow" / "api" / "templates").glob("*.html")}
    assert templates == {"desk.html", "new_request.html", "records.html", "refused.html"}
    module, _, name = ENTRY_POINT.partition(":")
    plugin = getattr(__import__(module, fromlist=[name]), name)
    assert issubclass(plugin, AirflowPlugin) and plugin.name == "erasure"


def test_nothing_of_the_adapter_is_left_in_a_plugins_folder() -> None:
    """A copy in the plugins folder would be loaded beside the entry point's, and refused."""
    assert not (REPO / "plugins").exists()


def test_the_dags_folder_holds_dag_files_only() -> None:
    for path in sorted((REPO / "dags").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        } | {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        local = {p.stem for p in (REPO / "dags").glob("*.py")} & imported
        assert not local, f"{path.name} imports {sorted(local)} from dags/: move it to the adapter"
        defines_dag = any(
            isinstance(node, ast.Name | ast.Attribute)
            and (getattr(node, "id", None) or getattr(node, "attr", None)) in ("dag", "DAG")
            for node in ast.walk(tree)
        )
        assert defines_dag, f"{path.name} defines no DAG: only DAG files belong in dags/"
