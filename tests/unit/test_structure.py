"""The shape of the code, held by a test: no import circle, lineage and the adapter entered
through their doors, and a domain that never imports Airflow.

Imports are read from the source (typing-only ones included: a circle a type checker walks is
still a circle a reader walks), module by module, over erasure/ and erasure_airflow/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("erasure", "erasure_airflow")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `path` imports (a name imported from a package that is a module
    of its own counts as that module)."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in named if name in known}


def import_graph() -> nx.DiGraph:
    known = _modules()
    graph = nx.DiGraph()
    for name, path in known.items():
        graph.add_node(name)
        graph.add_edges_from((name, imported) for imported in _imports(path, known))
    return graph


def _is_door_of(importer: str, imported: str, package: str) -> bool:
    return imported == package or importer == package or importer.startswith(package + ".")


def test_no_module_imports_itself_back_round_a_circle() -> None:
    graph = import_graph()
    # A package's door may name its own modules, which import their siblings by full path.
    without_doors = graph.copy()
    without_doors.remove_edges_from(
        (a, b)
        for a, b in graph.edges
        if b.startswith(a + ".") and (REPO / a.replace(".", "/")).is_dir()
    )
    circles = [sorted(c) for c in nx.strongly_connected_components(without_doors) if len(c) > 1]
    assert circles == [], f"import circles: {circles}"


def test_lineage_is_entered_only_through_its_door() -> None:
    outside = [
        (a, b)
        for a, b in import_graph().edges
        if b.startswith("erasure.lineage.") and not _is_door_of(a, b, "erasure.lineage")
    ]
    assert outside == [], f"import erasure.lineage, not its modules: {outside}"


def test_the_domain_never_imports_airflow_or_its_adapter() -> None:
    offenders = []
    for name, path in _modules().items():
        if not name.startswith("erasure.") and name != "erasure":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{name}: {m}" for m in modules if m.split(".")[0] in ("airflow", "erasure_airflow")
            ]
    assert offenders == []
